"""The system C compiler: discovery, flags, and a disk cache of compiled libraries.

- ``$CC`` (default ``cc``) is probed once per process: its version line goes into every cache key.
- ``-fopenmp`` is used when a tiny OpenMP program compiles and links (probed once, remembered on disk).
- ``-march=native`` is used only when the CPU can be identified (``/proc/cpuinfo`` model name and
  flags, hashed into the cache key), so a cached library never runs on a CPU lacking its instructions.
- Libraries are cached in ``config().cache_dir`` under hash(source + flags + compiler version + cpu id)
  and written atomically (temp file + ``os.replace``): two processes compiling the same program both
  succeed and the cache never holds a half-written file.
- Every library has a sidecar ``caten_<key>.so.sha256`` (its SHA-256 and size, written before the
  library is renamed into place). A cache hit reads the library once, checks it against the sidecar
  and hands back a private copy of exactly the bytes it checked (``Built.load_path``, one per content
  per process): a truncated or overwritten library is discarded and rebuilt with a
  :class:`~caten_lab.runtime.cache_files.CacheWarning`, and nothing that failed the check is ever
  loaded. ``toolchains.json`` is checked the same way (a digest of its entries and the known flags).
- A big multi-kernel source is compiled as one translation unit per CPU (up to 8) in parallel and
  linked, composed from the renderer's units (``parallel_build``); the cache key and the cached ``.c``
  are those of the one-file build.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from caten_lab.errors import CompileError
from caten_lab.runtime.cache_files import (
    atomic_write,
    bad_entry,
    cache_root,
    cache_write_error,
    digest,
    publish,
    read_entry,
)
from caten_lab.runtime.parallel_build import compile_parts, compose_parts, part_count, place_units

BASE_FLAGS = ["-O3", "-fPIC", "-shared", "-pthread", "-std=gnu11", "-fwrapv", "-fno-math-errno",
              "-Werror=implicit-function-declaration"]  # a missing helper fails the compile, not the load
MINIMAL_FLAGS = ["-O2", "-fPIC", "-shared"]  # when a base flag is not supported
PROBES_FORMAT = "caten_lab.toolchains"
PROBES_VERSION = 3


@dataclass(frozen=True)
class Toolchain:
    cc: tuple[str, ...]
    version: str
    flags: tuple[str, ...]
    openmp: bool
    cpu_id: str
    libs: tuple[str, ...] = ("-lm",)  # what every link ends with (libmvec first when the probe found it)

    @property
    def identity(self) -> str:
        return f"{' '.join(self.cc)}|{self.version}|{' '.join(self.flags)}|{' '.join(self.libs)}|{self.cpu_id}"


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


def _probe(cc: list[str], flags: list[str], code: str, libs: tuple[str, ...] = ()) -> bool:
    with tempfile.TemporaryDirectory(prefix="caten_probe_") as d:
        src = Path(d) / "probe.c"
        src.write_text(code)
        try:
            r = _run([*cc, *flags, "-o", str(Path(d) / "probe.so"), str(src), *libs], timeout=60)
        except (OSError, subprocess.SubprocessError):
            return False
        return r.returncode == 0


_OMP_PROBE = "#include <omp.h>\nint caten_probe(void){int s=0;\n#pragma omp parallel for reduction(+:s)\nfor(int i=0;i<8;i++) s+=i;\nreturn s+omp_get_max_threads();}\n"
_PLAIN_PROBE = "int caten_probe(int x){return x+1;}\n"
# glibc's vector math library: a loop calling exp2f vectorizes with its SIMD variants (codegen/c/runtime.h
# declares them under CL_MVEC); without -ffast-math, math.h does not declare them itself
_MVEC_PROBE = ("#include <math.h>\n#pragma omp declare simd notinbranch\nfloat exp2f(float);\n"
               "void caten_probe(float *restrict o, const float *restrict x, int n)"
               "{for(int i=0;i<n;i++) o[i]=exp2f(x[i]);}\n")
MVEC_LIBS = ("-lmvec", "-lm")


def forget_toolchains() -> None:
    """Drop this process's probe results (the next ``toolchain`` call reads ``toolchains.json`` again)."""
    _TOOLCHAINS.clear()


