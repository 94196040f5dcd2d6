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
- collapse: an elementwise kernel whose index expressions all flatten is one loop over numel;
- matmul/matvec tile form (a reduce whose weight access is contiguous along the innermost output
  axis and strided along the reduced axis): the innermost output axis is tiled and the reduction
  runs over a tile-sized accumulator array (``vector`` loops), so the inner loop is unit-stride.
Everything else (``hoist``, ``simd``, ``parallel``, ``unroll``) is a codegen pass over the kernel IR
(:mod:`caten_lab.codegen.hoist`, :mod:`caten_lab.codegen.loop_opts`, :mod:`caten_lab.codegen.parallel`).
"""

from __future__ import annotations

from dataclasses import dataclass

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.ops import BINARY, ELEMENTWISE
from caten_lab.air.symbolic import Dim, Expr
from caten_lab.air.value import Value
from caten_lab.codegen import lower_exprs as E
from caten_lab.codegen.kir import (
    Assign,
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
from caten_lab.codegen.symbolic_kir import Names, dim_to_kir
from caten_lab.errors import CompileError
from caten_lab.passes.indexing import (
    contiguous_strides,
    flat_index,
    fold_divmod,
    has_divmod_on,
    loop_var,
    loop_vars_of,
    numel,
    unravel,
)
from caten_lab.passes.schedule import Kernel

I64 = DType.int64
ERR = Var("err", I64)


@dataclass(frozen=True)
class LowerOptions:
    """What the lowering decides by: ``safety`` (1: division/gather checks, 2: every index checked) and
    ``vector_tile`` (outputs per matmul tile)."""

    safety: int = 1
    vector_tile: int = 64


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


class KernelLowerer:
    """Lower one kernel (its fused AIR subgraph) to a kernel-IR function."""

    def __init__(self, kernel: Kernel, name: str, symbols: list[str], options: LowerOptions, *,
                 collapse: bool = False, vectorize: frozenset[str] = frozenset()) -> None:
        self.k = kernel
        self.kg: Graph = kernel.graph
        self.name = name
        self.symbols = symbols
        self.opts = options
        self.safety = options.safety
        self.collapse = collapse
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
        self.collapse_ok = True
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
        d = fold_divmod(d)
        if self.collapse and has_divmod_on(d, {"__f"}):
            self.collapse_ok = False
        return self.dim(d)

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

    def _reduce(self, n: Node, coords: tuple) -> KExpr:
        src = self.kg.producer_of(n.reads[0])
        dt = n.dtype
        init = E.reduce_init(n.attrs.op, dt)
        s = self.stage_counter
        self.stage_counter += 1
        inner = list(coords)
        stage_vars: list[tuple[str, Dim]] = []
        for ax in n.attrs.axes:
            d = src.shape[ax]
            if isinstance(d, int) and d == 1:
                inner[ax] = 0
                continue
            var = f"__r{s}_{ax}"
            inner[ax] = loop_var(var)
            stage_vars.append((var, d))
            self.bounds[var] = d
        trip: Dim = 1
        for _, d in stage_vars:
            trip = trip * d
        if n.attrs.op == "add" and len(stage_vars) == 1:
            gathered = self._onehot_gather(n, tuple(inner), stage_vars[0])
            if gathered is not None:
                return gathered  # one row read: the vocabulary-sized trip count is not work
        self.work = _dmax(self.work, trip)
        vector = self.tile is not None and n.out in self.vectorize and _uses(coords, self.tile[1])
        blk = self.block_for(coords)
        acc = self.fresh("acc")
        depends_inner = self.inner_main is not None and _uses(coords, self.inner_main)
        if vector:
            return self._vector_reduce(n, coords, inner, stage_vars, acc, init)
        ct = E.compute_dtype(dt)
        o = self.origin(n.id)
        blk.stmts.append(Decl(acc, ct, init, origin=o))
        self.stage_loads.append([])
        parent = blk
        opened: list[_Loop] = []
        for var, d in stage_vars:
            loop = self.open_loop(var, self.dim(d), "stage", n.id, parent)
            opened.append(loop)
            parent = loop.block
        x = self.operand(n.reads[0], dt, tuple(inner))
        parent.stmts.append(Assign(acc, E.combine(n.attrs.op, Var(acc, ct), x, dt), origin=o))
        loads = self.stage_loads.pop()
        if self.stage_loads:
            self.stage_loads[-1].extend(loads)
        self.stage_info[n.out] = (depends_inner, loads, stage_vars[-1][0] if stage_vars else None)
        for loop in reversed(opened):
            loop.close()
        return Var(acc, ct)

    def depends_on(self, v: str, coords: tuple, var: str) -> bool:
        """Whether value ``v`` at ``coords`` depends on loop variable ``var`` (no code is emitted)."""
        n = self.kg.producer_of(v)
        op = n.op
        if op == "allocate":
            return n.attrs.name is not None and var in loop_vars_of(flat_index(coords, contiguous_strides(n.shape)))
        if op == "const":
            return False
        if op == "index":
            return var in loop_vars_of(coords[n.attrs.axis])
        if op == "view":
            a = n.attrs
            flat = flat_index(coords, a.strides, a.offset)
            if a.mask is not None and any(var in loop_vars_of(c) for c in coords):
                return True
            src = self.kg.producer_of(n.reads[0])
            if src.op == "allocate":
                return src.attrs.name is not None and var in loop_vars_of(flat)
            return self.depends_on(n.reads[0], unravel(flat, src.shape, self.bounds), var)
        if op in ELEMENTWISE:
            return any(self.depends_on(r, coords, var) for r in n.reads if isinstance(r, Value))
        return any(var in loop_vars_of(c) for c in coords)

    def resolve(self, v: str, coords: tuple) -> tuple[Node, tuple]:
        """Follow unmasked views over computed values: the node that really computes ``v`` at ``coords``."""
        n = self.kg.producer_of(v)
        while n.op == "view" and n.attrs.mask is None:
            src = self.kg.producer_of(n.reads[0])
            if src.op == "allocate":
                break
            coords = unravel(flat_index(coords, n.attrs.strides, n.attrs.offset), src.shape, self.bounds)
            n = src
        return n, coords

    def _onehot_gather(self, n: Node, inner: tuple, stage: tuple[str, Dim]) -> str | None:
        """``sum_r where(idx == r, x[r], 0)`` (an embedding written as a one-hot reduction) becomes
        the gather ``x[idx]``: one row read instead of the whole table."""
        var, extent = stage
        src, c0 = self.resolve(n.reads[0], inner)
        if src.op != "where" or not isinstance(src.reads[0], Value):
            return None
        cond, c1 = self.resolve(src.reads[0], c0)
        negated = cond.op == "not"
        if negated:
            if not isinstance(cond.reads[0], Value):
                return None
            cond, c1 = self.resolve(cond.reads[0], c1)
        if cond.op != "ne":
            return None
        hit, miss = (src.reads[1], src.reads[2]) if negated else (src.reads[2], src.reads[1])
        if not _is_zero(self.kg, miss) or not isinstance(hit, Value):
            return None
        target = loop_var(var)
        sides = list(cond.reads)
        for i, side in enumerate(sides):
            if not isinstance(side, Value):
                continue
            node, c2 = self.resolve(side, c1)
            while node.op == "cast" and node.dtype.is_int and isinstance(node.reads[0], Value):
                node, c2 = self.resolve(node.reads[0], c2)
            if node.op != "index" or c2[node.attrs.axis] != target:
                continue
            other = sides[1 - i]
            if isinstance(other, Value) and (self.depends_on(other, c1, var)
                                           or not self.kg.producer_of(other).dtype.is_int):
                return None
            outer = tuple(c for c in c1 if not (isinstance(c, Expr) and var in loop_vars_of(c)))
            idx = E.as_int64(self.operand(other, DType.int64, c1))
            gname = self.fresh("g")
            gvar = f"__{gname}"
            blk = self.block_for(outer)
            ext = self.dim(extent)
            o = self.origin(n.id)
            g = Var(gname, I64)
            blk.stmts.append(Decl(gname, I64, idx, const=True, origin=o))
            clamped = E.i64("max", Const(0, I64), E.i64("min", g, E.i64("sub", ext, Const(1, I64))))
            blk.stmts.append(Decl(f"{gname}c", I64, clamped, const=True, origin=o))
            self.var_block[gvar] = blk
            self.bounds[gvar] = extent
            self.names[gvar] = f"{gname}c"
            coords2 = tuple(c.substitute({var: loop_var(gvar)}) if isinstance(c, Expr) else c for c in c0)
            x = self.at(hit, coords2)
            inside = E.i64("land", E.i64("ge", g, Const(0, I64)), E.i64("lt", g, ext))
            return self.temp(E.where(inside, x, self.literal(0, n.dtype)), n.dtype, coords2, n.id)
        return None

    def _vector_reduce(self, n: Node, coords: tuple, inner: list, stage_vars: list, acc: str,
                       init: KExpr) -> KExpr:
        """A reduce over a tile of the innermost output axis: ``acc[lane] op= x(lane)``, lanes innermost."""
        tile_var, lane_var = self.tile  # type: ignore[misc]
        ct = E.compute_dtype(n.dtype)
        o = self.origin(n.id)
        # the accumulator lives just outside the lane loop: the deepest block among the reduce's other loops
        sub_t = {lane_var: loop_var(tile_var)}
        tblk = self.block_for(tuple(c.substitute(sub_t) if isinstance(c, Expr) else c for c in coords))
        tblk.stmts.append(Decl(acc, ct, size=Const(self.opts.vector_tile, I64), origin=o))
        lane2 = f"__v{self.stage_counter}"
        init_loop = self.open_loop(lane2, self.tn, "vector", n.id, tblk)
        init_loop.block.stmts.append(Store(acc, self.var(lane2), init, origin=o))
        init_loop.close()
        parent = tblk
        opened: list[_Loop] = []
        for var, d in stage_vars:
            loop = self.open_loop(var, self.dim(d), "stage", n.id, parent)
            opened.append(loop)
            parent = loop.block
        lane = f"__w{self.stage_counter}"
        full = f"__u{self.stage_counter}"
        lane_loop = self.open_loop(lane, self.tn, "vector", n.id, parent)
        lb = lane_loop.block
        lb.stmts.append(Decl(self.names[full], I64, E.i64("add", self.var(tile_var), self.var(lane)), const=True,
                             origin=o))
        self.var_block[full] = lb
        self.bounds[full] = self.bounds[lane_var]
        opened.append(lane_loop)
        sub = {lane_var: loop_var(full)}
        inner2 = tuple(c.substitute(sub) if isinstance(c, Expr) else c for c in inner)
        x = self.operand(n.reads[0], n.dtype, inner2)
        e = E.combine(n.attrs.op, Load(acc, self.var(lane), ct), x, n.dtype)
        lb.stmts.append(Store(acc, self.var(lane), e, origin=o))
        for loop in reversed(opened):
            loop.close()
        return Load(acc, E.i64("sub", self.var(lane_var), self.var(tile_var)), ct, origin=o)

    # ---- the kernel ----------------------------------------------------------------------
    def lower(self) -> Function:
        kg = self.kg
        root = kg.producer_of(kg.outputs[0])
        is_store = self.k.kind == "store"
        shape = root.attrs.shape if is_store else root.shape
        opened: list[_Loop] = []
        parent = self.root_block
        coords: list[Dim] = []
        total = numel(shape)
        self.work = 1
        tile = self.opts.vector_tile
        if self.collapse:
            self.bounds["__f"] = total
            loop = self.open_loop("__f", self.dim(total), "collapsed", root.id, parent)
            opened.append(loop)
            parent = loop.block
            coords = list(unravel(loop_var("__f"), shape, {"__f": total}))
        else:
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


def _dmax(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if isinstance(a, int) and a <= 1:
        return b
    if isinstance(b, int) and b <= 1:
        return a
    # symbolic: the sum bounds max(a, b) (both are non-negative trip counts) without raising the
    # degree. A product here made three (pos + seq)-long reductions of a decode attention kernel a
    # cubic "work" that crossed the parallel threshold at pos = 8, so every decode step paid 12
    # thread wake-ups for a kernel of a few thousand flops (1 ms at 2 threads, 0.07 ms serial).
    return a + b


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


def _is_zero(kg: Graph, r: object) -> bool:
    if not isinstance(r, Value):
        return r == 0
    p = kg.producer_of(r)
    if p.op == "const":
        return not isinstance(p.attrs.value, Expr) and p.attrs.value == 0
    return p.op == "allocate" and p.attrs.name is None


def _uses(coords: tuple, var: str) -> bool:
    return any(isinstance(c, Expr) and var in loop_vars_of(c) for c in coords)
