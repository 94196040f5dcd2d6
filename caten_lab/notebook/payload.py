"""PassTrace / Program -> one compact JSON document the Inspector front-end steps through.

The notebook layer only reads what the compiler recorded. Nodes are stored once in a table (keyed
by their full content) and every graph is a list of indices into it, so the ~N graphs of a trace
cost little more than one. Rewrites carry the produced nodes as table indices plus the replaced
value and the removed ids: exactly what the browser needs to rebuild the graph after any prefix of
a pass's rewrites (the same algorithm as ``caten_lab.air.rewriter.replay``, see :func:`replay_payload`).
Records of random-number internals carry ``"grp"`` (drawn as one box, see :func:`rng_groups`) and
``value_names`` maps value ids to the names a reader knows (buffers, KV caches, ``out0``...).
"""

from __future__ import annotations

import linecache
import math
from collections.abc import Iterable
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.ops import OPS, attrs_items
from caten_lab.air.symbolic import Expr
from caten_lab.air.value import Value
from caten_lab.notebook.kernel_view import KernelTables, c_path_index, kernel_pass_view
from caten_lab.notebook.profile_payload import cell_profile

PAYLOAD_VERSION = 3  # 3: records of random-number internals carry "grp", "value_names"; 2: codegen passes carry a "kir" block (kernel list, listings, steps); "fusion"
MAX_REWRITES_PER_PASS = 20_000  # beyond this a pass's rewrites are summarized, not replayable


def _fmt_value(v: Any, limit: int = 80) -> str:
    if isinstance(v, DType):
        s = v.value
    elif isinstance(v, Expr):
        s = str(v)
    elif isinstance(v, tuple):
        s = "(" + ", ".join(_fmt_value(x, limit) for x in v) + ("," if len(v) == 1 else "") + ")"
    elif isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        s = repr(v)
    elif isinstance(v, float):
        s = _fmt_float(v)
    else:
        s = str(v)
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _fmt_float(v: float) -> str:
    """A constant as a reader wants it: short reprs stay (``1.0``, ``0.5``), long ones are rounded to six
    significant digits (``0.0013020833333333333`` -> ``0.00130208``)."""
    r = repr(v)
    if len(r) <= 10:
        return r
    s = format(v, ".6g")
    return s if ("." in s or "e" in s or "inf" in s or "nan" in s) else s + ".0"


def _fmt_read(r: Any) -> Any:
    """A value id becomes its str ("v12"); a literal {"lit": text}, so the client never confuses them."""
    return str(r) if r.__class__ is Value else {"lit": _fmt_value(r)}


def node_record(n: Node) -> dict[str, Any]:
    """The JSON form of one node: everything the detail panel and the layout need."""
    attrs = {k: _fmt_value(v) for k, v in attrs_items(n.attrs) if v is not None}
    return {
        "id": n.id,
        "op": n.op,
        "cat": OPS[n.op].category if n.op in OPS else "other",
        "out": "" if n.out is None else str(n.out),
        "reads": [_fmt_read(r) for r in n.reads],
        "attrs": attrs,
        "shape": [_fmt_value(d) for d in n.shape],
        "dtype": n.dtype.value if isinstance(n.dtype, DType) else str(n.dtype),
        "src": n.source,
    }


