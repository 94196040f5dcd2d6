"""Compile C files to objects and link them, with the toolchain's flags (an exported library's build).

``toolchain.build_library`` turns one generated source into a cached shared library. An exported
workflow (caten_lab/workflow/export.py) is several translation units written next to each other:
each is compiled here with exactly the flags of a runtime library (``Toolchain.flags`` without
``-shared``), as many at once as this process has CPUs, every object written atomically (a temp file
renamed into place); then the objects link into a shared library or a program. A failure is the
toolchain's :func:`~caten_lab.runtime.toolchain.compile_failure`: the compiler's message and the
offending lines of the unit.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from caten_lab.config import config
from caten_lab.errors import CompileError
from caten_lab.runtime.parallel_build import cpu_count
from caten_lab.runtime.toolchain import Toolchain, compile_failure, toolchain

TIMEOUT_S = 900.0


def current_toolchain() -> Toolchain:
    """The toolchain of ``config()`` (the compiler and cache directory every runtime build uses)."""
    cfg = config()
    return toolchain(cfg.cc, cfg.cache_dir)


def object_flags(tc: Toolchain) -> list[str]:
    """The runtime's compile flags for one object file (``-shared`` belongs to the link)."""
    return [f for f in tc.flags if f != "-shared"]


def _run(cmd: list[str], what: str) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CompileError(
            f"building {what}: the C compiler could not be run: {exc}",
            hint="install gcc or clang, or set CC=/path/to/compiler",
        ) from None


def _compile_one(tc: Toolchain, source: Path, extra: Sequence[str]) -> float:
    obj = source.with_suffix(".o")
    tmp = source.with_name(f".{source.stem}.{os.getpid()}.o.tmp")
    t0 = time.perf_counter()
    r = _run([*tc.cc, *object_flags(tc), *extra, "-c", "-o", str(tmp), str(source)], source.name)
    try:
        if r.returncode != 0:
            raise compile_failure(r.stderr or r.stdout, source.read_text(errors="replace"), tc)
        os.replace(tmp, obj)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return time.perf_counter() - t0


def compile_objects(tc: Toolchain, sources: Sequence[Path], extra: Sequence[str] = ()) -> dict[str, float]:
    """Compile every ``x.c`` of ``sources`` to ``x.o`` beside it (concurrently); seconds per source stem.

    ``extra`` flags (include directories, visibility) follow the runtime's own.
    """
    workers = max(1, min(cpu_count(), len(sources)))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        times = list(pool.map(lambda s: _compile_one(tc, s, extra), sources))
    return {s.stem: t for s, t in zip(sources, times, strict=True)}


def link(tc: Toolchain, inputs: Sequence[Path | str], out: Path, *, shared: bool,
         extra: Sequence[str] = ()) -> float:
    """Link ``inputs`` (objects, or C files to compile on the way) into ``out``, atomically; seconds.

    A shared library gets ``-shared`` (and ``-fopenmp`` when the runtime's kernels use OpenMP); a
    program gets ``extra`` only (its flags and libraries are the caller's).
    """
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    flags = ["-shared", *(["-fopenmp"] if "-fopenmp" in tc.flags else [])] if shared else []
    t0 = time.perf_counter()
    r = _run([*tc.cc, *flags, "-o", str(tmp), *map(str, inputs), *extra, *tc.libs], out.name)
    try:
        if r.returncode != 0:
            raise CompileError(
                f"linking {out.name} failed:\n{(r.stderr or r.stdout)[:4000]}",
                hint="this is a caten_lab export bug unless the C compiler or linker is broken",
            )
        os.replace(tmp, out)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return time.perf_counter() - t0
