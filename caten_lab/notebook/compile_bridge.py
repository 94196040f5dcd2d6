"""The notebook's one door into the compiler: compile a graph with tracing on and run the program.

Everything goes through ``caten_lab.compiler`` (compile, default_pipeline). Only while that module
is missing (early development, or a broken install) does a NumPy fallback run the graph passes with a
traced PassManager and execute the result with the AIR interpreter, so the workbench still shows
passes; the Inspector then says so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from caten_lab.air.graph import Graph
from caten_lab.air.interpreter import interpret


def default_pipeline() -> Any:
    """The compiler's default PassManager (or the graph passes only, without the compiler)."""
    try:
        from caten_lab.compiler import default_pipeline as _default
    except ImportError:
        return _graph_passes_only()
    return _default()


def codegen_pass_names() -> set[str]:
    """Names of the passes that turn the graph into code (schedule ... render): never optional."""
    try:
        from caten_lab.codegen.passes import codegen_passes
    except ImportError:
        return set()
    return {p.name for p in codegen_passes()}


def _graph_passes_only() -> Any:
    from caten_lab.passes.graph_pipeline import graph_pipeline

    return graph_pipeline()


@dataclass
class InterpretedProgram:
    """A stand-in Program used only when caten_lab.compiler is unavailable: graph passes + NumPy interpreter."""

    graph: Graph
    trace: Any
    backend: str = "numpy (interpreter; caten_lab.compiler unavailable)"
    c_source: str | None = None
    source_map: list | None = None
    kernel_lines: dict | None = None
    schedule: Any = None
    flags: list[str] = field(default_factory=list)
    compile_s: float = 0.0
    cc_s: float | None = None

    def __call__(
        self, inputs: dict[str, np.ndarray], symbols: dict[str, int] | None = None
    ) -> list[np.ndarray]:
        return interpret(self.graph, inputs, symbols or {})


def compile_traced(
    graph: Graph,
    *,
    pipeline: Any = None,
    backend: str | None = None,
    safety: int | None = None,
    force: bool = False,
) -> Any:
    """``caten_lab.compiler.compile(graph, trace=True, ...)``; the fallback when the compiler is missing."""
    try:
        from caten_lab.compiler import compile as _compile
    except ImportError:
        pm = pipeline if pipeline is not None else _graph_passes_only()
        t0 = time.perf_counter()
        res = pm.run(graph.copy(), trace=True)
        return InterpretedProgram(res.graph, res.trace, compile_s=time.perf_counter() - t0)
    return _compile(graph, backend=backend, safety=safety, trace=True, pipeline=pipeline, force=force)


def reference_outputs(
    graph: Graph, inputs: dict[str, np.ndarray], symbols: dict[str, int] | None = None
) -> list:
    """The NumPy interpreter's outputs: the semantics every backend must reproduce."""
    return interpret(graph, {k: np.array(v, copy=True) for k, v in inputs.items()}, symbols or {})
