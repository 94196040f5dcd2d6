"""What the scheduler realizes so that no kernel recomputes it too often: per-value cost facts over AIR.

:func:`caten_lab.passes.schedule.schedule_graph` inlines a value into every kernel that reads it unless
inlining would repeat real work. These are the facts it decides with, each one pass over the graph in
topological order (so linear in its size):

- :func:`heavy_values`: the value holds a reduction (inlined into two kernels, it would run twice);
- :func:`expensive_values`: its per-element work has a transcendental or an integer division;
- :func:`loaded_values`: the full-size buffers its per-element work loads (up to two: enough to tell
  "one load" from "a sum of several tensors");
- :func:`recomputes_in_stage`: a view broadcasts its operand along a kernel's main loop while inside a
  reduce stage, the matmul A-operand case: every output column tile recomputes the operand.

A broadcast operand inside a stage is realized when it is expensive, or when it loads two or more
full-size buffers (a gradient that is the sum of the gradients of several slices of one tensor, like
the q/k/v gradients of a fused qkv projection): recomputed per column tile it costs those loads and adds
once per tile, realized it costs one write and one read (only where codegen lowers the matmul as a
vector tile of output columns: in the dot-product form the ``hoist`` pass already computes it once per row).
"""

from __future__ import annotations

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.ops import ELEMENTWISE
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.symbolic import Dim
from caten_lab.air.value import Value
from caten_lab.passes.indexing import loop_vars_of

_ELEMENTWISE = frozenset(ELEMENTWISE)
_EXPENSIVE = frozenset({"exp2", "log2", "sin", "sqrt", "recip", "idiv", "mod"})
RECOMPUTE_LIMIT = 64  # a broadcast that would recompute a multi-load operand more often than this realizes it
EXPENSIVE_LIMIT = 8  # ... an expensive one (a transcendental, a division per element)
MULTI_LOAD = 2  # an operand that loads this many full-size buffers counts as costly to recompute


def heavy_values(order: list[Node], forced: set[str]) -> dict[str, bool]:
    """Values that hold a reduction not already realized (``forced``)."""
    heavy: dict[str, bool] = {}
    for n in order:
        if n.op in ("reduce", "quant_matmul"):  # a quantized matmul's element is a k-long dot product
            heavy[n.out] = True
        elif n.op in _ELEMENTWISE or n.op == "view":
            heavy[n.out] = any(heavy.get(r, False) and r not in forced for r in n.reads if isinstance(r, Value))
        else:
            heavy[n.out] = False
    return heavy


def expensive_values(order: list[Node]) -> dict[str, bool]:
    """Values whose own per-element work includes a transcendental or integer division (an unmasked
    view counts: a view over it must divide its flat index back into the view's coordinates)."""
    expensive: dict[str, bool] = {}
    views: dict[str, bool] = {}
    for n in order:
        if n.op in _ELEMENTWISE:
            expensive[n.out] = n.op in _EXPENSIVE or any(
                expensive.get(r, False) and not views.get(r, False) for r in n.reads if isinstance(r, Value))
        elif n.op == "view":  # read through another view, a view divides its flat index per element
            expensive[n.out] = views[n.out] = True  # (only there: an elementwise op over views does not inherit it)
        elif n.op == "quant_matmul":
            expensive[n.out] = True
    return expensive


def broadcasts(n: Node) -> bool:
    """Whether view ``n`` repeats elements (a stride-0 axis longer than 1)."""
    return any(isinstance(st, int) and st == 0 and not (isinstance(d, int) and d == 1)
               for d, st in zip(n.attrs.shape, n.attrs.strides))


def loaded_values(order: list[Node], forced: set[str]) -> dict[str, frozenset[str]]:
    """Per elementwise or view value: up to :data:`MULTI_LOAD` of the buffers its per-element work loads
    in full. A buffer is a value no elementwise op or view produces, or one already realized
    (``forced``); a broadcasting view loads nothing in full (a bias, a row statistic: one load per row),
    so ``x * scale[None]`` loads one buffer, ``dq + dk + dv`` three."""
    loads: dict[str, frozenset[str]] = {}
    empty: frozenset[str] = frozenset()
    for n in order:
        if n.op not in _ELEMENTWISE and n.op != "view":
            continue
        if n.op == "view" and broadcasts(n):
            loads[n.out] = empty
            continue
        acc: set[str] = set()
        for r in n.reads:
            if not isinstance(r, Value):
                continue
            acc |= {r} if r in forced or r not in loads else loads[r]
            if len(acc) >= MULTI_LOAD:
                break
        loads[n.out] = frozenset(sorted(acc)[:MULTI_LOAD])
    return loads


