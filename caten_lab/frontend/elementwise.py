"""Elementwise math on lazy Tensors, derived from the few AIR primitives.

exp and log go through exp2/log2, cos through sin, tanh through exp, erf through a polynomial
(Abramowitz & Stegun 7.1.26, |error| < 1.5e-7), minimum through max of negations (floats, so NaN
propagates) or where (integers), comparisons through lt/ne.
On float16 these composites run in float32 and round once at the end (``_in_float32``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.shapes import broadcast_shapes
from caten_lab.frontend.division import float_floordiv, float_mod, is_negative
from caten_lab.frontend.errors import DTypeError
from caten_lab.frontend.source import user_source

if TYPE_CHECKING:
    from caten_lab.frontend.tensor import Tensor

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
_ERF_P = 0.3275911
_ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _in_float32(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Compute a composite function of a float16 tensor in float32 and round once at the end.

    Rounding every intermediate to float16 costs several ulps (exp's ``x * log2(e)`` alone loses
    ~0.1%); PyTorch computes half-precision math in float32 too, so results match it to one rounding.
    """

    @functools.wraps(fn)
    def wrapper(self: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if self.dtype != DType.float16:
            return fn(self, *args, **kwargs)
        out = fn(self.cast(DType.float32), *args, **kwargs)
        return out.cast(DType.float16) if out.dtype == DType.float32 else out

    return wrapper


class ElementwiseMixin:
    """Arithmetic, math functions, comparisons, logic and ``where``."""

    __slots__ = ()

    # ---- arithmetic ------------------------------------------------------------------------
    def add(self: Tensor, other: Any) -> Tensor:
        return self._binary("add", "add", other)

    def mul(self: Tensor, other: Any) -> Tensor:
        return self._binary("mul", "mul", other)

    def sub(self: Tensor, other: Any) -> Tensor:
        (a, b), _, _ = self._operands("sub", (other,))
        return a + (-b)

    def rsub(self: Tensor, other: Any) -> Tensor:
        (a, b), _, _ = self._operands("sub", (other,))
        return (-a) + b

    def div(self: Tensor, other: Any) -> Tensor:
        """True division (integers promote to float32)."""
        (a, b), dt, shape = self._float_operands("div", other)
        if isinstance(b, float):
            return a * (1.0 / b) if b != 0 else a._binary_lit_div(b)
        return a * b.reciprocal()

    def _binary_lit_div(self: Tensor, b: float) -> Tensor:
        return self * type(self).full((), b, self.dtype).reciprocal()

    def rdiv(self: Tensor, other: Any) -> Tensor:
        (a, b), dt, shape = self._float_operands("div", other)
        return a.reciprocal() * b

    def _float_operands(self: Tensor, op: str, other: Any) -> tuple:
        """Promote like any binary op, then to float32 if the result would not be a float."""
        res = self._operands(op, (other,))
        if res[1].is_float:
            return res
        return self._operands(op, (other,), DType.float32)

    def floordiv(self: Tensor, other: Any) -> Tensor:
        """Floor division (Python semantics) on integers; floor(a / b) on floats."""
        (a, b), dt, shape = self._operands("floordiv", (other,))
        if dt.is_float:
            return float_floordiv(a, b)
        if dt == DType.bool:
            raise DTypeError("floordiv: not defined for bool tensors", where=user_source())
        q = type(self)._ew("idiv", [a, b], shape, dt)
        if dt.is_unsigned:  # truncation is floor for non-negative operands
            return q
        r = type(self)._ew("mod", [a, b], shape, dt)
        fix = (r != 0).logical_and((r < 0).logical_xor(is_negative(b)))
        return fix.where(q - 1, q)

    def mod(self: Tensor, other: Any) -> Tensor:
        """Remainder with the sign of the divisor (Python / torch semantics)."""
        (a, b), dt, shape = self._operands("mod", (other,))
        if dt.is_float:
            return float_mod(a, b)
        r = type(self)._ew("mod", [a, b], shape, dt)
        if dt.is_unsigned:
            return r
        fix = (r != 0).logical_and((r < 0).logical_xor(is_negative(b)))
        return fix.where(r + b, r)

    __add__ = add
    __radd__ = add
    __mul__ = mul
    __rmul__ = mul
    __sub__ = sub
    __rsub__ = rsub
    __truediv__ = div
    __rtruediv__ = rdiv
    __floordiv__ = floordiv
    __mod__ = mod

    def _lift(self: Tensor, op: str, other: Any) -> Tensor:
        """A Python scalar as a 0-d tensor of the promoted dtype (for reflected operators)."""
        (_, b), dt, _ = self._operands(op, (other,))
        return b if isinstance(b, type(self)) else type(self).full((), b, dt)

    def __rfloordiv__(self: Tensor, other: Any) -> Tensor:
        return self._lift("floordiv", other) // self

    def __rmod__(self: Tensor, other: Any) -> Tensor:
        return self._lift("mod", other) % self

    def neg(self: Tensor) -> Tensor:
        if self.dtype == DType.bool:
            raise DTypeError("neg: not defined for bool tensors (use logical_not or ~)", where=user_source())
        return self._unary("neg")

    __neg__ = neg

    def reciprocal(self: Tensor) -> Tensor:
        return self._float()._unary("recip")

    # ---- math functions ------------------------------------------------------------------------
    def exp2(self) -> Tensor:
        return self._float()._unary("exp2")

    def log2(self) -> Tensor:
        return self._float()._unary("log2")

    @_in_float32
    def exp(self: Tensor) -> Tensor:
        return (self._float() * LOG2E).exp2()

    @_in_float32
    def log(self: Tensor) -> Tensor:
        return self.log2() * LN2

    def sqrt(self: Tensor) -> Tensor:
        return self._float()._unary("sqrt")

    def rsqrt(self: Tensor) -> Tensor:
        return self.sqrt().reciprocal()

    def sin(self: Tensor) -> Tensor:
        return self._float()._unary("sin")

    @_in_float32
    def cos(self: Tensor) -> Tensor:
        return (self._float() + math.pi / 2).sin()

    @_in_float32
    def tan(self: Tensor) -> Tensor:
        return self.sin() / self.cos()

    @_in_float32
    def sigmoid(self: Tensor) -> Tensor:
        return (1 + (-self._float()).exp()).reciprocal()

    @_in_float32
    def tanh(self: Tensor) -> Tensor:
        return 2 * (self._float() * 2).sigmoid() - 1

    @_in_float32
    def erf(self: Tensor) -> Tensor:
        x = self._float()
        ax = x.abs()
        t = (1 + _ERF_P * ax).reciprocal()
        poly = t * _ERF_A[4]
        for a in reversed(_ERF_A[:4]):
            poly = t * (poly + a)
        y = 1 - poly * (-(ax * ax)).exp()
        return (x < 0).where(-y, y)

    def relu(self: Tensor) -> Tensor:
        return self.maximum(0)

    @_in_float32
    def gelu(self: Tensor, approximate: str = "none") -> Tensor:
        """GELU: exact (erf) or ``approximate="tanh"`` (GPT-2's gelu_new)."""
        x = self._float()
        if approximate == "tanh":
            return 0.5 * x * (1 + (math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)).tanh())
        return 0.5 * x * (1 + (x * (1 / math.sqrt(2))).erf())

    def silu(self: Tensor) -> Tensor:
        return self * self.sigmoid()

    def abs(self: Tensor) -> Tensor:
        if self.dtype == DType.bool or self.dtype.is_unsigned:
            return self
        return self.maximum(-self)

    __abs__ = abs

    def sign(self: Tensor) -> Tensor:
        return (self > 0).cast(self.dtype) - (self < 0).cast(self.dtype)

    def square(self: Tensor) -> Tensor:
        return self * self

    def trunc(self: Tensor) -> Tensor:
        if not self.dtype.is_float:
            return self
        t = self.cast(DType.int64).cast(self.dtype)
        return (self.abs() < 2.0**52).where(t, self)

    def floor(self: Tensor) -> Tensor:
        t = self.trunc()
        return t - (t > self).cast(t.dtype) if self.dtype.is_float else t

    def ceil(self: Tensor) -> Tensor:
        t = self.trunc()
        return t + (t < self).cast(t.dtype) if self.dtype.is_float else t

    def pow(self: Tensor, exponent: Any) -> Tensor:
        """``self ** exponent``; small integer exponents multiply exactly, others use exp2/log2."""
        if isinstance(exponent, bool):
            exponent = int(exponent)
        if isinstance(exponent, (int, float)) and float(exponent).is_integer() and abs(exponent) <= 8:
            n = int(exponent)
            base = self if (isinstance(exponent, int) and not self.dtype.is_float) else self._float()
            if n == 0:
                return base * 0 + 1
            out = base
            for _ in range(abs(n) - 1):
                out = out * base
            return out if n > 0 else out.reciprocal()
        if isinstance(exponent, (int, float)) and exponent == 0.5:
            return self.sqrt()
        (x, e), dt, _ = self._float()._operands("pow", (exponent,))
        if dt == DType.float16:  # like _in_float32: one rounding at the end
            e = e if isinstance(e, float) else e.cast(DType.float32)
            return _pow_float(x.cast(DType.float32), e).cast(DType.float16)
        return _pow_float(x, e)

    __pow__ = pow

    def __rpow__(self: Tensor, base: Any) -> Tensor:
        return self._float()._lift("pow", base).pow(self._float())

    def maximum(self: Tensor, other: Any) -> Tensor:
        return self._binary("maximum", "max", other)

    def minimum(self: Tensor, other: Any) -> Tensor:
        """Elementwise min; a NaN in either operand gives NaN (torch.minimum / np.minimum)."""
        (a, b), dt, shape = self._operands("minimum", (other,))
        if dt.is_float:  # max propagates NaN and negation is exact
            return -type(self)._ew("max", [-a, -b], shape, dt)
        return (a < b).where(a, b) if isinstance(a, type(self)) else (b < a).where(b, a)

    def clamp(self: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002 - torch's names
        """torch.clamp: ``minimum(maximum(x, min), max)``; NaN stays NaN, and min > max gives max."""
        if min is None and max is None:
            raise DTypeError("clamp: give min, max or both", where=user_source())
        for name, bound in (("min", min), ("max", max)):
            if bound is not None and (
                isinstance(bound, str) or not isinstance(bound, (int, float, type(self), np.generic, np.ndarray))
            ):
                raise DTypeError(
                    f"clamp: {name} must be a number or a Tensor, got {bound!r} ({type(bound).__name__})",
                    where=user_source(),
                )
        out = self
        if min is not None:
            out = out.maximum(min)
        if max is not None:
            out = out.minimum(max)
        return out

    clip = clamp

    # ---- comparisons -------------------------------------------------------------------------
    def __lt__(self: Tensor, other: Any) -> Tensor:
        return self._binary("lt", "lt", other)

    def __gt__(self: Tensor, other: Any) -> Tensor:
        return self._binary("gt", "lt", other, reverse=True)

    def __ne__(self: Tensor, other: Any) -> Tensor:
        return self._binary("ne", "ne", other)

    def __eq__(self: Tensor, other: Any) -> Tensor:
        return self._binary("eq", "ne", other).logical_not()

    def __le__(self: Tensor, other: Any) -> Tensor:
        return (self < other).logical_or(self == other)

    def __ge__(self: Tensor, other: Any) -> Tensor:
        return (self > other).logical_or(self == other)

    lt, gt, le, ge = __lt__, __gt__, __le__, __ge__

    def eq(self: Tensor, other: Any) -> Tensor:
        return self == other

    def ne(self: Tensor, other: Any) -> Tensor:
        return self != other

    # ---- logic ---------------------------------------------------------------------------------
    def _logic(self: Tensor, op: str, air_op: str, other: Any) -> Tensor:
        out = self._binary(op, air_op, other)
        if out.dtype.is_float:
            raise DTypeError(
                f"{op}: needs bool or integer operands, got {out.dtype.value}", where=user_source()
            )
        return out

    def logical_and(self: Tensor, other: Any) -> Tensor:
        return self.bool()._logic("logical_and", "and", _as_bool(other))

    def logical_or(self: Tensor, other: Any) -> Tensor:
        return self.bool()._logic("logical_or", "or", _as_bool(other))

    def logical_xor(self: Tensor, other: Any) -> Tensor:
        return self.bool()._logic("logical_xor", "xor", _as_bool(other))

    def logical_not(self: Tensor) -> Tensor:
        return self.bool()._unary("not")

    def __and__(self: Tensor, other: Any) -> Tensor:
        return self._logic("and", "and", other)

    def __or__(self: Tensor, other: Any) -> Tensor:
        return self._logic("or", "or", other)

    def __xor__(self: Tensor, other: Any) -> Tensor:
        return self._logic("xor", "xor", other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    def __invert__(self: Tensor) -> Tensor:
        if self.dtype.is_float:
            raise DTypeError("invert (~): needs bool or integer operands", where=user_source())
        return self._unary("not")

    def where(self: Tensor, a: Any, b: Any) -> Tensor:
        """``a`` where this (bool) tensor is true, else ``b``; all three broadcast."""
        cond = self if self.dtype == DType.bool else self.bool()
        t = type(self)
        if not isinstance(a, t) and not isinstance(b, t):
            a = t.full((), a, _scalar_dtype(a, b))
        if isinstance(a, t):
            (x, y), dt, _ = a._operands("where", (b,))
        else:
            (y, x), dt, _ = b._operands("where", (a,))
        shape = _bshape(cond, x, y)
        ops = [cond.broadcast_to(shape)] + [v.broadcast_to(shape) if isinstance(v, t) else v for v in (x, y)]
        return t._ew("where", ops, shape, dt)


def _as_bool(v: Any) -> Any:
    return v.bool() if hasattr(v, "bool") and not isinstance(v, (int, float)) else bool(v)


def _scalar_dtype(a: Any, b: Any) -> DType:
    if isinstance(a, float) or isinstance(b, float):
        return DType.float32
    if isinstance(a, bool) and isinstance(b, bool):
        return DType.bool
    return DType.int64


def _bshape(*ts: Any) -> tuple:
    return broadcast_shapes("where", *(t.shape for t in ts if hasattr(t, "shape")), where=user_source)


def _pow_float(x: Tensor, e: Tensor | float) -> Tensor:
    """``x ** e`` for a float ``x`` through exp2/log2, with the sign rules of torch.pow."""
    mag = (e * x.abs().log2()).exp2()
    if isinstance(e, float):
        return (x < 0).where(math.nan, mag) if not e.is_integer() else mag
    e_int = e.trunc() == e
    odd = (e.abs() % 2) == 1
    neg = (x < 0).where(e_int.where(odd.where(-mag, mag), math.nan), mag)
    return (e == 0).where(1.0, neg)
