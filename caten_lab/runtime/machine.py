"""This machine's ceilings for the roofline: memory bandwidth (bytes/s) and peak float32 FLOP/s.

Measured once per CPU model + toolchain + thread count by the fixed C benchmark ``c/machine_bench.c``
(a STREAM triad over arrays larger than the caches, and independent multiply-adds on register-
resident data), built with the runtime's own compiler and flags; the result is kept as JSON in the
cache directory (``machine-<key>.json``), so later calls read it back in microseconds.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import platform
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from caten_lab.config import config
from caten_lab.errors import CompileError
from caten_lab.runtime.cache_files import atomic_write, cache_root
from caten_lab.runtime.toolchain import toolchain

BENCH_C = Path(__file__).with_name("c") / "machine_bench.c"
FORMAT = "caten_lab.machine"
VERSION = 1
TRIAD_ELEMENTS = 1 << 23  # 3 float arrays of 32 MiB: past the last-level cache of common CPUs
FLOP_ITERS = 1 << 19


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else ``platform.processor()``)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_key(tc: Any, threads: int) -> str:
    """The cache key: CPU model, the toolchain (compiler, version, flags, CPU features), threads."""
    raw = f"{cpu_model()}|{tc.identity}|{threads}|{VERSION}"
    return hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()


def _measure(tc: Any, threads: int) -> dict[str, float]:
    import cffi

    ffi = cffi.FFI()
    ffi.cdef(BENCH_C.with_suffix(".h").read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="caten_bench_") as d:
        so = Path(d) / "machine_bench.so"
        cmd = [*tc.cc, *tc.flags, "-o", str(so), str(BENCH_C)]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            raise CompileError(
                f"the machine benchmark did not compile: {(r.stderr or r.stdout).strip()[:400]}",
                hint="the roofline needs the C toolchain the programs are built with",
            )
        lib: Any = ffi.dlopen(str(so))
        lib.caten_bench_threads(int(threads))
        t0 = time.perf_counter()
        bw = float(lib.caten_bench_bandwidth(TRIAD_ELEMENTS, 4))
        peak = float(lib.caten_bench_flops(FLOP_ITERS, 3))
        return {"bandwidth": bw, "peak_flops": peak, "measured_s": time.perf_counter() - t0}


def machine_ceilings(cache_dir: Path | None = None, *, force: bool = False) -> dict[str, Any]:
    """``{"bandwidth": bytes/s, "peak_flops": FLOP/s, "cpu", "toolchain", "threads", "key", "cached",
    "measured_s"}``; measured on the first call for this CPU + toolchain + thread count, then read back."""
    cfg = config()
    cache_dir = Path(cache_dir if cache_dir is not None else cfg.cache_dir)
    tc = toolchain(cfg.cc, cache_dir)
    threads = int(cfg.threads if tc.openmp else 1)
    key = machine_key(tc, threads)
    path = cache_root(cache_dir) / f"machine-{key}.json"
    if not force:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            d = json.loads(path.read_text())
            if (
                d.get("format") == FORMAT
                and d.get("version") == VERSION
                and d["bandwidth"] > 0
                and d["peak_flops"] > 0
            ):
                return {**d, "cached": True}
    info = {
        "format": FORMAT,
        "version": VERSION,
        "key": key,
        "cpu": cpu_model(),
        "toolchain": tc.version,
        "flags": " ".join(tc.flags),
        "threads": threads,
        **_measure(tc, threads),
    }
    with contextlib.suppress(OSError):  # not remembered: measured again next time
        atomic_write(path, json.dumps(info, indent=1).encode())
    return {**info, "cached": False}
