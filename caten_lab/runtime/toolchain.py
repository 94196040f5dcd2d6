"""The system C compiler: discovery, flags, and a disk cache of compiled libraries.

- ``$CC`` (default ``cc``) is probed once per process: its version line goes into every cache key.
- ``-fopenmp`` is used when a tiny OpenMP program compiles and links (probed once, remembered on disk).
- ``-march=native`` is used only when the CPU can be identified (``/proc/cpuinfo`` model name and
  flags, hashed into the cache key), so a cached library never runs on a CPU lacking its instructions.
- Libraries are cached in ``config().cache_dir`` under hash(source + flags + compiler version + cpu id)
  and written atomically (temp file + ``os.replace``): two processes compiling the same program both
  succeed and the cache never holds a half-written file.
- A big multi-kernel source is compiled as one translation unit per CPU (up to 8) in parallel and
  linked (``parallel_build``); the cache key and the cached ``.c`` are those of the one-file build.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from caten_lab.errors import CompileError
from caten_lab.runtime.parallel_build import compile_parts, kernel_spans, part_count, split_source

BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-std=gnu11", "-fwrapv", "-fno-math-errno"]


@dataclass(frozen=True)
class Toolchain:
    cc: tuple[str, ...]
    version: str
    flags: tuple[str, ...]
    openmp: bool
    cpu_id: str

    @property
    def identity(self) -> str:
        return f"{' '.join(self.cc)}|{self.version}|{' '.join(self.flags)}|{self.cpu_id}"


def cpu_id() -> str:
    """A hash of the CPU model and feature flags, or '' when they cannot be read."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return ""
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = re.search(r"^(?:flags|Features)\s*:\s*(.*)$", text, re.M)
    if not flags:
        return ""
    raw = (model.group(1) if model else "") + "|" + " ".join(sorted(flags.group(1).split()))
    return hashlib.blake2b(raw.encode(), digest_size=8).hexdigest()


_TOOLCHAINS: dict[tuple[str, str], Toolchain] = {}


