"""Disk cache of compile results by graph structure, so a warm compile skips the passes entirely.

The library cache (toolchain.py) is keyed by the C source, which means the passes must run to know
the key. This second cache maps (graph structure, options, compiler code) to the pipeline's result
(compiled graph + artifacts, pickled), so re-running a notebook or restarting a program loads the
result and the library without lowering anything. The key includes a fingerprint of the compiler's
own source files: editing a pass invalidates every entry. Writes are atomic (temp file + rename);
an unreadable entry is ignored and rebuilt.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pickle
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

_COMPILER_PARTS = ("air", "passes", "codegen", "compiler.py", "config.py")


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the compiler's source files (computed once per process)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.blake2b(digest_size=16)
    for part in _COMPILER_PARTS:
        p = root / part
        files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
        for f in files:
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def artifact_key(structure: str, **options: Any) -> str:
    text = repr((structure, sorted(options.items()), compiler_fingerprint()))
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def load(cache_dir: Path, key: str) -> Any | None:
    path = Path(cache_dir) / f"artifacts_{key}.pkl"
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except Exception:  # missing, truncated or from an incompatible build: recompile
        return None


def store(cache_dir: Path, key: str, value: Any) -> None:
    """Write atomically; a result that cannot be pickled is simply not cached."""
    d = Path(cache_dir)
    tmp: str | None = None
    try:
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".artifacts_", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, d / f"artifacts_{key}.pkl")
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
