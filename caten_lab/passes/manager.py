"""The PassManager: an editable list of passes, run in order, optionally traced and verified.

Tracing off, a run is a plain loop over ``pass.run(graph, ctx)``: no graph copies, no
tracemalloc, ``ctx.rewrites`` stays None. Tracing on, every pass gets a :class:`PassRecord`; a codegen
pass's record also holds the kernel program (``ctx.artifacts[KERNEL_IR]``) before and after it, which
costs nothing (the kernel IR is immutable) and its kernel-IR rewrites.
"""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from caten_lab.air.graph import Graph, state_outputs
from caten_lab.errors import CatenError, CompileError
from caten_lab.passes.base import Pass, PassContext
from caten_lab.passes.trace import KERNEL_IR, PassRecord, PassTrace
from caten_lab.type_words import a_type


@dataclass
class PassResult:
    """What :meth:`PassManager.run` returns: the final graph, the context and the trace (or None)."""

    graph: Graph
    ctx: PassContext
    trace: PassTrace | None


class PassManager:
    """A pipeline of passes. Edit it by pass name; ``verify=True`` checks the graph after every pass.

    ``kernel_check`` (e.g. ``caten_lab.codegen.kir_check.validate``), with ``verify=True``, checks the
    kernel program after every pass that changed it, so the first codegen pass to break the kernel IR
    is named.
    """

    def __init__(
        self, passes: Iterable[Pass] = (), *, verify: bool = False, kernel_check: Callable[[Any], Any] | None = None
    ) -> None:
        self.passes: list[Pass] = []
        self.verify = verify
        if kernel_check is not None and not callable(kernel_check):
            raise CompileError(
                f"kernel_check must be a function of the kernel program, not {a_type(kernel_check)} "
                f"{kernel_check!r:.60}",
                hint="PassManager(passes, verify=True, kernel_check=caten_lab.codegen.kir_check.validate)",
            )
        self.kernel_check = kernel_check
        for p in passes:
            self._check(p)
            self.passes.append(p)

    # ---- editing -------------------------------------------------------------------------
    def names(self) -> list[str]:
        return [p.name for p in self.passes]

    def describe(self) -> list[tuple[str, str]]:
        """(name, description) of each pass, in order."""
        return [(p.name, p.description) for p in self.passes]

    def index(self, name: str) -> int:
        for i, p in enumerate(self.passes):
            if p.name == name:
                return i
        raise CompileError(
            f"no pass named {name!r} in this pipeline", hint=f"passes: {', '.join(self.names()) or 'none'}"
        )

    def find(self, name: str) -> Pass:
        """The pass called ``name`` (CompileError listing the pipeline when absent)."""
        return self.passes[self.index(name)]

    def __contains__(self, name: object) -> bool:
        return any(p.name == name for p in self.passes)

    def insert(self, where: int | str, pass_: Pass, *, before: bool = False) -> PassManager:
        """Insert at a position, or after (``before=True``: before) the pass named ``where``."""
        self._check(pass_)
        if isinstance(where, str):
            i = self.index(where) + (0 if before else 1)
        else:
            i = where
        self.passes.insert(i, pass_)
        return self

    def append(self, pass_: Pass) -> PassManager:
        self._check(pass_)
        self.passes.append(pass_)
        return self

    def remove(self, name: str) -> Pass:
        """Remove the pass called ``name`` and return it."""
        return self.passes.pop(self.index(name))

    def replace(self, name: str, pass_: Pass) -> Pass:
        """Put ``pass_`` where the pass called ``name`` was; returns the old pass."""
        self._check(pass_)
        i = self.index(name)
        old = self.passes[i]
        self.passes[i] = pass_
        return old

    def copy(self) -> PassManager:
        return PassManager(list(self.passes), verify=self.verify, kernel_check=self.kernel_check)

    def __iter__(self) -> Iterator[Pass]:
        return iter(self.passes)

    def __len__(self) -> int:
        return len(self.passes)

    def __repr__(self) -> str:
        width = max((len(p.name) for p in self.passes), default=0)
        lines = [f"PassManager ({len(self.passes)} passes{', verify' if self.verify else ''}):"]
        lines += [f"  {i:2d}. {p.name:<{width}}  {p.description}" for i, p in enumerate(self.passes)]
        return "\n".join(lines)

    @staticmethod
    def _check(p: object) -> None:
        if not isinstance(p, Pass):
            raise CompileError(
                f"{p!r} is not a pass: it needs a `name`, a `description` and `run(graph, ctx)`",
                hint="wrap a function: FunctionPass(name, description, fn), or decorate it with @graph_pass",
            )

    # ---- running -------------------------------------------------------------------------
    def run(
        self, graph: Graph, ctx: PassContext | None = None, *, trace: bool = False, trace_memory: bool = True
    ) -> PassResult:
        """Run every pass in order; ``trace=True`` records a PassTrace (``trace_memory``: memory peaks)."""
        ctx = ctx if ctx is not None else PassContext()
        # which outputs update an input in place is decided by the graph as given, not as the passes leave it
        ctx.options["state_outputs"] = state_outputs(graph)
        if trace:
            return self._run_traced(graph, ctx, trace_memory)
        ctx.tracing = False
        ctx.rewrites = None
        for i, p in enumerate(self.passes):
            kernel_before = ctx.artifacts.get(KERNEL_IR) if self.verify else None
            try:
                out = p.run(graph, ctx)
            except Exception as exc:
                raise self._failure(p, i, exc, None) from exc
            graph = graph if out is None else _checked_result(p, i, out)
            if self.verify:
                self._verify(graph, p, i, None)
                self._check_kernel(ctx.artifacts.get(KERNEL_IR), kernel_before, p, i, None)
        return PassResult(graph, ctx, None)

    def _run_traced(self, graph: Graph, ctx: PassContext, trace_memory: bool) -> PassResult:
        ctx.tracing = True
        tr = PassTrace()
        started_tm = trace_memory and not tracemalloc.is_tracing()
        if started_tm:
            tracemalloc.start()
        try:
            snapshot: Graph | None = None  # a copy of ``graph`` as it is now (the previous pass's ``after``)
            for i, p in enumerate(self.passes):
                before = snapshot if snapshot is not None else graph.copy()
                arts_before = dict(ctx.artifacts)
                rewrites: list = []
                ctx.rewrites = rewrites
                rec = PassRecord(p.name, p.description, i, before, None, 0.0, 0, len(graph), len(graph))
                rec.kernel_before = arts_before.get(KERNEL_IR)
                tr.records.append(rec)
                if trace_memory:
                    tracemalloc.reset_peak()
                    base = tracemalloc.get_traced_memory()[0]
                error: Exception | None = None
                t0 = time.perf_counter()
                try:
                    out = p.run(graph, ctx)
                    graph = graph if out is None else _checked_result(p, i, out)
                except Exception as exc:  # recorded, then re-raised as CompileError below
                    error = exc
                rec.wall_s = time.perf_counter() - t0
                if trace_memory:
                    rec.mem_bytes = max(0, tracemalloc.get_traced_memory()[1] - base)
                rec.rewrites = rewrites  # what the pass recorded, even if it reassigned ctx.rewrites
                ctx.rewrites = None
                rec.artifacts = {
                    k: v for k, v in ctx.artifacts.items() if arts_before.get(k, _MISSING) is not v
                }
                rec.after = _safe_copy(graph)  # always a copy: a pass may edit nodes behind the indices
                snapshot = rec.after  # ... and the next pass's ``before`` (records are read-only snapshots)
                rec.nodes_after = len(graph)
                rec.kernel_after = ctx.artifacts.get(KERNEL_IR)
                rec.changed = bool(rec.rewrites) or rec.kernel_changed or _fingerprint(graph) != _fingerprint(before)
                if error is not None:
                    rec.error = f"{type(error).__name__}: {error}"
                    raise self._failure(p, i, error, tr) from error
                if self.verify:
                    self._verify(graph, p, i, tr)
                    self._check_kernel(rec.kernel_after, rec.kernel_before, p, i, tr)
        finally:
            ctx.rewrites = None
            if started_tm:
                tracemalloc.stop()
        return PassResult(graph, ctx, tr)

    def _verify(self, graph: Graph, p: Pass, i: int, tr: PassTrace | None) -> None:
        try:
            graph.verify()
        except CatenError as exc:
            if tr is not None and tr.records:
                tr.records[-1].error = f"verify: {exc.message}"
            err = CompileError(
                f"the graph is broken after pass {p.name!r} (#{i}): {exc.message}",
                where=exc.where,
                hint=f"pass {p.name!r} is the first to break a graph invariant; inspect err.trace",
            )
            err.trace = tr  # type: ignore[attr-defined]
            err.pass_name = p.name  # type: ignore[attr-defined]
            err.pass_index = i  # type: ignore[attr-defined]
            raise err from exc

    def _check_kernel(self, program: Any, before: Any, p: Pass, i: int, tr: PassTrace | None) -> None:
        """Run ``kernel_check`` on a kernel program the pass made or changed."""
        if self.kernel_check is None or program is None or program is before:
            return
        try:
            self.kernel_check(program)
        except CatenError as exc:
            if tr is not None and tr.records:
                tr.records[-1].error = f"kernel check: {exc.message}"
            err = CompileError(
                f"the kernel program is broken after pass {p.name!r} (#{i}): {exc.message}",
                where=exc.where,
                hint=f"pass {p.name!r} is the first to break the kernel IR; "
                "inspect err.trace.program_at(err.pass_name).text()",
            )
            err.trace = tr  # type: ignore[attr-defined]
            err.pass_name = p.name  # type: ignore[attr-defined]
            err.pass_index = i  # type: ignore[attr-defined]
            raise err from exc

    @staticmethod
    def _failure(p: Pass, i: int, exc: Exception, tr: PassTrace | None) -> CompileError:
        where = exc.where if isinstance(exc, CatenError) else None
        msg = exc.message if isinstance(exc, CatenError) else str(exc)
        err = CompileError(
            f"pass {p.name!r} (#{i}) failed: {type(exc).__name__}: {msg}",
            where=where,
            hint=(exc.hint if isinstance(exc, CatenError) and exc.hint else None)
            or f"run with trace=True and inspect err.trace; or remove the pass: pm.remove({p.name!r})",
        )
        err.trace = tr  # type: ignore[attr-defined]
        err.pass_name = p.name  # type: ignore[attr-defined]
        err.pass_index = i  # type: ignore[attr-defined]
        return err


_MISSING = object()


def _checked_result(p: Pass, i: int, out: object) -> Graph:
    if not isinstance(out, Graph):
        raise CompileError(
            f"pass {p.name!r} (#{i}) returned {type(out).__name__} {out!r:.60}, not a Graph",
            hint="a pass returns the graph it was given (or a new one), or None after editing it in place",
        )
    return out


def _fingerprint(g: Graph) -> tuple:
    """Change detector (tracing only): live structure plus node count (so dead-code removal counts)."""
    try:
        return g.structural_key(), len(g)
    except (CatenError, KeyError):  # a broken graph (verify reports it): compare by version instead
        return None, g.version, len(g)


def _safe_copy(g: Graph) -> Graph | None:
    try:
        return g.copy()
    except CatenError:
        return None
