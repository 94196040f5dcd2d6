"""Disk cache of compile results by graph structure, so a warm compile skips the passes entirely.

The library cache (toolchain.py) is keyed by the C source, which means the passes must run to know
the key. This second cache maps (graph structure, options, compiler code) to the pipeline's result
(compiled graph + artifacts), so re-running a notebook or restarting a program loads the result and
the library without lowering anything. The key includes a fingerprint of the compiler's own source
files: editing a pass invalidates every entry.

Format: ``artifacts_<key>.json`` is versioned JSON, never pickle (loading a cache entry runs no code):
a one-line header (format, version, key, SHA-256 and size of the body) and the body: a line with the
table of symbolic expressions, then a JSON object of the compiled graph (``air.serialize``) and every
artifact, each through its class's ``to_json`` / ``from_json`` (:data:`CODECS`), expressions referred
to by their index in the table. The compiled graph and the kernel graphs are kept as JSON text and parsed
when first used (a compiled program never reads the kernels'; one loaded by its interface, the graph only
for an error message). A result holding an artifact without a codec is not cached. A body
that fails its hash or does not decode is discarded with a ``CacheWarning`` and rebuilt. Writes are
atomic (temp file + rename). Pickles written by older versions (``artifacts_*.pkl``) are never
opened; the first use of a cache directory deletes them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from caten_lab.air import serialize
from caten_lab.air.graph import Graph
from caten_lab.air.symbolic import Expr
from caten_lab.codegen.kir_json import DeferredProgram, program_to_json
from caten_lab.passes.memory_plan import MemoryPlan
from caten_lab.passes.schedule import Schedule
from caten_lab.runtime.cache_files import (
    CacheWarning,
    atomic_write,
    bad_entry,
    cache_root,
    hash_sources,
    one_builder,
    read_entry,
    sealed,
    unseal,
)

_COMPILER_PARTS = ("air", "passes", "codegen", "formats", "compiler.py", "config.py")
FORMAT = "caten_lab.artifacts"
VERSION = 3  # 2: the kernel IR (kernel_ir) replaces the loop IR; 3: the compiled graph as JSON text


def _pairs(d: dict) -> dict[str, tuple[int, int]]:
    return {str(k): (int(v[0]), int(v[1])) for k, v in d.items()}


def _plain(v: Any) -> Any:
    return v


# artifact name -> (encode, decode); plain JSON values round-trip as they are
CODECS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "schedule": (Schedule.to_json, Schedule.from_json),
    "kernel_ir": (program_to_json, DeferredProgram),  # decoded when first used (a warm compile needs its meta only)
    "memory_plan": (MemoryPlan.to_json, MemoryPlan.from_json),
    "c_source": (str, str),
    "c_units": (_plain, lambda v: [(str(name), str(text)) for name, text in v]),  # Rendered.units
    "source_map": (_plain, lambda v: [[int(x) for x in row] for row in v]),
    "kernel_lines": (_plain, _pairs),
    "function_lines": (_plain, _pairs),
    "kernel_nodes": (_plain, lambda v: {str(k): [int(x) for x in ids] for k, ids in v.items()}),
    "graph_symbols": (_plain, lambda v: [str(s) for s in v]),
    "line_paths": (_plain, lambda v: [None if x is None else (str(x[0]), tuple((str(f), int(i)) for f, i in x[1]))
                                      for x in v]),
}


@lru_cache(maxsize=1)
def compiler_fingerprint() -> str:
    """A hash of the compiler's source files, Python and the fixed C it renders into programs (computed
    once per process)."""
    root = Path(__file__).resolve().parent.parent
    h = hashlib.blake2b(digest_size=16)
    hash_sources(h, root, _COMPILER_PARTS)
    return h.hexdigest()


def artifact_key(structure: str, **options: Any) -> str:
    text = repr((structure, sorted(options.items()), compiler_fingerprint()))
    return hashlib.blake2b(text.encode(), digest_size=20).hexdigest()


def entry_path(cache_dir: Path, key: str) -> Path:
    return Path(cache_dir) / f"artifacts_{key}.json"


def _intern(obj: Any, table: dict[str, tuple[int, Any]]) -> Any:
    """``obj`` with every symbolic expression ``{"expr": [...]}`` replaced by ``{"$e": index}`` into
    ``table`` (repr -> (index, payload)): a compiled graph repeats a few hundred expressions thousands
    of times, and decoding each once keeps a warm compile fast."""
    if type(obj) is dict:
        if len(obj) == 1:
            e = obj.get("expr")
            if type(e) is list:  # Expr.to_json (a symbol named "expr" maps to an int)
                hit = table.get(r := repr(e))
                if hit is None:
                    hit = table[r] = (len(table), e)
                return {"$e": hit[0]}
        return {k: _intern(v, table) if type(v) in (dict, list) else v for k, v in obj.items()}
    return [_intern(v, table) if type(v) in (dict, list) else v for v in obj]


def encode(graph: Graph, artifacts: dict[str, Any]) -> bytes | None:
    """The entry body for a pipeline result, or None when an artifact has no codec. Two JSON lines:
    the expression table, then the graph and the artifacts."""
    if any(name not in CODECS for name in artifacts):
        return None
    body = {"graph": serialize.to_json(graph),
            "artifacts": {name: CODECS[name][0](v) for name, v in artifacts.items()}}
    for k in body["artifacts"].get("schedule", {}).get("kernels", ()):
        k["graph"] = json.dumps(k["graph"], separators=(",", ":"), allow_nan=False)  # parsed when first used
    table: dict[str, tuple[int, Any]] = {}
    # where the repeated expressions are (not the loop IR); the graph as JSON text, parsed when first used
    body["graph"] = json.dumps(_intern(body["graph"], table), separators=(",", ":"), allow_nan=False)
    for name in ("schedule", "memory_plan"):
        if name in body["artifacts"]:
            body["artifacts"][name] = _intern(body["artifacts"][name], table)
    exprs = json.dumps([e for _, e in table.values()], separators=(",", ":"))  # in index order
    return (exprs + "\n" + json.dumps(body, separators=(",", ":"), allow_nan=False)).encode()


def decode(body: bytes, *, graph: bool = True) -> tuple[Graph | Callable[[], Graph], dict[str, Any]]:
    """The (compiled graph, artifacts) of an entry body. ``graph=False``: the graph as a function that decodes
    it (a program that was loaded by its interface needs it only for an error message)."""
    nl = body.index(b"\n")
    exprs = [Expr.from_json({"expr": e}) for e in json.loads(body[:nl])]

    def hook(d: dict) -> Any:
        return exprs[d["$e"]] if len(d) == 1 and "$e" in d else d

    obj = json.loads(body[nl + 1 :], object_hook=hook)
    arts = {name: CODECS[name][1](v) for name, v in obj["artifacts"].items()}
    text = obj["graph"]

    def compiled_graph() -> Graph:
        return serialize.from_json(json.loads(text, object_hook=hook))

    return (compiled_graph() if graph else compiled_graph), arts


def building(cache_dir: Path, key: str) -> contextlib.AbstractContextManager[None]:
    """The block that loads, or compiles and stores, the entry ``key`` (and builds its library): one
    process at a time per key (:func:`~caten_lab.runtime.cache_files.one_builder`)."""
    return one_builder(cache_root(cache_dir), key)


def load(cache_dir: Path, key: str, *, graph: bool = True) -> tuple[Graph | Callable[[], Graph], dict[str, Any]] | None:
    """The cached (compiled graph, artifacts) for ``key``, or None (a miss, or a damaged entry: that one
    is deleted with a warning and the caller compiles afresh). ``graph=False``: see :func:`decode`."""
    path = entry_path(cache_root(cache_dir), key)
    data = read_entry(path)
    if data is None:
        return None
    try:
        head, body = unseal(FORMAT, VERSION, data)
        if head.get("key") != key:
            raise ValueError("it belongs to another key")
        return decode(body, graph=graph)
    except Exception as exc:  # noqa: BLE001 - a bad hash, malformed JSON, or an AirError from a graph that does not validate
        bad_entry(path, str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}")
    with contextlib.suppress(OSError):
        path.unlink()
    return None


def store(cache_dir: Path, key: str, value: tuple[Graph, dict[str, Any]]) -> bool:
    """Write atomically; True if written. A result that cannot be encoded, or a write that fails
    (e.g. a full disk), is simply not cached (one warning per process for a failed write)."""
    graph, artifacts = value
    body = encode(graph, artifacts)
    if body is None:
        return False
    d = cache_root(cache_dir)
    try:
        atomic_write(entry_path(d, key), sealed(FORMAT, VERSION, body, key=key))
    except OSError as exc:
        _warn_unwritable(d, exc)
        return False
    return True


_WARNED: set[str] = set()


def _warn_unwritable(d: Path, exc: OSError) -> None:
    if str(d) not in _WARNED:
        _WARNED.add(str(d))
        warnings.warn(CacheWarning(f"compile results cannot be cached in {d} ({exc.strerror or exc}); "
                                   "every compile in this process runs the passes",
                                   hint="free disk space or set CATEN_CACHE_DIR to a writable directory"),
                      stacklevel=3)
