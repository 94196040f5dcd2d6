"""Lowering the quantized matmul ops (``quant_rows``, ``quant_matmul``; :mod:`caten_lab.formats.act_quant`):
a part of :class:`~caten_lab.codegen.lower.KernelLowerer`.

A ``quant_rows`` kernel computes each row of its operand (a fused expression: an RMSNorm, a SiLU-gated
product) into a local array and quantizes it with one helper call::

    FOR l (the rows)                       float hN[k]
      FOR q in [0, k) [quant]              hN[q] = x(l, q)
      cl_quant_rows_a32(hN, &p0[l * row_bytes], k)

A ``quant_matmul`` element is an expression, a helper call over one weight row and one activation row
(``cl_qdot_<type>(k, &w[j * weight_row_bytes], &xq[l * row_bytes])``), so whatever its reader computes
from it (a residual add, SiLU(gate) * up over two of them) fuses around it, and the reader's loops (the
output features) are what the loop passes parallelize. The helpers live in ``codegen/c/quant.h``.
"""

from __future__ import annotations

from caten_lab.air.dtypes import DType
from caten_lab.air.node import Node
from caten_lab.air.shapes import contiguous_strides, numel
from caten_lab.codegen import lower_exprs as E
from caten_lab.codegen.kir import Addr, Call, Const, Decl, Eval, Function, Store
from caten_lab.codegen.kir import Expr as KExpr
from caten_lab.formats.gguf_quant import row_bytes
from caten_lab.passes.indexing import flat_index, loop_var

I64, F32 = DType.int64, DType.float32
QUANT_ROLE = "quant"  # the loop that fills a row before it is quantized


def qdot_helper(wtype: str) -> str:
    """The C helper of a dot product of a ``wtype`` weight row with an activation row (quant.h)."""
    return f"cl_qdot_{wtype.lower()}"


class QuantLowering:
    """The quantized-matmul half of the kernel lowerer (it uses the lowerer's loops, blocks and values)."""

    def lower_quant_rows(self, root: Node) -> Function:
        """A ``quant_rows`` root: per row, the operand into a local array, then one helper call."""
        x = root.reads[0]
        k = self.kg.producer_of(x).shape[-1]
        o = self.origin(root.id)
        shape = root.shape
        parent = self.root_block
        opened = []
        coords: list = []
        for a, d in enumerate(shape[:-1]):
            if isinstance(d, int) and d == 1:
                coords.append(0)
                continue
            var = f"__l{a}"
            self.bounds[var] = d
            loop = self.open_loop(var, self.dim(d), "loop", root.id, parent)
            opened.append(loop)
            parent = loop.block
            coords.append(loop_var(var))
        h = self.fresh("h")
        parent.stmts.append(Decl(h, F32, size=Const(k, I64), origin=o))
        qvar = "__q"
        self.bounds[qvar] = k
        fill = self.open_loop(qvar, Const(k, I64), QUANT_ROLE, root.id, parent)
        value = self.operand(x, F32, (*coords, loop_var(qvar)))
        fill.block.stmts.append(Store(h, self.var(qvar), value, origin=o))
        fill.close()
        row = self.idx(flat_index((*coords, 0), contiguous_strides(shape)))
        helper = "cl_quant_rows_a32" if root.attrs.block == 32 else "cl_quant_rows_a256"
        parent.stmts.append(Eval(Call(helper, (Addr(h, None, F32), Addr("p0", row, DType.uint8), Const(k, I64)),
                                      F32, o), origin=o))
        rows = numel(shape[:-1])
        self.work = rows * k
        for loop in reversed(opened):
            loop.close()
        return self._function()

    def quant_matmul_at(self, n: Node, coords: tuple) -> KExpr:
        """One element of ``quant_matmul`` at ``coords`` (..., j): a helper call (quant.h)."""
        a = n.attrs
        xq, w = (self.kg.producer_of(r) for r in n.reads)
        xname, _ = self.param_name(xq)
        wname, _ = self.param_name(w)
        xrow = self.idx(flat_index((*coords[:-1], 0), contiguous_strides(xq.shape)))
        wrow = self.idx(flat_index((coords[-1],), (row_bytes(a.wtype, a.k),)))
        call = Call(qdot_helper(a.wtype), (Const(a.k, I64), Addr(wname, wrow, w.dtype), Addr(xname, xrow, xq.dtype)),
                    F32, self.origin(n.id))
        self.work = E.work_max(self.work, a.k)
        return self.temp(call, F32, coords, n.id)
