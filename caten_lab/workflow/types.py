"""The type vocabulary of @action functions.

Actions are ordinary Python functions annotated with these types, so they also run unchanged as
plain Python (on ints, floats and NumPy arrays): that is the interpreted mode tests compare against
the compiled one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from caten_lab.air.dtypes import DType


@dataclass(frozen=True, slots=True)
class ScalarType:
    """A scalar element type of the action language; ``dtype`` is its element type in the one dtype
    system of the project (:class:`~caten_lab.air.dtypes.DType`), the only type the kernel IR carries."""

    name: str
    dtype: DType
    is_float: bool
    bits: int

    @property
    def c_name(self) -> str:
        return self.dtype.c_name

    @property
    def np_dtype(self) -> str:
        return self.dtype.np.name

    def __repr__(self) -> str:
        return self.name

    def __call__(self, x: object) -> object:  # lets `i32(x)` be a cast in interpreted mode
        return np.dtype(self.np_dtype).type(x).item()


i32 = ScalarType("i32", DType.int32, False, 32)
i64 = ScalarType("i64", DType.int64, False, 64)
u8 = ScalarType("u8", DType.uint8, False, 8)
f32 = ScalarType("f32", DType.float32, True, 32)
f64 = ScalarType("f64", DType.float64, True, 64)
boolean = ScalarType("boolean", DType.bool, False, 1)

SCALARS: dict[str, ScalarType] = {t.name: t for t in (i32, i64, u8, f32, f64, boolean)}


@dataclass(frozen=True, slots=True)
class ArrayType:
    """A typed array argument; ``dims`` entries are ints or symbolic names bound at call time."""

    dtype: ScalarType
    dims: tuple[int | str, ...]

    def __repr__(self) -> str:
        return f"Array[{self.dtype}, {self.dims}]"


LOCAL_MAX_BYTES = 1 << 30
"""The largest ``Local(...)`` array an action may declare (1 GiB): larger sizes are refused when the
action is defined. Locals above 64 KiB live on the heap in compiled mode (to_kir.LOCAL_STACK_LIMIT)."""


@dataclass(frozen=True, slots=True)
class LocalType:
    """A fixed-size array local to an action (C stack storage, or the heap when large)."""

    dtype: ScalarType
    dims: tuple[int, ...]

    def __repr__(self) -> str:
        return f"Local[{self.dtype}, {self.dims}]"


def _dims(d: object) -> tuple:
    if isinstance(d, (int, str)):
        return (d,)
    return tuple(d)  # type: ignore[arg-type]


class _ArrayFactory:
    def __getitem__(self, item: tuple) -> ArrayType:
        dtype, dims = item
        return ArrayType(dtype, _dims(dims))


class _LocalFactory:
    def __getitem__(self, item: tuple) -> LocalType:
        dtype, dims = item
        return LocalType(dtype, tuple(int(x) for x in _dims(dims)))

    def __call__(self, dtype: ScalarType, dims: object) -> np.ndarray:
        """Interpreted mode: ``buf = Local(i32, 16)`` makes a zeroed NumPy array."""
        return np.zeros(_dims(dims), dtype=dtype.np_dtype)


Array = _ArrayFactory()
Local = _LocalFactory()
