"""Arrays that start on a cache line: what the runtime allocates for the kernels, and what the layers above
allocate for the buffers they own (parameters, optimizer moments).

NumPy places a large array 16 bytes past a 64-byte boundary (its allocator's header), so every AVX-512 load
and store of it straddles two cache lines; the generated kernels stream their operands 64 bytes at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALIGN = 64  # bytes: a cache line, and one AVX-512 vector


def _aligned(shape: tuple, dtype: Any, alloc: Any) -> np.ndarray:
    dt = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = alloc(nbytes + ALIGN, dtype=np.uint8)
    skip = -raw.ctypes.data % ALIGN
    return raw[skip:skip + nbytes].view(dt).reshape(shape)


def aligned_empty(shape: tuple, dtype: Any) -> np.ndarray:
    """``np.empty(shape, dtype)`` whose first element sits on an ALIGN-byte boundary."""
    return _aligned(shape, dtype, np.empty)


def aligned_zeros(shape: tuple, dtype: Any) -> np.ndarray:
    """``np.zeros`` on an ALIGN-byte boundary. Zeroed by calloc: a large one takes fresh pages that the OS
    zeroes when first touched (a KV cache costs nothing until its positions are written)."""
    return _aligned(shape, dtype, np.zeros)


def aligned_copy(values: Any, dtype: Any) -> np.ndarray:
    """A C-contiguous, aligned copy of ``values`` as ``dtype``."""
    src = np.asarray(values)
    out = aligned_empty(tuple(src.shape), dtype)
    out[...] = src
    return out
