"""Standard layers: Linear, Embedding, LayerNorm, RMSNorm, GELU, MLP."""

from __future__ import annotations

import math

import numpy as np

from caten_lab.frontend.tensor import Tensor
from caten_lab.nn import functional as F
from caten_lab.nn.module import Module, parameter


def _uniform(bound: float):  # noqa: ANN202
    return lambda rng, shape: rng.uniform(-bound, bound, shape).astype(np.float32)


def _normal(std: float):  # noqa: ANN202
    return lambda rng, shape: (rng.standard_normal(shape) * std).astype(np.float32)


def _const(v: float):  # noqa: ANN202
    return lambda rng, shape: np.full(shape, v, np.float32)


class Linear(Module):
    """``y = x W^T + b``; weight in PyTorch layout [out_features, in_features]."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        bound = 1 / math.sqrt(in_features) if in_features else 0.0
        self.in_features, self.out_features = in_features, out_features
        self.weight = parameter((out_features, in_features), _uniform(bound))
        self.bias = parameter((out_features,), _uniform(bound)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)


class Embedding(Module):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        self.weight = parameter((num_embeddings, embedding_dim), _normal(1.0))

    def forward(self, ids: Tensor) -> Tensor:
        return F.embedding(ids, self.weight)


class LayerNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-5, elementwise_affine: bool = True) -> None:
        self.eps = eps
        self.weight = parameter((dim,), _const(1.0)) if elementwise_affine else None
        self.bias = parameter((dim,), _const(0.0)) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.weight, self.bias, self.eps)


class RMSNorm(Module):
    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        self.eps = eps
        self.weight = parameter((dim,), _const(1.0))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, self.weight, self.eps)


class GELU(Module):
    """GELU, exact (``approximate="none"``, erf) or ``"tanh"`` (GPT-2's gelu_new)."""

    def __init__(self, approximate: str = "none") -> None:
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return x.gelu(self.approximate)


class MLP(Module):
    """GPT-2's feed-forward block: c_fc -> activation -> c_proj."""

    def __init__(self, n_embd: int, hidden: int, approximate: str = "tanh") -> None:
        self.c_fc = Linear(n_embd, hidden)
        self.act = GELU(approximate)
        self.c_proj = Linear(hidden, n_embd)

    def forward(self, x: Tensor) -> Tensor:
        return self.c_proj(self.act(self.c_fc(x)))
