"""A runner's warm start: a GGUF model opened again without tracing its graph or looking its program up.

``from_pretrained(model.gguf)`` opens the file, traces the model's graph (0.2 s for SmolLM2), hashes it to
find the compiled program in the compile cache and decodes that entry. All of it gives the same result for
the same file, options and caten_lab code, so the first compile writes down what a later process needs
(``warm_<key>.json`` in the cache directory), and that process rebuilds the runner from it:

- the model's config and the runner's names (the token input, the KV caches, the fixed tables);
- every bound input: a view of the memory-mapped file at its offset (the raw weight blocks and the F32
  norms: no copy), zeros (a KV cache) or the stored bytes of a small table (RoPE's cos/sin);
- the program: its compile-cache key and its interface (inputs, symbols, in-place outputs, entry checks),
  loaded by :func:`caten_lab.compiler.load_program` without the graph.

The key holds the file's identity (path, size, modification time, inode), the runner's options, the thread
count, safety, C compiler and flags, and a fingerprint of caten_lab's source (the compiler, and the frontend,
nn and models that trace the graph): a change to any of them is a miss, never a stale runner. A record that
fails its check, or whose program left the compile cache, is a miss too (the runner is built as usual and the
record rewritten). ``runner.graph`` is traced again when something asks for it. ``CATEN_WEIGHT_CACHE=0``
turns warm starts off with the prepared-weights cache.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.compiler import load_program
from caten_lab.config import config
from caten_lab.formats.gguf_file import read_gguf
from caten_lab.formats.gguf_header import mapped
from caten_lab.models.prepared_weights import source_identity
from caten_lab.runtime import artifact_cache
from caten_lab.runtime.aligned import aligned_copy, aligned_zeros
from caten_lab.runtime.cache_files import atomic_write, cache_root, hash_sources, read_entry, sealed, unseal
from caten_lab.runtime.toolchain import toolchain

FORMAT = "caten_lab.warm_start"
VERSION = 1
_GRAPH_PARTS = ("frontend", "nn", "models")  # the code that traces a model's graph (besides the compiler's)


@lru_cache(maxsize=1)
def _fingerprint() -> str:
    h = hashlib.blake2b(artifact_cache.compiler_fingerprint().encode(), digest_size=16)
    hash_sources(h, Path(__file__).resolve().parent.parent, _GRAPH_PARTS)
    return h.hexdigest()


def key(runner_name: str, path: Path, options: dict[str, Any]) -> str | None:
    """The record key of ``path`` opened by ``runner_name`` with ``options``; None when the file cannot
    be identified (no warm start)."""
    ident = source_identity(path)
    if ident is None:
        return None
    cfg = config()
    tc = toolchain(cfg.cc, cfg.cache_dir)
    text = repr((runner_name, ident, sorted(options.items()), cfg.threads, cfg.safety, cfg.cc, tuple(tc.flags),
                 _fingerprint()))
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def _path(k: str) -> Path:
    return cache_root(config().cache_dir) / f"warm_{k}.json"


def _address(a: np.ndarray) -> int:
    return int(a.__array_interface__["data"][0])


def describe(runner: Any, path: Path, sources: dict[str, Any]) -> dict[str, Any] | None:
    """How a warm start rebinds each of ``runner``'s inputs (see the module docstring), or None when one of
    them is neither a view of the file, nor a KV cache, nor a table small enough to store. ``sources``: the
    arrays its weights were converted from (``runner.state_views(weights)``; F32 ones are views of the file)."""
    tensors = read_gguf(path).tensors  # the same mapping as the runner's views (read_gguf keeps it per file)
    if not tensors:
        return None
    t0 = tensors[0]
    base = _address(t0.data) - t0.data_offset  # the mapped file's first byte
    size = path.stat().st_size
    inputs: dict[str, list] = {}
    for name, arr in runner.arrays.items():
        if name == runner.tokens_name:
            continue
        if name in runner.states:
            inputs[name] = ["zeros", arr.dtype.str, list(arr.shape)]
            continue
        for a in (arr, sources.get(name)):  # the bound array, or what it was converted from
            if isinstance(a, np.ndarray) and a.dtype == arr.dtype and a.shape == arr.shape and a.flags.c_contiguous \
                    and 0 <= _address(a) - base <= size - a.nbytes:
                inputs[name] = ["file", _address(a) - base, a.dtype.str, list(a.shape)]
                break
        else:
            if name not in runner.fixed or arr.nbytes > 1 << 22:
                return None
            inputs[name] = ["bytes", base64.b64encode(np.ascontiguousarray(arr).tobytes()).decode(), arr.dtype.str,
                            list(arr.shape)]
    return inputs


def store(runner: Any, path: Path, k: str, inputs: dict[str, Any]) -> None:
    """Write the record of a runner whose program is compiled (best effort: a failed write costs nothing
    but the next start's speed)."""
    prog = runner.program
    if prog.artifact_key is None or prog.graph is None:
        return
    record = {
        "runner": type(runner).__name__, "config": dataclasses.asdict(runner.config), "n_ctx": runner.n_ctx,
        "weight_format": runner.weight_format, "all_logits": runner.all_logits, "activations": runner.activations,
        "tokens_name": runner.tokens_name, "states": list(runner.states), "fixed": list(runner.fixed),
        "raw_types": {n: str(t) for n, t in runner.raw_types.items()}, "inputs": inputs,
        "program": {"key": prog.artifact_key, "interface": prog.interface_json()},
    }
    body = json.dumps(record, separators=(",", ":"), allow_nan=False).encode()
    with contextlib.suppress(OSError):
        atomic_write(_path(k), sealed(FORMAT, VERSION, body, key=k))


def load(cls: type, path: Path, k: str) -> Any | None:
    """The runner of record ``k``, or None (no record, a damaged one, or its program left the cache)."""
    t0 = time.perf_counter()
    entry = read_entry(_path(k))
    if entry is None:
        return None
    try:
        head, body = unseal(FORMAT, VERSION, entry)
        if head.get("key") != k:
            return None
        rec = json.loads(body)
    except (ValueError, json.JSONDecodeError):
        return None
    if rec.get("runner") != cls.__name__:
        return None
    try:
        arrays = _bind(rec["inputs"], path)
    except (KeyError, TypeError, ValueError):  # a record this code did not write: a miss
        return None
    prog = load_program(rec["program"]["key"], rec["program"]["interface"])
    if prog is None:
        return None
    return cls.warm(rec, arrays, prog, path, time.perf_counter() - t0)


def _bind(inputs: dict[str, list], path: Path) -> dict[str, np.ndarray]:
    """The arrays :func:`describe` described: views of the mapped file, zeros, or stored tables."""
    data = np.frombuffer(mapped(path), dtype=np.uint8)  # read-only, shared with the page cache
    arrays: dict[str, np.ndarray] = {}
    for name, spec in inputs.items():
        kind = spec[0]
        if kind == "file":
            _, off, dt, shape = spec
            n = int(np.prod(shape, dtype=np.int64))
            arrays[name] = np.frombuffer(data, dtype=np.dtype(dt), count=n, offset=off).reshape(shape)
        elif kind == "zeros":
            arrays[name] = aligned_zeros(tuple(spec[2]), np.dtype(spec[1]))
        else:
            dt = np.dtype(spec[2])
            arrays[name] = aligned_copy(np.frombuffer(base64.b64decode(spec[1]), dtype=dt).reshape(spec[3]), dt)
    return arrays
