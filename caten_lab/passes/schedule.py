"""Fusion / scheduling: group AIR nodes into kernels.

Every value is either *realized* (written to a buffer by the kernel whose root it is) or *inlined*
(recomputed, as an index expression, inside each kernel that reads it). One reverse walk over the
topologically sorted graph decides, per value:

- graph outputs, ``store`` results and their destinations, and operands of masked views are realized;
- a value read by several kernels is inlined into each when it is cheap (no reduction inside) and
  realized otherwise;
- a ``reduce`` is fused into its consumer kernel as a *stage* (an accumulator loop placed at the loop
  depth its coordinates need) when the consumer asks for it at one coordinate tuple depending on a
  prefix of the kernel's loops: softmax and layernorm become one kernel per call, matmul fuses with
  its bias add and activation. Otherwise the reduce is realized (its own kernel).

Views are never copies: each inlined node records the coordinates its consumers ask for (loop
variables composed through views by :func:`caten_lab.passes.indexing.unravel`). Kernels with equal
structural keys (canonical buffer names) share one lowered, compiled function: the schedule cache.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from caten_lab.air import serialize
from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.ops import ELEMENTWISE, OPS
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.symbolic import Dim, Expr
from caten_lab.air.value import Value
from caten_lab.errors import CompileError
from caten_lab.passes.base import PassContext
from caten_lab.passes.fusion import DEAD, INLINE, ROOT, FusionDecision
from caten_lab.passes.indexing import flat_index, loop_var, loop_vars_of, unravel
from caten_lab.passes.recompute import (
    broadcasts,
    costly_to_recompute,
    expensive_values,
    heavy_values,
    loaded_values,
    recomputes_in_stage,
)
from caten_lab.passes.scatter_form import scatter_axis
from caten_lab.passes.values import is_reshape

_ELEMENTWISE = frozenset(ELEMENTWISE)
MAX_COORDS_PER_VALUE = 4  # beyond this many distinct coordinate tuples in one kernel, realize instead


@dataclass
class BufferInfo:
    """A buffer the program reads or writes. ``kind``: input | output | state | intermediate | constant."""

    name: str
    shape: tuple
    dtype: DType
    kind: str

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    def to_json(self) -> dict:
        return {"name": self.name, "shape": serialize.encode_value(tuple(self.shape)),
                "dtype": self.dtype.value, "kind": self.kind}

    @classmethod
    def from_json(cls, d: dict) -> BufferInfo:
        return cls(str(d["name"]), tuple(serialize.decode_value(d["shape"])), DType(d["dtype"]), str(d["kind"]))


@dataclass
class Kernel:
    """One fused loop nest. ``graph``'s inputs are ``allocate(name=<buffer>)`` nodes; its single output
    is written to ``outputs[0]``. ``params`` is the canonical parameter order (outputs, then inputs)."""

    name: str
    graph: Graph
    inputs: list[str]
    outputs: list[str]
    node_ids: list[int]
    key: str
    params: list[str] = field(default_factory=list)
    kind: str = "value"  # value | store | copy
    n_stages: int = 0

    def __repr__(self) -> str:
        return f"<Kernel {self.name} {self.outputs} <- {self.inputs} ({len(self.node_ids)} nodes)>"

    def to_json(self) -> dict:
        return {"name": self.name, "graph": serialize.to_json(self.graph), "inputs": list(self.inputs),
                "outputs": list(self.outputs), "node_ids": list(self.node_ids), "key": self.key,
                "params": list(self.params), "kind": self.kind, "n_stages": self.n_stages}

    @classmethod
    def from_json(cls, d: dict) -> Kernel:
        """The kernel of :meth:`to_json`. Its graph is rebuilt from the JSON on first use of ``.graph``
        (a compiled program never reads it; a warm compile of GPT-2 would spend most of its time here)."""
        graph_json = d["graph"]  # the object, or its JSON text (parsed when first used)
        if not isinstance(graph_json, (dict, str)):
            raise TypeError(f"kernel {d['name']!r}: graph must be an AIR JSON object or its text")
        k = cls(str(d["name"]), None, [str(x) for x in d["inputs"]],  # type: ignore[arg-type]
                [str(x) for x in d["outputs"]], [int(x) for x in d["node_ids"]], str(d["key"]),
                [str(x) for x in d["params"]], str(d["kind"]), int(d["n_stages"]))
        del k.__dict__["graph"]
        k.__dict__["_graph_json"] = graph_json
        return k

    def __getattr__(self, name: str) -> object:  # only reached for a graph not decoded yet
        pending = self.__dict__.get("_graph_json") if name == "graph" else None
        if pending is None:
            raise AttributeError(name)
        g = self.__dict__["graph"] = serialize.from_json(pending)
        del self.__dict__["_graph_json"]
        return g


@dataclass
class Schedule:
    kernels: list[Kernel]
    buffers: dict[str, BufferInfo]
    symbols: list[str]
    outputs: list[str] = field(default_factory=list)  # buffer of each graph output, in order
    state_writes: dict[int, str] = field(default_factory=dict)  # output index -> state input it updates
    value_buffer: dict[str, str] = field(default_factory=dict)  # realized AIR value -> buffer

    def unique_kernels(self) -> int:
        return len({k.key for k in self.kernels})

    def to_json(self) -> dict:
        """JSON-ready data (the artifact cache's format); :meth:`from_json` rebuilds an equal Schedule."""
        return {"kernels": [k.to_json() for k in self.kernels], "buffers": [b.to_json() for b in self.buffers.values()],
                "symbols": list(self.symbols), "outputs": list(self.outputs),
                "state_writes": [[i, b] for i, b in self.state_writes.items()], "value_buffer": {str(v): b for v, b in self.value_buffer.items()}}

    @classmethod
    def from_json(cls, d: dict) -> Schedule:
        buffers = [BufferInfo.from_json(b) for b in d["buffers"]]
        return cls([Kernel.from_json(k) for k in d["kernels"]], {b.name: b for b in buffers},
                   [str(x) for x in d["symbols"]], [str(x) for x in d["outputs"]],
                   {int(i): str(b) for i, b in d["state_writes"]},
                   {Value.parse(k): str(b) for k, b in d["value_buffer"].items()})

    def summary(self) -> str:
        lines = [f"{len(self.kernels)} kernels ({self.unique_kernels()} unique), {len(self.buffers)} buffers"]
        for k in self.kernels:
            lines.append(f"  {k.name}: {', '.join(k.outputs)} <- {', '.join(k.inputs) or '-'}  [{len(k.node_ids)} nodes]")
        return "\n".join(lines)


def graph_symbols(g: Graph) -> list[str]:
    """Every symbol name used in shapes or attributes of ``g``."""
    out: set[str] = set()
    seen: set[object] = set()
    for n in g:
        items: tuple = n.shape
        op = n.op
        if op == "view":
            a = n.attrs
            items = (*items, *a.strides, a.offset, *(a.mask or ()))
        elif op == "store":
            a = n.attrs
            items = (*items, *a.shape, *a.strides, a.offset)
        elif op == "const":
            items = (*items, n.attrs.value)
        elif op == "check_index":
            items = (*items, n.attrs.size)
        for v in items:
            if type(v) is int or v in seen:
                continue
            if isinstance(v, Expr):
                seen.add(v)
                out |= v.symbols()
            elif isinstance(v, tuple):
                _collect(v, out)
    return sorted(out)


def _collect(v: object, out: set[str]) -> None:
    if isinstance(v, Expr):
        out |= v.symbols()
    elif isinstance(v, tuple):
        for x in v:
            _collect(x, out)


def _is_buffer_node(n: Node) -> bool:
    return n.op == "allocate" and n.attrs.name is not None


class _Plan:
    """Working state of one scheduling run."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.realized: dict[str, int] = {}  # value -> kernel id (root)
        self.member: dict[str, set[int]] = {}  # inlined value -> kernel ids
        self.req: list[dict[str, set[tuple]]] = []  # per kernel: value -> coordinate tuples
        self.bounds: list[dict[str, Dim]] = []  # per kernel: loop var -> extent
        self.loops: list[list[str]] = []  # per kernel: root loop variables, outermost first
        self.stage_count: list[int] = []
        self.roots: list[Node] = []

    def new_kernel(self, root: Node) -> int:
        kid = len(self.roots)
        self.roots.append(root)
        shape = root.attrs.shape if root.op == "store" else root.shape
        names, coords, bounds = [], [], {}
        for k, d in enumerate(shape):
            if isinstance(d, int) and d == 1:
                coords.append(0)
                continue
            name = f"__l{k}"
            names.append(name)
            coords.append(loop_var(name))
            bounds[name] = d
        self.req.append({})
        self.bounds.append(bounds)
        self.loops.append(names)
        self.stage_count.append(0)
        self.realized[root.out] = kid
        self.push(kid, root, tuple(coords))
        return kid

    def push(self, kid: int, n: Node, coords: tuple) -> None:
        """Record the coordinates at which ``n``'s operands are needed when ``n`` is at ``coords``."""
        g = self.g
        op = n.op
        if op in _ELEMENTWISE:
            for r in n.reads:
                if isinstance(r, Value):
                    self._add(kid, r, coords)
        elif op == "view":
            src = n.reads[0]
            p = g.producer_of(src)
            if p is None or _is_buffer_node(p) or src in self.realized:
                self._add(kid, src, ())
                return
            a = n.attrs
            flat = flat_index(coords, a.strides, a.offset)
            self._add(kid, src, unravel(flat, p.shape, self.bounds[kid]))
        elif op == "quant_matmul":  # its operands are buffers (forced): a helper call reads whole rows
            for r in n.reads:
                self._add(kid, r, ())
        elif op == "quant_rows":  # a row of x (the last axis: a stage) is quantized per row
            s = self.stage_count[kid]
            self.stage_count[kid] += 1
            name = f"__r{s}_{len(coords) - 1}"
            self.bounds[kid][name] = g.producer_of(n.reads[0]).shape[-1]
            self._add(kid, n.reads[0], (*coords[:-1], loop_var(name)))
        elif op == "reduce":
            shape = g.producer_of(n.reads[0]).shape
            s = self.stage_count[kid]
            self.stage_count[kid] += 1
            inner = list(coords)
            for ax in n.attrs.axes:
                d = shape[ax]
                if isinstance(d, int) and d == 1:
                    inner[ax] = 0
                    continue
                name = f"__r{s}_{ax}"
                inner[ax] = loop_var(name)
                self.bounds[kid][name] = d
            self._add(kid, n.reads[0], tuple(inner))
        elif op == "store":
            src = n.reads[1]
            if isinstance(src, Value):
                self._add(kid, src, coords)

    def _add(self, kid: int, value: str, coords: tuple) -> None:
        self.req[kid].setdefault(value, set()).add(coords)


def _is_reshape(g: Graph, n: Node) -> bool:
    """Whether view ``n`` only reshapes its operand: reading through it is reading the operand's own flat
    index, so a kernel loses nothing by reading it in place and a copy would only move memory."""
    a = n.attrs
    src = g.producer_of(n.reads[0]) if isinstance(n.reads[0], Value) else None
    return src is not None and is_reshape(a.shape, a.strides, a.offset, a.mask, src.shape)


def _view_base(g: Graph, n: Node) -> str:
    """The first value below a chain of (unmasked) views starting at view ``n``."""
    v = n.reads[0]
    p = g.producer_of(v)
    while p is not None and p.op == "view" and p.attrs.mask is None:
        v = p.reads[0]
        p = g.producer_of(v)
    return v


def _reduce_fusable(plan: _Plan, kid: int, n: Node) -> bool:
    coords = plan.req[kid].get(n.out, set())
    if len(coords) != 1:
        return False
    (c,) = coords
    used: set[str] = set()
    for d in c:
        used |= loop_vars_of(d)
    loops = plan.loops[kid]
    if any(v not in loops for v in used):
        return False  # depends on another stage's variables: would be recomputed per iteration
    if _read_transposed(plan.g, n, c, loops):
        return False
    return used == set(loops[: len(used)])


def _read_transposed(g: Graph, n: Node, c: tuple, loops: list[str]) -> bool:
    """Whether matmul ``n`` (a sum of products) is read at coordinates ``c`` that put its innermost output
    axis on another loop than the reader's innermost one: fused, it would be computed in the reader's order,
    undoing a matmul computed transposed on purpose (passes/transpose_matmul.py); realized, it keeps its own.
    (Attention's heads read back as rows permute outer axes only: those stay fused.)"""
    p = g.producer_of(n.reads[0]) if isinstance(n.reads[0], Value) else None
    if p is None or p.op != "mul":
        return False
    at = [loops.index(next(iter(vs))) for vs in (loop_vars_of(d) for d in c) if len(vs) == 1]
    return bool(at) and at[-1] != max(at)


def _quant_matmul_fusable(plan: _Plan, kid: int, n: Node) -> bool:
    """A quantized matmul is computed inside its reader (a helper call per element) only when that reader
    needs each element once: one coordinate tuple of the reader's own loops, no stage variable."""
    coords = plan.req[kid].get(n.out, set())
    if len(coords) != 1:
        return False
    used: set[str] = set()
    for d in next(iter(coords)):
        used |= loop_vars_of(d)
    return used <= set(plan.loops[kid])


def schedule_graph(g: Graph, state_outputs: dict[int, str] | None = None,
                   decisions: list[FusionDecision] | None = None) -> Schedule:
    """Group the nodes of ``g`` into kernels (see the module docstring).

    ``state_outputs`` (output index -> input name, :func:`caten_lab.air.graph.state_outputs` of the graph
    *before* the passes) says which outputs update an input in place; only their stores may write into
    the caller's array. Simplification can turn a plain value into a store chain rooted at an input
    (``store(x * 1, ...)`` becomes ``store(x, ...)``): that store must copy first. None: derived from ``g``.
    ``decisions`` (a list, when tracing) receives one :class:`FusionDecision` per node decided.
    """
    order = g.toposort()
    pos = {n.id: i for i, n in enumerate(order)}
    forced: set[str] = set(g.outputs)
    why: dict[str, str] | None = None if decisions is None else dict.fromkeys(g.outputs, "a graph output")
    for n in order:
        if n.op == "store":
            forced.add(n.out)
            forced.add(n.reads[0])
            if why is not None:
                why.setdefault(n.out, "the result of a store (written to its destination buffer)")
                why.setdefault(n.reads[0], "the destination of a store")
        elif n.op == "view" and n.attrs.mask is not None:
            forced.add(n.reads[0])
            if why is not None:
                why.setdefault(n.reads[0], "the operand of a masked (padded) view")
        elif n.op == "quant_rows":
            forced.add(n.out)  # a kernel of its own: each row quantized by one helper call
            if why is not None:
                why.setdefault(n.out, "8-bit activation rows (quant_rows): their own kernel")
        elif n.op == "quant_matmul":
            for r in n.reads:  # a helper reads whole rows of both: they must be buffers
                forced.add(r)
                if why is not None:
                    why.setdefault(r, "an operand of a quantized matmul (its helper reads whole rows)")
        elif n.op == "reduce" and scatter_axis(g, n) is not None:
            forced.add(n.out)  # its own kernel: lowered as a scatter-add (codegen/lower_scatter.py)
            if why is not None:
                why.setdefault(n.out, "a one-hot scatter-add (an embedding's gradient): its own kernel")
    heavy = heavy_values(order, forced)
    expensive = expensive_values(order)
    loads = loaded_values(order, forced)
    plan = _Plan(g)
    log: list[tuple[Node, str, tuple[int, ...], str, bool]] | None = None if decisions is None else []
    for n in reversed(order):
        v = n.out
        if _is_buffer_node(n):
            continue
        must = v in forced
        kernels: set[int] = set()
        if not must:
            for u in g.users_of(v):
                if u.out in plan.realized:
                    kernels.add(plan.realized[u.out])
                else:
                    kernels |= plan.member.get(u.out, set())
            if not kernels:
                if log is not None:
                    log.append((n, DEAD, (), "no kernel reads it", False))
                continue  # dead: nothing reads it
            if len(kernels) > 1 and heavy[v] and n.op == "view" and (broadcasts(n) or _view_base(g, n) in forced):
                # realizing a broadcast would copy its operand once per repeat (a training graph reads the
                # matmul operand x in the forward and in the weight gradient): realize the operand instead
                base = _view_base(g, n)
                forced.add(base)
                if why is not None:
                    why.setdefault(base, f"the operand of a broadcast read by {len(kernels)} kernels")
            elif len(kernels) > 1 and heavy[v] and not (n.op == "view" and _is_reshape(g, n)) or n.op == "reduce" and not _reduce_fusable(plan, next(iter(kernels)), n) or n.op == "quant_matmul" and not _quant_matmul_fusable(plan, next(iter(kernels)), n) or any(len(plan.req[k].get(v, ())) > MAX_COORDS_PER_VALUE for k in kernels):
                must = True
                if log is not None:
                    log.append((n, ROOT, (len(plan.roots),), _refusal(plan, n, kernels, heavy), True))
        elif log is not None and why is not None:
            log.append((n, ROOT, (len(plan.roots),), why.get(v, "realized"), False))
        if must:
            plan.new_kernel(n)
            continue
        plan.member[v] = kernels
        if n.op == "view" and costly_to_recompute(g, n, expensive, loads) and any(
                recomputes_in_stage(plan.loops[kid], plan.req[kid], n) for kid in kernels):
            forced.add(n.reads[0])
            if why is not None:
                why.setdefault(n.reads[0], "an expensive or multi-load value a reduce stage would recompute "
                               "per output column (broadcast operand)")
        if log is not None:
            log.append((n, INLINE, tuple(sorted(kernels)), "fused into the kernel(s) that read it",
                        False))
        for kid in kernels:
            for c in plan.req[kid].get(v, ()):
                plan.push(kid, n, c)
    if log is None or decisions is None:
        return _build(g, plan, pos, state_outputs)
    by_kid: dict[int, Kernel] = {}
    sched = _build(g, plan, pos, state_outputs, by_kid)
    rank = {id(k): i for i, k in enumerate(sched.kernels)}
    for n, action, kids, reason, refused in reversed(log):  # graph order
        names = tuple(k.name for k in sorted((by_kid[k] for k in kids), key=lambda k: rank[id(k)]))
        decisions.append(FusionDecision(n.id, n.op, str(n.out), action, names, reason, refused))
    return sched


def _refusal(plan: _Plan, n: Node, kernels: set[int], heavy: dict[str, bool]) -> str:
    """Why value ``n`` (read by ``kernels``) is realized instead of fused (tracing only; the same tests,
    in the same order, as :func:`schedule_graph`)."""
    v = n.out
    if len(kernels) > 1 and heavy[v]:
        return f"read by {len(kernels)} kernels and holds a reduction: fusing would recompute it in each"
    if n.op == "quant_matmul":
        coords = plan.req[next(iter(kernels))].get(v, set())
        return (f"a quantized matmul its reader needs at {len(coords)} coordinate tuples or inside a reduce "
                "stage: computed once, each element a dot product")
    if n.op == "reduce":
        kid = next(iter(kernels))
        coords = plan.req[kid].get(v, set())
        if len(coords) != 1:
            return f"a reduce its reader needs at {len(coords)} coordinate tuples: fused, it would run once per tuple"
        used: set[str] = set()
        for d in next(iter(coords)):
            used |= loop_vars_of(d)
        if any(u not in plan.loops[kid] for u in used):
            return "a reduce indexed by another reduce stage's loop: fused, it would be recomputed per iteration"
        if used != set(plan.loops[kid][: len(used)]):
            return "a reduce whose coordinates are not an outer prefix of its reader's loops"
    return f"needed at more than {MAX_COORDS_PER_VALUE} coordinate tuples in one kernel"


# ---- building kernels -------------------------------------------------------------------


def _describe(nodes: list[Node], g: Graph) -> str:
    parts: list[str] = []
    for n in nodes:
        if n.op == "reduce":
            src = g.producer_of(n.reads[0])
            label = "matmul" if n.attrs.op == "add" and src is not None and src.op == "mul" else f"{n.attrs.op}"
        elif n.op in ELEMENTWISE and n.op != "check_index":  # a check does not name a kernel
            label = n.op
        elif n.op == "store":
            label = "store"
        elif n.op == "quant_matmul":
            label = f"qmatmul_{n.attrs.wtype.lower()}"
        elif n.op == "quant_rows":
            label = "quantize"
        else:
            continue
        if label in parts:
            continue
        if n.op in ("quant_matmul", "quant_rows"):  # what the kernel is for, before its epilogue's ops
            parts.insert(0, label)
        else:
            parts.append(label)
    return "_".join(parts[:4]) or "copy"


def _build(g: Graph, plan: _Plan, pos: dict[int, int], states: dict[int, str] | None,
           by_kid: dict[int, Kernel] | None = None) -> Schedule:
    buffers: dict[str, BufferInfo] = {}
    value_buffer: dict[str, str] = {}
    out_index = {o: i for i, o in reversed(list(enumerate(g.outputs)))}
    for n in g:
        if _is_buffer_node(n):
            buffers[n.attrs.name] = BufferInfo(n.attrs.name, n.shape, n.dtype, "input")
            value_buffer[n.out] = n.attrs.name

    def state_root(value: str) -> str | None:
        p = g.producer_of(value)
        while p is not None and p.op == "store":
            p = g.producer_of(p.reads[0])
        return p.attrs.name if p is not None and _is_buffer_node(p) else None

    if states is None:
        states = {i: sr for i, o in enumerate(g.outputs)
                  if (sr := state_root(o)) is not None and g.producer_of(o).op == "store"}
    output_stores: set[int] = set()  # store chains of the state outputs: only these may update an input in place
    for i, o in enumerate(g.outputs):
        if i not in states or state_root(o) != states[i]:
            continue
        p = g.producer_of(o)
        while p is not None and p.op == "store":
            output_stores.add(p.id)
            p = g.producer_of(p.reads[0])

    kernels: list[tuple[float, Kernel]] = []
    outputs_set = set(g.outputs)
    kid_order = sorted(range(len(plan.roots)), key=lambda k: pos[plan.roots[k].id])
    for kid in kid_order:
        root = plan.roots[kid]
        if root.op == "store":
            dst = root.reads[0]
            dst_buf = value_buffer[dst]
            reads_dst = _kernel_reads_buffer(g, plan, kid, dst_buf, value_buffer)
            external = buffers.get(dst_buf) is not None and buffers[dst_buf].kind in ("input", "state")
            in_place = (not reads_dst and (not external or root.id in output_stores) and dst not in outputs_set
                        and _old_value_read_before(g, plan, dst, root, pos))
            if not in_place and (g.n_users(dst) > 1 or reads_dst or (external and root.id not in output_stores)):
                copy = f"c{root.id}"
                buffers[copy] = BufferInfo(copy, buffers[dst_buf].shape, buffers[dst_buf].dtype, "intermediate")
                if not _overwrites_all(root, buffers[dst_buf].shape):  # a whole overwrite (an optimizer's
                    kernels.append((pos[root.id] - 0.5, _copy_kernel(g, dst, dst_buf, copy)))  # m[:] = ...)
                dst_buf = copy  # needs a new buffer, not the old values
            value_buffer[root.out] = dst_buf
            if dst_buf in buffers and buffers[dst_buf].kind == "input":
                buffers[dst_buf].kind = "state"
        else:
            if root.out in out_index:
                name = f"out{out_index[root.out]}"
                kind = "output"
            else:
                name = f"t{root.id}"
                kind = "intermediate"
            buffers[name] = BufferInfo(name, root.shape, root.dtype, kind)
            value_buffer[root.out] = name
        kernels.append((pos[root.id], _make_kernel(g, plan, kid, value_buffer, buffers)))
        if by_kid is not None:
            by_kid[kid] = kernels[-1][1]
    kernels.sort(key=lambda t: t[0])
    ks = [k for _, k in kernels]
    for i, k in enumerate(ks):
        k.name = f"k{i}_{k.name}"
    outputs = [value_buffer.get(o, "") for o in g.outputs]
    state_writes = {i: name for i, name in states.items() if i < len(g.outputs) and state_root(g.outputs[i]) == name
                    and g.producer_of(g.outputs[i]).op == "store"}
    for b in outputs:
        if b and buffers[b].kind == "intermediate":
            buffers[b].kind = "output"
    return Schedule(ks, buffers, graph_symbols(g), outputs, state_writes, value_buffer)


def _old_value_read_before(g: Graph, plan: _Plan, dst: Value, store: Node, pos: dict[int, int]) -> bool:
    """Whether every other reader of ``dst``'s old value is computed in a kernel that runs before ``store``'s
    (kernels run in the order of their roots): the store may then write into ``dst``'s buffer in place, as an
    optimizer's ``m[:] = new_m`` does once ``new_m`` (which read ``m``) is computed."""
    here = pos[store.id]
    for u in g.users_of(dst):
        if u.id == store.id:
            continue
        ks = {plan.realized[u.out]} if u.out in plan.realized else plan.member.get(u.out, set())
        if not ks or any(pos[plan.roots[k].id] >= here for k in ks):
            return False
    return True


def _overwrites_all(store: Node, shape: tuple) -> bool:
    """Whether ``store`` writes every element of its destination (of ``shape``) exactly once."""
    a = store.attrs
    return (tuple(a.shape) == tuple(shape) and a.offset == 0 and tuple(a.strides) == contiguous_strides(tuple(shape)))


def _kernel_reads_buffer(g: Graph, plan: _Plan, kid: int, buf: str, value_buffer: dict[str, str]) -> bool:
    root = plan.roots[kid]
    seen: set[str] = set()
    stack = [r for r in root.reads[1:] if isinstance(r, Value)]
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in plan.realized or _is_buffer_node(g.producer_of(v)):
            if value_buffer.get(v) == buf:
                return True
            continue
        stack.extend(r for r in g.producer_of(v).reads if isinstance(r, Value))
    return False


def _copy_kernel(g: Graph, value: str, src_buf: str, dst_buf: str) -> Kernel:
    p = g.producer_of(value)
    kg = Graph()
    shape = p.shape
    node = Node("allocate", (value,), [], _alloc_attrs(shape, p.dtype, src_buf), p.dtype, shape)
    kg.add(node)
    kg.outputs = [value]
    key = _hash(("copy", shape, p.dtype.value))
    return Kernel("copy", kg, [src_buf], [dst_buf], [], key, [dst_buf, src_buf], "copy")


_ATTRS: dict[tuple, object] = {}
_ALLOC_CLS = OPS["allocate"].attrs_cls


def _alloc_attrs(shape: tuple, dtype: DType, name: str) -> object:
    key = (shape, dtype, name)
    a = _ATTRS.get(key)
    if a is None:
        a = _ATTRS[key] = _ALLOC_CLS(shape=shape, dtype=dtype, name=name)
    return a


_KEYS: dict[object, str] = {}


def _hash(obj: object) -> str:
    """A stable digest of a canonical kernel form (memoized: identical blocks hash once)."""
    h = _KEYS.get(obj)
    if h is None:
        if len(_KEYS) > 50_000:
            _KEYS.clear()
        h = _KEYS[obj] = hashlib.blake2b(repr(obj).encode(), digest_size=12).hexdigest()
    return h


def _make_kernel(g: Graph, plan: _Plan, kid: int, value_buffer: dict[str, str], buffers: dict[str, BufferInfo]) -> Kernel:
    """The fused subgraph of kernel ``kid`` (built in DFS post-order, which makes its key canonical)."""
    root = plan.roots[kid]
    out_buf = value_buffer[root.out]
    kg = Graph()
    params = [out_buf]
    param_index = {out_buf: 0}
    local: dict[str, int] = {}
    canon: list[tuple] = []
    node_ids: list[int] = []
    inputs: list[str] = []
    root_reads = root.reads
    if root.op == "store":  # the destination is the output buffer itself, written in place
        dst = root.reads[0]
        info = buffers[out_buf]
        if value_buffer.get(dst) != out_buf:
            # the store writes a copy of its destination (the source reads the destination's buffer,
            # or the old value has other readers): the source must keep reading the original buffer
            # while the copy is written, so the copy gets a value of its own in this kernel
            dst = Value(-root.id)
            root_reads = [dst, *root.reads[1:]]
        kg.add(Node("allocate", (dst,), [], _alloc_attrs(info.shape, info.dtype, out_buf), info.dtype, info.shape))
        local[dst] = 0
        canon.append(("param", 0, info.shape, info.dtype.value))

    def buffer_read(value: str) -> None:
        buf = value_buffer.get(value)
        if buf is None:
            raise CompileError(f"schedule: value {value!r} is read by kernel {kid} but has no buffer")
        if buf not in param_index:
            param_index[buf] = len(params)
            params.append(buf)
        if buf not in inputs and not (root.op == "store" and buf == out_buf):
            inputs.append(buf)
        info = buffers[buf]
        # the parameter node keeps the id of the node that produced the buffer's value, so what the
        # kernel reads from it (its kernel-IR origins, the Inspector's links) names a node of the graph
        src = g.producer_of(value)
        node = Node("allocate", (value,), [], _alloc_attrs(info.shape, info.dtype, buf), info.dtype, info.shape,
                    id=src.id if src is not None and not kg.has_node(src.id) else None)
        kg.add(node)
        local[value] = len(canon)
        canon.append(("param", param_index[buf], info.shape, info.dtype.value))

    stack: list[tuple[str, bool]] = [(root.out, True)]
    while stack:
        v, is_root = stack.pop()
        if v in local:
            continue
        n = g.producer_of(v)
        inline = is_root or (v not in plan.realized and not _is_buffer_node(n))
        if not inline:
            buffer_read(v)
            continue
        reads = root_reads if is_root else n.reads
        pending = [r for r in reads if isinstance(r, Value) and r not in local]
        if pending:
            stack.append((v, is_root))
            for r in reversed(pending):
                stack.append((r, False))
            continue
        c = n.copy()
        c.reads = list(reads)
        kg.add(c)
        node_ids.append(n.id)
        local[v] = len(canon)
        rd = tuple(("v", local[r]) if isinstance(r, Value) else ("l", type(r).__name__, r) for r in reads)
        canon.append((n.op, n.attrs, n.dtype, n.shape, rd))
    kg.outputs = [root.out]
    key = _hash((root.op == "store", tuple(canon)))
    kind = "store" if root.op == "store" else "value"
    return Kernel(_describe(kg.nodes, kg), kg, inputs, [out_buf], node_ids, key, params, kind,
                  plan.stage_count[kid])


class ScheduleKernels:
    """Pass: fuse AIR nodes into kernels; stores the Schedule in ``ctx.artifacts['schedule']``."""

    name = "schedule"
    description = "fuse elementwise chains, reductions and matmul epilogues into kernels (schedule cache by key)"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        decisions: list[FusionDecision] | None = [] if ctx.tracing else None
        sched = schedule_graph(graph, ctx.options.get("state_outputs"), decisions)
        ctx.artifacts["schedule"] = sched
        if decisions is not None:
            ctx.artifacts["fusion"] = decisions  # the fusion log (passes/fusion.py), in the schedule's record
        return graph
