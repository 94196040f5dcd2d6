"""From lazy Tensors to one AIR graph: ``build_graph(outputs) -> (Graph, arrays)``.

One iterative post-order walk over the LazyNodes reachable from the outputs (O(N), no recursion, so
deep models do not hit the recursion limit). Each LazyNode becomes at most one AIR node, and nodes
with equal (op, operands, attributes) are merged, so shared subexpressions are built once.
Pending slice assignments into bound buffers (e.g. the KV cache) become extra graph outputs: running
the graph writes them back into the caller's arrays (see realize.execute).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from caten_lab.air.graph import Graph
from caten_lab.air.value import Value
from caten_lab.errors import CatenError
from caten_lab.frontend.lazy import Buffer, LazyNode, buffer_node, post_order
from caten_lab.frontend.realize import execute


@dataclass
class Traced:
    """A built graph plus what is needed to run it and commit its state updates."""

    graph: Graph
    arrays: dict[str, np.ndarray]
    n_outputs: int  # the first n graph outputs are the requested tensors
    states: dict[str, Buffer] = field(default_factory=dict)  # name -> buffer updated by an extra output
    unbound: list[str] = field(default_factory=list)  # named inputs without data


def _key(v: object) -> object:
    if isinstance(v, float):  # by bit pattern: -0.0 and 0.0 stay apart, nan matches nan
        return ("f", v.hex())
    if isinstance(v, list):
        return tuple(_key(x) for x in v)
    return (type(v).__name__, v)


def trace(outputs: Sequence[object], *, bind: bool = True) -> Traced:
    """Build the AIR graph of ``outputs`` (Tensors); with ``bind`` also create missing buffer data."""
    g = Graph()
    value_of: dict[int, str] = {}  # LazyNode.id -> AIR value
    cse: dict[tuple, str] = {}
    names: dict[int, str] = {}  # id(buffer) -> name in this graph
    used_names: set[str] = set()
    buffers: list[Buffer] = []
    roots = [t.node for t in outputs]

    def name_of(buf: Buffer) -> str:
        key = id(buf)
        if key in names:
            return names[key]
        base = buf.name or (
            "state" if buf.kind == "state" else "param" if buf.kind == "parameter" else "input"
        )
        name, k = base, 0
        if buf.name is None:
            name = f"{base}{k}"
        while name in used_names:
            k += 1
            name = f"{base}{k}" if buf.name is None else f"{base}_{k}"
        used_names.add(name)
        names[key] = name
        buffers.append(buf)
        return name

    def emit(node: LazyNode) -> str:
        reads = [value_of[s.id] if isinstance(s, LazyNode) else s for s in node.srcs]
        attrs = node.attrs
        if node.op == "allocate" and node.buffer is not None:
            attrs = dict(attrs, name=name_of(node.buffer))
        key = (
            node.op,
            tuple(r if isinstance(r, Value) else _key(r) for r in reads),
            tuple((k, _key(v)) for k, v in attrs.items()),
        )
        try:
            # a scratch buffer is its own storage: two are never merged
            hit = None if node.op == "allocate" and node.buffer is None else cse.get(key)
        except TypeError:  # an unhashable attribute: never merged
            key, hit = None, None
        if hit is not None:
            return hit
        out = g.insert(node.op, reads, source=node.source, **attrs)
        if key is not None:
            cse[key] = out
        return out

    seen: set[int] = set()

    def walk(root: LazyNode) -> None:
        for node in post_order([root], seen):
            value_of[node.id] = emit(node)

    for r in roots:
        walk(r)
    # state updates: the latest pending store of every buffer the graph touches
    extra: list[tuple[str, Buffer, LazyNode]] = []
    k = 0
    while k < len(buffers):
        buf = buffers[k]
        k += 1
        if buf.pending is not None:
            walk(buf.pending)
            extra.append((names[id(buf)], buf, buf.pending))
    for r in roots:
        g.outputs.append(value_of[r.id])
    states: dict[str, Buffer] = {}
    for name, buf, node in extra:
        v = value_of[node.id]
        if v not in g.outputs:
            g.outputs.append(v)
        states[name] = buf
    arrays: dict[str, np.ndarray] = {}
    unbound: list[str] = []
    for buf in buffers:
        arr = buf.materialize() if bind else buf.array
        if arr is None:
            unbound.append(names[id(buf)])
        else:
            arrays[names[id(buf)]] = arr
    return Traced(g, arrays, len(roots), states, unbound)


def build_graph(outputs: Sequence[object], *, bind: bool = True) -> tuple[Graph, dict[str, np.ndarray]]:
    """The AIR graph computing ``outputs`` and the arrays to bind to its named ``allocate`` nodes.

    Graph outputs are the requested tensors in order, followed by pending in-place state updates.
    With ``bind=False`` no parameter data is created (buffers without data stay unbound inputs).
    """
    t = trace(outputs, bind=bind)
    return t.graph, t.arrays


def commit(t: Traced, before: Mapping[str, np.ndarray] | None = None) -> None:
    """After a run wrote the state outputs into their buffers: the owners now read the new values.

    ``before`` holds each state's values from before the run: tensors built from the state before the
    assignment (``y = x * 1; x[0] = 5``) keep reading those, as in NumPy and PyTorch, instead of the
    updated buffer (their root ``allocate`` now points at the snapshot).
    """
    for name, buf in t.states.items():
        root = buf.pending
        while root is not None and root.op == "store":
            root = root.srcs[0]
        old = (before or {}).get(name)
        if old is not None and root is not None and root.op == "allocate" and root.buffer is buf:
            root.buffer = Buffer(buf.shape, buf.dtype, old)
        buf.pending = None
        owner = buf.owner  # the Tensor that assigned into the buffer (Tensor.from_buffer, setitem)
        if owner is not None:
            owner.node = buffer_node(buf)


def realize(outputs: Sequence[object], symbols: Mapping[str, int]) -> list[np.ndarray]:
    """Run ``outputs`` now (``Tensor.numpy``); commits pending state updates into their buffers."""
    t = trace(outputs)
    if t.unbound:
        raise CatenError(
            f"cannot realize: input(s) {', '.join(t.unbound)} have no data",
            hint="bind placeholders by running the graph with execute(graph, {name: array}, symbols)",
        )
    before = {name: np.array(t.arrays[name], copy=True) for name in t.states if name in t.arrays}
    results = execute(t.graph, t.arrays, dict(symbols))
    commit(t, before)
    return [np.asarray(r) for r in results[: t.n_outputs]]  # an ndarray on every backend, 0-d included
