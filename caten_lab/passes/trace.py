"""What a traced pipeline run recorded: one PassRecord per pass, and ways to read them back.

A record keeps copies of the graph before and after its pass and the rewrites the pass recorded,
so any intermediate state (after the first k rewrites of pass i) can be rebuilt with
:func:`caten_lab.air.rewriter.replay` instead of being stored.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from caten_lab.air.graph import Graph
from caten_lab.air.rewriter import Rewrite, replay
from caten_lab.air.serialize import to_json as graph_to_json
from caten_lab.air.value import Value
from caten_lab.errors import CompileError

TRACE_FORMAT = "caten_lab.passtrace"
TRACE_VERSION = 1


@dataclass
class PassRecord:
    """One pass of a traced run. ``after`` is the graph when the pass returned (or failed).

    ``before``/``after`` are snapshots shared between neighbouring records (a pass's ``after`` is the
    next pass's ``before``): treat them as read-only, or take ``trace.graph_at(...)`` for a fresh copy.
    """

    name: str
    description: str
    index: int
    before: Graph
    after: Graph | None
    wall_s: float
    mem_bytes: int
    nodes_before: int
    nodes_after: int
    rewrites: list[Rewrite] = field(default_factory=list)
    changed: bool = False
    artifacts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def rule_counts(self) -> dict[str, int]:
        """How many times each rule fired in this pass, most frequent first."""
        counts: dict[str, int] = {}
        for rw in self.rewrites:
            counts[rw.rule] = counts.get(rw.rule, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: -kv[1]))

    def diff(self) -> dict[str, list[int]]:
        """Node ids the pass ``added``, ``removed``, and ``changed`` (same id, new operands or attributes)."""
        after = self.after if self.after is not None else self.before
        old = {n.id: n for n in self.before.nodes}
        new = {n.id: n for n in after.nodes}
        changed = [
            i
            for i, n in new.items()
            if i in old and (n.reads != old[i].reads or n.attrs != old[i].attrs or n.op != old[i].op)
        ]
        return {
            "added": [i for i in new if i not in old],
            "removed": [i for i in old if i not in new],
            "changed": changed,
        }

    def __repr__(self) -> str:
        status = f" FAILED: {self.error}" if self.error else ""
        return (
            f"<PassRecord #{self.index} {self.name}: {self.wall_s * 1e3:.2f} ms, "
            f"{self.nodes_before}->{self.nodes_after} nodes, {len(self.rewrites)} rewrites{status}>"
        )


class PassTrace:
    """The records of one traced :meth:`PassManager.run`, in pipeline order."""

    def __init__(self, records: list[PassRecord] | None = None) -> None:
        self.records: list[PassRecord] = records if records is not None else []

    # ---- access --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self):  # noqa: ANN204 - iterator of PassRecord
        return iter(self.records)

    def __getitem__(self, key: int | str) -> PassRecord:
        """A record by position or by pass name (the first pass with that name)."""
        if isinstance(key, str):
            for r in self.records:
                if r.name == key:
                    return r
            raise KeyError(f"no pass named {key!r} in this trace; passes: {', '.join(self.names())}")
        return self.records[key]

    def names(self) -> list[str]:
        return [r.name for r in self.records]

    @property
    def total_s(self) -> float:
        """Wall time of all passes (tracing overhead such as graph copies excluded)."""
        return sum(r.wall_s for r in self.records)

    @property
    def failed(self) -> PassRecord | None:
        return next((r for r in self.records if r.error is not None), None)

    # ---- graphs at any point -------------------------------------------------------------
    def graph_at(self, pass_index: int | str, rewrite_index: int | None = None) -> Graph:
        """The graph after pass ``pass_index`` (a fresh copy), or after its first ``rewrite_index`` rewrites.

        ``rewrite_index=0`` is the graph before the pass. A pass that also edits the graph outside
        recorded rewrites (e.g. re-sorting) is rebuilt up to node order; ``rewrite_index=None`` always
        returns exactly the recorded ``after``.
        """
        rec = self[pass_index] if isinstance(pass_index, str) else self._record(pass_index)
        if rewrite_index is None:
            return (rec.after if rec.after is not None else rec.before).copy()
        n = len(rec.rewrites)
        if not 0 <= rewrite_index <= n:
            raise CompileError(
                f"pass {rec.name!r} (#{rec.index}) recorded {n} rewrites; "
                f"rewrite_index {rewrite_index} is out of range",
                hint=f"use 0..{n}",
            )
        return replay(rec.before.copy(), rec.rewrites[:rewrite_index])

    def _record(self, i: int) -> PassRecord:
        if not -len(self.records) <= i < len(self.records):
            raise CompileError(
                f"pass index {i} is out of range: the trace has {len(self.records)} passes",
                hint=f"passes: {', '.join(self.names())}",
            )
        return self.records[i]

    # ---- reports -------------------------------------------------------------------------
    def table(self) -> list[dict]:
        """One row per pass: pass, time_s, share, mem_bytes, nodes_before, nodes_after, rewrites."""
        total = self.total_s or 1.0
        return [
            {
                "pass": r.name,
                "time_s": r.wall_s,
                "share": r.wall_s / total,
                "mem_bytes": r.mem_bytes,
                "nodes_before": r.nodes_before,
                "nodes_after": r.nodes_after,
                "rewrites": len(r.rewrites),
                "changed": r.changed,
                "error": r.error,
            }
            for r in self.records
        ]

    def summary(self, *, order: str = "time") -> str:
        """A text report in the spirit of LLVM's ``-time-passes``: slowest first, or ``order="pipeline"``."""
        total = self.total_s
        bar = "=" + "-" * 76 + "="
        lines = [
            bar,
            "caten_lab pass execution report".center(78),
            bar,
            f"  Total execution time: {total:.4f} s ({len(self.records)} passes)",
            "",
            f"  {'---Wall Time---':>17}  {'--Peak Mem--':>12}  {'-----Nodes-----':>15}  "
            f"{'Rewrites':>8}  Name",
        ]
        rows = self.records if order == "pipeline" else sorted(self.records, key=lambda r: -r.wall_s)
        for r in rows:
            share = 100.0 * r.wall_s / total if total else 0.0
            nodes = f"{r.nodes_before} -> {r.nodes_after}"
            mark = "  FAILED" if r.error else ""
            lines.append(
                f"  {r.wall_s:8.4f} ({share:5.1f}%)  {_fmt_bytes(r.mem_bytes):>12}  {nodes:>15}  "
                f"{len(r.rewrites):>8}  {r.name}{mark}"
            )
        n_rewrites = sum(len(r.rewrites) for r in self.records)
        lines.append(f"  {total:8.4f} (100.0%)  {'':>12}  {'':>15}  {n_rewrites:>8}  Total")
        lines.append(bar)
        return "\n".join(lines)

    def __repr__(self) -> str:
        names = " -> ".join(self.names())
        return f"<PassTrace {len(self.records)} passes, {self.total_s * 1e3:.2f} ms: {names}>"

    # ---- serialization -------------------------------------------------------------------
    def to_json(self, *, graphs: bool = True) -> dict:
        """A JSON-ready dict (graphs through caten_lab.air.serialize); ``graphs=False`` keeps only metrics."""
        out = []
        for r in self.records:
            d: dict[str, Any] = {
                "name": r.name,
                "description": r.description,
                "index": r.index,
                "wall_s": r.wall_s,
                "mem_bytes": r.mem_bytes,
                "nodes_before": r.nodes_before,
                "nodes_after": r.nodes_after,
                "changed": r.changed,
                "error": r.error,
                "artifacts": sorted(r.artifacts),
                "rewrites": [rewrite_to_json(rw) for rw in r.rewrites],
            }
            if graphs:
                d["before"] = graph_to_json(r.before)
                d["after"] = graph_to_json(r.after) if r.after is not None else None
            out.append(d)
        return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "total_s": self.total_s, "records": out}

    def dumps(self, *, graphs: bool = True) -> str:
        return json.dumps(self.to_json(graphs=graphs))


def rewrite_to_json(rw: Rewrite) -> dict:
    """One rewrite as JSON: rule, where it is defined, matched/removed ids, produced nodes, replacement."""
    produced = Graph()
    for n in rw.produced:
        produced.add(n.copy())  # add() does not require reads to be defined: fine for a fragment
    replaced = ["", ""]  # no replacement (a pass that only removed nodes)
    if rw.replaced is not None:
        old, new = rw.replaced
        replaced = [str(old), str(new) if new.__class__ is Value else {"lit": _literal_json(new)}]
    return {
        "rule": rw.rule,
        "location": rw.location,
        "matched": list(rw.matched),
        "produced": graph_to_json(produced)["nodes"],
        "replaced": replaced,
        "removed": list(rw.removed),
    }


def _literal_json(v: object) -> object:
    """A literal as strict JSON (inf and nan spelled out the way caten_lab.air.serialize does)."""
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return {"float": repr(v)}
    return v


def _fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024**2:.1f} MiB"
