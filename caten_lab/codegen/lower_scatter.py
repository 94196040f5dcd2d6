"""Lowering a one-hot scatter-add (:func:`caten_lab.passes.scatter_form.scatter_axis`: an embedding's
gradient) as the scatter it is: a part of :class:`~caten_lab.codegen.lower.KernelLowerer`.

``gw[v, c] = sum_t where(ids[t] == v, g[t, c], 0)`` becomes

    FOR f in [0, V*C)                       gw[f] = 0
    FOR t [scatter]                         v = ids[t]; vc = clamp(v, 0, V - 1); in = 0 <= v < V
      FOR c                                 gw[vc, c] = gw[vc, c] + (in ? g[t, c] : 0)

Each output adds the same terms in the same order (increasing ``t``) starting from +0.0, and the terms
the dense sum adds for the other tokens are +0.0, which leave a sum unchanged (it is never -0.0: it
starts at +0.0 and a float sum reaches zero only as +0.0): the results are bitwise the dense ones. An id
outside ``[0, V)`` adds zero to a clamped row, as no row matches it in the dense sum (its ``check_index``
still reports it). The token loops have the role ``scatter``: no pass runs them in parallel (two tokens
with one id would race).
"""

from __future__ import annotations

from caten_lab.air.dtypes import DType
from caten_lab.air.node import Node
from caten_lab.air.shapes import contiguous_strides, numel
from caten_lab.codegen import lower_exprs as E
from caten_lab.codegen.kir import Const, Decl, Function, Load, Store, Var
from caten_lab.passes.indexing import flat_index, loop_var

I64 = DType.int64


class ScatterLowering:
    """The scatter half of the kernel lowerer (it uses the lowerer's loops, blocks, names and values)."""

    def lower_scatter(self, root: Node, axis: int, side_pos: int) -> Function:
        """``root`` (a reduce) as a scatter-add along kept ``axis``; operand ``side_pos`` of the comparison
        is the id (:func:`caten_lab.passes.scatter_form.scatter_plan`)."""
        kg = self.kg
        w = kg.producer_of(root.reads[0])
        shape = w.shape
        o = self.origin(root.id)
        out_shape = root.shape
        dt = root.dtype
        total = numel(out_shape)
        check = self.check(total, root.id)
        fill = self.open_loop("__f", self.dim(total), "loop", root.id, self.root_block)
        fill.block.stmts.append(Store("p0", self.var("__f"), self.literal(0, dt), check, origin=o))
        fill.close()
        reduced = [k for k in root.attrs.axes if not (isinstance(shape[k], int) and shape[k] == 1)]
        coords: list = [0] * len(shape)
        parent = self.root_block
        opened = []
        for k in reduced:
            var = f"__t{k}"
            self.bounds[var] = shape[k]
            loop = self.open_loop(var, self.dim(shape[k]), "scatter", root.id, parent)
            opened.append(loop)
            parent = loop.block
            coords[k] = loop_var(var)
        # the token's id: the comparison's other side, at this token (it does not depend on the row)
        cond, c1 = self.resolve(w.reads[0], tuple(coords))
        negated = cond.op == "not"
        if negated:
            cond, c1 = self.resolve(cond.reads[0], c1)
        hit = w.reads[1] if negated else w.reads[2]
        side = cond.reads[side_pos]
        v = self.fresh("v")
        rows = shape[axis]
        blk = parent
        blk.stmts.append(Decl(v, I64, E.as_int64(self.operand(side, I64, c1)), const=True, origin=o))
        ext = self.dim(rows)
        vv = E.i64("max", Const(0, I64), E.i64("min", Var(v, I64), E.i64("sub", ext, Const(1, I64))))
        blk.stmts.append(Decl(f"{v}c", I64, vv, const=True, origin=o))
        inside = E.i64("land", E.i64("ge", Var(v, I64), Const(0, I64)), E.i64("lt", Var(v, I64), ext))
        self.names[f"__{v}"] = f"{v}c"
        self.var_block[f"__{v}"] = blk
        self.bounds[f"__{v}"] = rows
        coords[axis] = loop_var(f"__{v}")
        for k, d in enumerate(shape):  # the row's other axes (its width)
            if k in root.attrs.axes or k == axis or isinstance(d, int) and d == 1:
                continue
            var = f"__l{k}"
            self.bounds[var] = d
            loop = self.open_loop(var, self.dim(d), "loop", root.id, parent)
            opened.append(loop)
            parent = loop.block
            coords[k] = loop_var(var)
        x = self.operand(hit, dt, tuple(coords))
        out = tuple(0 if k in root.attrs.axes else c for k, c in enumerate(coords))
        index = self.idx(flat_index(out, contiguous_strides(out_shape)))
        old = Load("p0", index, E.compute_dtype(dt), check, origin=o)
        parent.stmts.append(Store("p0", index, E.binary("add", old, E.where(inside, x, self.literal(0, dt)), dt),
                                  check, origin=o))
        tokens = numel(shape) // rows if isinstance(rows, int) and rows and isinstance(numel(shape), int) else 1
        self.work = total + tokens
        for loop in reversed(opened):
            loop.close()
        return self._function()