def toolchain(cc: str, cache_dir: Path) -> Toolchain:
    """Probe ``cc`` (once per process; OpenMP/-march results are remembered in ``cache_dir``)."""
    key = (cc, str(cache_dir))
    hit = _TOOLCHAINS.get(key)
    if hit is not None:
        return hit
    cache_dir = cache_root(cache_dir)
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
    known = read_probes(probe_file)
    info = known.get(pkey)
    if info is None:
        base = [*BASE_FLAGS]
        if not _probe(cmd, base, _PLAIN_PROBE):
            # maybe a flag is unsupported: fall back to the bare minimum
            base = [*MINIMAL_FLAGS]
            if not _probe(cmd, base, _PLAIN_PROBE):
                raise CompileError(f"C compiler {cc!r} ({version}) cannot build a shared library",
                                   hint="check the compiler installation, or use backend='numpy'")
        info = {"base": base, "openmp": _probe(cmd, [*base, "-fopenmp"], _OMP_PROBE),
                "simd": _probe(cmd, [*base, "-fopenmp-simd"], _PLAIN_PROBE),
                "native": bool(cpu) and _probe(cmd, [*base, "-march=native"], _PLAIN_PROBE)}
        simd_flag = "-fopenmp" if info["openmp"] else "-fopenmp-simd" if info["simd"] else None
        info["mvec"] = simd_flag is not None and _probe(cmd, [*base, simd_flag], _MVEC_PROBE, MVEC_LIBS)
        known[pkey] = info
        with contextlib.suppress(OSError):  # not remembered: probed again next time
            atomic_write(probe_file, probes_json(known))
    flags = list(info["base"])
    if info["openmp"]:
        flags.append("-fopenmp")
    elif info["simd"]:
        flags.append("-fopenmp-simd")
    if info["native"]:
        flags.append("-march=native")
    if info["mvec"]:
        flags.append("-DCL_MVEC")
    tc = Toolchain(tuple(cmd), version, tuple(flags), bool(info["openmp"]), cpu if info["native"] else "",
                   MVEC_LIBS if info["mvec"] else ("-lm",))
    _TOOLCHAINS[key] = tc
    return tc


def _entries_digest(entries: dict) -> str:
    return digest(json.dumps(entries, sort_keys=True).encode())


def probes_json(entries: dict) -> bytes:
    """``toolchains.json``: the probe results per (cc, version, cpu) and a digest of them."""
    return json.dumps({"format": PROBES_FORMAT, "version": PROBES_VERSION, "entries": entries,
                       "sha256": _entries_digest(entries)}, indent=1).encode()


def _valid_probe(info: object) -> bool:
    return (isinstance(info, dict) and set(info) == {"base", "openmp", "simd", "native", "mvec"}
            and info["base"] in (BASE_FLAGS, MINIMAL_FLAGS)
            and all(type(info[k]) is bool for k in ("openmp", "simd", "native", "mvec")))


def read_probes(path: Path) -> dict:
    """The remembered probe results; {} when there are none. A file that fails its digest or holds
    anything but the known flag sets is discarded with a warning (its compiler flags are not used)."""
    try:
        raw = path.read_bytes()
    except OSError:
        return {}
    try:
        obj = json.loads(raw)
        if isinstance(obj, dict) and "format" not in obj:
            return {}  # the unversioned layout of older versions: probe again, quietly
        if not isinstance(obj, dict) or obj.get("format") != PROBES_FORMAT:
            raise ValueError("not a toolchains file")
        if obj.get("version") != PROBES_VERSION:
            return {}  # an older layout: probe again, quietly
        entries = obj.get("entries")
        if not isinstance(entries, dict) or obj.get("sha256") != _entries_digest(entries):
            raise ValueError("content does not match its SHA-256")
        if not all(_valid_probe(v) for v in entries.values()):
            raise ValueError("unknown compiler flags")
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        bad_entry(path, str(exc))
        with contextlib.suppress(OSError):
            path.unlink()
        return {}
    return entries


def library_key(source: str, tc: Toolchain) -> str:
    return hashlib.blake2b((tc.identity + "\n" + source).encode(), digest_size=16).hexdigest()


@dataclass
class Built:
    path: Path  # the library in the cache (its C source is beside it, ``.c`` for ``.so``)
    cc_s: float
    cached: bool
    key: str
    load_path: Path | None = None  # a private copy of the verified bytes: dlopen this one
    sha256: str = ""


def _parts(source: str, units: Sequence[tuple[str, str]] | None, tc: Toolchain, filename: str) -> list[str]:
    """The translation units to compile ``source`` as: [] for one compiler call on the whole file.

    Several only for gcc/clang-like toolchains (OpenMP probe passed) and a big multi-kernel source
    whose renderer units tile it (``parallel_build``).
    """
    if not units or not tc.openmp or "-shared" not in tc.flags:
        return []
    placed = place_units(source, units)
    return compose_parts(placed, part_count(placed), filename) if placed else []


def sidecar(path: Path) -> Path:
    """``caten_<key>.so.sha256``: the library's SHA-256 and size."""
    return path.with_name(path.name + ".sha256")