class _NodeTable:
    """Interns node records: equal content -> one index."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self._index: dict[tuple, int] = {}
        self._alive: dict[int, Any] = {}  # objects whose id() is part of a key stay alive (ids never reused)

    def _ident(self, obj: Any) -> int:
        # node copies share their attrs/shape objects, so identity is a cheap, exact-enough key; two
        # equal objects with different identities only cost one duplicate record
        i = id(obj)
        if i not in self._alive:
            self._alive[i] = obj
        return i

    def intern(self, n: Node) -> int:
        reads = n.reads
        rkey = (
            tuple(reads)
            if all(r.__class__ is Value for r in reads)
            else tuple((type(r).__name__, r) for r in reads)
        )
        key = (n.id, n.op, n.out, rkey, self._ident(n.attrs), self._ident(n.shape), id(n.dtype), n.source)
        i = self._index.get(key)
        if i is None:
            i = len(self.records)
            self._index[key] = i
            self.records.append(node_record(n))
        return i


class _GraphTable:
    """Interns graphs as (node indices, outputs) so unchanged passes share one entry."""

    def __init__(self, nodes: _NodeTable) -> None:
        self.nodes = nodes
        self.graphs: list[dict[str, Any]] = []
        self._index: dict[tuple, int] = {}

    def intern(self, g: Graph | None) -> int | None:
        if g is None:
            return None
        idx = [self.nodes.intern(n) for n in g.nodes]
        key = (tuple(idx), tuple(g.outputs))
        i = self._index.get(key)
        if i is None:
            i = len(self.graphs)
            self._index[key] = i
            self.graphs.append({"nodes": idx, "outputs": [str(o) for o in g.outputs]})
        return i


RNG_SEED_OPS = frozenset({"xor"})  # Threefry's mixing step: no other frontend op makes uint32 xors


def rng_groups(records: list[dict[str, Any]]) -> dict[int, str]:
    """Node id -> its random-number group, for the nodes of one graph (``records`` in graph order).

    ``Tensor.rand``/``randn`` expand into ~130 uint32 ops (Threefry-2x32: add, xor, mul, idiv) plus the
    float conversion (Box-Muller: log, sqrt, sin). They all carry the source line of the user's call,
    which is the node's provenance: a group is the nodes of one source line that feed a uint32 ``xor``
    (the generator's state: counters, constants) or are computed only from such nodes (the float
    conversion). The group key is that source line; the Inspector draws a group as one box.
    """
    by_out = {r["out"]: r for r in records if r["out"]}
    seeds = [r for r in records if r["op"] in RNG_SEED_OPS and r["dtype"] == "uint32" and r["src"]]
    group: dict[int, str] = {}
    stack = list(seeds)
    while stack:  # backwards: what the generator's mixing reads, on the same line
        r = stack.pop()
        if r["id"] in group:
            continue
        group[r["id"]] = r["src"]
        for x in r["reads"]:
            p = by_out.get(x) if isinstance(x, str) else None
            if p is not None and p["src"] == r["src"] and p["id"] not in group:
                stack.append(p)
    if not group:
        return group
    grouped_out = {r["out"]: group[r["id"]] for r in records if r["id"] in group}
    for r in records:  # forwards, in graph order: conversions of the bits, on the same line
        if r["id"] in group or not r["src"]:
            continue
        vals = [x for x in r["reads"] if isinstance(x, str)]
        if vals and all(grouped_out.get(x) == r["src"] for x in vals):
            group[r["id"]] = r["src"]
            grouped_out[r["out"]] = r["src"]
    return group


def _mark_rng(nodes: _NodeTable, graphs: _GraphTable) -> None:
    """Tag the records of random-number internals with ``"grp": "rng <source>"`` (see :func:`rng_groups`)."""
    recs = nodes.records
    for g in graphs.graphs:
        members = rng_groups([recs[i] for i in g["nodes"]])
        for i in g["nodes"]:
            src = members.get(recs[i]["id"])
            if src is not None:
                recs[i]["grp"] = f"rng {src}"


def value_names(records: list[dict[str, Any]], graphs: list[dict[str, Any]]) -> dict[str, str]:
    """Value id -> the name a reader knows it by: a named node's name (inputs, weights, KV caches), a
    store's result the name of the buffer it writes (a KV cache's new state), else ``out<i>`` for the
    i-th output of a graph (the names ``show()`` and the Result use)."""
    names: dict[str, str] = {}
    for r in records:
        name = (r.get("attrs") or {}).get("name")
        if r["out"] and name:
            names.setdefault(r["out"], str(name))
    by_out = {r["out"]: r for r in records if r["out"]}
    for r in records:  # a store's result is the new state of the buffer it writes (a KV cache)
        if r["op"] != "store" or not r["out"] or not r["reads"] or not isinstance(r["reads"][0], str):
            continue
        target = r["reads"][0]
        for _ in range(8):  # through views of the buffer
            if target in names or target not in by_out or by_out[target]["op"] != "view":
                break
            head = by_out[target]["reads"][0] if by_out[target]["reads"] else None
            if not isinstance(head, str):
                break
            target = head
        if target in names:
            names.setdefault(r["out"], names[target])
    for g in graphs:
        for i, o in enumerate(g["outputs"]):
            names.setdefault(o, f"out{i}")
    return names


def _rewrite_record(rw: Any, nodes: _NodeTable) -> dict[str, Any]:
    replaced: list[Any] = ["", ""]  # no replacement (a pass that only removed nodes)
    if rw.replaced is not None:
        replaced = [str(rw.replaced[0]), _fmt_read(rw.replaced[1])]
    return {
        "rule": rw.rule,
        "loc": getattr(rw, "location", ""),
        "matched": list(rw.matched),
        "produced": [nodes.intern(p) for p in rw.produced],
        "replaced": replaced,
        "removed": list(rw.removed),
    }


def _source_lines(records: Iterable[dict[str, Any]]) -> dict[str, str]:
    """``file:line`` -> the text of that line (from linecache, which also holds notebook cells)."""
    out: dict[str, str] = {}
    for r in records:
        src = r.get("src")
        if not src or src in out or ":" not in src:
            continue
        path, _, line = src.rpartition(":")
        if line.isdigit():
            text = linecache.getline(path, int(line)).strip()
            if text:
                out[src] = text
    return out


def _kernels(schedule: Any) -> list[dict[str, Any]]:
    if schedule is None:
        return []
    return [
        {
            "name": k.name,
            "node_ids": list(getattr(k, "node_ids", []) or []),
            "inputs": list(getattr(k, "inputs", []) or []),
            "outputs": list(getattr(k, "outputs", []) or []),
            "key": str(getattr(k, "key", "")),
        }
        for k in getattr(schedule, "kernels", []) or []
    ]


def _artifact(trace: Any, key: str) -> Any:
    """The last value a pass stored under ``key`` in ctx.artifacts (None if none did)."""
    for rec in reversed(list(getattr(trace, "records", []) or [])):
        arts = getattr(rec, "artifacts", None) or {}
        if key in arts:
            return arts[key]
    return None


def trace_payload(
    trace: Any,
    *,
    program: Any = None,
    result: dict[str, Any] | None = None,
    profile_png: str | None = None,
    c_lines_html: list[str] | None = None,
    title: str = "",
    profile: list[dict] | None = None,
) -> dict[str, Any]:
    """Everything the Inspector shows, as JSON-ready data (no Python objects left).

    ``profile``: rows of ``Program.profile`` (kernel, function, seconds per run): the kernel lists of
    codegen passes show the time per call of each function.
    """
    nodes = _NodeTable()
    graphs = _GraphTable(nodes)
    passes: list[dict[str, Any]] = []
    line_paths = getattr(program, "line_paths", None) if program is not None else None
    line_paths = line_paths if line_paths is not None else _artifact(trace, "line_paths")
    tables = KernelTables(c_path_index(line_paths), _artifact(trace, "kernel_ir") if line_paths else None)
    for i, rec in enumerate(getattr(trace, "records", []) or []):
        all_rewrites = list(getattr(rec, "rewrites", None) or [])
        rewrites = list(getattr(rec, "graph_rewrites", all_rewrites))
        truncated = len(rewrites) > MAX_REWRITES_PER_PASS
        before = getattr(rec, "before", None)
        after = getattr(rec, "after", None)
        passes.append(
            {
                "name": rec.name,
                "description": getattr(rec, "description", "") or "",
                "index": getattr(rec, "index", i),
                "wall_s": float(getattr(rec, "wall_s", 0.0) or 0.0),
                "mem_bytes": int(getattr(rec, "mem_bytes", 0) or 0),
                "nodes_before": int(getattr(rec, "nodes_before", len(before) if before is not None else 0)),
                "nodes_after": int(getattr(rec, "nodes_after", len(after) if after is not None else 0)),
                "changed": bool(getattr(rec, "changed", True)),
                "error": getattr(rec, "error", None),
                "before": graphs.intern(before),
                "after": graphs.intern(after),
                "n_rewrites": len(all_rewrites),
                "rewrites_truncated": truncated,
                "rewrites": [] if truncated else [_rewrite_record(rw, nodes) for rw in rewrites],
                "artifacts": sorted(str(k) for k in (getattr(rec, "artifacts", None) or {})),
                "kir": kernel_pass_view(rec, tables, profile),
            }
        )
    schedule = getattr(program, "schedule", None) if program is not None else None
    schedule = schedule if schedule is not None else _artifact(trace, "schedule")
    c_source = getattr(program, "c_source", None) if program is not None else None
    c_source = c_source if c_source is not None else _artifact(trace, "c_source")
    source_map = getattr(program, "source_map", None) if program is not None else None
    source_map = source_map if source_map is not None else _artifact(trace, "source_map")
    kernel_lines = getattr(program, "kernel_lines", None) if program is not None else None
    kernel_lines = kernel_lines if kernel_lines is not None else _artifact(trace, "kernel_lines")
    c_text = c_source or ""
    c_block: dict[str, Any] = {
        "text": c_text,
        "lines_html": c_lines_html if c_lines_html is not None else None,
        "source_map": [list(ids) for ids in (source_map or [])],
        "kernel_lines": {k: [int(v[0]), int(v[1])] for k, v in (kernel_lines or {}).items()},
        "flags": _fmt_flags(getattr(program, "flags", None)),
        "compile_s": _opt_float(getattr(program, "compile_s", None)),
        "cc_s": _opt_float(getattr(program, "cc_s", None)),
        "backend": str(getattr(program, "backend", "") or ""),
        "cached": bool(getattr(program, "cached", False)),
    }
    table = trace.table() if hasattr(trace, "table") else []
    _mark_rng(nodes, graphs)
    return {
        "version": PAYLOAD_VERSION,
        "title": title,
        "nodes": nodes.records,
        "graphs": graphs.graphs,
        "passes": passes,
        "kernels": _kernels(schedule),
        "fusion": [d.to_json() for d in (_artifact(trace, "fusion") or [])],
        "kir": {"lines": tables.lines, "origins": tables.origins, "states": tables.states},
        "c": c_block,
        "profile": {
            "rows": _json_rows(table),
            "total_s": float(getattr(trace, "total_s", 0.0) or 0.0),
            "png": profile_png,
        },
        "result": result,
        "source_lines": _source_lines(nodes.records),
        "cell_profile": cell_profile(trace, program=program, result=result, profile=profile),
        "value_names": value_names(nodes.records, graphs.graphs),
    }


def _fmt_flags(flags: Any) -> str:
    if flags is None:
        return ""
    if isinstance(flags, (list, tuple)):
        return " ".join(str(f) for f in flags)
    return str(flags)


def _opt_float(v: Any) -> float | None:
    try:
        return None if v is None else float(v)
    except (TypeError, ValueError):
        return None


def _json_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        out.append(
            {k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v)) for k, v in r.items()}
        )
    return out


# ---- the client's replay, in Python (tests check it equals PassTrace.graph_at) ------------------


def payload_graph(payload: dict[str, Any], graph_index: int) -> list[dict[str, Any]]:
    """The node records of one interned graph, in order."""
    recs = payload["nodes"]
    return [recs[i] for i in payload["graphs"][graph_index]["nodes"]]


def replay_payload(
    payload: dict[str, Any], pass_index: int, rewrite_index: int
) -> tuple[list[dict], list[str]]:
    """Node records and outputs after the first ``rewrite_index`` rewrites of a pass.

    This mirrors ``applyRewrite`` in extensions/src/graph_model.js line for line: add the produced
    nodes, redirect the uses (and outputs) of the replaced value, drop the removed ids.
    """
    p = payload["passes"][pass_index]
    recs = payload["nodes"]
    g = payload["graphs"][p["before"]]
    order: dict[int, dict] = {}
    for i in g["nodes"]:
        r = dict(recs[i])
        order[r["id"]] = r
    outputs = list(g["outputs"])
    for rw in p["rewrites"][:rewrite_index]:
        for i in rw["produced"]:
            r = dict(recs[i])
            order[r["id"]] = r
        old, new = rw["replaced"]
        for node in order.values():
            if any(x == old for x in node["reads"]):
                node["reads"] = [new if x == old else x for x in node["reads"]]
        if isinstance(new, str):
            outputs = [new if o == old else o for o in outputs]
        for nid in rw["removed"]:
            order.pop(nid, None)
    return list(order.values()), outputs
