"""Fixtures: a real traced compile of a small graph (PassManager + PassTrace from caten_lab.passes),
and a compiled-program stand-in carrying a schedule, C source and source map with the contract's names."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from caten_lab.air import Graph, interpret
from caten_lab.passes import PassManager
from caten_lab.passes.const_fold import const_fold_pass
from caten_lab.passes.fold_views import fold_views_pass
from caten_lab.passes.simplify import simplify_pass


def small_graph() -> Graph:
    """exp2(a*1 + 0 + 2*3) plus an untouched branch: const folding and simplification both fire."""
    g = Graph()
    a = g.insert("allocate", [], shape=(4, 4), dtype="float32", name="a", source="model.py:1")
    b = g.insert("mul", [a, 1.0], source="model.py:2")
    c = g.insert("add", [b, 0.0], source="model.py:3")
    k = g.insert("const", [], value=2.0, shape=(4, 4), dtype="float32")
    k2 = g.insert("mul", [k, 3.0])
    d = g.insert("add", [c, k2], source="model.py:4")
    e = g.insert("exp2", [d], source="model.py:5")
    f = g.insert("sqrt", [a])
    h = g.insert("max", [e, f])
    g.mark_output(h)
    return g


def pipeline() -> PassManager:
    return PassManager([const_fold_pass(), simplify_pass(), fold_views_pass()])


@pytest.fixture
def traced():
    """(graph before, PassResult with trace)."""
    g = small_graph()
    res = pipeline().run(g.copy(), trace=True)
    return g, res


@dataclass
class FakeKernel:
    name: str
    graph: Any
    inputs: list[str]
    outputs: list[str]
    node_ids: list[int]
    key: str = ""


@dataclass
class FakeSchedule:
    kernels: list[FakeKernel]
    buffers: dict = field(default_factory=dict)
    symbols: list = field(default_factory=list)


@dataclass
class FakeProgram:
    """The compiler contract's Program attributes, for a graph 'compiled' by the interpreter."""

    graph: Graph
    trace: Any
    c_source: str
    source_map: list
    kernel_lines: dict
    schedule: FakeSchedule
    flags: list = field(default_factory=lambda: ["-O2", "-fPIC"])
    compile_s: float = 0.01
    cc_s: float = 0.2
    backend: str = "c"

    def __call__(self, inputs, symbols=None):
        return interpret(self.graph, inputs, symbols or {})


def fake_program(graph: Graph, trace: Any) -> FakeProgram:
    nodes = [n for n in graph.nodes if n.op != "allocate"]
    half = max(1, len(nodes) // 2)
    k0, k1 = nodes[:half], nodes[half:]
    c_lines = [
        "#include <math.h>",
        "",
        "void k0(float *restrict out, const float *restrict a) {",
        "  for (int i = 0; i < 16; i++) {",
        "    out[i] = exp2f(a[i] + 6.0f);",
        "  }",
        "}",
        "void k1(float *restrict out, const float *restrict a, const float *restrict t) {",
        "  for (int i = 0; i < 16; i++) out[i] = fmaxf(t[i], sqrtf(a[i]));",
        "}",
    ]
    smap: list[list[int]] = [[] for _ in c_lines]
    for ln in (3, 4, 5, 6):
        smap[ln - 1] = [n.id for n in k0]
    for ln in (8, 9):
        smap[ln - 1] = [n.id for n in k1]
    sched = FakeSchedule(
        [
            FakeKernel("k0", None, ["a"], ["t"], [n.id for n in k0]),
            FakeKernel("k1", None, ["a", "t"], ["out"], [n.id for n in k1]),
        ]
    )
    return FakeProgram(graph, trace, "\n".join(c_lines), smap, {"k0": (3, 7), "k1": (8, 10)}, sched)


@pytest.fixture
def program(traced):
    _, res = traced
    return fake_program(res.graph, res.trace)


@pytest.fixture
def inputs():
    return {"a": np.arange(16, dtype=np.float32).reshape(4, 4) / 8}


def _load_kernel_passes():
    """tests/passes/kernel_passes.py (the toy codegen pipeline), shared with the trace tests."""
    name = "kernel_passes"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "passes" / "kernel_passes.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


kernel_passes = _load_kernel_passes()