def _verified(path: Path) -> bytes | None:
    """The library's bytes when they match its sidecar; None when there is no entry. A damaged entry
    (or one without a sidecar) is deleted, with a warning when there was evidence of damage."""
    if not path.exists():
        return None
    data = read_entry(path)
    if data is not None:
        try:
            want = sidecar(path).read_text().split()
        except FileNotFoundError:
            want = None  # an entry of an older version, or a writer that died in between: rebuild quietly
        except (OSError, UnicodeDecodeError) as exc:
            want = ["?", str(exc)]
        if want is not None:
            if len(want) == 2 and want[0] == digest(data) and want[1] == str(len(data)):
                return data
            bad_entry(path, f"{len(data)} bytes that do not match {sidecar(path).name}")
    for p in (path, sidecar(path)):
        with contextlib.suppress(OSError):
            p.unlink()
    return None


_LOADABLE: dict[str, Path] = {}  # sha256 -> this process's private copy of those bytes
_LOAD_DIRS: dict[str, Path] = {}  # cache dir -> this process's directory of copies (removed at exit)
_LOADABLE_LOCK = threading.Lock()


def _loadable(cache_dir: Path, data: bytes, sha: str) -> Path:
    """A private file holding exactly ``data`` (made once per content and process, in one directory
    per process under the cache dir, removed at exit): what is dlopened can never be a file that
    changed after it was checked."""
    with _LOADABLE_LOCK:
        hit = _LOADABLE.get(sha)
        if hit is not None and hit.exists():
            return hit
        try:
            d = _LOAD_DIRS.get(str(cache_dir))
            if d is None or not d.is_dir():
                if not _LOAD_DIRS:
                    atexit.register(_remove_loadable)
                d = _LOAD_DIRS[str(cache_dir)] = Path(tempfile.mkdtemp(dir=cache_dir, prefix=".tmp_load_"))
            path = d / f"{sha}.so"
            with open(path, "wb") as f:
                f.write(data)
        except OSError as exc:
            raise cache_write_error(cache_dir, exc) from None
        _LOADABLE[sha] = path
        return path


def _remove_loadable() -> None:
    for d in _LOAD_DIRS.values():
        shutil.rmtree(d, ignore_errors=True)


def build_library(source: str, tc: Toolchain, cache_dir: Path, *, force: bool = False,
                  units: Sequence[tuple[str, str]] | None = None) -> Built:
    """The shared library for ``source``: from the disk cache (verified), or compiled now (atomically).

    ``force`` discards a cached library first. ``units`` are the renderer's (name, text) parts of
    ``source`` (``Rendered.units``): a big multi-kernel source is then compiled as several translation
    units in parallel and linked (``parallel_build``); the cache key and the cached ``.c`` (the full
    source) do not depend on that.
    """
    cache_dir = cache_root(cache_dir)
    key = library_key(source, tc)
    path = cache_dir / f"caten_{key}.so"
    if force:
        for p in (path, sidecar(path)):
            with contextlib.suppress(OSError):
                p.unlink()
    data = _verified(path)
    if data is not None:
        sha = digest(data)
        return Built(path, 0.0, True, key, _loadable(cache_dir, data, sha), sha)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        fd, tmp_c = tempfile.mkstemp(dir=cache_dir, prefix=".tmp_", suffix=".c")
        with os.fdopen(fd, "w") as f:
            f.write(source)
    except OSError as exc:
        raise cache_write_error(cache_dir, exc) from None
    tmp_so = tmp_c[:-2] + ".so"
    tmp_sum = tmp_c[:-2] + ".sha256"
    t0 = time.perf_counter()
    try:
        parts = _parts(source, units, tc, tmp_c)
        try:
            if parts:
                status, output = compile_parts(tc.cc, tc.flags, parts, tmp_so, timeout=600, libs=tc.libs)
            else:
                r = _run([*tc.cc, *tc.flags, "-o", tmp_so, tmp_c, *tc.libs], timeout=600)
                status, output = r.returncode, r.stderr or r.stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise _missing(" ".join(tc.cc), exc) from None
        cc_s = time.perf_counter() - t0
        if status != 0:
            if os.strerror(errno.ENOSPC) in (output or ""):  # the compiler could not write into the cache
                raise cache_write_error(cache_dir, OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
            raise compile_failure(output, source, tc)
        try:
            with open(tmp_so, "rb") as f:
                data = f.read()
            sha = digest(data)
            with open(tmp_sum, "w") as f:
                f.write(f"{sha} {len(data)}\n")
            # the sidecar first: a reader never sees a new library with an old sidecar from this writer
            publish(tmp_sum, sidecar(path))
            os.replace(tmp_so, path)  # the linker gave it the umask's executable mode
            publish(tmp_c, cache_dir / f"caten_{key}.c")
        except OSError as exc:
            raise cache_write_error(cache_dir, exc) from None
    finally:
        for p in (tmp_c, tmp_so, tmp_sum):
            if os.path.exists(p):
                with contextlib.suppress(OSError):
                    os.unlink(p)
    return Built(path, cc_s, False, key, _loadable(cache_dir, data, sha), sha)


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
