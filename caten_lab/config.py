"""Configuration in one place: defaults from environment variables, overridable per block of code.

``config()`` returns the current :class:`Config`; ``with settings(backend="numpy", safety=2): ...``
overrides fields for the code inside the block (a ContextVar, so threads and asyncio tasks each see
their own overrides). Environment variables are read when no override is active, so tests may
set them with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caten_lab.errors import CatenError

BACKENDS = ("c", "numpy")

ENV_VARS = {
    "CATEN_BACKEND": "backend: 'c' (compile to C, default) or 'numpy' (the reference interpreter)",
    "CATEN_SAFETY": "safety level 0 (only bindings, when asked), 1 (default: argument shapes, symbolic windows "
                    "against their buffers, integer division by zero, action indices), 2 (also every kernel index)",
    "CATEN_DEBUG": "debug level: 0 silent, 1 compile summary, 2 + C source path, 3 + pass timings",
    "CATEN_CACHE_DIR": "directory of compiled libraries (default ~/.cache/caten_lab; made if missing; an unusable "
                       "one is an error, an unusable default falls back to a temporary directory)",
    "CC": "C compiler command (default 'cc')",
    "CATEN_THREADS": "OpenMP threads for compiled programs (default: os.cpu_count())",
    "CATEN_TRACE": "1 to record a PassTrace for every compile (default 0)",
    "CATEN_WEIGHT_CACHE": "0 to not cache prepared (transposed, fp16/int8) model weights in CATEN_CACHE_DIR (default 1)",
}


@dataclass(frozen=True)
class Config:
    """Every knob of the compiler and runtime. Frozen: use :func:`settings` to change it."""

    backend: str = "c"
    safety: int = 1
    debug: int = 0
    cache_dir: Path = Path.home() / ".cache" / "caten_lab"
    cc: str = "cc"
    threads: int = os.cpu_count() or 1
    trace: bool = False
    weight_cache: bool = True  # GPT2Runner.from_pretrained keeps prepared weights in cache_dir

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise CatenError(f"unknown backend {self.backend!r}", hint=f"use one of {', '.join(BACKENDS)}")
        if self.safety not in (0, 1, 2):
            raise CatenError(f"safety must be 0, 1 or 2, got {self.safety!r}")
        if not isinstance(self.threads, int) or self.threads < 1:
            raise CatenError(f"threads must be a positive int, got {self.threads!r}")
        if not isinstance(self.cache_dir, Path):
            raise CatenError(f"cache_dir must be a path, got {self.cache_dir!r}",
                             hint="settings(cache_dir='/some/dir') or CATEN_CACHE_DIR=/some/dir")


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise CatenError(f"environment variable {name}={raw!r} is not an integer", hint=ENV_VARS[name]) from None


_ENV_MEMO: dict[tuple, Config] = {}


def from_env() -> Config:
    """A Config built from the environment variables listed in ``ENV_VARS`` (memoized on their values:
    a compiled program reads its thread count on every call)."""
    key = (*(os.environ.get(k) for k in ENV_VARS), os.environ.get("HOME"))
    hit = _ENV_MEMO.get(key)
    if hit is None:
        hit = _from_env()
        if len(_ENV_MEMO) > 64:
            _ENV_MEMO.clear()
        _ENV_MEMO[key] = hit
    return hit


def _from_env() -> Config:
    cache = os.environ.get("CATEN_CACHE_DIR")
    return Config(
        backend=os.environ.get("CATEN_BACKEND", "c").strip().lower() or "c",
        safety=_env_int("CATEN_SAFETY", 1),
        debug=_env_int("CATEN_DEBUG", 0),
        cache_dir=Path(cache).expanduser() if cache else Path.home() / ".cache" / "caten_lab",
        cc=os.environ.get("CC", "cc").strip() or "cc",
        threads=_env_int("CATEN_THREADS", os.cpu_count() or 1),
        trace=_env_int("CATEN_TRACE", 0) != 0,
        weight_cache=_env_int("CATEN_WEIGHT_CACHE", 1) != 0,
    )


_overrides: ContextVar[dict[str, Any] | None] = ContextVar("caten_settings", default=None)


def config() -> Config:
    """The configuration in effect here: environment defaults plus active ``settings`` overrides."""
    base = from_env()
    over = _overrides.get()
    return dataclasses.replace(base, **over) if over else base  # over is None or a dict


_FIELDS = {f.name for f in dataclasses.fields(Config)}


@contextlib.contextmanager
def settings(**overrides: Any) -> Iterator[Config]:
    """Override config fields inside a ``with`` block: ``with settings(backend="numpy"): ...``."""
    unknown = set(overrides) - _FIELDS
    if unknown:
        raise CatenError(f"unknown setting(s) {sorted(unknown)}", hint=f"known settings: {', '.join(sorted(_FIELDS))}")
    if "cache_dir" in overrides and overrides["cache_dir"] is not None:
        raw = overrides["cache_dir"]
        if not isinstance(raw, (str, os.PathLike)) or str(raw).strip() == "":
            raise CatenError(f"cache_dir must be a path, got {raw!r}",
                             hint="settings(cache_dir='/some/dir'); the directory is made if missing")
        overrides["cache_dir"] = Path(raw).expanduser()
    merged = {**(_overrides.get() or {}), **{k: v for k, v in overrides.items() if v is not None}}
    cfg = dataclasses.replace(from_env(), **merged)  # validates
    token = _overrides.set(merged)
    try:
        yield cfg
    finally:
        _overrides.reset(token)
