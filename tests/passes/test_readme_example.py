"""The examples of the passes README section run as written."""

from __future__ import annotations

import numpy as np

from caten_lab.air import Graph, Pat, Rule, dtypes, interpret
from caten_lab.passes import RewritePass, graph_pass, graph_pipeline, simplify_pass


def test_readme_example():
    g = Graph()
    x = g.insert("allocate", [], shape=(3,), dtype=dtypes.float32, name="x")
    g.mark_output(g.insert("add", [g.insert("neg", [g.insert("neg", [x])]), 0.0]))

    pm = graph_pipeline(verify=True)
    assert pm.names() == ["typecheck", "fold_views", "const_fold", "simplify", "cse", "transpose_operands", "transpose_matmul", "dce"]
    pm.remove("cse")
    pm.replace("simplify", simplify_pass(fast_math=True))

    @graph_pass("count", "remember the node count")
    def count(graph, ctx):
        ctx.artifacts["n_nodes"] = len(graph)

    double_neg = RewritePass(
        "no_double_neg", "-(-x) -> x", [Rule("-(-x) -> x", Pat("neg", [Pat("neg", ["x"])]), lambda m: m["x"])]
    )
    pm.append(count).insert("typecheck", double_neg)
    res = pm.run(g, trace=True)
    tr = res.trace
    assert tr.names() == [
        "typecheck",
        "no_double_neg",
        "fold_views",
        "const_fold",
        "simplify",
        "transpose_operands",
        "transpose_matmul",
        "dce",
        "count",
    ]
    assert tr["no_double_neg"].rule_counts() == {"-(-x) -> x": 1}
    assert res.ctx.artifacts["n_nodes"] == 1
    assert len(tr.graph_at("no_double_neg", 1)) == 2
    assert "Total execution time" in tr.summary() and tr.table()[0]["pass"] == "typecheck"
    data = np.array([1.0, -2.0, 3.0], np.float32)
    np.testing.assert_array_equal(interpret(res.graph, {"x": data})[0], data)
