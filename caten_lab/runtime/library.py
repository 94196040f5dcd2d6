"""Load a compiled program through cffi (ABI mode) and run it over NumPy-owned buffers.

Every generated library exports the same two functions, so one FFI instance serves them all:
``caten_run(void **buffers, const int64_t *symbols, int64_t *err)`` (one call per program run)
and ``caten_set_threads(int)``.
"""

from __future__ import annotations

import threading
from pathlib import Path

import cffi
import numpy as np

FFI = cffi.FFI()
FFI.cdef(
    """
    void caten_run(void **b, const int64_t *sym, int64_t *err);
    void caten_run_profile(void **b, const int64_t *sym, int64_t *err, double *prof);
    void caten_set_threads(int n);
    """
)

_LOADED: dict[str, object] = {}
_LOCK = threading.Lock()


def profile_pointer(profile: np.ndarray) -> object:
    """The ``double *`` that ``caten_run_profile`` adds each kernel call's time into (``profile``: float64,
    one slot per kernel call)."""
    return FFI.cast("double *", FFI.from_buffer(profile))


class Library:
    """A loaded program library."""

    def __init__(self, path: Path) -> None:
        key = str(path)
        with _LOCK:
            lib = _LOADED.get(key)
            if lib is None:
                lib = FFI.dlopen(key)
                _LOADED[key] = lib
        self.lib = lib
        self.path = path
        self._threads = -1  # calls go through runtime/fastcall.py (the cached pointer table)

    def set_threads(self, n: int) -> None:
        if n != self._threads:
            self.lib.caten_set_threads(int(n))  # type: ignore[attr-defined]
            self._threads = n
