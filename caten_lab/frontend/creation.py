"""Tensor creation: constants, ranges, NumPy data, named inputs, and seeded random numbers."""

from __future__ import annotations

import math
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.symbolic import Dim, Expr, floordiv
from caten_lab.frontend.errors import ShapeError
from caten_lab.frontend.promote import DEFAULT_FLOAT, promote
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor, as_dtype, norm_shape


def full(shape: Any, value: Any, dtype: Any = None) -> Tensor:
    return Tensor.full(shape, value, dtype)


def zeros(*shape: Any, dtype: Any = DEFAULT_FLOAT) -> Tensor:
    return Tensor.full(norm_shape(shape, "zeros"), 0, dtype)


def ones(*shape: Any, dtype: Any = DEFAULT_FLOAT) -> Tensor:
    return Tensor.full(norm_shape(shape, "ones"), 1, dtype)


def zeros_like(t: Tensor, dtype: Any = None) -> Tensor:
    return Tensor.full(t.shape, 0, dtype or t.dtype)


def ones_like(t: Tensor, dtype: Any = None) -> Tensor:
    return Tensor.full(t.shape, 1, dtype or t.dtype)


def full_like(t: Tensor, value: Any, dtype: Any = None) -> Tensor:
    return Tensor.full(t.shape, value, dtype or t.dtype)


def index(shape: tuple, axis: int, dtype: DType = DType.int64) -> Tensor:
    """The coordinate along ``axis`` of every element of ``shape`` (AIR ``index``)."""
    return Tensor._make("index", (), tuple(shape), dtype, shape=tuple(shape), axis=axis, dtype=dtype)


def arange(
    start: Dim | float, stop: Dim | float | None = None, step: int | float = 1, dtype: Any = None
) -> Tensor:
    """``start, start+step, ...`` below ``stop``; bounds may be symbolic (``arange(pos, pos + seq)``)."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero", where=user_source())
    is_int = all(isinstance(v, (int, Expr)) and not isinstance(v, bool) for v in (start, stop, step))
    dt = as_dtype(dtype, "arange") if dtype is not None else (DType.int64 if is_int else DEFAULT_FLOAT)
    if isinstance(start, Expr) or isinstance(stop, Expr):
        if not isinstance(step, int) or step <= 0:
            raise ShapeError("arange: symbolic bounds need a positive int step", where=user_source())
        n: Dim = -floordiv(-(stop - start), step)
    else:
        n = max(0, math.ceil((stop - start) / step))
    idx = index((n,), 0, DType.int64 if is_int else DType.float32)
    if step != 1:
        idx = idx * step
    if isinstance(start, Expr):
        idx = idx + Tensor.full((), start, DType.int64)
    elif start != 0:
        idx = idx + start
    return idx.cast(dt)


def eye(n: int, m: int | None = None, dtype: Any = DEFAULT_FLOAT) -> Tensor:
    m = n if m is None else m
    return (index((n, m), 0) == index((n, m), 1)).cast(dtype)


def from_numpy(array: Any, name: str | None = None, dtype: Any = None) -> Tensor:
    return Tensor.from_numpy(array, name, dtype)


def tensor(data: Any, dtype: Any = None, *, requires_grad: bool = False) -> Tensor:
    import numpy as np

    return Tensor.from_numpy(np.asarray(data), dtype=dtype, requires_grad=requires_grad)


def placeholder(shape: Any, dtype: Any = DEFAULT_FLOAT, name: str | None = None) -> Tensor:
    return Tensor.placeholder(shape, dtype, name)


def cat(tensors: list[Tensor], dim: int = 0) -> Tensor:
    """Concatenate along ``dim``: each input is padded into place and the pieces are added."""
    if not tensors:
        raise ShapeError("cat: needs at least one tensor", where=user_source())
    first = tensors[0]
    d = first._axis(dim, "cat")
    for t in tensors[1:]:
        if t.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(t.shape, first.shape)) if i != d
        ):
            shapes = ", ".join(str(x.shape) for x in tensors)
            raise ShapeError(f"cat: shapes {shapes} differ outside axis {d}", where=user_source())
    dt = first.dtype
    for t in tensors[1:]:
        dt = promote(dt, t.dtype)
    if len(tensors) == 1:
        return first.cast(dt)
    total: Dim = 0
    for t in tensors:
        total = total + t.shape[d]
    out: Tensor | None = None
    before: Dim = 0
    for t in tensors:
        after = total - before - t.shape[d]
        pads: list[Any] = [0] * (2 * (t.ndim - d))
        pads[-2], pads[-1] = before, after
        piece = t.cast(dt).pad(pads)
        out = piece if out is None else out + piece
        before = before + t.shape[d]
    assert out is not None
    return out


def stack(tensors: list[Tensor], dim: int = 0) -> Tensor:
    if not tensors:
        raise ShapeError("stack: needs at least one tensor", where=user_source())
    d = tensors[0]._axis(dim, "stack", tensors[0].ndim + 1)
    return cat([t.unsqueeze(d) for t in tensors], d)


def where(cond: Tensor, a: Any, b: Any) -> Tensor:
    return cond.where(a, b)


def maximum(a: Tensor, b: Any) -> Tensor:
    return a.maximum(b)


def minimum(a: Tensor, b: Any) -> Tensor:
    return a.minimum(b)
