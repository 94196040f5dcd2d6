"""Find a miscompile in one call: the first pass, and the first rewrite in it, after which the
program's outputs differ from the NumPy interpreter's.

The pipeline runs once with tracing; then the graph after pass i (``trace.graph_at(i)``) is
interpreted and compared with the reference, by binary search over the passes (O(log P)
interpretations) and, inside the guilty pass, over its recorded rewrites (O(log R)). If every
graph agrees but the compiled program does not, the blame goes to code generation (the C, its
compiler or the runtime), with the source attached.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten_lab.air.graph import Graph
from caten_lab.air.interpreter import interpret
from caten_lab.errors import CatenError


@dataclass
class BisectResult:
    """Where outputs first go wrong. ``ok`` when nothing differs."""

    ok: bool
    stage: str = ""  # "pass" | "codegen" | "" (ok)
    pass_name: str | None = None
    pass_index: int | None = None
    rewrite_index: int | None = None  # 1-based: outputs differ after this many rewrites of the pass
    rule: str | None = None
    location: str | None = None
    matched: list[int] = field(default_factory=list)
    output_index: int | None = None
    max_abs_err: float | None = None
    detail: str = ""
    evaluations: int = 0
    trace: Any = None

    def __repr__(self) -> str:
        if self.ok:
            return f"<BisectResult ok: every stage matches the NumPy interpreter ({self.evaluations} evaluations)>"
        where = (
            f"pass {self.pass_name!r} (#{self.pass_index})"
            if self.stage == "pass"
            else "code generation / runtime"
        )
        rw = f", rewrite #{self.rewrite_index} {self.rule!r} at {self.location}" if self.rewrite_index else ""
        err = (
            f", max |err| {self.max_abs_err:.3g} in output {self.output_index}"
            if self.max_abs_err is not None
            else ""
        )
        return f"<BisectResult miscompile in {where}{rw}{err}; {self.detail}>"


def _compare(
    got: list[np.ndarray], ref: list[np.ndarray], rtol: float, atol: float
) -> tuple[int, float | None, str] | None:
    """None when equal; else (output index, max abs error or None, description)."""
    if len(got) != len(ref):
        return 0, None, f"{len(got)} outputs instead of {len(ref)}"
    for i, (a, b) in enumerate(zip(got, ref)):
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            return i, None, f"output {i} has shape {a.shape} instead of {b.shape}"
        if a.dtype.kind == "b" or b.dtype.kind == "b":
            if not np.array_equal(a, b):
                return i, float(np.sum(a != b)), f"output {i}: {int(np.sum(a != b))} booleans differ"
            continue
        if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            err = float(np.nanmax(np.abs(a.astype(np.float64) - b.astype(np.float64))))
            return i, err, f"output {i} differs (max |err| {err:.3g})"
    return None


def bisect_miscompile(
    graph: Graph,
    inputs: dict[str, np.ndarray],
    *,
    pipeline: Any = None,
    symbols: dict[str, int] | None = None,
    rtol: float = 1e-4,
    atol: float = 1e-5,
    run_program: bool | Callable[..., list[np.ndarray]] = True,
) -> BisectResult:
    """Bisect ``pipeline`` (default: the compiler's) for the first stage whose outputs differ.

    ``run_program``: True compiles with :func:`caten_lab.compiler.compile` and runs the program when
    all graphs agree; a callable ``(graph, inputs, symbols) -> outputs`` runs a custom backend;
    False checks the graphs only.
    """
    from caten_lab.notebook.compile_bridge import default_pipeline

    symbols = symbols or {}
    pm = pipeline if pipeline is not None else default_pipeline()
    if isinstance(pm, (list, tuple)):
        from caten_lab.passes import PassManager

        pm = PassManager(list(pm))
    counter = [0]

    def evaluate(g: Graph) -> list[np.ndarray] | str:
        counter[0] += 1
        try:
            return interpret(g, {k: np.array(v, copy=True) for k, v in inputs.items()}, symbols)
        except (CatenError, ValueError, TypeError, IndexError) as exc:
            return f"the graph cannot be evaluated: {type(exc).__name__}: {exc}"

    reference = evaluate(graph)
    if isinstance(reference, str):
        raise CatenError(f"the input graph itself fails in the NumPy interpreter: {reference}")
    try:
        result = pm.run(graph.copy(), trace=True)
        trace = result.trace
    except CatenError as exc:  # a pass crashed: that is the first bad stage
        trace = getattr(exc, "trace", None)
        failed = trace.records[-1] if trace is not None and trace.records else None
        return BisectResult(
            False,
            "pass",
            failed.name if failed else getattr(exc, "pass_name", None),
            failed.index if failed else None,
            detail=f"the pass raised: {exc.message}",
            evaluations=counter[0],
            trace=trace,
        )
    records = trace.records

    def bad_after(i: int, k: int | None = None) -> tuple[int, float | None, str] | None:
        got = evaluate(trace.graph_at(i, k))
        if isinstance(got, str):
            return 0, None, got
        return _compare(got, reference, rtol, atol)

    n = len(records)
    if n and bad_after(n - 1) is not None:
        lo, hi = -1, n - 1  # invariant: after lo is good (-1: the input), after hi is bad
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if bad_after(mid) is None:
                lo = mid
            else:
                hi = mid
        rec = records[hi]
        mismatch = bad_after(hi)
        assert mismatch is not None
        res = BisectResult(
            False,
            "pass",
            rec.name,
            hi,
            output_index=mismatch[0],
            max_abs_err=mismatch[1],
            detail=mismatch[2],
            trace=trace,
        )
        rws = rec.graph_rewrites  # a codegen pass's kernel-IR rewrites do not change the graph
        if rws and bad_after(hi, len(rws)) is not None:
            klo, khi = 0, len(rws)  # after klo rewrites good, after khi bad
            while khi - klo > 1:
                mid = (klo + khi) // 2
                if bad_after(hi, mid) is None:
                    klo = mid
                else:
                    khi = mid
            rw = rws[khi - 1]
            res.rewrite_index, res.rule, res.location, res.matched = (
                khi,
                rw.rule,
                rw.location,
                list(rw.matched),
            )
        elif rws:
            res.detail += "; every recorded rewrite is fine: the change happened outside the rewriter"
        res.evaluations = counter[0]
        return res
    if run_program is False:
        return BisectResult(True, evaluations=counter[0], trace=trace)
    outputs, detail, c_source = _run_backend(graph, inputs, symbols, run_program)
    counter[0] += 1
    if isinstance(outputs, str):
        return BisectResult(False, "codegen", detail=outputs, evaluations=counter[0], trace=trace)
    mismatch = _compare(outputs, reference, rtol, atol)
    if mismatch is None:
        return BisectResult(True, evaluations=counter[0], trace=trace)
    return BisectResult(
        False,
        "codegen",
        output_index=mismatch[0],
        max_abs_err=mismatch[1],
        detail=mismatch[2] + "; every graph pass agrees with the interpreter, so look at the "
        "generated C" + (f" ({c_source.count(chr(10)) + 1} lines)" if c_source else ""),
        evaluations=counter[0],
        trace=trace,
    )


def _run_backend(
    graph: Graph,
    inputs: dict[str, np.ndarray],
    symbols: dict[str, int],
    run_program: bool | Callable[..., list[np.ndarray]],
) -> tuple[list[np.ndarray] | str, str, str | None]:
    feed = {k: np.array(v, copy=True) for k, v in inputs.items()}
    try:
        if callable(run_program):
            return list(run_program(graph, feed, symbols)), "", None
        from caten_lab.notebook.compile_bridge import compile_traced

        program = compile_traced(graph)
        return list(program(feed, symbols or None)), "", getattr(program, "c_source", None)
    except CatenError as exc:
        return f"the compiled program failed: {exc.message}", "", None