def _run(cmd: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _missing(cc: str, exc: BaseException) -> CompileError:
    return CompileError(
        f"C compiler {cc!r} could not be run: {exc}",
        hint="install gcc or clang, set CC=/path/to/compiler, or use backend='numpy' (CATEN_BACKEND=numpy)",
    )


def _probe(cc: list[str], flags: list[str], code: str) -> bool:
    with tempfile.TemporaryDirectory(prefix="caten_probe_") as d:
        src = Path(d) / "probe.c"
        src.write_text(code)
        try:
            r = _run([*cc, *flags, "-o", str(Path(d) / "probe.so"), str(src)], timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return r.returncode == 0


_OMP_PROBE = "#include <omp.h>\nint caten_probe(void){int s=0;\n#pragma omp parallel for reduction(+:s)\nfor(int i=0;i<8;i++) s+=i;\nreturn s+omp_get_max_threads();}\n"
_PLAIN_PROBE = "int caten_probe(int x){return x+1;}\n"


def toolchain(cc: str, cache_dir: Path) -> Toolchain:
    """Probe ``cc`` (once per process; OpenMP/-march results are remembered in ``cache_dir``)."""
    key = (cc, str(cache_dir))
    hit = _TOOLCHAINS.get(key)
    if hit is not None:
        return hit
    cmd = shlex.split(cc)
    if not cmd:
        raise _missing(cc, ValueError("empty command"))
    try:
        r = _run([*cmd, "--version"], timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        raise _missing(cc, exc) from None
    if r.returncode != 0:
        raise _missing(cc, RuntimeError((r.stderr or r.stdout).strip()[:500]))
    version = (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr).strip() else "unknown"
    cpu = cpu_id()
    probe_file = cache_dir / "toolchains.json"
    pkey = hashlib.blake2b(f"{cc}|{version}|{cpu}".encode(), digest_size=8).hexdigest()
    known: dict = {}
    try:
        known = json.loads(probe_file.read_text())
    except (OSError, ValueError):
        known = {}
    info = known.get(pkey)
    if info is None:
        base = [*BASE_FLAGS]
        if not _probe(cmd, base, _PLAIN_PROBE):
            # maybe a flag is unsupported: fall back to the bare minimum
            base = ["-O2", "-fPIC", "-shared"]
            if not _probe(cmd, base, _PLAIN_PROBE):
                raise CompileError(f"C compiler {cc!r} ({version}) cannot build a shared library",
                                   hint="check the compiler installation, or use backend='numpy'")
        info = {"base": base, "openmp": _probe(cmd, [*base, "-fopenmp"], _OMP_PROBE),
                "simd": _probe(cmd, [*base, "-fopenmp-simd"], _PLAIN_PROBE),
                "native": bool(cpu) and _probe(cmd, [*base, "-march=native"], _PLAIN_PROBE)}
        known[pkey] = info
        _atomic_write(probe_file, json.dumps(known, indent=1).encode())
    flags = list(info["base"])
    if info["openmp"]:
        flags.append("-fopenmp")
    elif info["simd"]:
        flags.append("-fopenmp-simd")
    if info["native"]:
        flags.append("-march=native")
    tc = Toolchain(tuple(cmd), version, tuple(flags), bool(info["openmp"]), cpu if info["native"] else "")
    _TOOLCHAINS[key] = tc
    return tc


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def library_key(source: str, tc: Toolchain) -> str:
    return hashlib.blake2b((tc.identity + "\n" + source).encode(), digest_size=16).hexdigest()


@dataclass
class Built:
    path: Path
    cc_s: float
    cached: bool
    key: str


def _parts(source: str, tc: Toolchain) -> int:
    """Translation units for ``source``: >1 only for gcc/clang-like toolchains (OpenMP probe passed)."""
    if not tc.openmp or "-shared" not in tc.flags:
        return 1
    return part_count(kernel_spans(source.split("\n")))


def build_library(source: str, tc: Toolchain, cache_dir: Path) -> Built:
    """The shared library for ``source``: from the disk cache, or compiled now (atomically).

    A big multi-kernel source is compiled as several translation units in parallel and linked
    (``parallel_build``); the cache key and the cached ``.c`` (the full source) do not depend on that.
    """
    key = library_key(source, tc)
    path = cache_dir / f"caten_{key}.so"
    if path.exists():
        return Built(path, 0.0, True, key)
    cache_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp_c = tempfile.mkstemp(dir=cache_dir, prefix=".tmp_", suffix=".c")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    tmp_so = tmp_c[:-2] + ".so"
    t0 = time.perf_counter()
    try:
        parts = split_source(source, _parts(source, tc), tmp_c)
        try:
            if len(parts) > 1:
                status, output = compile_parts(tc.cc, tc.flags, parts, tmp_so, timeout=600)
            else:
                r = _run([*tc.cc, *tc.flags, "-o", tmp_so, tmp_c, "-lm"], timeout=600)
                status, output = r.returncode, r.stderr or r.stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise _missing(" ".join(tc.cc), exc) from None
        cc_s = time.perf_counter() - t0
        if status != 0:
            raise compile_failure(output, source, tc)
        os.replace(tmp_so, path)
        os.replace(tmp_c, cache_dir / f"caten_{key}.c")
    finally:
        for p in (tmp_c, tmp_so):
            if os.path.exists(p):
                with contextlib.suppress(OSError):
                    os.unlink(p)
    return Built(path, cc_s, False, key)


def compile_failure(message: str, source: str, tc: Toolchain) -> CompileError:
    """A CompileError quoting the compiler's message and the offending generated C lines."""
    lines = source.split("\n")
    shown: list[str] = []
    seen: set[int] = set()
    for m in re.finditer(r":(\d+):(?:\d+:)?\s*(?:fatal )?error", message):
        ln = int(m.group(1))
        for i in range(max(1, ln - 1), min(len(lines), ln + 1) + 1):
            if i not in seen:
                seen.add(i)
                shown.append(f"{i:5d}{'>' if i == ln else ' '} {lines[i - 1]}")
        if len(seen) > 30:
            break
    msg = message.strip()
    if len(msg) > 4000:
        msg = msg[:4000] + "\n..."
    text = f"the C compiler failed ({' '.join(tc.cc)}):\n{msg}"
    if shown:
        text += "\noffending generated C lines:\n" + "\n".join(shown)
    err = CompileError(text, hint="this is a caten_lab code generation bug unless you edited the C; "
                                  "backend='numpy' runs the program without a C compiler")
    err.c_lines = shown  # type: ignore[attr-defined]
    err.compiler_output = message  # type: ignore[attr-defined]
    return err
