"""Step through a compile from code: ``PassDebugger(graph).step()``, rewrite by rewrite, back and forth.

The debugger owns a cursor into a pipeline and the live graph. ``step()`` runs the next pass and
verifies the result (index consistency, acyclicity, and every node's type against its operands),
so the first pass that breaks an invariant is named the moment it does. ``step_rewrite()`` reveals
one recorded rewrite at a time (the pass runs once, on a copy; its rewrites are replayed onto the
live graph). ``back()`` undoes the last step, ``skip()`` / ``replace()`` change the pipeline ahead
of the cursor, and the graph can be edited by hand between steps (``dbg.graph``): the next step
verifies the edit first and blames it, not the pass, if it broke something.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from caten_lab.air.graph import Graph, state_outputs
from caten_lab.air.rewriter import Rewrite, replay
from caten_lab.errors import CatenError, CompileError
from caten_lab.passes.base import Pass, PassContext
from caten_lab.passes.trace import KERNEL_IR, PassRecord, PassTrace


class InvariantError(CompileError):
    """The graph broke an invariant; ``pass_name`` says which pass (or "hand edit") did it."""

    pass_name: str
    rewrite_index: int | None


def check_graph(graph: Graph) -> list[str]:
    """Every invariant problem of ``graph`` (empty when it is sound). O(N + E)."""
    try:
        graph.verify()
    except CatenError as exc:
        return [exc.message]
    try:
        from caten_lab.passes.typecheck import check_types
    except ImportError:  # pragma: no cover - typecheck ships with the passes
        return []
    problems, _ = check_types(graph)
    return problems


@dataclass
class _Snapshot:
    position: int
    graph: Graph
    artifacts: dict[str, Any]
    n_records: int
    pending: _Pending | None


@dataclass
class _Pending:
    """A pass that has run on a copy and whose rewrites are being revealed one at a time."""

    index: int
    before: Graph
    after: Graph
    rewrites: list[Rewrite]
    record: PassRecord
    shown: int = 0
    artifacts: dict[str, Any] = field(default_factory=dict)


class PassDebugger:
    """A stepping debugger over a pipeline: ``PassDebugger(graph, pipeline=None, verify=True)``.

    ``pipeline`` is a PassManager or a list of passes (default: the compiler's default pipeline).
    """

    def __init__(
        self, graph: Graph, pipeline: Any = None, *, ctx: PassContext | None = None, verify: bool = True
    ) -> None:
        if pipeline is None:
            from caten_lab.notebook.compile_bridge import default_pipeline

            pipeline = default_pipeline()
        self.passes: list[Pass] = list(getattr(pipeline, "passes", pipeline))
        self.graph = graph.copy()
        self.ctx = ctx if ctx is not None else PassContext()
        self.ctx.options["state_outputs"] = state_outputs(graph)  # as the scheduler needs (see PassManager.run)
        self.ctx.tracing = True
        self.verify = verify
        self.position = 0
        self.records: list[PassRecord] = []
        self._history: list[_Snapshot] = []
        self._pending: _Pending | None = None

    # ---- where are we --------------------------------------------------------------------
    @property
    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    @property
    def done(self) -> bool:
        return self.position >= len(self.passes) and self._pending is None

    @property
    def next_pass(self) -> Pass | None:
        if self._pending is not None:
            return self.passes[self._pending.index]
        return self.passes[self.position] if self.position < len(self.passes) else None

    @property
    def trace(self) -> PassTrace:
        """What has run so far, as a PassTrace (for the Inspector or caten_lab.show)."""
        return PassTrace(list(self.records))

    def __repr__(self) -> str:
        lines = [f"PassDebugger: {len(self.graph)} nodes, {len(self.records)} pass(es) run"]
        for i, p in enumerate(self.passes):
            mark = "  "
            if self._pending is not None and i == self._pending.index:
                mark = f"~{self._pending.shown}/{len(self._pending.rewrites)}"
            elif i == self.position and self._pending is None:
                mark = "->"
            elif i < self.position:
                mark = "ok"
            lines.append(f"  {mark:>6} {i:2d}. {p.name}")
        return "\n".join(lines)

    # ---- stepping ------------------------------------------------------------------------
    def step(self) -> PassRecord | None:
        """Run the next pass (or finish the one being stepped by rewrites); verify; return its record."""
        if self._pending is not None:
            self._save()
            return self._finish_pending()
        if self.position >= len(self.passes):
            return None
        self._save()
        pending = self._run_pass(self.position)
        self._pending = pending
        return self._finish_pending()

    def step_rewrite(self) -> Rewrite | PassRecord | None:
        """Apply the next recorded rewrite of the current pass (running the pass first if needed).

        Returns the Rewrite applied, or the PassRecord when the pass is finished (a pass without
        recorded rewrites finishes in one step).
        """
        if self._pending is None:
            if self.position >= len(self.passes):
                return None
            self._save()
            self._pending = self._run_pass(self.position)
            if not self._pending.rewrites:
                return self._finish_pending()
        else:
            self._save()
        pend = self._pending
        if pend.shown >= len(pend.rewrites):
            return self._finish_pending()
        rw = pend.rewrites[pend.shown]
        replay(self.graph, [rw])
        pend.shown += 1
        self._check(self.passes[pend.index].name, rewrite_index=pend.shown, rule=rw.rule)
        return rw

    def run_to(self, pass_: int | str, *, inclusive: bool = True) -> PassDebugger:
        """Step until pass ``pass_`` (name or index) has run (``inclusive=False``: stop just before it)."""
        names = self.names
        target = names.index(pass_) if isinstance(pass_, str) and pass_ in names else pass_
        if not isinstance(target, int) or not 0 <= target < len(self.passes):
            raise CompileError(f"run_to: no pass {pass_!r}", hint=f"passes: {', '.join(self.names)}")
        stop = target + 1 if inclusive else target
        while (self.position < stop) or (self._pending is not None and self._pending.index < stop):
            self.step()
        return self

    def run_all(self) -> PassDebugger:
        """Continue to the end of the pipeline."""
        while not self.done:
            self.step()
        return self

    def back(self) -> PassDebugger:
        """Undo the last step (a pass or a rewrite)."""
        if not self._history:
            raise CompileError("back(): already at the start", hint="nothing has been stepped yet")
        snap = self._history.pop()
        self.position = snap.position
        self.graph = snap.graph
        self.ctx.artifacts = snap.artifacts
        del self.records[snap.n_records :]
        self._pending = snap.pending
        if self._pending is not None:
            self._pending = _Pending(**{**self._pending.__dict__})
        return self

    # ---- changing the pipeline ahead of the cursor -----------------------------------------
    def skip(self) -> PassDebugger:
        """Do not run the next pass."""
        if self._pending is not None:
            raise CompileError(
                "skip(): the current pass is half-stepped", hint="step() to finish it or back() out"
            )
        if self.position < len(self.passes):
            self._save()
            self.position += 1
        return self

    def replace(self, name: str, new_pass: Pass) -> PassDebugger:
        """Use ``new_pass`` instead of the pass called ``name`` (which must not have run yet)."""
        i = self._future_index(name)
        self.passes[i] = new_pass
        return self

    def insert(self, new_pass: Pass, *, before: str | None = None) -> PassDebugger:
        """Insert a pass before the one called ``before`` (default: as the next pass to run)."""
        i = self._future_index(before) if before else self.position
        self.passes.insert(i, new_pass)
        return self

    def remove(self, name: str) -> PassDebugger:
        del self.passes[self._future_index(name)]
        return self

    def _future_index(self, name: str) -> int:
        first = self.position + (1 if self._pending is not None else 0)
        for i in range(first, len(self.passes)):
            if self.passes[i].name == name:
                return i
        raise CompileError(
            f"no pass {name!r} ahead of the cursor",
            hint=f"passes still to run: {', '.join(self.names[first:]) or 'none'}",
        )

    # ---- views ---------------------------------------------------------------------------
    def view(self, **kwargs: Any) -> Any:
        """An Inspector over the passes run so far."""
        from caten_lab.notebook.inspector import Inspector

        return Inspector(self.trace, **kwargs)

    def show(self, **kwargs: Any) -> Any:
        from caten_lab.notebook.static_html import show

        return show(self.trace, **kwargs)

    # ---- internals -----------------------------------------------------------------------
    def _save(self) -> None:
        pend = self._pending
        self._history.append(
            _Snapshot(
                self.position,
                self.graph.copy(),
                dict(self.ctx.artifacts),
                len(self.records),
                None if pend is None else _Pending(**{**pend.__dict__}),
            )
        )

    def _run_pass(self, index: int) -> _Pending:
        p = self.passes[index]
        if self.verify:  # always: hand edits may bypass Graph methods (e.g. assigning .outputs)
            problems = check_graph(self.graph)
            if problems:
                self._history.pop()
                raise self._invariant_error(
                    "hand edit" if self.records else "input graph", problems, before=p.name
                )
        before = self.graph.copy()
        work = self.graph.copy()
        arts_before = dict(self.ctx.artifacts)
        self.ctx.rewrites = []
        t0 = time.perf_counter()
        try:
            out = p.run(work, self.ctx)
        except Exception as exc:
            self._history.pop()
            self.ctx.rewrites = None
            err = CompileError(
                f"pass {p.name!r} (#{index}) failed: {type(exc).__name__}: {exc}",
                hint="fix or replace the pass (dbg.replace(name, new_pass)), or dbg.skip() it",
            )
            err.pass_name = p.name  # type: ignore[attr-defined]
            raise err from exc
        wall = time.perf_counter() - t0
        after = work if out is None else out
        rewrites = list(self.ctx.rewrites or [])
        self.ctx.rewrites = None
        artifacts = {k: v for k, v in self.ctx.artifacts.items() if arts_before.get(k, _MISSING) is not v}
        kernel_before, kernel_after = arts_before.get(KERNEL_IR), self.ctx.artifacts.get(KERNEL_IR)
        rec = PassRecord(
            p.name,
            p.description,
            index,
            before,
            after.copy(),
            wall,
            0,
            len(before),
            len(after),
            rewrites,
            False,
            artifacts,
            kernel_before=kernel_before,
            kernel_after=kernel_after,
        )
        rec.changed = (bool(rewrites) or rec.kernel_changed or not before.structurally_equal(after)
                       or len(before) != len(after))
        # stepping replays graph rewrites on the graph; a codegen pass's kernel-IR rewrites are for
        # trace.program_at (the pass then finishes in one step)
        return _Pending(index, before, after, rec.graph_rewrites, rec, 0, artifacts)

    def _finish_pending(self) -> PassRecord:
        pend = self._pending
        assert pend is not None
        self.graph = pend.after
        self._pending = None
        self.position = pend.index + 1
        self.records.append(pend.record)
        self._check(pend.record.name)
        return pend.record

    def _check(self, pass_name: str, rewrite_index: int | None = None, rule: str | None = None) -> None:
        if not self.verify:
            return
        problems = check_graph(self.graph)
        if problems:
            if self.records and self.records[-1].name == pass_name and rewrite_index is None:
                self.records[-1].error = "invariant broken: " + problems[0]
            raise self._invariant_error(pass_name, problems, rewrite_index=rewrite_index, rule=rule)

    @staticmethod
    def _invariant_error(
        pass_name: str,
        problems: list[str],
        *,
        before: str | None = None,
        rewrite_index: int | None = None,
        rule: str | None = None,
    ) -> InvariantError:
        if pass_name == "hand edit":
            msg = f"the graph was edited by hand into an invalid state (found before running pass {before!r})"
        elif pass_name == "input graph":
            msg = f"the input graph is invalid (found before running pass {before!r})"
        else:
            msg = f"pass {pass_name!r} is the first to break a graph invariant"
            if rewrite_index is not None:
                msg += f", at its rewrite #{rewrite_index} ({rule})"
        err = InvariantError(
            msg + ":\n  " + "\n  ".join(problems[:8]),
            hint="back() returns to the last good state; inspect dbg.graph.dump()",
        )
        err.pass_name = pass_name
        err.rewrite_index = rewrite_index
        return err


_MISSING = object()
