"""Causal self-attention with a KV cache written in place at a (symbolic) start position.

The cache is state of shape (batch, n_head, n_ctx, head_dim). A call with ``seq`` new tokens at
``pos`` stores k and v into ``cache[:, :, pos:pos + seq]`` and attends over ``cache[:, :, :pos + seq]``
with a causal mask offset by ``pos``: the same graph serves the prompt (pos = 0) and every decode step.
"""

from __future__ import annotations

from caten_lab.air.symbolic import Dim
from caten_lab.frontend.errors import ShapeError, fmt_shape
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor
from caten_lab.nn import functional as F
from caten_lab.nn.layers import Linear
from caten_lab.nn.module import Module, state


class CausalSelfAttention(Module):
    def __init__(self, n_embd: int, n_head: int, n_ctx: int, batch: int = 1, use_cache: bool = True) -> None:
        if n_embd % n_head:
            raise ShapeError(
                f"CausalSelfAttention: n_embd {n_embd} is not divisible by n_head {n_head}",
                where=user_source(),
            )
        self.n_embd, self.n_head, self.head_dim, self.n_ctx = n_embd, n_head, n_embd // n_head, n_ctx
        self.c_attn = Linear(n_embd, 3 * n_embd)
        self.c_proj = Linear(n_embd, n_embd)
        self.use_cache = use_cache
        if use_cache:
            self.cache_k = state((batch, n_head, n_ctx, self.head_dim))
            self.cache_v = state((batch, n_head, n_ctx, self.head_dim))

    def forward(self, x: Tensor, pos: Dim = 0) -> Tensor:
        if x.ndim != 3 or x.shape[-1] != self.n_embd:
            raise ShapeError(
                f"CausalSelfAttention: input must be (batch, seq, {self.n_embd}), got {fmt_shape(x.shape)}",
                where=user_source(),
            )
        b, t, e = x.shape
        h, d = self.n_head, self.head_dim
        q, k, v = self.c_attn(x).split(e, dim=2)
        q, k, v = (z.reshape(b, t, h, d).transpose(1, 2) for z in (q, k, v))  # (b, h, t, d)
        if self.use_cache:
            self.cache_k[:, :, pos : pos + t] = k
            self.cache_v[:, :, pos : pos + t] = v
            k = self.cache_k[:, :, : pos + t]
            v = self.cache_v[:, :, : pos + t]
        else:
            pos = 0
        y = F.attention(q, k, v, start=pos, causal=True)  # (b, h, t, d)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, e))
