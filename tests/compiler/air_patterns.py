"""Canonical tensor patterns written directly in AIR, the way the frontend expresses them
(matmul = broadcast views + mul + reduce add; softmax/layernorm = reduce + stride-0 broadcast back)."""

from __future__ import annotations

import numpy as np

from caten_lab.air import Graph, dtypes
from caten_lab.air.shapes import contiguous_strides

LOG2E = 1.4426950408889634


def inp(g: Graph, name: str, shape: tuple, dtype=dtypes.float32) -> str:  # noqa: ANN001
    return g.insert("allocate", [], shape=shape, dtype=dtype, name=name)


def bcast(g: Graph, v: str, shape: tuple) -> str:
    """Broadcast ``v`` (same rank, size-1 axes) to ``shape`` with stride-0 views."""
    src = g.producer_of(v).shape
    cs = contiguous_strides(src)
    strides = tuple(0 if s == 1 and d != 1 else c for s, d, c in zip(src, shape, cs))
    return g.insert("view", [v], shape=shape, strides=strides)


def reshape(g: Graph, v: str, shape: tuple) -> str:
    return g.insert("view", [v], shape=shape, strides=contiguous_strides(shape))


def exp(g: Graph, v: str) -> str:
    return g.insert("exp2", [g.insert("mul", [v, LOG2E])])


def softmax(g: Graph, x: str) -> str:
    """Softmax over the last axis."""
    shape = g.producer_of(x).shape
    ax = len(shape) - 1
    m = bcast(g, g.insert("reduce", [x], op="max", axes=(ax,)), shape)
    e = exp(g, g.insert("add", [x, g.insert("neg", [m])]))
    s = bcast(g, g.insert("recip", [g.insert("reduce", [e], op="add", axes=(ax,))]), shape)
    return g.insert("mul", [e, s])


def layernorm(g: Graph, x: str, w: str, b: str, eps: float = 1e-5) -> str:
    shape = g.producer_of(x).shape
    ax = len(shape) - 1
    n = shape[ax]
    mean = bcast(g, g.insert("mul", [g.insert("reduce", [x], op="add", axes=(ax,)), 1.0 / n]), shape)
    xc = g.insert("add", [x, g.insert("neg", [mean])])
    var = g.insert("mul", [g.insert("reduce", [g.insert("mul", [xc, xc])], op="add", axes=(ax,)), 1.0 / n])
    rstd = bcast(g, g.insert("recip", [g.insert("sqrt", [g.insert("add", [var, eps])])]), shape)
    wb = g.insert("view", [w], shape=shape, strides=(0,) * (len(shape) - 1) + (1,))
    bb = g.insert("view", [b], shape=shape, strides=(0,) * (len(shape) - 1) + (1,))
    return g.insert("add", [g.insert("mul", [g.insert("mul", [xc, rstd]), wb]), bb])


def linear(g: Graph, x: str, w: str, b: str | None = None) -> str:
    """x (m, k) @ w (k, n) [+ b (n,)]."""
    m, k = g.producer_of(x).shape
    _, n = g.producer_of(w).shape
    a3 = g.insert("view", [x], shape=(m, n, k), strides=(k, 0, 1))
    b3 = g.insert("view", [w], shape=(m, n, k), strides=(0, 1, n))
    r = g.insert("reduce", [g.insert("mul", [a3, b3])], op="add", axes=(2,))
    out = reshape(g, r, (m, n))
    if b is not None:
        out = g.insert("add", [out, g.insert("view", [b], shape=(m, n), strides=(0, 1))])
    return out


def gelu(g: Graph, x: str) -> str:
    """tanh-approximation GELU through exp2 (as the frontend writes tanh)."""
    x3 = g.insert("mul", [g.insert("mul", [x, x]), x])
    inner = g.insert("mul", [g.insert("add", [x, g.insert("mul", [x3, 0.044715])]), 0.7978845608028654])
    e = exp(g, g.insert("mul", [inner, -2.0]))
    t = g.insert("add", [g.insert("mul", [g.insert("recip", [g.insert("add", [e, 1.0])]), 2.0]), -1.0])
    return g.insert("mul", [g.insert("mul", [x, 0.5]), g.insert("add", [t, 1.0])])


def attention(g: Graph, q: str, k: str, v: str) -> str:
    """Causal attention for (h, t, d) inputs: softmax(q k^T / sqrt(d) + mask) v."""
    h, t, d = g.producer_of(q).shape
    q4 = g.insert("view", [q], shape=(h, t, t, d), strides=(t * d, d, 0, 1))
    k4 = g.insert("view", [k], shape=(h, t, t, d), strides=(t * d, 0, d, 1))
    s = g.insert("reduce", [g.insert("mul", [q4, k4])], op="add", axes=(3,))
    s = g.insert("mul", [reshape(g, s, (h, t, t)), 1.0 / float(np.sqrt(d))])
    row = g.insert("index", [], shape=(h, t, t), axis=1, dtype=dtypes.int32)
    col = g.insert("index", [], shape=(h, t, t), axis=2, dtype=dtypes.int32)
    masked = g.insert("where", [g.insert("lt", [row, col]), float("-inf"), s])
    p = softmax(g, masked)
    p4 = g.insert("view", [p], shape=(h, t, d, t), strides=(t * t, t, 0, 1))
    v4 = g.insert("view", [v], shape=(h, t, d, t), strides=(t * d, 0, 1, d))
    o = g.insert("reduce", [g.insert("mul", [p4, v4])], op="add", axes=(3,))
    return reshape(g, o, (h, t, d))


def rand_inputs(g: Graph, seed: int = 0, symbols: dict | None = None) -> dict[str, np.ndarray]:
    from caten_lab.air.symbolic import evaluate

    rng = np.random.default_rng(seed)
    out = {}
    for n in g.inputs():
        shape = tuple(evaluate(d, symbols or {}) for d in n.shape)
        out[n.attrs.name] = rng.standard_normal(shape).astype(n.dtype.np)
    return out
