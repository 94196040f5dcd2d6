"""The one-hot scatter-add form of a reduction: an embedding's gradient, found in AIR.

The frontend writes ``w[ids]`` as a one-hot select and sum (``sum_v where(ids[t] == v, w[v], 0)``), so
its gradient is the same shape turned around: ``gw[v, c] = sum_t where(ids[t] == v, g[t, c], 0)``. Read
as written, every output row ``v`` scans every token ``t``: vocabulary x tokens x width selects, as much
work as a matmul, for tokens x width additions. :func:`scatter_axis` recognizes the form so the
scheduler gives it its own kernel and the lowering writes it as the scatter-add it is
(``codegen/lower_scatter.py``): zero the output, then for each token add its row into row ``ids[t]``.

The form: ``reduce(add, axes)`` over ``where(c, x, 0)`` (or ``where(c, 0, x)`` with ``c`` negated), where
``c`` is ``ids == index`` (``not(ne(...))``) through views, one side an ``index`` node that runs along
exactly one kept axis of the reduction (the row ``v``) and along no reduced one, the other side an
integer that depends on a reduced axis and on no kept one (the token's id: one row per token, the same
for every element of that row).
"""

from __future__ import annotations

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.value import Value


def _zero(g: Graph, r: object) -> bool:
    if not isinstance(r, Value):
        return isinstance(r, (int, float)) and not isinstance(r, bool) and r == 0
    p = g.producer_of(r)
    while p is not None and p.op == "view" and p.attrs.mask is None and isinstance(p.reads[0], Value):
        p = g.producer_of(p.reads[0])
    return p is not None and p.op == "const" and p.attrs.value == 0


def follow(g: Graph, v: object, axes: list[int | None]) -> tuple[Node | None, list[int | None]]:
    """The first node below value ``v`` that is not an unmasked view (or a cast between integers), and
    where each entry of ``axes`` (an axis of ``v``, or None) lands in its coordinates: None where a view
    broadcasts it or steps across several axes of its operand."""
    if not isinstance(v, Value):
        return None, axes
    n = g.producer_of(v)
    while n is not None and isinstance(n.reads[0] if n.reads else None, Value) and (
            n.op == "view" and n.attrs.mask is None or n.op == "cast" and n.dtype.is_int):
        if n.op == "view":
            src = g.producer_of(n.reads[0])
            if not (isinstance(n.attrs.offset, int) and n.attrs.offset == 0):
                return n, [None] * len(axes)  # a shifted window: the coordinates do not carry over
            inner = contiguous_strides(src.shape)
            out: list[int | None] = []
            for a in axes:
                st = None if a is None else n.attrs.strides[a]
                hit = None if st is None or isinstance(st, int) and st == 0 else next(
                    (j for j, (c, d) in enumerate(zip(inner, src.shape)) if c == st and d != 1), None)
                out.append(hit)
            axes = out
        n = g.producer_of(n.reads[0])
    return n, axes


def _depends(g: Graph, v: object, axes: list[int | None]) -> list[bool] | None:
    """Per axis: whether value ``v`` (an operand of the comparison) varies along it; None when unknown
    (a computed value below the views: only an ``index`` or a buffer-like leaf is understood)."""
    n, at = follow(g, v, axes)
    if n is None:
        return [False] * len(axes)
    if n.op == "index":
        return [a == n.attrs.axis for a in at]
    if n.op in ("allocate", "check_index") or n.op == "cast" or n.dtype.is_int:
        return [a is not None for a in at]
    return None


def scatter_axis(g: Graph, r: Node) -> int | None:
    """The kept axis of ``reduce`` node ``r`` that a one-hot scatter-add writes by id, or None when ``r``
    is not that form (see the module docstring)."""
    plan = scatter_plan(g, r)
    return None if plan is None else plan[0]


def scatter_plan(g: Graph, r: Node) -> tuple[int, int] | None:
    """``(axis, side)``: the kept axis written by id, and which operand of the comparison is the id (the
    other is the row index), or None when ``r`` is not a one-hot scatter-add."""
    if r.op != "reduce" or r.attrs.op != "add" or not isinstance(r.reads[0], Value):
        return None
    w = g.producer_of(r.reads[0])
    if w is None or w.op != "where" or not r.dtype.is_float:
        return None
    rank = len(w.shape)
    cond, at = follow(g, w.reads[0], list(range(rank)))
    if cond is None:
        return None
    negated = cond.op == "not"
    if negated:
        cond, at = follow(g, cond.reads[0], at)
    miss = w.reads[2] if negated else w.reads[1]
    if cond is None or cond.op != "ne" or not _zero(g, miss):
        return None
    sides = [_depends(g, s, at) for s in cond.reads]
    reduced = set(r.attrs.axes)
    for i, dep in enumerate(sides):
        other = sides[1 - i]
        node, _ = follow(g, cond.reads[i], at)
        if node is None or node.op != "index" or dep is None or other is None:
            continue
        kept = [k for k in range(rank) if dep[k] and k not in reduced]
        if len(kept) != 1 or any(dep[k] for k in reduced):
            continue
        (axis,) = kept
        if node.shape[node.attrs.axis] != w.shape[axis]:
            continue  # the index must count every row of the output once
        # the id: the same for every element of the row it selects (else each column scatters elsewhere)
        if any(other[k] for k in range(rank) if k not in reduced) or not any(other[k] for k in reduced):
            continue
        return axis, 1 - i
    return None
