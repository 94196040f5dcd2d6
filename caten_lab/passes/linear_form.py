"""The ``x @ W.T`` form of a weight's use in AIR, as the frontend writes a linear layer.

``F.linear(x, W)`` with ``x`` (..., k) and ``W`` (n, k) is traced as

    xb = view(x, (..., n, k))        # x broadcast along n (x maybe a view: attention heads as rows)
    wb = view(W, (..., n, k))        # W broadcast along the leading axes (maybe through W.T and back)
    y = reduce(mul(xb, wb), add, axes=(last,))           # (..., n, 1)

:func:`linear_uses` recognizes that shape from a view of the weight, exactly: the weight side's chain of
unmasked views is composed into the flat index it reads in ``W`` (:func:`caten_lab.passes.indexing.unravel`),
which must be ``k * j + c``, and ``xb`` must read its operand ``x`` at the row-major index of ``(..., c)``
(``x`` itself may be a view: attention heads transposed back to rows). So a match means
``y[..., j, 0] = sum_c x[..., c] * W[j, c]``: what a rewrite needs to replace the sum by another way of
computing the same product (a quantized matmul over the weight's file blocks,
:mod:`caten_lab.models.quant_graph`). Anything else is no match.
"""

from __future__ import annotations

from dataclasses import dataclass

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.shapes import contiguous_strides, numel
from caten_lab.air.symbolic import Dim
from caten_lab.air.value import Value
from caten_lab.passes.indexing import flat_index, linear_form, loop_var, unravel


@dataclass(frozen=True)
class LinearUse:
    """``reduce`` (shape (..., n, 1)) sums ``x[..., c] * W[j, c]`` over c, ``x`` read as a (..., k) array in
    its row-major order (its own shape may differ: attention heads (..., h, d) with h * d = k)."""

    reduce: Node
    mul: Node
    weight_view: Node
    x: Value


def _base(g: Graph, v: Node, coords: tuple, bounds: dict) -> tuple[Node, Dim] | None:
    """The node below the chain of unmasked views starting at view ``v`` and the flat index into it that
    ``v`` reads at ``coords``; None for a masked view on the way."""
    flat = flat_index(coords, v.attrs.strides, v.attrs.offset)
    src = g.producer_of(v.reads[0]) if isinstance(v.reads[0], Value) else None
    while src is not None and src.op == "view":
        if src.attrs.mask is not None:
            return None
        flat = flat_index(unravel(flat, src.shape, bounds), src.attrs.strides, src.attrs.offset)
        src = g.producer_of(src.reads[0]) if isinstance(src.reads[0], Value) else None
    return (src, flat) if src is not None else None


def _is(flat: Dim, want: dict[str, Dim]) -> bool:
    """Whether ``flat`` is exactly ``sum(want[v] * v)`` (every loop variable not named has coefficient 0)."""
    lin = linear_form(flat)
    if lin is None:
        return False
    coefs, const = lin
    return const == 0 and {v: c for v, c in coefs.items() if c != 0} == {v: c for v, c in want.items() if c != 0}


def linear_uses(g: Graph, wb: Node) -> list[LinearUse]:
    """Every :class:`LinearUse` that view ``wb`` of a 2-d weight takes part in (a view the frontend shares
    with an embedding's lookup of the same weight may also feed a matmul)."""
    if wb.op != "view" or wb.attrs.mask is not None or len(wb.attrs.shape) < 2:
        return []
    shape = tuple(wb.attrs.shape)
    names = [f"__a{i}" for i in range(len(shape))]
    coords = tuple(0 if isinstance(d, int) and d == 1 else loop_var(v) for v, d in zip(names, shape))
    bounds = dict(zip(names, shape))
    base = _base(g, wb, coords, bounds)
    if base is None or base[0].op != "allocate" or len(base[0].shape) != 2:
        return []
    weight, flat = base
    n, k = weight.shape
    if shape[-2:] != (n, k) or not _is(flat, {names[-2]: k, names[-1]: 1}):
        return []
    lead = shape[:-2]
    strides = contiguous_strides((*lead, k))  # x read as a (..., k) array in its row-major order
    want = {v: st for v, st, d in zip(names, (*strides[:-1], 0, strides[-1]), shape)
            if not (isinstance(d, int) and d == 1)}
    out = []
    for mul in g.users_of(wb.out):
        sums = g.users_of(mul.out)
        if mul.op != "mul" or len(sums) != 1 or sums[0].op != "reduce" or sums[0].attrs.op != "add" \
                or tuple(sums[0].attrs.axes) != (len(shape) - 1,):
            continue
        other = mul.reads[0] if mul.reads[1] == wb.out else mul.reads[1]
        xb = g.producer_of(other) if isinstance(other, Value) else None
        if xb is None or xb.op != "view" or xb.attrs.mask is not None or tuple(xb.attrs.shape) != shape:
            continue
        x = g.producer_of(xb.reads[0]) if isinstance(xb.reads[0], Value) else None
        if x is None or x.dtype != mul.dtype or numel(tuple(x.shape)) != numel((*lead, k)):
            continue
        # xb reads its operand (itself maybe a transposing view: heads) in the operand's row-major order
        if _is(flat_index(coords, xb.attrs.strides, xb.attrs.offset), want):
            out.append(LinearUse(sums[0], mul, wb, x.out))
    return out
