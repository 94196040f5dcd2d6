"""Seeded random numbers from Threefry-2x32 (20 rounds), expressed in AIR ops on uint32.

A counter-based generator: element i gets ``threefry(key, (i, 0))``, so the numbers depend only on
the seed, the call number and the element index, never on the backend or the evaluation order.
Rotations are built from mul (x << r == x * 2**r, wrapping) and idiv (x >> s == x // 2**s).
"""

from __future__ import annotations

import math
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.shapes import numel
from caten_lab.frontend.creation import index
from caten_lab.frontend.promote import DEFAULT_FLOAT
from caten_lab.frontend.tensor import Tensor, as_dtype, norm_shape

_ROT = (13, 15, 26, 6, 17, 29, 16, 24)
_PARITY = 0x1BD11BDA
_MASK = 0xFFFFFFFF


class _State:
    seed = 0
    calls = 0


def manual_seed(seed: int) -> None:
    """Reset the generator: the same seed and the same sequence of calls give the same numbers."""
    _State.seed = int(seed) & _MASK
    _State.calls = 0


def _rotl(x: Tensor, r: int) -> Tensor:
    return (x * (1 << r)) | x._binary("shr", "idiv", 1 << (32 - r))


def threefry2x32(key: tuple[int, int], x0: Tensor, x1: Tensor) -> tuple[Tensor, Tensor]:
    """Threefry-2x32-20 of counters (x0, x1) (uint32 tensors) under a constant key."""
    ks = (key[0] & _MASK, key[1] & _MASK, (_PARITY ^ key[0] ^ key[1]) & _MASK)
    x0 = x0 + ks[0]
    x1 = x1 + ks[1]
    for r in range(20):
        x0 = x0 + x1
        x1 = _rotl(x1, _ROT[r % 8])
        x1 = x1 ^ x0
        if r % 4 == 3:
            s = r // 4 + 1
            x0 = x0 + ks[s % 3]
            x1 = x1 + ((ks[(s + 1) % 3] + s) & _MASK)
    return x0, x1


def _bits(shape: tuple) -> tuple[Tensor, Tensor]:
    key = (_State.seed, _State.calls)
    _State.calls += 1
    n = numel(shape)
    ctr = index((n,), 0, DType.uint32)
    zero = Tensor.full((n,), 0, DType.uint32)
    a, b = threefry2x32(key, ctr, zero)
    return a.reshape(*shape), b.reshape(*shape)


def _uniform01(bits: Tensor) -> Tensor:
    """The top 24 bits as a float in [0, 1): exact in float32."""
    return bits._binary("shr", "idiv", 1 << 8).cast(DType.float32) * (1.0 / (1 << 24))


def rand(*shape: Any, dtype: Any = DEFAULT_FLOAT) -> Tensor:
    """Uniform numbers in [0, 1)."""
    shape = norm_shape(shape, "rand")
    a, _ = _bits(shape)
    return _uniform01(a).cast(as_dtype(dtype, "rand"))


def randn(*shape: Any, dtype: Any = DEFAULT_FLOAT) -> Tensor:
    """Standard normal numbers (Box-Muller on two uniforms)."""
    shape = norm_shape(shape, "randn")
    a, b = _bits(shape)
    u1 = 1.0 - _uniform01(a)  # (0, 1]: log is finite
    u2 = _uniform01(b)
    z = (u1.log() * -2.0).sqrt() * (u2 * (2 * math.pi)).cos()
    return z.cast(as_dtype(dtype, "randn"))


def randint(low: int, high: int, shape: tuple, dtype: Any = DType.int64) -> Tensor:
    u = rand(*shape)
    return (u * (high - low)).floor().cast(as_dtype(dtype, "randint")) + low
