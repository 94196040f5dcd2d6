"""The cache directory's files: where they go, how they are written, verified and swept.

Every cache writer (compiled libraries, compile results, toolchain probes, prepared weights) goes
through this module:

- :func:`cache_root` checks a cache directory once per process: it must be (or become) a writable
  directory. An unusable directory that the user named (``CATEN_CACHE_DIR`` or
  ``settings(cache_dir=...)``) is a :class:`CatenError` saying what to do; the *default* directory
  (``~/.cache/caten_lab``) falls back to a fresh temporary directory with one :class:`CacheWarning`,
  so a notebook on a read-only home still runs. The first use also sweeps temp files left by killed
  writers (older than :data:`STALE_S`) and pickles left by older versions (never unpickled).
- :func:`atomic_write` / :func:`publish`: a temp file in the same directory, chmod to the umask's
  file mode (``mkstemp`` would leave 0o600), then ``os.replace`` — readers never see a partial file.
- :func:`sealed` / :func:`unseal`: a one-line JSON header carrying the SHA-256 of the body, so a
  truncated or edited entry is detected on load (:func:`bad_entry` warns and the caller rebuilds).
- :func:`one_builder`: an advisory lock per entry key, so processes sharing the directory that miss the
  same entry build it once (the others wait, then load it).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from caten_lab.errors import CatenError

try:
    import fcntl
except ImportError:  # not POSIX: builds of the same entry by two processes are not serialized
    fcntl = None  # type: ignore[assignment]

STALE_S = 3600.0  # a temp file this old belongs to a writer that died (cc times out after 600 s)
# (prefix, suffix) of the names of temp files: a writer's, and the build locks
TEMP_NAMES = ((".tmp_", ""), (".artifacts_", ".tmp"), (".prepared_", ".tmp"), (".lock_", ""))
LOCK_WAIT_S = 900.0  # longest wait for another process's build of the same entry (then build it too)
LEGACY_NAMES = (("artifacts_", ".pkl"),)  # pickled compile results of older versions: never loaded


def _named(name: str, table: tuple[tuple[str, str], ...]) -> bool:
    return any(name.startswith(pre) and name.endswith(suf) and len(name) >= len(pre) + len(suf) for pre, suf in table)


class CacheWarning(CatenError, UserWarning):
    """A cache entry failed its check (and is rebuilt), or the cache directory fell back to a temp dir.

    It is a ``CatenError`` too: under ``warnings.simplefilter("error", CacheWarning)`` it raises."""


def default_cache_dir() -> Path:
    return Path.home() / ".cache" / "caten_lab"


_umask: int | None = None


def file_mode() -> int:
    """0o666 minus the process umask (0o644 under the usual 022), read once."""
    global _umask
    if _umask is None:
        try:
            with open("/proc/self/status") as f:
                line = next(ln for ln in f if ln.startswith("Umask:"))
            _umask = int(line.split()[1], 8)
        except (OSError, StopIteration, ValueError, IndexError):
            _umask = os.umask(0o022)
            os.umask(_umask)
    return 0o666 & ~_umask


_ROOTS: dict[str, Path] = {}


def _unusable(d: Path) -> str | None:
    """Why ``d`` cannot hold the cache, or None when it can (made if missing; a probe file is written)."""
    try:
        if d.exists() and not d.is_dir():
            return "it is a file, not a directory"
        d.mkdir(parents=True, exist_ok=True)
        if not d.is_dir():
            return "it is not a directory"
        if not os.access(d, os.W_OK | os.X_OK):
            return "it is not writable"
        fd, probe = tempfile.mkstemp(dir=d, prefix=".tmp_probe_")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def cache_root(cache_dir: Path) -> Path:
    """The directory to use for ``cache_dir`` (checked and swept once per process; see the module doc)."""
    key = str(cache_dir)
    hit = _ROOTS.get(key)
    if hit is not None:
        return hit
    d = Path(cache_dir)
    why = _unusable(d)
    if why is None:
        root = d
    elif d == default_cache_dir():
        root = Path(tempfile.mkdtemp(prefix="caten_cache_"))
        warnings.warn(CacheWarning(
            f"the default cache directory {d} cannot be used ({why}); compiled programs are cached in "
            f"{root} for this process only",
            hint="set CATEN_CACHE_DIR to a writable directory to keep the cache between runs"), stacklevel=3)
    else:
        raise CatenError(
            f"the cache directory {d} (CATEN_CACHE_DIR / settings(cache_dir=...)) cannot be used: {why}",
            hint="point CATEN_CACHE_DIR at a writable directory, or unset it to use ~/.cache/caten_lab")
    sweep(root)
    _ROOTS[key] = root
    return root


def cache_write_error(d: Path, exc: OSError) -> CatenError:
    """The error for a write into the cache directory that failed (e.g. ENOSPC)."""
    what = exc.strerror or str(exc)
    hint = "free some disk space" if exc.errno == errno.ENOSPC else "make the directory writable"
    return CatenError(f"cannot write to the cache directory {d} (CATEN_CACHE_DIR): {what}",
                      hint=f"{hint}, or set CATEN_CACHE_DIR to another directory")


def sweep(d: Path, now: float | None = None) -> int:
    """Delete temp files and dirs of writers that died (older than STALE_S) and legacy pickles (one pass
    over the directory: a warm start pays it)."""
    stale = (time.time() if now is None else now) - STALE_S
    n = 0
    try:
        entries = list(os.scandir(d))
    except OSError:
        return 0
    for e in entries:
        temp = _named(e.name, TEMP_NAMES)
        if not temp and not _named(e.name, LEGACY_NAMES):
            continue
        with contextlib.suppress(OSError):
            if temp and e.stat(follow_symlinks=False).st_mtime >= stale:
                continue
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path)
            else:
                os.unlink(e.path)
            n += 1
    return n


@contextlib.contextmanager
def one_builder(root: Path, key: str, wait_s: float = LOCK_WAIT_S) -> Iterator[None]:
    """Build the entry ``key`` of the cache directory ``root`` in one process at a time.

    Processes sharing a cache directory (two notebooks, test workers) that miss the same entry would
    each build it; inside this block a process holds an advisory lock on ``root/.lock_<key>``, so the
    second one waits, then finds the first one's entry. Best effort: without ``fcntl``, when the lock
    file cannot be made, or after ``wait_s`` seconds of waiting, the block runs unlocked (a duplicate
    build, never a failure). Closing the file releases the lock, also when the process dies."""
    try:
        fd = os.open(Path(root) / f".lock_{key}", os.O_RDWR | os.O_CREAT, file_mode())
    except OSError:
        fd = -1
    try:
        deadline = time.monotonic() + wait_s
        while fcntl is not None and fd >= 0:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            except OSError:
                break
        yield
    finally:
        if fd >= 0:
            os.close(fd)


def publish(tmp: str | os.PathLike, path: Path) -> None:
    """Give the finished temp file ``tmp`` the umask's file mode and rename it to ``path`` (atomic)."""
    os.chmod(tmp, file_mode())
    os.replace(tmp, path)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically with the umask's file mode. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        publish(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def digest(data: bytes | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def sealed(kind: str, version: int, body: bytes, **meta: object) -> bytes:
    """``body`` behind a one-line JSON header naming its format, version and SHA-256."""
    head = {"format": kind, "version": version, **meta, "sha256": digest(body), "bytes": len(body)}
    return json.dumps(head).encode() + b"\n" + body


