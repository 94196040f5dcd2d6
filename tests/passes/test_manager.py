"""PassManager editing, running, tracing, failure reporting and verify mode; PassTrace reading."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest

from caten_lab.air import Graph, Pat, Rule, dtypes, interpret
from caten_lab.air.node import Node
from caten_lab.errors import CatenError, CompileError
from caten_lab.passes import (
    FunctionPass,
    PassContext,
    PassManager,
    PassTrace,
    RewritePass,
    graph_pass,
    graph_passes,
)


def small_graph() -> Graph:
    """x*1 + 0, a duplicated subexpression, a dead node and a const broadcast."""
    g = Graph()
    x = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32, name="x")
    one = g.insert("const", [], value=1.0, shape=(), dtype=dtypes.float32)
    one_b = g.insert("view", [one], shape=(2, 3), strides=(0, 0))
    a = g.insert("mul", [x, one_b])
    b = g.insert("add", [a, 0.0])
    s1 = g.insert("sin", [x])
    s2 = g.insert("sin", [x])
    g.insert("exp2", [x])  # dead
    out = g.insert("add", [g.insert("add", [b, s1]), s2])
    g.mark_output(out)
    return g


X = np.arange(6, dtype=np.float32).reshape(2, 3) / 7


def test_names_find_insert_remove_replace():
    pm = PassManager(graph_passes())
    assert pm.names() == ["typecheck", "fold_views", "const_fold", "simplify", "cse", "transpose_operands", "transpose_matmul", "dce"]
    assert pm.find("cse").name == "cse" and "cse" in pm and "nope" not in pm
    noop = FunctionPass("noop", "does nothing", lambda g, ctx: g)
    pm.insert("cse", noop)
    assert pm.names()[pm.index("cse") + 1] == "noop"
    pm.insert("typecheck", FunctionPass("first", "before typecheck", lambda g, ctx: None), before=True)
    assert pm.names()[0] == "first"
    pm.insert(2, FunctionPass("at2", "by position", lambda g, ctx: None))
    assert pm.names()[2] == "at2"
    removed = pm.remove("noop")
    assert removed is noop and "noop" not in pm
    old = pm.replace("dce", FunctionPass("dce", "my own dce", lambda g, ctx: g.prune() and None))
    assert old.description != pm.find("dce").description
    assert [d for n, d in pm.describe() if n == "dce"] == ["my own dce"]
    assert "my own dce" in repr(pm)
    with pytest.raises(CompileError, match="no pass named 'missing'.*\n.*passes: first"):
        pm.find("missing")
    with pytest.raises(CompileError, match="is not a pass"):
        pm.append(lambda g, ctx: g)  # type: ignore[arg-type]


def test_custom_pass_in_a_few_lines():
    @graph_pass("double_outputs", "multiply every output by 2")
    def double(graph, ctx):
        graph.outputs = [graph.insert("mul", [o, 2.0]) for o in graph.outputs]

    g = small_graph()
    expected = interpret(g, {"x": X})[0] * 2
    pm = PassManager(graph_passes()).append(double)
    res = pm.run(g, trace=True)
    np.testing.assert_allclose(interpret(res.graph, {"x": X})[0], expected, rtol=1e-6)
    assert res.trace["double_outputs"].description == "multiply every output by 2"
    assert res.trace["double_outputs"].changed

    @graph_pass()
    def count_nodes(graph, ctx):
        """Remember the node count."""
        ctx.artifacts["n_nodes"] = len(graph)

    assert count_nodes.name == "count_nodes" and count_nodes.description == "Remember the node count."
    res = PassManager([count_nodes]).run(small_graph(), trace=True)
    assert res.ctx.artifacts["n_nodes"] == len(small_graph())
    assert res.trace.records[0].artifacts == {"n_nodes": len(small_graph())}
    assert not res.trace.records[0].changed


def test_rewrite_pass_records_rules():
    rules = [Rule("x+0 -> x", Pat("add", ["x", 0]), lambda m: m["x"])]
    res = PassManager([RewritePass("my_simplify", "drop +0", rules)]).run(small_graph(), trace=True)
    rec = res.trace.records[0]
    assert [r.rule for r in rec.rewrites] == ["x+0 -> x"]
    assert rec.rewrites[0].location.startswith("test_manager.py:")
    assert rec.nodes_after == rec.nodes_before - 1


def test_trace_records_everything():
    g = small_graph()
    n0 = len(g)
    res = PassManager(graph_passes()).run(g, trace=True)
    tr = res.trace
    assert isinstance(tr, PassTrace) and len(tr) == 8
    for i, rec in enumerate(tr.records):
        assert rec.index == i and rec.error is None
        assert rec.wall_s >= 0 and rec.mem_bytes >= 0
        assert rec.nodes_before == len(rec.before) and rec.nodes_after == len(rec.after)
        if i:
            assert rec.before.structurally_equal(tr.records[i - 1].after)
    assert tr.records[0].nodes_before == n0
    assert tr.records[-1].nodes_after == len(res.graph)
    assert tr["typecheck"].artifacts == {"graph_symbols": []}
    assert not tr["typecheck"].changed and tr["simplify"].changed and tr["cse"].changed and tr["dce"].changed
    assert tr.total_s == pytest.approx(sum(r.wall_s for r in tr.records))
    rows = tr.table()
    assert [r["pass"] for r in rows] == tr.names()
    assert set(rows[0]) >= {"pass", "time_s", "share", "mem_bytes", "nodes_before", "nodes_after", "rewrites"}
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert sum(r["rewrites"] for r in rows) == sum(len(r.rewrites) for r in tr.records)
    text = tr.summary()
    assert "Total execution time" in text and all(n in text for n in tr.names())
    in_order = tr.summary(order="pipeline")
    positions = [in_order.index(f"  {n}") for n in tr.names()]
    assert positions == sorted(positions)
    # the final graph still computes the same thing
    np.testing.assert_allclose(
        interpret(res.graph, {"x": X})[0], interpret(small_graph(), {"x": X})[0], rtol=1e-6
    )


def test_graph_at_rebuilds_each_rewrite_prefix():
    g = small_graph()
    expected = interpret(g, {"x": X})[0]
    tr = PassManager(graph_passes()).run(g, trace=True).trace
    for rec in tr.records:
        assert tr.graph_at(rec.index, 0).structurally_equal(rec.before)
        assert len(tr.graph_at(rec.index, 0)) == len(rec.before)
        for k in range(len(rec.rewrites) + 1):
            gk = tr.graph_at(rec.index, k)
            gk.verify()
            np.testing.assert_allclose(interpret(gk, {"x": X})[0], expected, rtol=1e-6)
        assert tr.graph_at(rec.index).structurally_equal(rec.after)
        assert tr.graph_at(rec.name) is not rec.after  # a fresh copy each time
    # step-by-step: each prefix differs from the previous one by exactly one recorded rewrite
    rec = tr["simplify"]
    sizes = [len(tr.graph_at("simplify", k)) for k in range(len(rec.rewrites) + 1)]
    for k, rw in enumerate(rec.rewrites):
        assert sizes[k + 1] == sizes[k] + len(rw.produced) - len(rw.removed)
    with pytest.raises(CompileError, match="out of range"):
        tr.graph_at("simplify", len(rec.rewrites) + 1)
    with pytest.raises(CompileError, match="out of range"):
        tr.graph_at(99)


def test_trace_to_json():
    tr = PassManager(graph_passes()).run(small_graph(), trace=True).trace
    d = json.loads(json.dumps(tr.to_json()))
    assert d["format"] == "caten_lab.passtrace" and len(d["records"]) == 8
    rec = d["records"][3]
    assert rec["name"] == "simplify" and rec["rewrites"] and rec["before"]["format"] == "caten_lab.air"
    from caten_lab.air.serialize import from_json

    assert from_json(rec["after"]).structurally_equal(tr["simplify"].after)
    light = tr.to_json(graphs=False)
    assert "before" not in light["records"][0]


def test_tracing_off_records_nothing():
    seen = []

    @graph_pass("spy", "looks at the context")
    def spy(graph, ctx):
        seen.append((ctx.tracing, ctx.rewrites, tracemalloc.is_tracing()))

    res = PassManager([*graph_passes(), spy]).run(small_graph())
    assert res.trace is None
    assert seen == [(False, None, False)]
    res = PassManager([spy]).run(small_graph(), trace=True)
    assert seen[-1][0] is True and seen[-1][1] == [] and seen[-1][2] is True
    assert not tracemalloc.is_tracing()  # stopped again after the run
    assert res.ctx.rewrites is None


def test_tracing_off_makes_no_graph_copies(monkeypatch):
    copies = []
    real = Graph.copy

    def counting_copy(self):  # noqa: ANN001, ANN202
        copies.append(1)
        return real(self)

    monkeypatch.setattr(Graph, "copy", counting_copy)
    PassManager(graph_passes()).run(small_graph())
    assert copies == []
    PassManager(graph_passes()).run(small_graph(), trace=True)
    assert len(copies) == 9  # one before the first pass, one after each pass


def test_failing_pass_raises_compile_error_naming_it():
    @graph_pass("explode", "always fails")
    def explode(graph, ctx):
        raise ValueError("boom")

    pm = PassManager(graph_passes()).insert("const_fold", explode)
    with pytest.raises(CompileError, match=r"pass 'explode' \(#3\) failed: ValueError: boom") as info:
        pm.run(small_graph(), trace=True)
    err = info.value
    assert isinstance(err.__cause__, ValueError)
    assert err.pass_name == "explode" and err.pass_index == 3
    assert err.trace.names() == ["typecheck", "fold_views", "const_fold", "explode"]
    assert err.trace.failed.name == "explode" and "boom" in err.trace.records[-1].error
    assert err.trace.records[-1].after is not None
    with pytest.raises(CompileError, match="explode") as info:
        pm.run(small_graph())
    assert info.value.trace is None


def test_typecheck_failure_is_reported_by_the_manager():
    g = small_graph()
    node = g.producer_of(g.outputs[0])
    node.dtype = dtypes.float64  # corrupt the recorded type
    with pytest.raises(
        CompileError, match=r"(?s)pass .typecheck. \(#0\) failed: ShapeError.*recorded as float64"
    ):
        PassManager(graph_passes()).run(g)


def test_verify_mode_names_the_first_breaking_pass():
    @graph_pass("breaker", "leaves a dangling read")
    def breaker(graph, ctx):
        node = graph.producer_of(graph.outputs[0])
        node.reads[0] = "v_missing"  # bypasses the indices: the graph is now broken

    pm = PassManager([*graph_passes()[:2], breaker, *graph_passes()[2:]], verify=True)
    with pytest.raises(CompileError, match=r"broken after pass 'breaker' \(#2\)") as info:
        pm.run(small_graph(), trace=True)
    assert info.value.pass_name == "breaker"
    assert info.value.trace.records[-1].name == "breaker"
    # without verify the breakage goes unnoticed until someone checks the result
    pm.verify = False
    out = pm.run(small_graph()).graph
    with pytest.raises(CatenError, match="v_missing"):
        out.verify()


def test_pass_may_return_a_new_graph():
    def rebuild(graph, ctx):  # noqa: ANN001, ANN202
        return graph.copy()

    res = PassManager([FunctionPass("rebuild", "copy the graph", rebuild)]).run(small_graph(), PassContext())
    assert res.graph.structurally_equal(small_graph())


def test_trace_memory_can_be_skipped():
    res = PassManager(graph_passes()).run(small_graph(), trace=True, trace_memory=False)
    assert all(r.mem_bytes == 0 for r in res.trace.records)


def test_records_repr_and_rule_counts():
    tr = PassManager(graph_passes()).run(small_graph(), trace=True).trace
    assert "simplify" in repr(tr["simplify"]) and "PassTrace" in repr(tr)
    counts = tr["simplify"].rule_counts()
    assert sum(counts.values()) == len(tr["simplify"].rewrites)
    assert isinstance(tr.records[0].before, Graph)
    assert all(isinstance(n, Node) for n in tr.records[0].before.nodes)


def test_a_pass_returning_something_else_is_named():
    bad = FunctionPass("bad", "returns an int", lambda g, ctx: g.prune())
    with pytest.raises(CompileError, match=r"pass 'bad' \(#0\) returned int"):
        PassManager([bad]).run(small_graph())
    with pytest.raises(CompileError, match="pass 'bad'") as info:
        PassManager([bad]).run(small_graph(), trace=True)
    assert info.value.trace.failed.name == "bad"


def test_record_diff_names_added_removed_and_changed_nodes():
    tr = PassManager(graph_passes()).run(small_graph(), trace=True).trace
    d = tr["cse"].diff()
    assert len(d["removed"]) == 1 and not d["added"] and len(d["changed"]) == 1  # the second sin goes
    d = tr["dce"].diff()
    assert d["removed"] and not d["added"] and not d["changed"]
    d = tr["fold_views"].diff()
    assert d["added"] and d["removed"]
    assert tr["typecheck"].diff() == {"added": [], "removed": [], "changed": []}


def test_trace_json_is_strict_with_infinities():
    g = Graph()
    x = g.insert("allocate", [], shape=(2,), dtype=dtypes.float32, name="x")
    c = g.insert("const", [], value=float("-inf"), shape=(2,), dtype=dtypes.float32)
    g.mark_output(g.insert("max", [x, c]))
    inline = RewritePass(
        "inline_inf",
        "const -inf -> literal",
        [
            Rule(
                "const -> literal",
                Pat("const", where=lambda n: n.attrs.value == float("-inf")),
                lambda m: float("-inf"),
            )
        ],
    )
    tr = PassManager([inline, *graph_passes()]).run(g, trace=True).trace
    assert tr["inline_inf"].rewrites[0].replaced[1] == float("-inf")
    text = json.dumps(tr.to_json(), allow_nan=False)
    assert '"float": "-inf"' in text
    assert [n.op for n in tr.graph_at(len(tr) - 1).nodes] == ["allocate"]  # max(x, -inf) -> x
