"""Functional forms of the layers (pure functions of Tensors), shared by the modules."""

from __future__ import annotations

import math

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.symbolic import Dim
from caten_lab.frontend.creation import index
from caten_lab.frontend.errors import DTypeError, ShapeError, fmt_shape
from caten_lab.frontend.movement import checked_index
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor

NEG_INF = float(np.finfo(np.float32).min)  # the mask value HF uses: finite, so softmax never sees inf - inf


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` with weight in PyTorch layout [out, in]."""
    if x.shape[-1] != weight.shape[-1]:
        raise ShapeError(
            f"linear: input {fmt_shape(x.shape)} has {x.shape[-1]} features, "
            f"weight {fmt_shape(weight.shape)} "
            f"expects {weight.shape[-1]}",
            where=user_source(),
        )
    y = x @ weight.T
    return y + bias if bias is not None else y


def embedding(ids: Tensor, weight: Tensor) -> Tensor:
    """Rows of ``weight`` selected by integer ``ids`` (one-hot select and sum: exact, no gather op needed).
    As torch's embedding, an id outside [0, num_embeddings) raises when the program runs."""
    if not ids.dtype.is_int:
        raise DTypeError(
            f"embedding: ids must be an integer tensor, got {ids.dtype.value}", where=user_source()
        )
    n = weight.shape[0]
    hot = checked_index(ids, n).unsqueeze(-1) == index((n,), 0)  # (*ids, n)
    return hot.unsqueeze(-1).where(weight, 0.0).sum(-2)


def cross_entropy(logits: Tensor, targets: Tensor, reduction: str = "mean") -> Tensor:
    """torch.nn.functional.cross_entropy for (N, C) logits and (N,) integer class targets:
    ``-log_softmax(logits)[i, targets[i]]``, averaged (``"mean"``), summed (``"sum"``) or per row
    (``"none"``). A target outside [0, C) raises when the program runs."""
    if logits.ndim != 2 or targets.ndim != 1 or targets.shape[0] != logits.shape[0]:
        raise ShapeError(
            f"cross_entropy: expected logits (N, C) and targets (N,), got {fmt_shape(logits.shape)} and "
            f"{fmt_shape(targets.shape)}",
            where=user_source(),
            hint="flatten the batch first: cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))",
        )
    if not targets.dtype.is_int:
        raise DTypeError(
            f"cross_entropy: targets must be integers, got {targets.dtype.value}", where=user_source()
        )
    if reduction not in ("mean", "sum", "none"):
        raise ShapeError(
            f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}",
            where=user_source(),
        )
    # log-sum-exp minus the target's logit, never the (N, C) log-softmax: two reads of the logits forward
    # (max, then the sum of exp), and a backward of one (N, C) pass, softmax - one-hot. The max is a
    # constant shift (detached, as torch's logsumexp): its gradient is 0 exactly, not 1 - sum(softmax).
    x = logits if logits.dtype.is_float else logits.float()
    m = x.max(-1, keepdim=True).detach()
    m = (m.abs() == float("inf")).where(0.0, m)  # an infinite max must not make inf - inf
    lse = (x - m).exp().sum(-1, keepdim=True).log() + m
    picked = (lse - x.gather(1, targets.unsqueeze(1))).reshape(logits.shape[0])
    return picked.mean() if reduction == "mean" else picked.sum() if reduction == "sum" else picked


def layer_norm(x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float = 1e-5) -> Tensor:
    mean = x.mean(-1, keepdim=True)
    d = x - mean
    y = d * ((d * d).mean(-1, keepdim=True) + eps).rsqrt()
    if weight is not None:
        y = y * weight
    return y + bias if bias is not None else y


def rms_norm(x: Tensor, weight: Tensor | None, eps: float = 1e-6) -> Tensor:
    y = x * ((x * x).mean(-1, keepdim=True) + eps).rsqrt()
    return y * weight if weight is not None else y


def causal_mask(q_len: Dim, k_len: Dim, start: Dim) -> Tensor:
    """(q_len, k_len) bool: query i (absolute position start + i) may see key j iff j <= start + i."""
    shape = (q_len, k_len)
    row, col = index(shape, 0), index(shape, 1)
    limit = row + (Tensor.full((), start + 1, DType.int64) if not isinstance(start, int) else start + 1)
    return col < limit


def attention(q: Tensor, k: Tensor, v: Tensor, start: Dim = 0, causal: bool = True) -> Tensor:
    """softmax(q k^T / sqrt(d) [+ causal mask]) v over (..., T, d); keys may be longer than queries."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if isinstance(q.shape[-1], int) else None
    att = q @ k.transpose(-1, -2)
    att = att * scale if scale is not None else att / Tensor.full((), q.shape[-1]).float().sqrt()
    if causal:
        att = causal_mask(q.shape[-2], k.shape[-2], start).where(att, NEG_INF)
    return att.softmax(-1) @ v
