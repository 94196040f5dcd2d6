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
        self._threads = -1
        self._ptrs = None
        self._last: list = []
        self._keep: list = []

    def set_threads(self, n: int) -> None:
        if n != self._threads:
            self.lib.caten_set_threads(int(n))  # type: ignore[attr-defined]
            self._threads = n

    def run(self, arrays: list[np.ndarray], symbols: list[int], profile: np.ndarray | None = None) -> np.ndarray:
        """Call ``caten_run`` once over ``arrays`` (in the library's buffer order); returns the error record
        (err[0] != 0 on a violation). A compiled :class:`~caten_lab.compiler.Program` calls through
        runtime/fastcall.py instead; this is for a library built from a kernel-IR program by hand.

        With ``profile`` (a float64 array, one slot per kernel call), ``caten_run_profile`` adds each
        kernel call's wall time to its slot."""
        n = len(arrays)
        if self._ptrs is None or len(self._last) != n:
            self._ptrs = FFI.new("void *[]", max(1, n))
            self._last = [None] * n
            self._keep = [None] * n
        ptrs, last, keep = self._ptrs, self._last, self._keep
        for i, a in enumerate(arrays):
            if a is not last[i]:  # weights and workspaces keep their identity across calls: reuse the pointer
                buf = FFI.from_buffer(a)
                ptrs[i] = FFI.cast("void *", buf)
                last[i] = a
                keep[i] = buf
        sym = np.asarray(symbols if symbols else [0], dtype=np.int64)
        err = np.zeros(8, dtype=np.int64)
        sym_p = FFI.cast("const int64_t *", FFI.from_buffer(sym))
        err_p = FFI.cast("int64_t *", FFI.from_buffer(err))
        if profile is None:
            self.lib.caten_run(ptrs, sym_p, err_p)  # type: ignore[attr-defined]
        else:
            self.lib.caten_run_profile(ptrs, sym_p, err_p, profile_pointer(profile))  # type: ignore[attr-defined]
        return err
