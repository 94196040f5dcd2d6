"""Disk cache of GPT-2 weights as the compiled program consumes them: transposed, fp32/fp16/int8.

Why: with the compile cache warm (~0.05 s), a start still spent 0.6-1.3 s reading ~0.5 GB of
safetensors, transposing the Conv1D weights and converting them to fp16/int8. This cache keeps the
*prepared* arrays (exact names, layout and dtype of the runner's inputs) in one file per source and
weight format; a warm start maps that file (no copy, no conversion, nothing decoded).

Key: each source file's resolved path, size, mtime_ns, ctime_ns and inode (``stat`` only: hashing
0.5 GB would cost what we save), the weight format, and a fingerprint of the code that prepares the
arrays. File: magic, header length, JSON header (key, config, tensor table), 64-byte aligned data,
trailer (magic + SHA-256 of the header and the whole data region). Writes are atomic (temp file +
``os.replace``, the umask's file mode).

Verification: the SHA-256 of the whole entry is checked the first time an entry is loaded (about
0.45 s per 0.5 GB on one core), which then writes a stamp ``<entry>.verified`` holding the digest and
the entry's ``stat`` (size, mtime_ns, ctime_ns, inode, device). A later load whose ``stat`` matches
the stamp skips the hash: any write to the entry (truncation, an in-place overwrite, a replacement)
changes its ctime or inode, so it is hashed again. A file whose size, header, trailer or digest do not
check out is ``"invalid"`` (a :class:`~caten_lab.runtime.cache_files.CacheWarning` names it) and is
rewritten. Recency for eviction is the stamp's mtime (touching the entry itself would change its ctime). Writing an entry removes older entries of the same source and format (one
copy of the weights per source and format) and then the least recently used entries beyond
``MAX_BYTES``. Clear it by deleting ``prepared_*.bin`` in the cache dir; ``CATEN_WEIGHT_CACHE=0``
turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import mmap
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.runtime.cache_files import atomic_write, bad_entry, cache_root, hash_sources, publish

_MAGIC = b"CATENPW2"
_TRAILER = b"CATENEND"
_DIGEST = 32  # SHA-256
_ALIGN = 64
_VERSION = 2
# all entries together: room for GPT-2 small in all three formats (0.9 GB) or GPT-2 medium in two,
# without letting models loaded once from temporary directories pile up
MAX_BYTES = 4 << 30
# the code whose output is cached: editing any of these invalidates every entry
_PREP_CODE = (
    "models/prepared_weights.py",
    "models/gpt2.py",
    "models/gpt2_weights.py",
    "models/runner.py",
    "models/llama.py",
    "models/llama_weights.py",
    "models/quantize.py",
    "nn/gpt2.py",
    "nn/llama.py",
    "nn/llama_config.py",
    "nn/rope.py",
    "nn/decoder.py",
    "nn/module.py",
    "formats",  # the validator: an entry written before a rule was tightened is not served after it
)


@dataclass
class CacheStats:
    """Counters for this process (tests observe hits here, never through timing)."""

    hits: int = 0
    misses: int = 0  # no entry for this key
    invalid: int = 0  # an entry existed but failed a check: rebuilt
    stores: int = 0

    def record(self, status: str) -> None:
        """Count the outcome of one lookup (``"hit"``, ``"miss"`` or ``"invalid"``)."""
        field = {"hit": "hits", "miss": "misses", "invalid": "invalid"}[status]
        setattr(self, field, getattr(self, field) + 1)


STATS = CacheStats()


@dataclass
class Prepared:
    """A cache hit: the model config (as a dict) and arrays mapped (copy-on-write) from the file."""

    config: dict[str, Any]
    arrays: dict[str, np.ndarray]
    path: Path


@lru_cache(maxsize=1)
def _code_fingerprint() -> str:
    root = Path(__file__).resolve().parent.parent
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{_VERSION} {np.__version__} {sys.byteorder}".encode())
    hash_sources(h, root, _PREP_CODE)
    return h.hexdigest()


def source_files(path: str | os.PathLike) -> list[Path] | None:
    """The files a model is read from (HF dir: config.json + model.safetensors, or + the shard index
    and every ``*.safetensors`` shard; or one .gguf)."""
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        return [p]
    files = [p / "config.json", p / "model.safetensors"]
    if p.is_dir() and not files[1].is_file() and (p / "model.safetensors.index.json").is_file():
        files = [files[0], p / "model.safetensors.index.json", *sorted(p.glob("*.safetensors"))]
    return files if p.is_dir() and all(f.is_file() for f in files) else None


def source_identity(path: str | os.PathLike) -> tuple | None:
    """``(resolved path, size, mtime_ns, ctime_ns, inode)`` per source file; None if not readable."""
    files = source_files(path)
    if files is None:
        return None
    try:
        out = []
        for f in files:
            r = f.resolve()
            st = r.stat()
            out.append((str(r), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino))
        return tuple(out)
    except OSError:
        return None


def _entry_prefix(identity: tuple, fmt: str) -> str:
    where = hashlib.blake2b(repr([f[0] for f in identity]).encode(), digest_size=8).hexdigest()
    return f"prepared_{where}_{fmt}_"


def entry_key(identity: tuple, fmt: str) -> str:
    return hashlib.blake2b(repr((identity, fmt, _code_fingerprint())).encode(), digest_size=16).hexdigest()


def entry_path(cache_dir: Path, identity: tuple, fmt: str) -> Path:
    return Path(cache_dir) / f"{_entry_prefix(identity, fmt)}{entry_key(identity, fmt)}.bin"


def _align(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def _content_digest(header_bytes: bytes, data: Any, start: int, nbytes: int) -> bytes:
    """SHA-256 of the header and of the data region ``data[start : start + nbytes]`` (a buffer)."""
    h = hashlib.sha256(header_bytes)
    h.update(memoryview(data)[start : start + nbytes])
    return h.digest()


def stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stat_of(fd: int) -> list[int]:
    st = os.fstat(fd)
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]


def _stamp(path: Path, fd: int, trailer_digest: bytes) -> None:
    """Remember that ``path`` (as it is now) matched its digest; best effort."""
    with contextlib.suppress(OSError):
        atomic_write(stamp_path(path), json.dumps({"sha256": trailer_digest.hex(), "stat": _stat_of(fd)}).encode())


def _stamped(path: Path, fd: int, trailer_digest: bytes) -> bool:
    try:
        st = json.loads(stamp_path(path).read_bytes())
    except (OSError, ValueError):
        return False
    return st == {"sha256": trailer_digest.hex(), "stat": _stat_of(fd)}


def load(cache_dir: Path, identity: tuple, fmt: str) -> tuple[Prepared | None, str]:
    """The entry for ``identity``/``fmt`` mapped from disk, and ``"hit"``, ``"miss"`` (no entry) or
    ``"invalid"`` (an entry failing a check: the caller rebuilds it, ``store`` replaces the file).
    The caller records the final outcome in :data:`STATS` (it may still reject a hit)."""
    path = entry_path(cache_root(cache_dir), identity, fmt)
    if not path.is_file():
        return None, "miss"
    try:
        with open(path, "rb") as f:
            config, arrays = _read(f, entry_key(identity, fmt), path)
    except (OSError, ValueError, KeyError, TypeError, OverflowError) as exc:  # JSONDecodeError is a ValueError
        bad_entry(path, str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}")
        return None, "invalid"
    with contextlib.suppress(OSError):
        os.utime(stamp_path(path))  # recently used: evicted last
    return Prepared(config, arrays, path), "hit"


def _read(f: Any, key: str, path: Path) -> tuple[dict, dict[str, np.ndarray]]:
    """The config and arrays of an entry; ValueError saying what does not check out."""
    size = os.fstat(f.fileno()).st_size
    head = f.read(16)
    if len(head) < 16 or head[:8] != _MAGIC:
        raise ValueError("not a prepared-weights file (truncated?)")
    hlen = int.from_bytes(head[8:], "little")
    if hlen <= 0 or 16 + hlen > size:
        raise ValueError("header length out of range (truncated?)")
    header_bytes = f.read(hlen)
    header = json.loads(header_bytes)
    start = _align(16 + hlen)
    data_bytes = int(header["data_bytes"])
    if header.get("key") != key:
        raise ValueError("it belongs to another key")
    if size != start + data_bytes + len(_TRAILER) + _DIGEST:
        raise ValueError(f"{size} bytes where the header implies {start + data_bytes + len(_TRAILER) + _DIGEST}")
    # copy-on-write: the arrays are writable like loaded ones, and a write never reaches the file
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    if mm[size - _DIGEST - len(_TRAILER) : size - _DIGEST] != _TRAILER:
        raise ValueError("no trailer")
    want = mm[size - _DIGEST :]
    if not _stamped(path, f.fileno(), want):
        if _content_digest(header_bytes, mm, start, data_bytes) != want:
            raise ValueError("content does not match its SHA-256")
        _stamp(path, f.fileno(), want)
    arrays = {}
    for t in header["tensors"]:
        off, nbytes = start + int(t["offset"]), int(t["nbytes"])
        dt, shape = np.dtype(t["dtype"]), tuple(int(s) for s in t["shape"])
        if dt.itemsize * int(np.prod(shape)) != nbytes or off + nbytes > start + data_bytes:
            raise ValueError(f"tensor {t['name']!r} does not fit its table entry")
        arrays[t["name"]] = np.frombuffer(mm, dt, count=nbytes // dt.itemsize, offset=off).reshape(shape)
    return header["config"], arrays


def _layout(
    identity: tuple,
    fmt: str,
    config: Mapping[str, Any],
    specs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
) -> tuple[bytes, list[dict], int, int]:
    """Header bytes, tensor table, data start and total file size of an entry."""
    table, offset = [], 0
    for name, (shape, dtype) in specs.items():
        dt = np.dtype(dtype)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        table.append(
            {
                "name": name,
                "dtype": dt.str,
                "shape": [int(x) for x in shape],
                "offset": offset,
                "nbytes": nbytes,
            }
        )
        offset = _align(offset + nbytes)
    header = {
        "version": _VERSION,
        "key": entry_key(identity, fmt),
        "format": fmt,
        "config": dict(config),
        "source": [f[0] for f in identity],
        "tensors": table,
        "data_bytes": offset,
    }
    header_bytes = json.dumps(header).encode()
    start = _align(16 + len(header_bytes))
    return header_bytes, table, start, start + offset + len(_TRAILER) + _DIGEST


class EntryWriter:
    """A new entry filled in place: ``arrays`` are writable views of a shared mapping of a temp file.

    Preparing the weights straight into the file means a cold start writes the cache without an
    extra pass over the data or a second copy in memory; the kernel writes the pages back later.
    ``commit`` seals and renames the file and returns its arrays mapped copy-on-write (so later
    writes by the runner never reach the file); ``abort`` deletes it.
    """

    def __init__(
        self,
        cache_dir: Path,
        identity: tuple,
        fmt: str,
        config: Mapping[str, Any],
        specs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    ) -> None:
        self.dir, self.identity, self.fmt = cache_root(Path(cache_dir)), identity, fmt
        self.header_bytes, self.table, self.start, self.size = _layout(identity, fmt, config, specs)
        self.dir.mkdir(parents=True, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(dir=self.dir, prefix=".prepared_", suffix=".tmp")
        try:
            os.posix_fallocate(fd, 0, self.size)  # a full disk fails here, not as SIGBUS on a page write
            os.pwrite(fd, _MAGIC + len(self.header_bytes).to_bytes(8, "little") + self.header_bytes, 0)
            self._mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_WRITE)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(self.tmp)
            raise
        os.close(fd)
        self.arrays = {
            t["name"]: np.frombuffer(
                self._mm,
                np.dtype(t["dtype"]),
                int(np.prod(t["shape"], dtype=np.int64)),
                self.start + t["offset"],
            ).reshape(t["shape"])
            for t in self.table
        }

    @classmethod
    def create(
        cls,
        cache_dir: Path,
        identity: tuple,
        fmt: str,
        config: Mapping[str, Any],
        specs: Mapping[str, tuple[tuple[int, ...], np.dtype]],
    ) -> EntryWriter | None:
        """A writer, or None where the file cannot be made (no space, read-only dir, no fallocate)."""
        if not hasattr(os, "posix_fallocate"):
            return None
        try:
            return cls(cache_dir, identity, fmt, config, specs)
        except (OSError, ValueError):
            return None

    def commit(self) -> dict[str, np.ndarray] | None:
        """Seal and publish the entry; its arrays mapped copy-on-write, or None if that failed."""
        data_bytes = self.size - self.start - len(_TRAILER) - _DIGEST
        sha = _content_digest(self.header_bytes, self._mm, self.start, data_bytes)
        self._mm[self.size - len(_TRAILER) - _DIGEST :] = _TRAILER + sha
        self.arrays = {}
        final = entry_path(self.dir, self.identity, self.fmt)
        try:
            self._mm.flush()
            publish(self.tmp, final)
            with open(final, "rb") as f:
                _stamp(final, f.fileno(), sha)
        except OSError:
            self.abort()
            return None
        STATS.stores += 1
        _drop_superseded(self.dir, self.identity, self.fmt)
        evict(self.dir, keep=entry_path(self.dir, self.identity, self.fmt))
        hit, _ = load(self.dir, self.identity, self.fmt)
        return hit.arrays if hit is not None else None

    def abort(self) -> None:
        self.arrays = {}
        with contextlib.suppress(OSError):
            os.unlink(self.tmp)


def store(
    cache_dir: Path, identity: tuple, fmt: str, config: Mapping[str, Any], arrays: Mapping[str, np.ndarray]
) -> Path | None:
    """Write ready arrays as an entry (sequential writes: works without ``posix_fallocate``);
    atomic; drops superseded entries; None if it could not be written."""
    d = Path(cache_dir)
    header_bytes, table, start, size = _layout(
        identity, fmt, config, {k: (v.shape, v.dtype) for k, v in arrays.items()}
    )
    d = cache_root(d)
    final = entry_path(d, identity, fmt)
    tmp: str | None = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".prepared_", suffix=".tmp")
        h = hashlib.sha256(header_bytes)

        def data(chunk: Any) -> None:  # a piece of the data region: written and hashed
            h.update(chunk)
            f.write(chunk)

        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + len(header_bytes).to_bytes(8, "little") + header_bytes)
            f.write(b"\0" * (start - f.tell()))
            for t, arr in zip(table, arrays.values()):
                data(b"\0" * (start + t["offset"] - f.tell()))
                data(memoryview(np.ascontiguousarray(arr)).cast("B"))
            data(b"\0" * (size - _DIGEST - len(_TRAILER) - f.tell()))
            sha = h.digest()
            f.write(_TRAILER + sha)
        publish(tmp, final)
        tmp = None
        with open(final, "rb") as f:
            _stamp(final, f.fileno(), sha)
    except OSError:
        return None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    STATS.stores += 1
    _drop_superseded(d, identity, fmt)
    evict(d, keep=final)
    return final


def _drop_superseded(d: Path, identity: tuple, fmt: str) -> None:
    """Entries of the same source files and format under an older key (the files changed since)."""
    final = entry_path(d, identity, fmt)
    for old in d.glob(f"{_entry_prefix(identity, fmt)}*.bin"):
        if old != final:
            for p in (old, stamp_path(old)):
                with contextlib.suppress(OSError):
                    p.unlink()


def evict(cache_dir: Path, keep: Path | None = None, budget: int = MAX_BYTES) -> None:
    """Delete the least recently used entries until all of them fit ``budget`` (``keep`` stays),
    and temp files left by writers that died more than an hour ago."""
    stale = time.time() - 3600
    for p in Path(cache_dir).glob(".prepared_*.tmp"):
        with contextlib.suppress(OSError):
            if p.stat().st_mtime < stale:
                p.unlink()
    entries = []
    for p in Path(cache_dir).glob("prepared_*.bin"):
        with contextlib.suppress(OSError):
            st = p.stat()
            used = st.st_mtime_ns
            with contextlib.suppress(OSError):
                used = max(used, stamp_path(p).stat().st_mtime_ns)  # load() touches the stamp
            entries.append((used, st.st_size, p))
    total = sum(e[1] for e in entries)
    for _, nbytes, p in sorted(entries, key=lambda e: e[0]):
        if total <= budget:
            break
        if p != keep:
            with contextlib.suppress(OSError):
                p.unlink()
                total -= nbytes
            with contextlib.suppress(OSError):
                stamp_path(p).unlink()