def unseal(kind: str, version: int, data: bytes) -> tuple[dict, bytes]:
    """The header and body of a :func:`sealed` file; ValueError saying what is wrong otherwise."""
    nl = data.find(b"\n")
    if nl < 0:
        raise ValueError("no header line")
    head = json.loads(data[:nl])
    if not isinstance(head, dict) or head.get("format") != kind:
        raise ValueError(f"not a {kind} file")
    if head.get("version") != version:
        raise ValueError(f"version {head.get('version')!r}, this build reads {version}")
    body = data[nl + 1 :]
    if head.get("bytes") != len(body):
        raise ValueError(f"{len(body)} bytes where the header says {head.get('bytes')} (truncated?)")
    if head.get("sha256") != digest(body):
        raise ValueError("content does not match its SHA-256")
    return head, body


def bad_entry(path: Path, why: str) -> None:
    """Warn that the cache entry ``path`` failed its check and is rebuilt."""
    warnings.warn(CacheWarning(f"cache entry {path} is damaged ({why}); it is discarded and rebuilt",
                               hint="nothing to do; if this repeats, check the disk or delete the cache "
                                    "directory (CATEN_CACHE_DIR)"), stacklevel=3)


def read_entry(path: Path) -> bytes | None:
    """The bytes of the cache entry ``path``: None when there is none, or when it cannot be read (then
    it is reported as damaged and the caller rebuilds it)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        bad_entry(path, exc.strerror or str(exc))
        return None


def hash_sources(h: Any, root: Path, parts: Iterable[str], suffixes: tuple[str, ...] = (".py", ".h", ".c")) -> None:
    """Feed ``h`` the names and bytes of the source files under ``root``: each part is a file or a
    directory (its files ending in ``suffixes``, in sorted order). Cache keys fingerprint the code
    that made an entry with it, so an edit to that code never serves an entry it would not make."""
    for part in parts:
        p = root / part
        for f in sorted(f for f in p.rglob("*") if f.suffix in suffixes) if p.is_dir() else [p]:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
