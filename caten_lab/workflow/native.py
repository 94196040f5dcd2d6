"""Compile an action to a shared library (through caten_lab.runtime's toolchain and disk cache) and
call it on NumPy arrays via cffi, with the same argument checks as interpreted mode."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cffi
import numpy as np

from caten_lab.config import config
from caten_lab.errors import CatenError, RuntimeCheckError
from caten_lab.runtime.toolchain import build_library, toolchain
from caten_lab.workflow.cgen import RenderedActions, render_c
from caten_lab.workflow.to_kir import ERR_COUNTER, ERR_DIV0, ERR_INDEX, ERR_MEMORY
from caten_lab.workflow.types import ArrayType


class NativeAction:
    """A compiled action: call it with the same arguments as the action itself."""

    def __init__(self, act: Any, rendered: RenderedActions, path: Path, safety: int, cc_s: float,
                 load_path: Path | None = None) -> None:
        self.action = act
        self.rendered = rendered
        self.path = path  # the library in the cache; ``load_path`` is the verified private copy loaded
        self.safety = safety
        self.cc_s = cc_s
        self.ffi = cffi.FFI()
        self.ffi.cdef(rendered.cdef)
        self.lib = self.ffi.dlopen(str(load_path or path))
        self.fn = getattr(self.lib, rendered.entry)
        self._err = np.zeros(4, dtype=np.int64)
        self._err_ptr = self.ffi.cast("int64_t *", self.ffi.from_buffer(self._err))
        self._ptr_types = [
            f"{t.dtype.c_name} *" if isinstance(t, ArrayType) else None for _, t in act.ir.params
        ]

    @property
    def c_source(self) -> str:
        return self.rendered.source

    @property
    def program(self) -> Any:
        """The kernel-IR program (:class:`caten_lab.codegen.kir.Program`) the C was rendered from."""
        return self.rendered.program

    def __repr__(self) -> str:
        return f"<compiled {self.action!r} from {self.path.name}>"

    def __call__(self, *args: Any) -> Any:
        self.action.bind(args)  # dtypes, ranks, fixed and symbolic dims
        ffi = self.ffi
        cargs: list[Any] = []
        keep: list[Any] = []
        for value, (name, _), ptr in zip(args, self.action.ir.params, self._ptr_types):
            if ptr is None:
                cargs.append(value.item() if isinstance(value, np.generic) else value)
                continue
            if not value.flags.c_contiguous:
                raise CatenError(
                    f"{self.action.ir.name}: argument {name!r} must be C-contiguous for the compiled action",
                    hint="pass np.ascontiguousarray(a)",
                )
            if value.size == 0:
                cargs.append(ffi.NULL)
            else:
                buf = ffi.from_buffer(value, require_writable=False)
                keep.append(buf)
                cargs.append(ffi.cast(ptr, buf))
            cargs.extend(int(d) for d in value.shape)
        err = self._err
        err[:] = 0
        result = self.fn(*cargs, self._err_ptr)
        if err[0]:
            raise self._error(err)
        return result

    def _error(self, err: np.ndarray) -> RuntimeCheckError:
        where = self.action.ir.where(int(err[1]))
        if err[0] == ERR_INDEX:
            return RuntimeCheckError(
                f"index {int(err[2])} out of bounds for a dimension of size {int(err[3])}",
                where=where,
                hint="check the loop bounds against len(a) / a.shape[k]",
            )
        if err[0] == ERR_DIV0:
            return RuntimeCheckError("division by zero", where=where)
        if err[0] == ERR_MEMORY:
            return RuntimeCheckError(
                f"out of memory: cannot allocate {int(err[2])} bytes for a Local array", where=where
            )
        if err[0] == ERR_COUNTER:
            return RuntimeCheckError(
                f"range() stop {int(err[2])} does not fit the loop's i32 counter (max {int(err[3])})",
                where=where,
                hint="count in i64: `for i in range(i64(0), n)`",
            )
        return RuntimeCheckError(f"run-time check failed (code {int(err[0])})", where=where)


def compile_action(act: Any, *, safety: int | None = None, cc: str | None = None) -> NativeAction:
    """Type-check, render C, compile (cached on disk by source hash) and load ``act``."""
    cfg = config()
    safety = cfg.safety if safety is None else safety
    _ = act.types  # type errors surface here, at the user's line
    rendered = render_c(act, safety=safety)
    if rendered.externs:
        names = ", ".join(sorted(e.removeprefix("host_") for e in rendered.externs))
        raise CatenError(
            f"{act.ir.name} calls host action(s) {names}, which only an exported library links",
            hint="run it interpreted (after set_host) or export the workflow",
        )
    tc = toolchain(cc or cfg.cc, cfg.cache_dir)
    built = build_library(rendered.source, tc, cfg.cache_dir)
    return NativeAction(act, rendered, built.path, safety, built.cc_s, built.load_path)
