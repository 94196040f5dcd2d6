"""Reductions (sum, mean, max, min, argmax, var, softmax, log_softmax) and matmul.

AIR has one reduction op (add or max, keeping reduced axes as size 1); everything else derives from
it: min is max under an exact order-reversing map (``~x`` on integers, ``-x`` on floats). matmul is
broadcast-multiply then sum over the shared axis, built from views so nothing is copied.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from caten_lab.air.dtypes import DType
from caten_lab.air.shapes import broadcast_shapes, numel
from caten_lab.air.symbolic import Dim
from caten_lab.frontend.errors import AxisError, DTypeError, ShapeError, fmt_shape
from caten_lab.frontend.promote import promote
from caten_lab.frontend.source import user_source
from caten_lab.type_words import a_type

if TYPE_CHECKING:
    from caten_lab.frontend.tensor import Tensor

Axis = int | Sequence[int] | None


class ReduceMixin:
    __slots__ = ()

    def _axes(self: Tensor, axis: Axis, op: str) -> tuple[int, ...]:
        if axis is None:
            return tuple(range(self.ndim))
        items = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
        axes = tuple(self._axis(a, op) for a in items)
        if len(set(axes)) != len(axes):
            raise AxisError(f"{op}: axis {items} repeats an axis", where=user_source())
        return tuple(sorted(axes))

    def _reduce(self: Tensor, rop: str, axis: Axis, keepdim: bool, op: str) -> Tensor:
        axes = self._axes(axis, op)
        shp = self.shape
        kept = tuple(1 if i in axes else d for i, d in enumerate(shp))
        if not axes:
            return self
        out = type(self)._make("reduce", (self.node,), kept, self.dtype, op=rop, axes=axes)
        if keepdim:
            return out
        return out.reshape(*(d for i, d in enumerate(shp) if i not in axes))

    def _count(self: Tensor, axis: Axis, op: str) -> Dim:
        return numel(tuple(self.shape[a] for a in self._axes(axis, op)))

    def sum(self: Tensor, axis: Axis = None, keepdim: bool = False, dtype: Any = None) -> Tensor:
        x = self
        if dtype is not None:
            x = x.cast(dtype)
        elif not self.dtype.is_float:
            x = x.cast(DType.int64)
        return x._reduce("add", axis, keepdim, "sum")

    def _check_nonempty(self: Tensor, axis: Axis, op: str) -> None:
        """max/min/argmax of nothing has no answer: torch and NumPy raise, and so do we."""
        for a in self._axes(axis, op):
            n = self.shape[a]
            if isinstance(n, int) and n == 0:
                raise ShapeError(
                    f"{op}: axis {a} of shape {fmt_shape(self.shape)} is empty, so there is no {op}",
                    where=user_source(),
                    hint="reduce over a non-empty axis, or use sum (whose empty value is 0)",
                )

    def max(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        self._check_nonempty(axis, "max")
        return self._reduce("max", axis, keepdim, "max")

    def min(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        self._check_nonempty(axis, "min")
        return self._order_reversed()._reduce("max", axis, keepdim, "min")._order_reversed()

    def _order_reversed(self: Tensor) -> Tensor:
        """An exact, order-reversing bijection of the values: min(x) = r(max(r(x))), argmin = argmax(r(x)).

        ``~x`` on integers (two's complement, signed or unsigned: never wraps, unlike ``-x`` on the
        minimum), ``not`` on bools, ``-x`` on floats (exact; NaN stays NaN).
        """
        if self.dtype == DType.bool:
            return self.logical_not()
        if self.dtype.is_float:
            return -self
        return ~self

    def mean(self: Tensor, axis: Axis = None, keepdim: bool = False) -> Tensor:
        x = self._float()
        n = self._count(axis, "mean")
        total = x.sum(axis, keepdim)
        if isinstance(n, int):
            return total * (1.0 / n) if n else total / 0.0
        return total / type(self).full((), n, DType.int64).cast(total.dtype)

    def var(
        self, axis: Axis = None, keepdim: bool = False, correction: int = 1, unbiased: bool | None = None
    ) -> Tensor:
        if unbiased is not None:
            correction = 1 if unbiased else 0
        x = self._float()
        d = x - x.mean(axis, keepdim=True)
        n = self._count(axis, "var")
        ss = (d * d).sum(axis, keepdim)
        denom = n - correction
        if isinstance(denom, int):
            return ss * (1.0 / denom) if denom > 0 else ss / 0.0
        return ss / type(self).full((), denom, DType.int64).cast(ss.dtype)

    def std(self: Tensor, axis: Axis = None, keepdim: bool = False, correction: int = 1) -> Tensor:
        return self.var(axis, keepdim, correction).sqrt()

    def argmax(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first maximum along ``axis`` (int64; over the flattened tensor when None).

        A NaN is the maximum (the index of the first NaN, as in torch and NumPy).
        """
        if axis is None:
            out = self.reshape(-1).argmax(0)
            return out.reshape(*([1] * self.ndim)) if keepdim else out
        a = self._axis(axis, "argmax")
        self._check_nonempty(a, "argmax")
        n = self.shape[a]
        t = type(self)
        rng = (n,) + (1,) * (self.ndim - a - 1)
        idx = t._make("index", (), rng, DType.int64, shape=rng, axis=0, dtype=DType.int64)
        rev = t.full((), n - 1, DType.int64) - idx if not isinstance(n, int) else (n - 1) - idx
        is_max = self == self.max(a, keepdim=True)
        if self.dtype.is_float:  # the max is NaN iff the axis holds one: then the NaNs are the maxima
            is_max = is_max.logical_or(self != self)
        best = is_max.where(rev, -1).max(a, keepdim)
        return (n - 1) - best if isinstance(n, int) else t.full((), n - 1, DType.int64) - best

    def argmin(self: Tensor, axis: int | None = None, keepdim: bool = False) -> Tensor:
        """Index of the first minimum (the first NaN, if any)."""
        if axis is None:
            out = self.reshape(-1).argmin(0)
            return out.reshape(*([1] * self.ndim)) if keepdim else out
        self._check_nonempty(self._axis(axis, "argmin"), "argmin")
        return self._order_reversed().argmax(axis, keepdim)

    def logsumexp(self: Tensor, axis: Axis, keepdim: bool = False) -> Tensor:
        x = self._float()
        m = x._reduce("max", axis, True, "logsumexp")
        m = (m.abs() == float("inf")).where(0.0, m)  # as torch: an infinite max must not make inf - inf
        out = (x - m).exp().sum(axis, keepdim=True).log() + m
        return out if keepdim else out.squeeze(self._axes(axis, "logsumexp"))

    def softmax(self: Tensor, axis: int = -1) -> Tensor:
        x = self._float()
        e = (x - x._reduce("max", axis, True, "softmax")).exp()
        return e / e.sum(axis, keepdim=True)

    def log_softmax(self: Tensor, axis: int = -1) -> Tensor:
        x = self._float()
        s = x - x._reduce("max", axis, True, "log_softmax")
        return s - s.exp().sum(axis, keepdim=True).log()

    # ---- matmul -------------------------------------------------------------------------------
    def matmul(self: Tensor, other: Tensor) -> Tensor:
        """NumPy matmul: 1-d operands are promoted and squeezed, batch axes broadcast."""
        t = type(self)
        if not isinstance(other, t):
            raise DTypeError(f"matmul: operand must be a Tensor, got {a_type(other)}", where=user_source())
        a, b = self, other
        if a.ndim == 0 or b.ndim == 0:
            raise ShapeError(
                f"matmul: operands must have at least 1 axis, "
                f"got {fmt_shape(a.shape)} @ {fmt_shape(b.shape)}",
                where=user_source(),
            )
        dt = promote(a.dtype, b.dtype)
        a, b = a.cast(dt), b.cast(dt)
        va, vb = a.ndim == 1, b.ndim == 1
        if va:
            a = a.unsqueeze(0)
        if vb:
            b = b.unsqueeze(-1)
        k1, k2 = a.shape[-1], b.shape[-2]
        if k1 != k2:
            raise ShapeError(
                f"matmul: inner dimensions differ: "
                f"{fmt_shape(self.shape)} @ {fmt_shape(other.shape)} ({k1} vs {k2})",
                where=user_source(),
            )
        batch = broadcast_shapes("matmul", a.shape[:-2], b.shape[:-2], where=user_source)
        n, m = a.shape[-2], b.shape[-1]
        x = a.unsqueeze(-2).broadcast_to((*batch, n, m, k1))  # (..., n, 1, k) -> (..., n, m, k)
        y = b.transpose(-1, -2).unsqueeze(-3).broadcast_to((*batch, n, m, k1))  # (..., 1, m, k)
        out = (x * y).sum(-1, dtype=dt if not dt.is_float else None)
        if va:
            out = out.squeeze(-2)
        if vb:
            out = out.squeeze(-1)
        return out

    __matmul__ = matmul

    def __rmatmul__(self: Tensor, other: Tensor) -> Tensor:
        return other.matmul(self)

    def dot(self: Tensor, other: Tensor) -> Tensor:
        return self.matmul(other)
