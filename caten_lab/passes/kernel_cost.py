"""Bytes moved and floating-point operations of one scheduled kernel (the roofline's two axes).

Counted on the kernel's fused AIR graph (``Kernel.graph``), with the run's symbol values:

- **flops**: every arithmetic node (``add mul idiv mod max neg recip exp2 log2 sin sqrt``) counts one
  operation per element of its result; a ``reduce`` counts one per element of its input. Comparisons,
  ``where``, casts and index arithmetic are not floating-point work and count zero. A matmul of
  (M, K) by (K, N) is the ``mul`` of an (M, N, K) broadcast and a ``reduce`` over K: 2*M*N*K.
- **bytes**: each input buffer is read once (its elements times the element size; a view that
  reaches only part of the buffer, such as a slice of a KV cache, counts only that part; broadcast
  axes, stride 0, count once), and the result is written once (for a ``store`` into a state, the
  stored region). This is the compulsory traffic: caches can only make the real traffic larger.
- an embedding written as a one-hot reduction, ``sum_r where(idx != r, 0, x[r])``, is lowered to the
  gather ``x[idx]`` (codegen/lower_reduce.py): it counts no flops and reads one row per result;
- its gradient, a one-hot scatter-add (passes/scatter_form.py, lowered by codegen/lower_scatter.py),
  counts one add per element it scatters (the reduce's input over the rows it selects from).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from caten_lab.air.symbolic import evaluate
from caten_lab.air.value import Value
from caten_lab.passes.scatter_form import scatter_axis

FLOP_OPS = frozenset({"add", "mul", "idiv", "mod", "max", "neg", "recip", "exp2", "log2", "sin", "sqrt"})


def _dim(d: Any, sym: Mapping[str, int]) -> int:
    return d if type(d) is int else int(evaluate(d, sym))


def _numel(shape: Any, sym: Mapping[str, int]) -> int:
    return math.prod(_dim(d, sym) for d in shape)


def _footprint(node: Any, sym: Mapping[str, int]) -> int:
    """Elements a reader of a buffer reaches: a view's shape without its broadcast (stride 0) axes."""
    strides = getattr(node.attrs, "strides", None) if node.op == "view" else None
    if strides is None or len(strides) != len(node.shape):
        return _numel(node.shape, sym)
    return math.prod(_dim(d, sym) for d, s in zip(node.shape, strides) if not (type(s) is int and s == 0))


def _source(g: Any, read: Any) -> Any:
    """The node behind ``read``, looking through views and casts (None for a literal)."""
    n = g.producer_of(read) if isinstance(read, Value) else None
    while n is not None and n.op in ("view", "cast") and n.reads and isinstance(n.reads[0], Value):
        n = g.producer_of(n.reads[0])
    return n


def _onehot_table(g: Any, reduce: Any) -> Any:
    """The table a one-hot ``reduce`` gathers from (its ``allocate``), or None if it is not one."""
    if getattr(reduce.attrs, "op", None) != "add" or not reduce.reads:
        return None
    w = _source(g, reduce.reads[0])
    if w is None or w.op != "where" or len(w.reads) != 3:
        return None
    cond = _source(g, w.reads[0])
    negated = cond is not None and cond.op == "not"
    if negated:
        cond = _source(g, cond.reads[0])
    if (
        cond is None
        or cond.op != "ne"
        or not any((s := _source(g, r)) is not None and s.op == "index" for r in cond.reads)
    ):
        return None
    table = _source(g, w.reads[1] if negated else w.reads[2])
    return table if table is not None and table.op == "allocate" else None


def kernel_cost(kernel: Any, buffers: Mapping[str, Any], sym: Mapping[str, int]) -> tuple[int, int]:
    """``(bytes, flops)`` of one call of ``kernel`` (a :class:`~caten_lab.passes.schedule.Kernel`)
    whose buffers are ``buffers`` (``Schedule.buffers``) under the symbol binding ``sym``."""
    g = kernel.graph
    flops = 0
    read_bytes = 0
    written = 0
    outputs = set(kernel.outputs)
    gathered: dict[int, int] = {}  # allocate node id -> elements a one-hot gather reads of it
    scatters = {n.id: axis for n in g if n.op == "reduce" and (axis := scatter_axis(g, n)) is not None}
    for n in g:
        if n.op == "reduce" and n.id not in scatters and (table := _onehot_table(g, n)) is not None:
            gathered[table.id] = gathered.get(table.id, 0) + _numel(n.shape, sym)
    for n in g:
        if n.op in FLOP_OPS:
            flops += _numel(n.shape, sym)
        elif n.id in scatters:
            src = g.producer_of(n.reads[0])
            flops += _numel(src.shape, sym) // max(1, _dim(src.shape[scatters[n.id]], sym))
        elif n.op == "reduce" and _onehot_table(g, n) is None:
            src = g.producer_of(n.reads[0]) if n.reads else None
            flops += _numel(src.shape if src is not None else n.shape, sym)
        elif n.op == "store" and len(n.reads) > 1:
            src = g.producer_of(n.reads[1])
            written += _numel(src.shape if src is not None else n.shape, sym) * n.dtype.itemsize
        elif n.op == "allocate":
            name = getattr(n.attrs, "name", None)
            size = _numel(n.shape, sym)
            users = g.users_of(n.out)
            reach = gathered.get(n.id) or max((_footprint(u, sym) for u in users), default=size)
            if name not in outputs:
                read_bytes += min(size, reach) * n.dtype.itemsize
    if not written:
        for b in kernel.outputs:
            info = buffers.get(b)
            if info is not None:
                written += _numel(info.shape, sym) * info.dtype.itemsize
    return read_bytes + written, flops
