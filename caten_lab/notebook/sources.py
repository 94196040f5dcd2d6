"""Accept whatever a user holds (a PassTrace, a compiled Program, a PassResult, a failed compile's error,
a %%caten result) and find the trace and the program in it, reading attributes only."""

from __future__ import annotations

from typing import Any

from caten_lab.errors import CatenError


def trace_and_program(obj: Any) -> tuple[Any, Any]:
    """(trace, program or None). Raises CatenError when ``obj`` carries no trace."""
    program = None
    trace = None
    if hasattr(obj, "records") and hasattr(obj, "graph_at"):
        trace = obj
    elif hasattr(obj, "c_source") or hasattr(obj, "schedule"):  # a compiled Program
        program, trace = obj, getattr(obj, "trace", None)
    elif hasattr(obj, "program") and hasattr(obj, "trace"):  # a %%caten result
        program, trace = obj.program, obj.trace
    elif hasattr(obj, "trace"):  # PassResult, or CompileError with a partial trace
        trace = obj.trace
    if trace is None:
        raise CatenError(
            f"{type(obj).__name__} carries no pass trace to show",
            hint="compile with trace=True (caten_lab.compiler.compile(graph, trace=True)) or use %%caten",
        )
    return trace, program
