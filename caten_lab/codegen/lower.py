"""Lowering a scheduled kernel to the loop IR.

The root's shape gives the main loop nest. Values are emitted on demand at symbolic coordinates
(``at(value, coords)``): elementwise ops combine their operands at the same coordinates, views
compose coordinates into index expressions (never copies), buffer reads become loads, and a
``reduce`` becomes a *stage*: an accumulator and a loop over the reduced axes, placed in the
outermost block where its coordinates are defined (so a softmax's max and sum run once per row,
not once per element). Every temporary lands in the block of the innermost loop it depends on.

Loop optimizations decided here:
- collapse: an elementwise kernel whose index expressions all flatten is one loop over numel;
- matmul/matvec (a reduce whose weight access is contiguous along the innermost output axis and
  strided along the reduced axis): the innermost output axis is tiled and the reduction runs over
  a tile-sized accumulator array (``vector`` stage), so the inner loop is unit-stride and vectorizes;
- reductions that are contiguous get ``#pragma omp simd reduction``; constant small loops unroll;
- the outermost loops get ``#pragma omp parallel for`` (collapsed when perfectly nested) guarded
  by an ``if(work > threshold)`` clause, because symbolic sizes are only known at run time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.ops import BINARY, ELEMENTWISE
from caten_lab.air.symbolic import Dim, Expr
from caten_lab.air.value import Value
from caten_lab.codegen.hoist import hoist_reduce_operand
from caten_lab.codegen.loopir import Assign, For, Function, Param, Stmt
from caten_lab.errors import CompileError
from caten_lab.passes.indexing import (
    c_expr,
    contiguous_strides,
    flat_index,
    fold_divmod,
    has_divmod_on,
    linear_form,
    loop_var,
    loop_vars_of,
    numel,
    unravel,
)
from caten_lab.passes.schedule import Kernel

VECTOR_TILE = 64
UNROLL_MAX = 8


class _Names(dict):
    """Symbol name -> C identifier: loop variables drop their ``__`` prefix, user symbols get ``S_``."""

    def __missing__(self, key: str) -> str:
        v = key[2:] if key.startswith("__") else f"S_{key}"
        self[key] = v
        return v


NAMES = _Names()


def ctype(dt: DType) -> str:
    """The C type values of ``dt`` are computed in (float16 is stored as _Float16, computed as float)."""
    return "float" if dt == DType.float16 else dt.c_name


def literal(v: object, dt: DType) -> str:
    if isinstance(v, Expr):
        return f"(({ctype(dt)}){c_expr(v, NAMES)})"
    if dt == DType.bool:
        return "1" if v else "0"
    if dt.is_float:
        f = float(v)  # type: ignore[arg-type]
        if math.isnan(f):
            return "NAN"
        if math.isinf(f):
            return "INFINITY" if f > 0 else "(-INFINITY)"
        s = repr(f) + ("f" if dt != DType.float64 else "")
        return f"({s})" if f < 0 else s
    i = int(v)  # type: ignore[call-overload]
    if dt.is_unsigned:
        i &= (1 << (8 * dt.itemsize)) - 1
    if i == -(1 << 63):
        return "(-9223372036854775807LL - 1)"
    if -(1 << 31) <= i < (1 << 31):
        return str(i) if i >= 0 else f"({i})"
    return f"{i}LL" if i >= 0 else f"({i}LL)"


_NARROW = {DType.int8, DType.uint8, DType.bool}


def _wrap(e: str, dt: DType) -> str:
    """Truncate results of narrow integer types after each op (C promotes them to int)."""
    return f"(({dt.c_name})({e}))" if dt in _NARROW and dt != DType.bool else e


def _fn(dt: DType) -> str:
    return {DType.float64: "f64", DType.float32: "f32", DType.float16: "f32"}.get(dt, dt.c_name.replace("_t", ""))


class _Block:
    __slots__ = ("stmts", "depth")

    def __init__(self, depth: int) -> None:
        self.stmts: list[Stmt] = []
        self.depth = depth


class KernelLowerer:
    """Lower one kernel (its fused AIR subgraph) to a loop-IR function."""

    def __init__(self, kernel: Kernel, name: str, symbols: list[str], safety: int, *, collapse: bool = False,
                 vectorize: frozenset[str] = frozenset(), threads: int = 1) -> None:
        self.k = kernel
        self.kg: Graph = kernel.graph
        self.name = name
        self.symbols = symbols
        self.safety = safety
        self.collapse = collapse
        self.vectorize = vectorize
        self.threads = threads
        self.param_index = {b: i for i, b in enumerate(kernel.params)}
        self.node_pos = {nid: i for i, nid in enumerate(kernel.node_ids)}
        self.memo: dict[tuple, str] = {}
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
        self.tn = ""  # C expression of the current tile's width
        self.vector_vars: dict[str, str] = {}
        self.work: Dim = 1

    # ---- blocks and temporaries ----------------------------------------------------------
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

    def temp(self, expr: str, ct: str, coords: tuple, nid: int) -> str:
        name = self.fresh("x")
        self.block_for(coords).stmts.append(Assign((nid,), name, expr, ct))
        return name

    def idx(self, d: Dim) -> str:
        d = fold_divmod(d)
        if self.collapse and has_divmod_on(d, {"__f"}):
            self.collapse_ok = False
        return c_expr(d, NAMES)

    def check(self, index: str, size: Dim, nid: int) -> str:
        if self.safety < 2:
            return index
        self.checks.append(self.node_pos.get(nid, -1))
        return f"CK({index}, {c_expr(size, NAMES)}, {len(self.checks) - 1})"

    # ---- loads and values ----------------------------------------------------------------
    def param_name(self, n: Node) -> tuple[str, int]:
        i = self.param_index[n.attrs.name]
        return f"p{i}", i

    def load(self, buf: Node, flat: Dim, nid: int, clamp: bool = False) -> str:
        """``p[flat]``. ``clamp`` keeps the index inside the buffer: a masked (padding) load is then an
        unconditional load plus a select, which also sidesteps a GCC 12 miscompilation of
        vectorized conditional loads."""
        pname, _ = self.param_name(buf)
        if self.stage_loads:
            self.stage_loads[-1].append(flat)
        size = numel(buf.shape)
        index = self.idx(flat)
        if clamp:
            index = f"cl_max64(0, cl_min64({index}, {c_expr(size, NAMES)} - 1))"
        if buf.dtype == DType.float16:  # read the bits: see cl_h2f in the C prelude
            return f"cl_h2f(((const cl_u16a *){pname})[{self.check(index, size, nid)}])"
        return f"{pname}[{self.check(index, size, nid)}]"

    def operand(self, r: object, dt: DType, coords: tuple) -> str:
        if isinstance(r, Value):
            return self.at(r, coords)
        return literal(r, dt)

    def at(self, v: str, coords: tuple) -> str:
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

    def _at(self, n: Node, coords: tuple) -> str:
        op = n.op
        dt = n.dtype
        if op == "allocate":
            if n.attrs.name is None:
                return literal(0, dt)
            flat = flat_index(coords, contiguous_strides(n.shape))
            return self.temp(self.load(n, flat, n.id), ctype(dt), (flat,), n.id)
        if op == "const":
            return literal(n.attrs.value, dt)
        if op == "index":
            return f"(({ctype(dt)}){self.idx(coords[n.attrs.axis])})"
        if op == "view":
            return self._view(n, coords)
        if op == "reduce":
            return self._reduce(n, coords)
        if op == "check_index" and (self.safety < 1 or self.empty):  # unchecked: the operand itself, no code
            return self.at(n.reads[0], coords)
        if op in ELEMENTWISE:
            return self.temp(self._elementwise(n, coords), ctype(dt), coords, n.id)
        raise CompileError(f"lowering {self.name}: op {op!r} cannot be inlined (node {n.id})")

    def _view(self, n: Node, coords: tuple) -> str:
        a = n.attrs
        src = self.kg.producer_of(n.reads[0])
        flat = flat_index(coords, a.strides, a.offset)
        if src.op == "allocate" and src.attrs.name is not None:
            load = self.load(src, flat, n.id, clamp=a.mask is not None)
            if a.mask is None:
                return self.temp(load, ctype(n.dtype), (flat,), n.id)
            conds = []
            place = [flat]
            for c, (lo, hi), d in zip(coords, a.mask, a.shape):
                if not (isinstance(lo, int) and lo <= 0):
                    conds.append(f"{self.idx(c)} >= {c_expr(lo, NAMES)}")
                    place.append(c)
                if not (hi == d or (isinstance(hi, int) and isinstance(d, int) and hi >= d)):
                    conds.append(f"{self.idx(c)} < {c_expr(hi, NAMES)}")
                    place.append(c)
            if not conds:
                return self.temp(load, ctype(n.dtype), (flat,), n.id)
            loaded = self.temp(load, ctype(n.dtype), (flat,), n.id)  # unconditional (clamped) load, then select
            e = f"(({' && '.join(conds)}) ? {loaded} : {literal(0, n.dtype)})"
            return self.temp(e, ctype(n.dtype), tuple(place), n.id)
        if a.mask is not None:
            raise CompileError(f"lowering {self.name}: masked view {n.id} over a computed value (schedule bug)")
        return self.at(n.reads[0], unravel(flat, src.shape, self.bounds))

    def _elementwise(self, n: Node, coords: tuple) -> str:
        op = n.op
        dt = n.dtype
        if op == "cast":
            src_dt = self.kg.producer_of(n.reads[0]).dtype
            x = self.at(n.reads[0], coords)
            if dt == DType.bool:
                return f"({x} != 0)"
            if dt == DType.float16:
                return f"((float)(_Float16)({x}))"
            if src_dt == DType.bool:
                return f"(({dt.c_name})({x} ? 1 : 0))"
            return f"(({dt.c_name})({x}))"
        if op == "check_index":
            x = self.operand(n.reads[0], dt, coords)
            # an index outside [0, size) stops the program (err[0] = 3, see codegen/c/index_check.h)
            self.checks.append(self.node_pos.get(n.id, -1))
            size = c_expr(n.attrs.size, NAMES)
            return f"(({ctype(dt)})cl_index_ck((int64_t)({x}), {size}, {len(self.checks) - 1}, err))"
        if op == "where":
            c = self.operand(n.reads[0], DType.bool, coords)
            a = self.operand(n.reads[1], dt, coords)
            b = self.operand(n.reads[2], dt, coords)
            return f"({c} ? {a} : {b})"
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
            return f"{fn}_{_fn(in_dt)}({args[0]}, {args[1]}, {len(self.checks) - 1}, err)"
        if op in BINARY:
            return _binary(op, args[0], args[1], in_dt)
        return _unary(op, args[0], dt)

    def _reduce(self, n: Node, coords: tuple) -> str:
        src = self.kg.producer_of(n.reads[0])
        dt = n.dtype
        ct = ctype(dt)
        if n.attrs.op == "add":
            init = literal(0, dt)
        elif dt.is_float:
            init = "(-INFINITY)"
        elif dt == DType.bool:
            init = "0"
        else:
            init = f"cl_min_{dt.c_name}"
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
            return self._vector_reduce(n, coords, inner, stage_vars, blk, acc, ct, init)
        if depends_inner and len(stage_vars) == 1:  # matvec: compute f(x)[r] once, not once per output
            hoist_reduce_operand(self, n, tuple(inner), *stage_vars[0])
        blk.stmts.append(Assign((n.id,), acc, init, ct))
        self.stage_loads.append([])
        parent = blk
        opened: list[tuple[For, _Block, _Block]] = []
        for var, d in stage_vars:
            b = _Block(parent.depth + 1)
            self.var_block[var] = b
            opened.append((For((n.id,), NAMES[var], "0", c_expr(d, NAMES), role="stage"), b, parent))
            parent = b
        x = self.operand(n.reads[0], dt, tuple(inner))
        parent.stmts.append(Assign((n.id,), acc, _combine(n.attrs.op, acc, x, dt)))
        loads = self.stage_loads.pop()
        if self.stage_loads:
            self.stage_loads[-1].extend(loads)
        self.stage_info[n.out] = (depends_inner, loads, stage_vars[-1][0] if stage_vars else None)
        self._close(opened, simd_acc=acc if (n.attrs.op == "add" and dt.is_float) else None)
        return acc

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
            idx = self.operand(other, DType.int64, c1)
            gname = self.fresh("g")
            gvar = f"__{gname}"
            blk = self.block_for(outer)
            ext = c_expr(extent, NAMES)
            blk.stmts.append(Assign((n.id,), gname, f"(int64_t)({idx})", "const int64_t"))
            blk.stmts.append(Assign((n.id,), f"{gname}c", f"cl_max64(0, cl_min64({gname}, {ext} - 1))",
                                    "const int64_t"))
            self.var_block[gvar] = blk
            self.bounds[gvar] = extent
            NAMES[gvar] = f"{gname}c"
            coords2 = tuple(c.substitute({var: loop_var(gvar)}) if isinstance(c, Expr) else c for c in c0)
            x = self.at(hit, coords2)
            e = f"(({gname} >= 0 && {gname} < {ext}) ? {x} : {literal(0, n.dtype)})"
            return self.temp(e, ctype(n.dtype), coords2, n.id)
        return None

    def _vector_reduce(self, n: Node, coords: tuple, inner: list, stage_vars: list, blk: _Block, acc: str,
                       ct: str, init: str) -> str:
        """A reduce over a tile of the innermost output axis: ``acc[lane] op= x(lane)``, lanes innermost."""
        tile_var, lane_var = self.tile  # type: ignore[misc]
        # the accumulator lives just outside the lane loop: the deepest block among the reduce's other loops
        sub_t = {lane_var: loop_var(tile_var)}
        tblk = self.block_for(tuple(c.substitute(sub_t) if isinstance(c, Expr) else c for c in coords))
        tblk.stmts.append(Assign((n.id,), acc, "", ct, array=str(VECTOR_TILE)))
        lane2 = f"__v{self.stage_counter}"
        init_loop = For((n.id,), NAMES[lane2], "0", self.tn, role="vector", pragma="omp simd")
        init_loop.body.append(Assign((n.id,), acc, init, index=NAMES[lane2]))
        tblk.stmts.append(init_loop)
        parent = tblk
        opened: list[tuple[For, _Block, _Block]] = []
        for var, d in stage_vars:
            b = _Block(parent.depth + 1)
            self.var_block[var] = b
            opened.append((For((n.id,), NAMES[var], "0", c_expr(d, NAMES), role="stage"), b, parent))
            parent = b
        lane = f"__w{self.stage_counter}"
        full = f"__u{self.stage_counter}"
        lb = _Block(parent.depth + 1)
        lb.stmts.append(Assign((n.id,), NAMES[full], f"{NAMES[tile_var]} + {NAMES[lane]}", "const int64_t"))
        self.var_block[full] = lb
        self.bounds[full] = self.bounds[lane_var]
        opened.append((For((n.id,), NAMES[lane], "0", self.tn, role="vector", pragma="omp simd"), lb, parent))
        sub = {lane_var: loop_var(full)}
        inner2 = tuple(c.substitute(sub) if isinstance(c, Expr) else c for c in inner)
        x = self.operand(n.reads[0], n.dtype, inner2)
        e = _combine(n.attrs.op, f"{acc}[{NAMES[lane]}]", x, n.dtype)
        lb.stmts.append(Assign((n.id,), acc, e, index=NAMES[lane]))
        self._close(opened)
        return f"{acc}[{NAMES[lane_var]} - {NAMES[tile_var]}]"

    def _close(self, opened: list[tuple[For, _Block, _Block]], simd_acc: str | None = None) -> None:
        for i in range(len(opened) - 1, -1, -1):
            loop, b, parent = opened[i]
            loop.body = b.stmts
            if i == len(opened) - 1 and loop.role == "stage":
                if simd_acc is not None and _simple_body(loop.body):
                    loop.pragma = f"omp simd reduction(+:{simd_acc})"
                elif loop.stop.isdigit() and int(loop.stop) <= UNROLL_MAX:
                    loop.pragma = f"GCC unroll {UNROLL_MAX}"
            parent.stmts.append(loop)

    # ---- the kernel ----------------------------------------------------------------------
    def lower(self) -> Function:
        kg = self.kg
        root = kg.producer_of(kg.outputs[0])
        is_store = self.k.kind == "store"
        shape = root.attrs.shape if is_store else root.shape
        opened: list[tuple[For, _Block, _Block]] = []
        parent = self.root_block
        coords: list[Dim] = []
        total = numel(shape)
        self.work = 1
        if self.collapse:
            b = _Block(1)
            self.var_block["__f"] = b
            self.bounds["__f"] = total
            opened.append((For((root.id,), "f", "0", c_expr(total, NAMES), role="collapsed"), b, parent))
            parent = b
            coords = list(unravel(loop_var("__f"), shape, {"__f": total}))
        else:
            real = [k for k, d in enumerate(shape) if not (isinstance(d, int) and d == 1)]
            by_axis: dict[int, Dim] = {}
            if self.vectorize:
                # matmul/matvec: the tile loop over the output axis goes outermost, so one tile of the
                # weight (K x 64) stays in cache while every row uses it, and the tiles feed the threads
                k = real[-1]
                d = shape[k]
                tvar = f"__t{k}"
                tb = _Block(parent.depth + 1)
                self.var_block[tvar] = tb
                self.bounds[tvar] = d
                opened.append((For((root.id,), NAMES[tvar], "0", c_expr(d, NAMES), role="tile"), tb, parent))
                parent = tb
                # a constant tile width when it divides the axis: the lane loops then unroll fully and
                # the accumulator tile can live in vector registers
                exact = isinstance(d, int) and d % VECTOR_TILE == 0
                self.tn = str(VECTOR_TILE) if exact else f"cl_min64({VECTOR_TILE}, {c_expr(d, NAMES)} - {NAMES[tvar]})"
            for pos, k in enumerate(real):
                d = shape[k]
                var = f"__l{k}"
                self.bounds[var] = d
                last = pos == len(real) - 1
                if last and self.vectorize:
                    tvar, jvar = f"__t{k}", f"__j{k}"
                    jb = _Block(parent.depth + 1)
                    jb.stmts.append(Assign((root.id,), NAMES[var], f"{NAMES[tvar]} + {NAMES[jvar]}", "const int64_t"))
                    self.var_block[var] = jb
                    opened.append((For((root.id,), NAMES[jvar], "0", self.tn, role="vector"), jb, parent))
                    parent = jb
                    self.tile = (tvar, var)
                    by_axis[k] = loop_var(var)
                    continue
                b = _Block(parent.depth + 1)
                self.var_block[var] = b
                opened.append((For((root.id,), NAMES[var], "0", c_expr(d, NAMES), role="loop"), b, parent))
                parent = b
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
            e = self.operand(src, root.dtype, ct) if isinstance(src, Value) else literal(src, root.dtype)
            flat = flat_index(ct, a.strides, a.offset)
        else:
            e = self.at(root.out, ct)
            flat = flat_index(ct, contiguous_strides(shape))
        store_dt = root.dtype
        index = self.check(self.idx(flat), numel(out_node.shape if out_node is not None else shape), root.id)
        parent.stmts.append(Assign((root.id,), "p0", f"({store_dt.c_name})({e})", index=index))
        self.work = self.work * total
        self._close_main(opened)
        return self._function()

    def _param_node(self, buf: str) -> Node | None:
        for n in self.kg:
            if n.op == "allocate" and n.attrs.name == buf:
                return n
        return None

    def _close_main(self, opened: list[tuple[For, _Block, _Block]]) -> None:
        for loop, b, parent in reversed(opened):
            loop.body = b.stmts
            parent.stmts.append(loop)
        for loop, _, _ in opened:
            if loop.role == "tile":
                loop.step = str(VECTOR_TILE)

    def _function(self) -> Function:
        params = []
        for i, b in enumerate(self.k.params):
            node = self._param_node(b)
            dt = node.dtype if node is not None else self.kg.producer_of(self.kg.outputs[0]).dtype
            params.append(Param(f"p{i}", dt.c_name, True, i > 0, b))
        params.append(Param("sym", "int64_t", True, True))
        params.append(Param("err", "int64_t", True, False))
        prologue: list[Stmt] = [Assign((), NAMES[s], f"sym[{i}]", "const int64_t") for i, s in enumerate(self.symbols)]
        fn = Function(self.name, params, prologue + self.root_block.stmts, self.k.key, [self.k.name], self.checks)
        fn.work = self.work
        return fn


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


def _simple_body(body: list[Stmt]) -> bool:
    return all(isinstance(s, Assign) for s in body)


def _combine(op: str, acc: str, x: str, dt: DType) -> str:
    if op == "add":
        if dt == DType.bool:
            return f"({acc} || {x})"
        return _wrap(f"{acc} + {x}", dt)
    return f"cl_max_{_fn(dt)}({acc}, {x})"


def _binary(op: str, a: str, b: str, dt: DType) -> str:
    if dt == DType.bool:
        sym = {"add": "||", "mul": "&&", "and": "&&", "or": "||", "xor": "!=", "lt": "<", "ne": "!=", "max": "||"}
        if op in sym:
            return f"({a} {sym[op]} {b})"
    if op == "add":
        return _wrap(f"{a} + {b}", dt)
    if op == "mul":
        return _wrap(f"{a} * {b}", dt)
    if op == "idiv":
        return f"cl_idiv_{_fn(dt)}({a}, {b})"
    if op == "mod":
        return f"cl_imod_{_fn(dt)}({a}, {b})"
    if op == "max":
        return f"cl_max_{_fn(dt)}({a}, {b})"
    if op in ("and", "or", "xor"):
        return _wrap(f"{a} {dict(add='+', **{'and': '&', 'or': '|', 'xor': '^'})[op]} {b}", dt)
    if op == "lt":
        return f"({a} < {b})"
    if op == "ne":
        return f"({a} != {b})"
    raise CompileError(f"no C rendering for binary op {op!r}")


def _unary(op: str, a: str, dt: DType) -> str:
    f = "" if dt == DType.float64 else "f"
    if op == "neg":
        return f"(!{a})" if dt == DType.bool else _wrap(f"-{a}", dt)
    if op == "not":
        return f"(!{a})" if dt == DType.bool else _wrap(f"~{a}", dt)
    if op == "recip":
        one = "1.0" if dt == DType.float64 else "1.0f"
        return f"({one} / {a})"
    if op in ("exp2", "log2", "sin", "sqrt"):
        return f"{op}{f}({a})"
    raise CompileError(f"no C rendering for unary op {op!r}")


def lower_kernel(kernel: Kernel, name: str, symbols: list[str], safety: int, threads: int = 1) -> Function:
    """Lower with the loop optimizations that apply (collapse, vectorized matmul), verified by a dry run."""
    has_reduce = any(n.op == "reduce" for n in kernel.graph)
    root = kernel.graph.producer_of(kernel.graph.outputs[0])
    shape = root.attrs.shape if kernel.kind == "store" else root.shape
    real = [d for d in shape if not (isinstance(d, int) and d == 1)]
    if not has_reduce and len(real) > 1:
        lw = KernelLowerer(kernel, name, symbols, safety, collapse=True, threads=threads)
        fn = lw.lower()
        if lw.collapse_ok:
            return fn
    lw = KernelLowerer(kernel, name, symbols, safety, threads=threads)
    fn = lw.lower()
    if not has_reduce or lw.inner_main is None:
        return fn
    vec = _vector_reduces(lw)
    if not vec:
        return fn
    lw2 = KernelLowerer(kernel, name, symbols, safety, vectorize=frozenset(vec), threads=threads)
    return lw2.lower()


def _vector_reduces(lw: KernelLowerer) -> set[str]:
    """Reduces that read something contiguous along the innermost output axis but strided along their own."""
    out = set()
    inner = lw.inner_main
    for value, (depends_inner, loads, last_stage) in lw.stage_info.items():
        if not depends_inner or last_stage is None:
            continue
        rows = dots = False
        for flat in loads:
            lin = linear_form(flat)
            if lin is None:
                continue
            coefs, _ = lin
            ci, cs = coefs.get(inner, 0), coefs.get(last_stage, 0)
            if ci == 1 and cs not in (0, 1):
                rows = True  # a matrix contiguous along the outputs (W^T layout): vectorize over outputs
            elif cs == 1 and ci != 0:
                dots = True  # a matrix contiguous along the reduction (W layout): the dot products vectorize
        if rows and not dots:  # (a per-output vector such as a dequantization scale decides nothing)
            out.add(value)
    return out


def lower_functions(kernels: list[Kernel], symbols: list[str], safety: int, threads: int = 1,
                    memo: Mapping[str, Function] | None = None) -> tuple[list[Function], dict[str, str]]:
    """Lower each unique kernel once (the schedule cache); returns functions and kernel name -> function."""
    by_key: dict[str, Function] = {}
    fn_of: dict[str, str] = {}
    funcs: list[Function] = []
    for k in kernels:
        f = by_key.get(k.key)
        if f is None:
            f = lower_kernel(k, f"kern{len(funcs)}_{_c_ident(k.name.split('_', 1)[-1])}", symbols, safety, threads)
            by_key[k.key] = f
            funcs.append(f)
        else:
            f.kernel_names.append(k.name)
        fn_of[k.name] = f.name
    return funcs, fn_of


def _c_ident(s: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in s)[:40]
