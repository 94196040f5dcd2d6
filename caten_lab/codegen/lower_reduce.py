"""Reductions in the lowering (:class:`ReduceLowering`, a part of
:class:`~caten_lab.codegen.lower.KernelLowerer`): a ``reduce`` becomes a stage (an accumulator and a loop
over the reduced axes in the outermost block where its coordinates are defined), a tile of
accumulator lanes in the matmul form, or, for a one-hot sum (an embedding written as a reduction),
the gather of one row."""

from __future__ import annotations

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.ops import ELEMENTWISE
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.symbolic import Dim, Expr
from caten_lab.air.value import Value
from caten_lab.codegen import lower_exprs as E
from caten_lab.codegen.kir import Assign, Const, Decl, Load, Store, Var
from caten_lab.codegen.kir import Expr as KExpr
from caten_lab.passes.indexing import flat_index, loop_var, loop_vars_of, unravel

I64 = DType.int64


class ReduceLowering:
    """The reduction half of the kernel lowerer (it reads and extends the lowerer's blocks and memo)."""

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
        self.work = E.work_max(self.work, trip)
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
        opened: list = []  # of lower._Loop
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
        opened: list = []  # of lower._Loop
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


def _is_zero(kg: Graph, r: object) -> bool:
    if not isinstance(r, Value):
        return r == 0
    p = kg.producer_of(r)
    if p.op == "const":
        return not isinstance(p.attrs.value, Expr) and p.attrs.value == 0
    return p.op == "allocate" and p.attrs.name is None


def _uses(coords: tuple, var: str) -> bool:
    return any(isinstance(c, Expr) and var in loop_vars_of(c) for c in coords)
