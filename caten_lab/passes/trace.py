"""What a traced pipeline run recorded: one PassRecord per pass, and ways to read them back.

A record keeps copies of the graph before and after its pass and the rewrites the pass recorded,
so any intermediate state (after the first k rewrites of pass i) can be rebuilt with
:func:`caten_lab.air.rewriter.replay` instead of being stored.

Codegen passes work on the kernel program ``ctx.artifacts["kernel_ir"]`` (a
``caten_lab.codegen.kir.Program``, immutable, so the snapshots ``kernel_before``/``kernel_after`` are
references, not copies) and record kernel-IR rewrites (``caten_lab.codegen.kir_rewrite.KRewrite``)
in the same ``rewrites`` list. A kernel rewrite is any recorded rewrite that is not an AIR
:class:`~caten_lab.air.rewriter.Rewrite`; it replays itself (``rw.apply(program)``), so this module
reads kernel programs without importing the codegen layer above it.
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

KERNEL_IR = "kernel_ir"  # the ctx.artifacts key of the kernel program codegen passes read and write
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
    rewrites: list[Any] = field(default_factory=list)  # AIR Rewrites, or kernel-IR KRewrites (codegen)
    changed: bool = False
    artifacts: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    kernel_before: Any = None  # the kernel-IR Program when the pass started (None before lowering)
    kernel_after: Any = None  # ... and when it returned (the same object when the pass left it alone)

    @property
    def graph_rewrites(self) -> list[Rewrite]:
        """The AIR rewrites of this pass (what :meth:`PassTrace.graph_at` replays)."""
        return [rw for rw in self.rewrites if isinstance(rw, Rewrite)]

    @property
    def kernel_rewrites(self) -> list[Any]:
        """The kernel-IR rewrites of this pass (what :meth:`PassTrace.program_at` replays)."""
        return [rw for rw in self.rewrites if not isinstance(rw, Rewrite)]

    @property
    def is_codegen(self) -> bool:
        """The pass ran on a kernel program (or made the first one, or recorded kernel-IR rewrites)."""
        return self.kernel_after is not None or self.kernel_before is not None or bool(self.kernel_rewrites)

    @property
    def kernel_changed(self) -> bool:
        """The pass changed the kernel program (structural equality; origins do not count)."""
        kb, ka = self.kernel_before, self.kernel_after
        return ka is not kb and (kb is None or ka is None or ka != kb)

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

    def kernel_diff(self) -> dict[str, list[str]]:
        """Names of the kernel-IR functions the pass ``added``, ``removed`` and ``changed`` (structurally)."""
        old = {f.name: f for f in self.kernel_before.functions} if self.kernel_before is not None else {}
        after = self.kernel_after if self.kernel_after is not None else self.kernel_before
        new = {f.name: f for f in after.functions} if after is not None else {}
        return {
            "added": [n for n in new if n not in old],
            "removed": [n for n in old if n not in new],
            "changed": [n for n, f in new.items() if n in old and old[n] is not f and old[n] != f],
        }

    def __repr__(self) -> str:
        status = f" FAILED: {self.error}" if self.error else ""
        kind = f" ({len(self.kernel_rewrites)} kernel IR)" if self.is_codegen else ""
        return (
            f"<PassRecord #{self.index} {self.name}: {self.wall_s * 1e3:.2f} ms, "
            f"{self.nodes_before}->{self.nodes_after} nodes, {len(self.rewrites)} rewrites{kind}{status}>"
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
        rec = self._record(pass_index)
        if rewrite_index is None:
            return (rec.after if rec.after is not None else rec.before).copy()
        rewrites = rec.graph_rewrites
        n = len(rewrites)
        if not 0 <= rewrite_index <= n:
            kernel = len(rec.rewrites) - n
            raise CompileError(
                f"pass {rec.name!r} (#{rec.index}) recorded {n} graph rewrites; "
                f"rewrite_index {rewrite_index} is out of range"
                + (f" (its {kernel} kernel-IR rewrites are stepped by trace.program_at)" if kernel else ""),
                hint=f"use 0..{n}" + (f", or trace.program_at({rec.name!r}, {rewrite_index})" if kernel else ""),
            )
        return replay(rec.before.copy(), rewrites[:rewrite_index])

    def program_at(self, pass_index: int | str, rewrite_index: int | None = None) -> Any:
        """The kernel-IR program after pass ``pass_index``, or after its first ``rewrite_index`` kernel rewrites.

        ``rewrite_index=0`` is the program before the pass; ``None`` is exactly the recorded
        ``kernel_after``. Programs are immutable: the result is shared with the trace, print it with
        ``.text()``. A pass that ran before lowering has no kernel program (CompileError).
        """
        rec = self._record(pass_index)
        if rewrite_index is None:
            prog = rec.kernel_after if rec.kernel_after is not None else rec.kernel_before
            if prog is None:
                raise self._no_program(rec)
            return prog
        rewrites = rec.kernel_rewrites
        n = len(rewrites)
        if not 0 <= rewrite_index <= n:
            raise CompileError(
                f"pass {rec.name!r} (#{rec.index}) recorded {n} kernel-IR rewrites; "
                f"rewrite_index {rewrite_index} is out of range",
                hint=f"use 0..{n}",
            )
        prog = rec.kernel_before
        if prog is None:
            if rec.kernel_after is not None and rewrite_index == n > 0:
                return rec.kernel_after  # the pass made the first kernel program (lowering) and rewrote it
            raise self._no_program(rec, before=True)
        for k, rw in enumerate(rewrites[:rewrite_index]):
            try:
                prog = rw.apply(prog)
            except (ValueError, KeyError, IndexError, AttributeError) as exc:
                raise CompileError(
                    f"kernel-IR rewrite {k + 1} ({rw.rule!r}) of pass {rec.name!r} (#{rec.index}) does not "
                    f"replay on the program before it: {exc}",
                    where=getattr(rw, "location", None) or None,
                    hint="the pass changed the program outside its recorded rewrites; "
                    "record every change (kir_rewrite.apply_rules / replace_function with record=ctx.rewrites)",
                ) from exc
        return prog

    def kernel_passes(self) -> list[str]:
        """Names of the passes that ran on a kernel program, in pipeline order."""
        return [r.name for r in self.records if r.is_codegen]

    def _no_program(self, rec: PassRecord, *, before: bool = False) -> CompileError:
        have = self.kernel_passes()
        if before:
            msg = f"pass {rec.name!r} (#{rec.index}) made the first kernel program: there is none before it"
            return CompileError(msg, hint=f"use trace.program_at({rec.name!r}) for the program it made")
        return CompileError(
            f"pass {rec.name!r} (#{rec.index}) ran before the kernel IR existed: it has no kernel program",
            hint=(f"kernel programs exist from pass {have[0]!r} on; use trace.graph_at({rec.name!r}) for its graph"
                  if have else "no pass of this trace produced ctx.artifacts['kernel_ir']"),
        )

    def _record(self, i: int | str) -> PassRecord:
        if isinstance(i, str):
            for r in self.records:
                if r.name == i:
                    return r
            raise CompileError(f"no pass named {i!r} in this trace", hint=f"passes: {', '.join(self.names())}")
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
                "kernel_rewrites": len(r.kernel_rewrites),
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
            if r.is_codegen:
                mark = f"  [kernel IR: {_program_size(r.kernel_before)} -> {_program_size(r.kernel_after)} stmts]" + mark
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
            if r.is_codegen:
                d["kernel_rewrites"] = len(r.kernel_rewrites)
            fusion = r.artifacts.get("fusion")
            if isinstance(fusion, list):  # the scheduler's decisions (passes/fusion.py): small records
                d["fusion"] = [x.to_json() for x in fusion if hasattr(x, "to_json")]
            if graphs:
                d["before"] = graph_to_json(r.before)
                d["after"] = graph_to_json(r.after) if r.after is not None else None
                if r.is_codegen:
                    d["kernel_before"] = r.kernel_before.text() if r.kernel_before is not None else None
                    d["kernel_after"] = r.kernel_after.text() if r.kernel_after is not None else None
            out.append(d)
        return {"format": TRACE_FORMAT, "version": TRACE_VERSION, "total_s": self.total_s, "records": out}

    def dumps(self, *, graphs: bool = True) -> str:
        return json.dumps(self.to_json(graphs=graphs))


def rewrite_to_json(rw: Any) -> dict:
    """One rewrite as JSON: rule, where it is defined, matched/removed ids, produced nodes, replacement.

    A kernel-IR rewrite serializes itself (``KRewrite.to_json``: rule, function, path, sizes), tagged
    ``"kind": "kernel"``."""
    if not isinstance(rw, Rewrite):
        return {"kind": "kernel", **rw.to_json()}
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


def _program_size(p: Any) -> int:
    """Statements of a kernel program (0 for None), nested bodies included."""
    if p is None:
        return 0
    total = 0
    stack = [f.body for f in p.functions]
    while stack:
        body = stack.pop()
        total += len(body)
        for s in body:
            for name in _BODY_FIELDS:
                sub = getattr(s, name, None)
                if isinstance(sub, tuple):
                    stack.append(sub)
    return total


_BODY_FIELDS = ("body", "then", "orelse")


def _fmt_bytes(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    if n < 1024**2:
        return f"{n / 1024:.1f} KiB"
    return f"{n / 1024**2:.1f} MiB"
