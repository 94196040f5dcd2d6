"""Division semantics on lazy Tensors beyond the AIR primitives: Python/NumPy/torch floor division
and remainder on floats, including their special cases for infinite and NaN operands.

AIR's ``idiv``/``mod`` are integer-only and truncate (as C does); float ``//`` and ``%`` are built here
from ``a / b`` and ``floor``, then patched where that formula disagrees with NumPy and torch:
``inf // b`` is NaN, a finite ``a // inf`` is 0 or -1 and ``a % inf`` is ``a`` or ``inf``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from caten_lab.frontend.tensor import Tensor


def is_negative(b: Any) -> Any:
    return b < 0 if not isinstance(b, (int, float, bool)) else (b < 0)


def is_inf(v: Any) -> Any:
    return math.isinf(v) if isinstance(v, float) else v.abs() == math.inf


def is_finite(v: Any) -> Any:
    return math.isfinite(v) if isinstance(v, float) else (v - v) == 0  # inf - inf and NaN are NaN


def signs_differ(a: Tensor, b: Any) -> Tensor:
    """a and b have opposite signs (a nonzero): where floor division rounds down past zero."""
    return (a != 0).logical_and((a < 0).logical_xor(is_negative(b)))


def float_floordiv(a: Tensor, b: Any) -> Tensor:
    """floor(a / b) with NumPy/torch's special cases: inf // b is NaN (b != 0); finite a // inf is 0, or -1
    when the signs differ (as Python's ``-5.0 // inf``)."""
    q = (a / b).floor()
    q = is_inf(a).logical_and(b != 0).where(math.nan, q)  # (inf // 0 stays inf, as in NumPy)
    inf_b = is_inf(b)
    if isinstance(inf_b, bool) and not inf_b:
        return q
    past = signs_differ(a, b).logical_and(is_finite(a))
    return (past.logical_and(inf_b) if not isinstance(inf_b, bool) else past).where(-1.0, q)


def float_mod(a: Tensor, b: Any) -> Tensor:
    """a - floor(a / b) * b with the sign of b; a finite a mod inf is a, or b when the signs differ."""
    r = a - (a / b).floor() * b
    inf_b = is_inf(b)
    if isinstance(inf_b, bool) and not inf_b:
        return r
    special = signs_differ(a, b).where(b, a)
    hit = is_finite(a) if isinstance(inf_b, bool) else is_finite(a).logical_and(inf_b)
    return hit.where(special, r)
