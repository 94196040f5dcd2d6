"""Transpose a matmul operand read along the reduced axis when many output rows share it.

``x @ W.T`` with ``W`` stored ``[out, in]`` (every ``linear``, the logits against the tied embedding,
``q @ k.T``) reaches the scheduler as ``sum_k x[n, k] * W[m, k]``: the second operand is contiguous along
``k``, the reduced axis, so each output element is a dot product of two rows, reduced across vector lanes
at the end (latency-bound for short ``k``: 25-30 GFLOP/s on one core at k = 128). Read through a
transposed copy ``Wt[k, m]`` instead, the operand is contiguous along ``m``, the output's innermost axis,
and the lowering's register tile of accumulators applies (rows of outputs, a vector of columns, one
broadcast multiply-add per ``k``): the form ``g @ W`` already runs in, 2-3x faster. The copy costs one pass
over the operand; this rule makes it only where the operand is broadcast over at least ``MIN_ROWS``
output rows (a fixed count: decode's one row, or a symbolic prompt length, keep the dot form).

The rewrite splits the operand's view in two: ``view(view(base, [..., k, m]), [..., n, m, k])``. The inner
view is the transposed window; the scheduler realizes it (a view read through a broadcast inside a reduce
stage is computed once, passes/schedule.py), the outer view reads it contiguously along ``m``.
"""

from __future__ import annotations

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.rewriter import Match, Pat, Rule
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.value import Value
from caten_lab.passes.base import RewritePass

MIN_ROWS = 64  # output rows sharing the operand before a transposed copy pays for itself


def _sums_last_axis(g: Graph, mul: Node) -> bool:
    """Every use of the product ``mul`` sums over its last axis (a matmul's reduction)."""
    rank = len(mul.shape)
    sums = g.users_of(mul.out)
    return bool(sums) and all(s.op == "reduce" and s.attrs.op == "add" and tuple(s.attrs.axes) == (rank - 1,)
                              for s in sums)


def _dot_operand(m: Match) -> Value | None:
    """``a * view(base)`` summed over k, the view of shape (..., n, m, k) with strides (..., 0, s, 1),
    n >= MIN_ROWS, s >= k -> ``a * view(view(base, (..., k, m)))``: the same values, read along m."""
    v = m.node("b")
    assert v is not None
    a = v.attrs
    shape, strides = tuple(a.shape), tuple(a.strides)
    r = len(shape)
    if a.mask is not None or r < 3 or not all(isinstance(d, int) for d in (*shape[-3:], *strides[-3:])):
        return None
    rows, cols, k = shape[-3:]
    s_n, s_m, s_k = strides[-3:]
    if s_n != 0 or s_k != 1 or rows < MIN_ROWS or cols < 2 or k < 2 or s_m < k:
        return None
    if not _sums_last_axis(m.graph, m.root):
        return None
    batch = [(d if st != 0 else 1, st) for d, st in zip(shape[:-3], strides[:-3])]  # broadcast batch axes stay so
    inner_shape = (*(d for d, _ in batch), k, cols)
    inner = m.graph.insert("view", [v.reads[0]], source=v.source, shape=inner_shape,
                           strides=(*(st for _, st in batch), 1, s_m), offset=a.offset, mask=None)
    cs = contiguous_strides(inner_shape)
    outer_strides = (*(c if st != 0 else 0 for c, (_, st) in zip(cs, batch)), 0, 1, cols)
    outer = m.graph.insert("view", [inner], source=v.source, shape=shape, strides=outer_strides, offset=0,
                           mask=None)
    other = m["a"]
    reads = [other, outer] if m.root.reads[1] == v.out else [outer, other]
    return m.graph.insert("mul", reads, source=m.root.source)


TRANSPOSE_DOT_OPERAND = Rule("x @ W.T (W rows along k) -> x @ transpose(W) (columns along m)",
                             Pat("mul", ["a", Pat("view", name="b")], commutative=True), _dot_operand)


def transpose_operands_pass() -> RewritePass:
    return RewritePass("transpose_operands", "read a matmul operand shared by many output rows through a "
                       "transposed copy (contiguous along the output's columns, not the reduced axis)",
                       [TRANSPOSE_DOT_OPERAND])
