"""Dtype promotion, PyTorch style: a higher category wins (bool < int < float); within a category the
wider type wins; a Python scalar only changes the result when its category is higher than the tensor's
(int tensor * 0.5 -> float32, float16 tensor * 2.0 -> float16). float64 never appears implicitly.
"""

from __future__ import annotations

from caten_lab.air.dtypes import DType

DEFAULT_FLOAT = DType.float32
DEFAULT_INT = DType.int64

_RANK = {
    DType.bool: 0,
    DType.uint8: 1,
    DType.int8: 2,
    DType.int32: 3,
    DType.uint32: 4,
    DType.int64: 5,
    DType.float16: 6,
    DType.float32: 7,
    DType.float64: 8,
}


def category(dt: DType) -> int:
    return 2 if dt.is_float else 1 if dt.is_int else 0


def scalar_category(v: object) -> int:
    return 0 if isinstance(v, bool) else 1 if isinstance(v, int) else 2


def promote(a: DType, b: DType) -> DType:
    if a == b:
        return a
    if {a, b} == {DType.uint32, DType.int32} or {a, b} == {DType.uint8, DType.int8}:
        return DType.int64 if DType.uint32 in (a, b) else DType.int32
    return a if _RANK[a] >= _RANK[b] else b


def promote_scalar(t: DType, v: object) -> DType:
    c = scalar_category(v)
    if c <= category(t):
        return t
    return DEFAULT_FLOAT if c == 2 else DEFAULT_INT


def literal(v: object, dt: DType) -> bool | int | float:
    """``v`` as the Python scalar kind matching ``dt`` (AIR literals carry no dtype of their own)."""
    if dt == DType.bool:
        return bool(v)
    if dt.is_int:  # two's complement wrap into the dtype, as C does (x_uint8 - 1 adds 255)
        bits = 8 * dt.np.itemsize
        n = int(v) % (1 << bits)
        return n - (1 << bits) if not dt.is_unsigned and n >= 1 << (bits - 1) else n
    return float(v)
