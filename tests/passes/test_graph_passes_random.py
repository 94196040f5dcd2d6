"""Differential tests: every graph pass (and the whole default list) keeps interpreter results equal."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from passes_graphgen import assert_same_results, programs, run, symbolic_programs

from caten_lab.passes import (
    PassContext,
    PassManager,
    const_fold_pass,
    cse_pass,
    dce_pass,
    fold_views_pass,
    graph_passes,
    simplify_pass,
    typecheck_pass,
)

SCALE = float(os.environ.get("CATEN_SLOW_SCALE", "1"))  # 1 = the reduced CI size; 30 = thousands
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(
    max_examples=max(20, int(100 * SCALE)), deadline=None, suppress_health_check=list(HealthCheck)
)

PASS_FACTORIES = {
    "typecheck": typecheck_pass,
    "fold_views": fold_views_pass,
    "const_fold": const_fold_pass,
    "simplify": simplify_pass,
    "cse": cse_pass,
    "dce": dce_pass,
}


@pytest.mark.parametrize("name", list(PASS_FACTORIES))
@FAST
@given(prog=programs())
def test_each_pass_preserves_results(name, prog):
    g, inputs = prog
    expected = run(g, inputs)
    p = PASS_FACTORIES[name]()
    out = p.run(g, PassContext())
    out.verify()
    assert_same_results(expected, run(out, inputs))


@FAST
@given(prog=programs())
def test_default_pipeline_preserves_results_and_never_grows(prog):
    g, inputs = prog
    expected = run(g, inputs)
    n_before = len(g)
    res = PassManager(graph_passes(), verify=True).run(g)
    assert len(res.graph) <= n_before
    assert_same_results(expected, run(res.graph, inputs))


@FAST
@given(prog=programs())
def test_pipeline_is_idempotent(prog):
    """A second run of the default passes finds nothing left to do (unless CSE exposed new work)."""
    g, inputs = prog
    expected = run(g, inputs)
    res = PassManager(graph_passes()).run(g, trace=True, trace_memory=False)
    first = res.graph
    if res.trace["cse"].rewrites:
        again = PassManager(graph_passes()).run(first).graph
        assert_same_results(expected, run(again, inputs))
        return
    key = first.structural_key()
    n = len(first)
    res = PassManager(graph_passes()).run(first, trace=True, trace_memory=False)
    assert res.graph.structural_key() == key
    assert len(res.graph) == n
    assert all(not r.rewrites for r in res.trace.records)


@FAST
@given(prog=programs())
def test_traced_rewrites_replay_to_every_intermediate_state(prog):
    """graph_at(pass, k) equals running the pass's rewriter for exactly k rewrites, for every k."""
    g, inputs = prog
    expected = run(g, inputs)
    res = PassManager(graph_passes(), verify=True).run(g, trace=True, trace_memory=False)
    for rec in res.trace.records:
        rewriter = getattr(pass_named(rec.name), "_rewriter", None)
        for k in range(len(rec.rewrites) + 1):
            at_k = res.trace.graph_at(rec.index, k)
            at_k.verify()
            assert_same_results(expected, run(at_k, inputs))
            if rewriter is not None:
                step = rec.before.copy()
                rewriter.run(step, stop_after=k) if k else None
                assert step.structural_key() == at_k.structural_key()
                assert len(step) == len(at_k)
        full = res.trace.graph_at(rec.index, len(rec.rewrites))
        assert full.structural_key() == rec.after.structural_key()
        assert len(full) == len(rec.after)


@FAST
@given(prog=symbolic_programs())
def test_symbolic_programs_keep_results(prog):
    """A symbolic first dimension: the passes keep the results for the bound size."""
    g, inputs, symbols = prog
    expected = run(g, inputs, symbols)
    res = PassManager(graph_passes(), verify=True).run(g, trace=True, trace_memory=False)
    assert res.ctx.artifacts["graph_symbols"] == ["n"]
    assert_same_results(expected, run(res.graph, inputs, symbols))
    for rec in res.trace.records:
        mid = res.trace.graph_at(rec.index, len(rec.rewrites) // 2)
        assert_same_results(expected, run(mid, inputs, symbols))


_PIPELINES: dict[str, PassManager] = {}


def pass_named(name: str):  # noqa: ANN201
    """The pass object of that name (the default list is rebuilt identically each time)."""
    pm = _PIPELINES.setdefault("default", PassManager(graph_passes()))
    return pm.find(name)


@pytest.mark.slow
@SLOW
@given(prog=programs(max_ops=30))
def test_default_pipeline_many_programs(prog):
    g, inputs = prog
    expected = run(g, inputs)
    res = PassManager(graph_passes(fast_math=False), verify=True).run(g, trace=True, trace_memory=False)
    assert_same_results(expected, run(res.graph, inputs))
    for rec in res.trace.records:
        at = res.trace.graph_at(rec.index, len(rec.rewrites) // 2)
        assert_same_results(expected, run(at, inputs))
