"""The adjoint of a strided view: the gradient of a contiguous value read through a ``view`` window.

Padding (the mask) reads zeros, so its gradient goes nowhere; a broadcast (stride-0) axis sums its copies'
gradients; what is left either walks a box of the value (reshape, permute, flip, slices with step 1: the
adjoint is a view of the gradient, padded with zeros) or not (steps: the gradient is written into zeros
through the same window, an AIR ``store``).
"""

from __future__ import annotations

from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.shapes import contiguous_strides
from caten_lab.frontend.lazy import LazyNode
from caten_lab.frontend.tensor import Tensor
from caten_lab.frontend.view import View
from caten_lab.passes.values import is_reshape


def view_adjoint(g: Tensor, v: View, shape: tuple, dtype: DType) -> Tensor:
    """The gradient of a contiguous value of ``shape`` read through the window ``v``, given ``g``."""
    vshape, strides, offset = list(v.shape), list(v.strides), v.offset
    if v.mask is not None:  # padding reads zeros: its gradient goes nowhere
        for ax, (lo, hi) in enumerate(v.mask):
            if lo == 0 and hi == vshape[ax]:
                continue
            if isinstance(lo, int) and isinstance(hi, int) and hi <= lo:
                return Tensor.full(shape, 0.0, dtype)
            g = g[(slice(None),) * ax + (slice(lo, hi),)]
            offset = offset + lo * strides[ax]
            vshape[ax] = hi - lo
    spread = tuple(ax for ax, (n, s) in enumerate(zip(vshape, strides)) if s == 0 and n != 1)
    if spread:  # broadcast axes: every copy adds its gradient
        g = g.sum(spread, keepdim=True)
        for ax in spread:
            vshape[ax] = 1
    if is_reshape(vshape, strides, offset, None, shape):  # merged or split axes: the gradient is reshaped back
        return g.reshape(*shape)
    box = _window_box(vshape, strides, offset, shape)
    if box is not None:  # reshape / permute / flip / slice with step 1: a view of g, padded with zeros
        axes, to_base, bounds = box
        flat = g.reshape(*(vshape[ax] for ax in axes))
        order = sorted(range(len(axes)), key=lambda i: to_base[i])
        flat = flat.permute(*order)
        flipped = [k for k, i in enumerate(order) if strides[axes[i]] < 0]
        if flipped:
            flat = flat.flip(flipped)
        flat = flat.reshape(*(hi - lo for lo, hi in bounds))
        pads = [p for (lo, hi), n in zip(reversed(bounds), reversed(shape)) for p in (lo, n - hi)]
        return flat.pad(pads) if any(pads) else flat
    zeros = Tensor.full(shape, 0.0, dtype)
    attrs = {"shape": tuple(vshape), "strides": tuple(strides), "offset": offset}
    return Tensor(LazyNode("store", (zeros.node, g.node), attrs, tuple(shape), dtype, None))


def _window_box(vshape: list, strides: list, offset: Any, shape: tuple) -> tuple | None:
    """If the window is a box of a contiguous ``shape`` (each of its axes walks one axis of ``shape`` with
    step +-1): (the window's axes longer than 1, the axis of ``shape`` each walks, the box's [lo, hi) on
    every axis of ``shape``). Else None (steps, symbolic sizes: the caller scatters instead)."""
    axes = [ax for ax, n in enumerate(vshape) if n != 1]
    if not isinstance(offset, int) or not all(isinstance(d, int) for d in shape):
        return None
    if any(not isinstance(strides[ax], int) or not isinstance(vshape[ax], int) for ax in axes):
        return None
    cs = contiguous_strides(tuple(shape))
    axis_of = {c: j for j, (c, n) in enumerate(zip(cs, shape)) if n != 1}
    to_base = [axis_of.get(abs(strides[ax])) for ax in axes]
    if None in to_base or len(set(to_base)) != len(to_base):
        return None
    digits, rest = [], offset  # the offset is the element the window starts at: unravel it
    for c, n in zip(cs, shape):
        digits.append(rest // c if n != 1 else 0)
        rest -= digits[-1] * c
    if rest != 0 or any(not 0 <= d < n for d, n in zip(digits, shape)):
        return None
    bounds = [(d, d + 1) for d in digits]
    for ax, j in zip(axes, to_base):
        lo = digits[j] if strides[ax] > 0 else digits[j] - vshape[ax] + 1
        if lo < 0 or lo + vshape[ax] > shape[j]:
            return None
        bounds[j] = (lo, lo + vshape[ax])
    return axes, to_base, bounds
