"""Bad inputs: caches. See tests/bad_inputs/__init__.py for the case format.

A damaged cache entry is not an error: it is discarded and rebuilt with a ``CacheWarning``. That
warning is a ``CatenError`` too, so the damage cases here run with warnings turned into errors and
expect the ``CacheWarning`` naming the damaged file. The unusable-directory cases raise as they are.
"""

from __future__ import annotations

import errno
import json
import os
import pickle
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import numpy as np

from bad_inputs import Case
from caten_lab.air import Graph
from caten_lab.errors import CatenError
from caten_lab.runtime.cache_files import CacheWarning


def _graph() -> Graph:
    g = Graph()
    x = g.insert("allocate", [], shape=(3, 5), dtype="float32", name="x")
    g.mark_output(g.insert("exp2", [x]))
    return g


@contextmanager
def _cache() -> Iterator[Path]:
    from caten_lab.config import settings

    with tempfile.TemporaryDirectory(prefix="caten_bad_cache_") as d, settings(cache_dir=d):
        yield Path(d)


def _strict(fn: Callable[[], object]) -> object:
    """Run ``fn`` with CacheWarnings turned into errors and the in-memory program cache cleared."""
    from caten_lab.compiler import clear_cache

    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        return fn()


def _compile_and_run() -> object:
    from caten_lab.compiler import compile

    return compile(_graph())({"x": np.ones((3, 5), np.float32)})


def cache_dir_under_a_file() -> None:
    from caten_lab.compiler import compile

    with tempfile.TemporaryDirectory() as d:
        blocker = Path(d) / "file"
        blocker.write_text("x")
        with mock.patch.dict(os.environ, {"CATEN_CACHE_DIR": str(blocker / "cache")}):
            compile(_graph())


def cache_dir_is_a_file() -> None:
    from caten_lab.compiler import compile
    from caten_lab.config import settings

    with tempfile.NamedTemporaryFile() as f, settings(cache_dir=f.name):
        compile(_graph())


def cache_dir_not_a_path() -> None:
    from caten_lab.config import settings

    with settings(cache_dir=42):
        pass


def cache_dir_empty_string() -> None:
    from caten_lab.config import settings

    with settings(cache_dir=" "):
        pass


def cache_dir_read_only() -> None:
    """Simulated (root ignores permission bits): os.access reports the directory read-only."""
    from caten_lab.compiler import compile
    from caten_lab.runtime import cache_files

    with _cache() as d, mock.patch.object(cache_files.os, "access", lambda p, m: Path(p) != d):
        compile(_graph())


def cache_disk_full() -> None:
    """Simulated ENOSPC: every temp file the cache would create fails as on a full disk."""
    from caten_lab.compiler import compile
    from caten_lab.runtime import cache_files

    def full(*a: object, **k: object) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with _cache() as d:
        cache_files.cache_root(d)
        with warnings.catch_warnings(), mock.patch.object(tempfile, "mkstemp", full):
            warnings.simplefilter("ignore", CacheWarning)  # "results cannot be cached"; the error is next
            compile(_graph())


def damaged_library() -> None:
    with _cache() as d:
        _compile_and_run()
        (so,) = d.glob("caten_*.so")
        os.truncate(so, so.stat().st_size // 2)
        _strict(_compile_and_run)


def library_overwritten_with_garbage() -> None:
    with _cache() as d:
        _compile_and_run()
        (so,) = d.glob("caten_*.so")
        so.write_bytes(b"\xcc" * so.stat().st_size)
        _strict(_compile_and_run)


def tampered_compile_result() -> None:
    with _cache() as d:
        _compile_and_run()
        (entry,) = d.glob("artifacts_*.json")
        entry.write_bytes(entry.read_bytes().replace(b"caten_run", b"caten_rum", 1))
        _strict(_compile_and_run)


def planted_pickle() -> None:
    with _cache() as d:
        _compile_and_run()
        (entry,) = d.glob("artifacts_*.json")
        entry.write_bytes(pickle.dumps({"never": "unpickled"}))
        _strict(_compile_and_run)


def toolchains_json_with_foreign_flags() -> None:
    from caten_lab.runtime import toolchain

    with _cache() as d:
        toolchain.toolchain("cc", d)
        probe = d / "toolchains.json"
        obj = json.loads(probe.read_text())
        for info in obj["entries"].values():
            info["base"] = [*info["base"], "-fplugin=/tmp/x.so"]
        obj["sha256"] = ""
        probe.write_text(json.dumps(obj))
        toolchain.forget_toolchains()
        _strict(lambda: toolchain.toolchain("cc", d))


def damaged_prepared_weights() -> None:
    from caten_lab.models import prepared_weights

    ident = (("/nonexistent/model.safetensors", 1, 2, 3, 4),)
    arrays = {"w": np.arange(20000, dtype=np.float32).reshape(100, 200)}
    with _cache() as d:
        path = prepared_weights.store(d, ident, "fp32", {"n_embd": 200}, arrays)
        assert path is not None
        with open(path, "r+b") as f:
            f.seek(path.stat().st_size // 2)
            f.write(b"\x00" * 8)
        _strict(lambda: prepared_weights.load(d, ident, "fp32"))


CASES: list[Case] = [
    ("caches: CATEN_CACHE_DIR under a file", cache_dir_under_a_file, CatenError,
     ("CATEN_CACHE_DIR", "cannot be used", "Not a directory")),
    ("caches: cache_dir is a file", cache_dir_is_a_file, CatenError, ("cannot be used", "a file, not a directory")),
    ("caches: cache_dir not a path", cache_dir_not_a_path, CatenError, ("cache_dir must be a path", "42")),
    ("caches: cache_dir blank", cache_dir_empty_string, CatenError, ("cache_dir must be a path",)),
    ("caches: read-only cache dir (simulated)", cache_dir_read_only, CatenError,
     ("CATEN_CACHE_DIR", "not writable")),
    ("caches: full disk (simulated ENOSPC)", cache_disk_full, CatenError,
     ("No space left on device", "CATEN_CACHE_DIR", "free some disk space")),
    ("caches: truncated library", damaged_library, CacheWarning, (".so", "damaged", "rebuilt")),
    ("caches: library overwritten with garbage", library_overwritten_with_garbage, CacheWarning,
     (".so.sha256", "damaged")),
    ("caches: tampered compile result", tampered_compile_result, CacheWarning, ("artifacts_", "SHA-256")),
    ("caches: pickle planted as a compile result", planted_pickle, CacheWarning, ("artifacts_", "damaged")),
    ("caches: toolchains.json with foreign flags", toolchains_json_with_foreign_flags, CacheWarning,
     ("toolchains.json", "SHA-256")),
    ("caches: damaged prepared weights", damaged_prepared_weights, CacheWarning, ("prepared_", "SHA-256")),
]
