"""Element types of AIR values, with their NumPy and C spellings."""

from __future__ import annotations

from enum import Enum

import numpy as np


class DType(Enum):
    """An element type. The value is the canonical lower-case name used in JSON and dumps."""

    bool = "bool"
    int8 = "int8"
    uint8 = "uint8"
    int32 = "int32"
    uint32 = "uint32"
    int64 = "int64"
    float16 = "float16"
    float32 = "float32"
    float64 = "float64"

    @property
    def np(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _NUMPY[self].itemsize

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_int(self) -> bool:
        return self in _INTS

    @property
    def is_unsigned(self) -> bool:
        return self in (DType.uint8, DType.uint32)

    @property
    def c_name(self) -> str:
        return _C_NAMES[self]

    def __repr__(self) -> str:
        return f"dtypes.{self.value}"

    def __str__(self) -> str:
        return self.value


_NUMPY = {
    DType.bool: np.dtype(np.bool_),
    DType.int8: np.dtype(np.int8),
    DType.uint8: np.dtype(np.uint8),
    DType.int32: np.dtype(np.int32),
    DType.uint32: np.dtype(np.uint32),
    DType.int64: np.dtype(np.int64),
    DType.float16: np.dtype(np.float16),
    DType.float32: np.dtype(np.float32),
    DType.float64: np.dtype(np.float64),
}
_FLOATS = frozenset({DType.float16, DType.float32, DType.float64})
_INTS = frozenset({DType.int8, DType.uint8, DType.int32, DType.uint32, DType.int64})
_C_NAMES = {
    DType.bool: "_Bool",
    DType.int8: "int8_t",
    DType.uint8: "uint8_t",
    DType.int32: "int32_t",
    DType.uint32: "uint32_t",
    DType.int64: "int64_t",
    DType.float16: "_Float16",
    DType.float32: "float",
    DType.float64: "double",
}

_BY_NAME = {d.value: d for d in DType}
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}


def to_dtype(x: object) -> DType:
    """Accept a DType, its name, or a NumPy dtype; raise ValueError otherwise."""
    if isinstance(x, DType):
        return x
    if isinstance(x, str) and x in _BY_NAME:
        return _BY_NAME[x]
    try:
        return _BY_NUMPY[np.dtype(x)]  # type: ignore[call-overload]
    except (TypeError, KeyError) as exc:
        raise ValueError(f"unknown dtype {x!r}; accepted: {', '.join(_BY_NAME)}") from exc


class dtypes:  # noqa: N801 - a namespace mirroring torch.float32 style access
    """Shorthand namespace: ``dtypes.float32`` etc."""

    bool = DType.bool
    int8 = DType.int8
    uint8 = DType.uint8
    int32 = DType.int32
    uint32 = DType.uint32
    int64 = DType.int64
    float16 = DType.float16
    float32 = DType.float32
    float64 = DType.float64