def repeats(n: Node) -> Dim:
    """How many times view ``n`` repeats each element of its operand (the product of its broadcast axes)."""
    reps: Dim = 1
    for d, st in zip(n.attrs.shape, n.attrs.strides):
        if isinstance(st, int) and st == 0:
            reps = reps * d
    return reps


def _tile_operand(g: Graph, n: Node) -> bool:
    """Whether broadcasting view ``n`` is the row operand of a matmul whose other operand is contiguous
    along an axis ``n`` broadcasts and strided along the reduction: the form codegen lowers as a vector tile
    of output columns (``codegen/lower_program.vector_reduces``), where every column tile reads the row
    operand again. (In the dot-product form the ``hoist`` pass computes it once per row instead.)"""
    bcast = {k for k, st in enumerate(n.attrs.strides) if isinstance(st, int) and st == 0}
    for u in g.users_of(n.out):
        if u.op != "mul":
            continue
        others = [r for r in u.reads if isinstance(r, Value) and r != n.out]
        p = g.producer_of(others[0]) if others else None
        if p is None or p.op != "view":
            continue
        strides = _base_strides(g, p)
        for red in g.users_of(u.out):
            if red.op == "reduce" and any(
                    strides[k] == 1 and strides[r] not in (0, 1, None) for k in bcast for r in red.attrs.axes):
                return True
    return False


def _base_strides(g: Graph, n: Node) -> list[Dim | None]:
    """The strides of view ``n`` in the buffer below its chain of unmasked views (None for an axis whose
    step is not one axis of the view below: a reshape across axes)."""
    strides: list[Dim | None] = list(n.attrs.strides)
    p = g.producer_of(n.reads[0])
    while p is not None and p.op == "view" and p.attrs.mask is None:
        inner = contiguous_strides(p.shape)
        out: list[Dim | None] = []
        for st in strides:
            if st is None or isinstance(st, int) and st == 0:
                out.append(st)
                continue
            j = next((j for j, (c, d) in enumerate(zip(inner, p.shape)) if c == st and d != 1), None)
            out.append(None if j is None else p.attrs.strides[j])
        strides = out
        p = g.producer_of(p.reads[0])
    return strides


def costly_to_recompute(g: Graph, n: Node, expensive: dict[str, bool], loads: dict[str, frozenset[str]]) -> bool:
    """Whether the operand of broadcasting view ``n`` costs too much to recompute per repeat: it is
    expensive and ``n`` repeats it more than :data:`EXPENSIVE_LIMIT` times (or a symbolic number of
    times), or it loads several buffers, ``n`` repeats it a fixed number of times above
    :data:`RECOMPUTE_LIMIT` (a symbolic count may be small, a decode step's one row: there a copy would
    cost more than it saves) and it is a vector-tile matmul's row operand (:func:`_tile_operand`)."""
    v = n.reads[0]
    reps = repeats(n)
    if expensive.get(v, False):
        return not isinstance(reps, int) or reps > EXPENSIVE_LIMIT
    return (len(loads.get(v, ())) >= MULTI_LOAD and isinstance(reps, int) and reps > RECOMPUTE_LIMIT
            and _tile_operand(g, n))


def recomputes_in_stage(loops: list[str], req: dict[str, set[tuple]], n: Node) -> bool:
    """Whether view ``n`` (in a kernel with main ``loops`` whose values are needed at ``req``) broadcasts
    its operand along a main loop axis while inside a reduce stage: the operand would be recomputed once
    per output column (matmul A operand)."""
    a = n.attrs
    bcast = [k for k, (d, st) in enumerate(zip(a.shape, a.strides))
             if isinstance(st, int) and st == 0 and not (isinstance(d, int) and d == 1)]
    if not bcast:
        return False
    main = set(loops)
    for c in req.get(n.out, ()):
        used: set[str] = set()
        for d in c:
            used |= loop_vars_of(d)
        if not (used - main):
            continue  # not inside a stage
        if any(loop_vars_of(c[k]) & main for k in bcast):
            return True
    return False
