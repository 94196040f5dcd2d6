"""Lowering a scheduled kernel to a kernel-IR function (:mod:`caten_lab.codegen.kir`).

The root's shape gives the main loop nest. Values are emitted on demand at symbolic coordinates
(``at(value, coords)``): elementwise ops combine their operands at the same coordinates, views
compose coordinates into index expressions (never copies), buffer reads become loads, and a
``reduce`` becomes a *stage*: an accumulator and a loop over the reduced axes, placed in the
outermost block where its coordinates are defined (so a softmax's max and sum run once per row,
not once per element). Every temporary lands in the block of the innermost loop it depends on.
Every expression is a typed kernel-IR expression and every statement carries the AIR node it came
from (``Origin(nodes=...)``); index arithmetic goes through :func:`~caten_lab.codegen.symbolic_kir.dim_to_kir`.

Decided here, because they need the symbolic index expressions of the AIR views:
- matmul/matvec tile form (a reduce whose weight access is contiguous along the innermost output
  axis and strided along the reduced axis): the innermost output axis is tiled and the reduction
  runs over a tile-sized accumulator array (``vector`` loops), so the inner loop is unit-stride.
Everything else (``collapse``, ``hoist``, ``simd``, ``parallel``, ``unroll``) is a codegen pass over the
kernel IR (:mod:`caten_lab.codegen.collapse`, :mod:`~caten_lab.codegen.hoist`, :mod:`~caten_lab.codegen.loop_opts`,
:mod:`~caten_lab.codegen.parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.ops import BINARY, ELEMENTWISE
from caten_lab.air.shapes import contiguous_strides, numel
from caten_lab.air.symbolic import Dim
from caten_lab.air.value import Value
from caten_lab.codegen import lower_exprs as E
from caten_lab.codegen.kir import (
    Call,
    Cast,
    Check,
    Const,
    Decl,
    For,
    Function,
    Load,
    Origin,
    Param,
    Stmt,
    Store,
    Var,
)
from caten_lab.codegen.kir import Expr as KExpr
from caten_lab.codegen.lower_quant import QuantLowering
from caten_lab.codegen.lower_reduce import ReduceLowering
from caten_lab.codegen.lower_scatter import ScatterLowering
from caten_lab.codegen.symbolic_kir import Names, dim_to_kir
from caten_lab.errors import CompileError
from caten_lab.passes.indexing import flat_index, fold_divmod, loop_var, loop_vars_of, unravel
from caten_lab.passes.scatter_form import scatter_plan
from caten_lab.passes.schedule import Kernel

I64 = DType.int64
ERR = Var("err", I64)


@dataclass(frozen=True)
class LowerOptions:
    """What the lowering decides by: ``safety`` (1: division/gather checks, 2: every index checked) and
    ``vector_tile`` (outputs per matmul tile)."""

    safety: int = 1
    vector_tile: int = 32  # two AVX-512 vectors: with row_jam's 12 rows, 24 of the 32 vector registers


class _Block:
    __slots__ = ("stmts", "depth")

    def __init__(self, depth: int) -> None:
        self.stmts: list[Stmt] = []
        self.depth = depth


class _Loop:
    """A loop being built: its body is known when it closes."""

    __slots__ = ("var", "start", "stop", "step", "role", "origin", "block", "parent")

    def __init__(self, var: str, stop: KExpr, role: str, origin: Origin, block: _Block, parent: _Block) -> None:
        self.var, self.start, self.stop, self.step = var, Const(0, I64), stop, Const(1, I64)
        self.role, self.origin, self.block, self.parent = role, origin, block, parent

    def close(self) -> None:
        self.parent.stmts.append(For(self.var, self.start, self.stop, self.step, tuple(self.block.stmts),
                                     role=self.role, origin=self.origin))


class KernelLowerer(ReduceLowering, ScatterLowering, QuantLowering):
    """Lower one kernel (its fused AIR subgraph) to a kernel-IR function."""

    def __init__(self, kernel: Kernel, name: str, symbols: list[str], options: LowerOptions, *,
                 vectorize: frozenset[str] = frozenset()) -> None:
        self.k = kernel
        self.kg: Graph = kernel.graph
        self.name = name
        self.symbols = symbols
        self.opts = options
        self.safety = options.safety
        self.vectorize = vectorize
        self.names = Names()
        self.dim_memo: dict = {}
        self.origins: dict[int, Origin] = {}
        self.param_index = {b: i for i, b in enumerate(kernel.params)}
        self.node_pos = {nid: i for i, nid in enumerate(kernel.node_ids)}
        self.memo: dict[tuple, KExpr] = {}
        self.bounds: dict[str, Dim] = {}
        self.var_block: dict[str, _Block] = {}
        self.root_block = _Block(0)
        self.counter = 0
        self.stage_counter = 0
        self.checks: list[int] = []
        root = kernel.graph.producer_of(kernel.graph.outputs[0])
        out_shape = root.attrs.shape if kernel.kind == "store" else root.shape
        # no element is written: code hoisted out of the (empty) loops must not report a check
        self.empty = any(type(d) is int and d == 0 for d in out_shape)
        self.stage_loads: list[list[Dim]] = []
        self.stage_info: dict[str, tuple[bool, list[Dim], str | None]] = {}
        self.inner_main: str | None = None
        self.tile: tuple[str, str] | None = None  # (tile var, vector lane var) in vector mode
        self.tn: KExpr = Const(options.vector_tile, I64)  # the current tile's width
        self.work: Dim = 1

    # ---- blocks, names and temporaries ---------------------------------------------------
    def origin(self, nid: int) -> Origin:
        o = self.origins.get(nid)
        if o is None:
            o = self.origins[nid] = Origin((nid,))
        return o

    def block_for(self, coords: tuple) -> _Block:
        best = self.root_block
        for c in coords:
            if isinstance(c, int):
                continue
            for v in loop_vars_of(c):
                b = self.var_block.get(v)
                if b is not None and b.depth > best.depth:
                    best = b
        return best

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def var(self, sym: str) -> Var:
        """The int64 variable of loop variable / symbol ``sym``."""
        return Var(self.names[sym], I64)

    def dim(self, d: Dim) -> KExpr:
        return dim_to_kir(d, self.names, self.dim_memo)

    def temp(self, expr: KExpr, dt: DType, coords: tuple, nid: int) -> Var:
        name = self.fresh("x")
        ct = E.compute_dtype(dt)
        self.block_for(coords).stmts.append(Decl(name, ct, expr, origin=self.origin(nid)))
        return Var(name, ct)

    def idx(self, d: Dim) -> KExpr:
        return self.dim(fold_divmod(d))

    def check(self, size: Dim, nid: int) -> Check | None:
        if self.safety < 2:
            return None
        self.checks.append(self.node_pos.get(nid, -1))
        return Check(self.dim(size), len(self.checks) - 1)

    def literal(self, v: object, dt: DType) -> KExpr:
        return E.literal(v, dt, self.names, self.dim_memo)

    def open_loop(self, sym: str, stop: KExpr, role: str, nid: int, parent: _Block) -> _Loop:
        b = _Block(parent.depth + 1)
        self.var_block[sym] = b
        return _Loop(self.names[sym], stop, role, self.origin(nid), b, parent)

    # ---- loads and values ----------------------------------------------------------------
    def param_name(self, n: Node) -> tuple[str, int]:
        i = self.param_index[n.attrs.name]
        return f"p{i}", i

    def load(self, buf: Node, flat: Dim, nid: int, clamp: bool = False) -> KExpr:
        """``p[flat]``. ``clamp`` keeps the index inside the buffer: a masked (padding) load is then an
        unconditional load plus a select, which also sidesteps a GCC 12 miscompilation of
        vectorized conditional loads. A float16 buffer loads as float32."""
        pname, _ = self.param_name(buf)
        if self.stage_loads:
            self.stage_loads[-1].append(flat)
        size = numel(buf.shape)
        index = self.idx(flat)
        if clamp:
            index = E.i64("max", Const(0, I64), E.i64("min", index, E.i64("sub", self.dim(size), Const(1, I64))))
        return Load(pname, index, E.compute_dtype(buf.dtype), self.check(size, nid), origin=self.origin(nid))

    def operand(self, r: object, dt: DType, coords: tuple) -> KExpr:
        if isinstance(r, Value):
            return self.at(r, coords)
        return self.literal(r, dt)

    def at(self, v: str, coords: tuple) -> KExpr:
        key = (v, coords)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        n = self.kg.producer_of(v)
        if n is None:
            raise CompileError(f"lowering {self.name}: value {v!r} is not defined in the kernel graph")
        out = self._at(n, coords)
        self.memo[key] = out
        return out

    def _at(self, n: Node, coords: tuple) -> KExpr:
        op = n.op
        dt = n.dtype
        if op == "allocate":
            if n.attrs.name is None:
                return self.literal(0, dt)
            flat = flat_index(coords, contiguous_strides(n.shape))
            return self.temp(self.load(n, flat, n.id), dt, (flat,), n.id)
        if op == "const":
            return self.literal(n.attrs.value, dt)
        if op == "index":
            i = self.idx(coords[n.attrs.axis])
            return i if E.compute_dtype(dt) == I64 else Cast(i, E.compute_dtype(dt))
        if op == "view":
            return self._view(n, coords)
        if op == "reduce":
            return self._reduce(n, coords)
        if op == "quant_matmul":
            return self.quant_matmul_at(n, coords)
        if op == "check_index" and (self.safety < 1 or self.empty):  # unchecked: the operand itself, no code
            return self.at(n.reads[0], coords)
        if op in ELEMENTWISE:
            return self.temp(self._elementwise(n, coords), dt, coords, n.id)
        raise CompileError(f"lowering {self.name}: op {op!r} cannot be inlined (node {n.id})")

    def _view(self, n: Node, coords: tuple) -> KExpr:
        a = n.attrs
        src = self.kg.producer_of(n.reads[0])
        flat = flat_index(coords, a.strides, a.offset)
        if src.op == "allocate" and src.attrs.name is not None:
            load = self.load(src, flat, n.id, clamp=a.mask is not None)
            if a.mask is None:
                return self.temp(load, n.dtype, (flat,), n.id)
            conds: list[KExpr] = []
            place = [flat]
            for c, (lo, hi), d in zip(coords, a.mask, a.shape):
                if not (isinstance(lo, int) and lo <= 0):
                    conds.append(E.i64("ge", self.idx(c), self.dim(lo)))
                    place.append(c)
                if not (hi == d or (isinstance(hi, int) and isinstance(d, int) and hi >= d)):
                    conds.append(E.i64("lt", self.idx(c), self.dim(hi)))
                    place.append(c)
            if not conds:
                return self.temp(load, n.dtype, (flat,), n.id)
            loaded = self.temp(load, n.dtype, (flat,), n.id)  # unconditional (clamped) load, then select
            cond = conds[0]
            for c in conds[1:]:
                cond = E.i64("land", cond, c)
            return self.temp(E.where(cond, loaded, self.literal(0, n.dtype)), n.dtype, tuple(place), n.id)
        if a.mask is not None:
            raise CompileError(f"lowering {self.name}: masked view {n.id} over a computed value (schedule bug)")
        return self.at(n.reads[0], unravel(flat, src.shape, self.bounds))

    def _elementwise(self, n: Node, coords: tuple) -> KExpr:
        op = n.op
        dt = n.dtype
        if op == "cast":
            return E.cast(self.at(n.reads[0], coords), dt)
        if op == "check_index":
            x = self.operand(n.reads[0], dt, coords)
            # an index outside [0, size) stops the program (err[0] = 3, see codegen/c/index_check.h)
            self.checks.append(self.node_pos.get(n.id, -1))
            ck = Call("cl_index_ck", (E.as_int64(x), self.dim(n.attrs.size), Const(len(self.checks) - 1, I64), ERR),
                      I64, self.origin(n.id))
            return ck if E.compute_dtype(dt) == I64 else Cast(ck, E.compute_dtype(dt))
        if op == "where":
            c = self.operand(n.reads[0], DType.bool, coords)
            a = self.operand(n.reads[1], dt, coords)
            b = self.operand(n.reads[2], dt, coords)
            return E.where(c, a, b)
        in_dt = dt
        if op in ("lt", "ne"):
            for r in n.reads:
                if isinstance(r, Value):
                    in_dt = self.kg.producer_of(r).dtype
                    break
        args = [self.operand(r, in_dt, coords) for r in n.reads]
        if op in ("idiv", "mod") and self.safety >= 1 and not _nonzero_constant(self.kg, n.reads[1]):
            # a zero divisor stops the program (err[0] = 2, see codegen/c/int_div.h); tag -> this node
            self.checks.append(self.node_pos.get(n.id, -1))
            fn = "cl_idiv_ck" if op == "idiv" else "cl_imod_ck"
            return Call(f"{fn}_{_suffix(in_dt)}", (args[0], args[1], Const(len(self.checks) - 1, I64), ERR),
                        in_dt, self.origin(n.id))
        if op in BINARY:
            return E.binary(op, args[0], args[1], in_dt)
        return E.unary(op, args[0], dt)

    # ---- the kernel ----------------------------------------------------------------------
    def lower(self) -> Function:
        kg = self.kg
        root = kg.producer_of(kg.outputs[0])
        is_store = self.k.kind == "store"
        if root.op == "quant_rows":
            return self.lower_quant_rows(root)
        if not is_store and root.op == "reduce" and not self.empty:
            plan = scatter_plan(kg, root)  # an embedding's gradient: a scatter-add (codegen/lower_scatter.py)
            if plan is not None:
                return self.lower_scatter(root, *plan)
        shape = root.attrs.shape if is_store else root.shape
        opened: list[_Loop] = []
        parent = self.root_block
        coords: list[Dim] = []
        total = numel(shape)
        self.work = 1
        tile = self.opts.vector_tile
        real = [k for k, d in enumerate(shape) if not (isinstance(d, int) and d == 1)]
        by_axis: dict[int, Dim] = {}
        if self.vectorize:
            # matmul/matvec: the tile loop over the output axis goes outermost, so one tile of the
            # weight (K x tile) stays in cache while every row uses it, and the tiles feed the threads
            k = real[-1]
            d = shape[k]
            tvar = f"__t{k}"
            self.bounds[tvar] = d
            loop = self.open_loop(tvar, self.dim(d), "tile", root.id, parent)
            loop.step = Const(tile, I64)
            opened.append(loop)
            parent = loop.block
            # a constant tile width when it divides the axis: the lane loops then unroll fully and
            # the accumulator tile can live in vector registers
            exact = isinstance(d, int) and d % tile == 0
            self.tn = Const(tile, I64) if exact else E.i64(
                "min", Const(tile, I64), E.i64("sub", self.dim(d), self.var(tvar)))
        for pos, k in enumerate(real):
            d = shape[k]
            var = f"__l{k}"
            self.bounds[var] = d
            last = pos == len(real) - 1
            if last and self.vectorize:
                tvar, jvar = f"__t{k}", f"__j{k}"
                loop = self.open_loop(jvar, self.tn, "vector", root.id, parent)
                loop.block.stmts.append(Decl(self.names[var], I64, E.i64("add", self.var(tvar), self.var(jvar)),
                                             const=True, origin=self.origin(root.id)))
                self.var_block[var] = loop.block
                opened.append(loop)
                parent = loop.block
                self.tile = (tvar, var)
                by_axis[k] = loop_var(var)
                continue
            loop = self.open_loop(var, self.dim(d), "loop", root.id, parent)
            opened.append(loop)
            parent = loop.block
            by_axis[k] = loop_var(var)
            if last:
                self.inner_main = var
        coords = [by_axis.get(k, 0) for k in range(len(shape))]
        ct = tuple(coords)
        out = self.k.params[0]
        out_node = self._param_node(out)
        if is_store:
            a = root.attrs
            src = root.reads[1]
            e = self.operand(src, root.dtype, ct)
            flat = flat_index(ct, a.strides, a.offset)
        else:
            e = self.at(root.out, ct)
            flat = flat_index(ct, contiguous_strides(shape))
        index = self.idx(flat)
        check = self.check(numel(out_node.shape if out_node is not None else shape), root.id)
        parent.stmts.append(Store("p0", index, e, check, origin=self.origin(root.id)))
        self.work = self.work * total
        for loop in reversed(opened):
            loop.close()
        return self._function()

    def _param_node(self, buf: str) -> Node | None:
        for n in self.kg:
            if n.op == "allocate" and n.attrs.name == buf:
                return n
        return None

    def _function(self) -> Function:
        params = []
        for i, b in enumerate(self.k.params):
            node = self._param_node(b)
            dt = node.dtype if node is not None else self.kg.producer_of(self.kg.outputs[0]).dtype
            params.append(Param(f"p{i}", dt, True, i > 0, b))
        params.append(Param("sym", I64, True, True))
        params.append(Param("err", I64, True, False))
        prologue = [Decl(self.names[s], I64, Load("sym", Const(i, I64), I64), const=True)
                    for i, s in enumerate(self.symbols)]
        meta = (("key", self.k.key), ("kernel_names", (self.k.name,)), ("checks", tuple(self.checks)),
                ("work", self.dim(self.work)))
        return Function(self.name, tuple(params), (*prologue, *self.root_block.stmts), linkage="kernel", meta=meta,
                        origin=Origin(tuple(self.k.node_ids)))


def _suffix(dt: DType) -> str:
    """The type suffix of the checked division helpers (``cl_idiv_ck_int32``)."""
    return {DType.float64: "f64", DType.float32: "f32", DType.float16: "f32"}.get(dt, dt.c_name.replace("_t", ""))


def _nonzero_constant(kg: Graph, r: object) -> bool:
    """Whether operand ``r`` is a nonzero integer constant (a literal, a const node or a view of one):
    a division by it needs no zero check."""
    if not isinstance(r, Value):
        return isinstance(r, int) and r != 0
    p = kg.producer_of(r)
    while p is not None and p.op == "view" and p.attrs.mask is None and isinstance(p.reads[0], Value):
        p = kg.producer_of(p.reads[0])
    return p is not None and p.op == "const" and isinstance(p.attrs.value, int) and p.attrs.value != 0
