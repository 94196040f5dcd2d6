"""Hoisting the output-independent part of a dot-product reduction out of the output loop.

A matvec lowered in dot-product form is ``for j: acc = 0; for r: acc += f(x)[r] * W[j, r]``. When
``f`` is expensive (a LayerNorm, a GELU, a strided/divided gather of a transposed activation) and
does not depend on the output index ``j``, the naive nest recomputes ``f(x)[r]`` for every ``j``:
``n_out`` times too often, and the inner loop no longer vectorizes. Here such subexpressions are
computed once into a small local array before the output loop (``h[r] = f(x)[r]``), and the
reduction reads ``h[r]``. The arithmetic is unchanged (same operations on the same values), so
results are bit-identical to the unhoisted code.
"""

from __future__ import annotations

from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.node import Node
from caten_lab.air.ops import ELEMENTWISE
from caten_lab.air.symbolic import Dim, Expr
from caten_lab.air.value import Value
from caten_lab.codegen.kir import Const, Decl, For, Load, Store
from caten_lab.passes.indexing import (
    contiguous_strides,
    flat_index,
    fold_divmod,
    linear_form,
    loop_var,
    loop_vars_of,
    unravel,
)

HOIST_ROLE = "hoist"
I64 = DType.int64


def _plain_load(lw: Any, n: Node, coords: tuple, stage: str) -> bool:
    """A load whose index is unit-stride in the reduction variable: cheap, and it vectorizes as is."""
    if n.op == "allocate":
        flat = flat_index(coords, contiguous_strides(n.shape))
    elif n.op == "view" and n.attrs.mask is None:
        flat = flat_index(coords, n.attrs.strides, n.attrs.offset)
    else:
        return False
    lin = linear_form(fold_divmod(flat))
    if lin is None:
        return False
    coef = lin[0].get(stage, 0)
    return coef in (0, 1)


def _candidates(lw: Any, v: str, coords: tuple, inner: str, stage: str, out: list, seen: set) -> None:
    """Maximal subexpressions of the reduce operand that depend on ``stage`` but not on ``inner``."""
    key = (v, coords)
    if key in seen:
        return
    seen.add(key)
    n = lw.kg.producer_of(v)
    if n is None or n.op in ("const", "index"):
        return
    if n.op == "view" and n.attrs.mask is None:  # see through reshapes/broadcasts of computed values
        src = lw.kg.producer_of(n.reads[0])
        if src.op != "allocate":
            flat = flat_index(coords, n.attrs.strides, n.attrs.offset)
            _candidates(lw, n.reads[0], unravel(flat, src.shape, lw.bounds), inner, stage, out, seen)
            return
    if not lw.depends_on(v, coords, inner):
        if not lw.depends_on(v, coords, stage):
            return
        if n.op == "allocate" or (n.op == "view" and lw.kg.producer_of(n.reads[0]).op == "allocate"):
            if _plain_load(lw, n, coords, stage):
                return
        elif n.op not in ELEMENTWISE and n.op not in ("view", "reduce"):
            return
        out.append((v, coords, n))
        return
    if n.op in ELEMENTWISE:
        for r in n.reads:
            if isinstance(r, Value):
                _candidates(lw, r, coords, inner, stage, out, seen)


def hoist_reduce_operand(lw: Any, n: Node, inner_coords: tuple, stage_var: str, extent: Dim) -> int:
    """Precompute the output-independent parts of reduce ``n``'s operand (at ``inner_coords``, reducing
    over ``stage_var`` in ``[0, extent)``) into local arrays; returns how many were hoisted. ``lw`` is the
    :class:`~caten_lab.codegen.lower.KernelLowerer` (its ``opts.hoist_max`` bounds the extent)."""
    inner = lw.inner_main
    if inner is None or not isinstance(extent, int) or not 1 < extent <= lw.opts.hoist_max:
        return 0
    if not isinstance(n.reads[0], Value):
        return 0
    found: list[tuple[str, tuple, Node]] = []
    _candidates(lw, n.reads[0], inner_coords, inner, stage_var, found, set())
    done = 0
    for v, coords, node in found:
        if (v, coords) in lw.memo:
            continue
        outer_vars: set[str] = set()
        for c in coords:
            if isinstance(c, Expr):
                outer_vars |= loop_vars_of(c)
        outer_vars.discard(stage_var)
        target = lw.root_block
        ok = True
        for ov in outer_vars:
            b = lw.var_block.get(ov)
            if b is None:
                ok = False
                break
            if b.depth > target.depth:
                target = b
        if not ok or inner in outer_vars:
            continue
        hvar = f"__h{lw.stage_counter}_{done}"
        hname = lw.fresh("h")
        block_cls = type(lw.root_block)
        hb = block_cls(target.depth + 1)
        lw.var_block[hvar] = hb
        lw.bounds[hvar] = extent
        sub = {stage_var: loop_var(hvar)}
        coords_h = tuple(c.substitute(sub) if isinstance(c, Expr) else c for c in coords)
        x = lw.at(v, coords_h)
        o = lw.origin(node.id)
        hb.stmts.append(Store(hname, lw.var(hvar), x, origin=o))
        target.stmts.append(Decl(hname, x.dtype, size=Const(extent, I64), origin=o))
        target.stmts.append(For(lw.names[hvar], Const(0, I64), Const(extent, I64), Const(1, I64), tuple(hb.stmts),
                                role=HOIST_ROLE, origin=o))
        lw.memo[(v, coords)] = Load(hname, lw.var(stage_var), x.dtype, origin=o)
        done += 1
    return done
