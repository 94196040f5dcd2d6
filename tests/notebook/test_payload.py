"""The Inspector's JSON document: compact, faithful to the trace, and replayable per rewrite."""

from __future__ import annotations

import json

from caten_lab.air.serialize import to_json
from caten_lab.notebook.payload import payload_graph, replay_payload, trace_payload


def _ids_and_reads(records):
    return [(r["id"], r["op"], [x if isinstance(x, str) else x["lit"] for x in r["reads"]]) for r in records]


def _graph_ids_and_reads(g):
    return [(n.id, n.op, [x if isinstance(x, str) else str(x) for x in n.reads]) for n in g.nodes]


def test_payload_has_every_pass_and_dedups_graphs(traced):
    _, res = traced
    p = trace_payload(res.trace)
    assert [x["name"] for x in p["passes"]] == ["const_fold", "simplify", "fold_views"]
    assert json.loads(json.dumps(p)) == p  # JSON-ready
    # after of pass i is before of pass i+1: interned once
    assert p["passes"][0]["after"] == p["passes"][1]["before"]
    assert p["passes"][2]["changed"] is False and p["passes"][2]["before"] == p["passes"][2]["after"]
    # fewer node records than the sum of graph sizes (shared nodes are stored once)
    assert len(p["nodes"]) < sum(len(g["nodes"]) for g in p["graphs"])


def test_payload_graphs_match_the_trace(traced):
    _, res = traced
    p = trace_payload(res.trace)
    for i, rec in enumerate(res.trace.records):
        assert _ids_and_reads(payload_graph(p, p["passes"][i]["before"])) == _graph_ids_and_reads(rec.before)
        assert _ids_and_reads(payload_graph(p, p["passes"][i]["after"])) == _graph_ids_and_reads(rec.after)
        assert p["passes"][i]["n_rewrites"] == len(rec.rewrites)


def test_client_replay_matches_graph_at_for_every_rewrite(traced):
    """The front-end's replay (mirrored in Python) reproduces PassTrace.graph_at(i, k) node for node."""
    _, res = traced
    p = trace_payload(res.trace)
    checked = 0
    for i, rec in enumerate(res.trace.records):
        for k in range(len(rec.rewrites) + 1):
            nodes, outputs = replay_payload(p, i, k)
            ref = res.trace.graph_at(i, k)
            assert sorted(_ids_and_reads(nodes)) == sorted(_graph_ids_and_reads(ref))
            assert outputs == [str(o) for o in ref.outputs]  # the client sees value ids as text
            checked += 1
    assert checked >= 5
    # and the final state equals the recorded after-graph (up to node order: the pass re-sorts)
    last = p["passes"][1]
    nodes, _ = replay_payload(p, 1, last["n_rewrites"])
    assert sorted(_ids_and_reads(nodes)) == sorted(_ids_and_reads(payload_graph(p, last["after"])))


def test_payload_carries_provenance_and_source_lines(program):
    p = trace_payload(program.trace, program=program)
    assert [k["name"] for k in p["kernels"]] == ["k0", "k1"]
    assert p["c"]["kernel_lines"] == {"k0": [3, 7], "k1": [8, 10]}
    assert len(p["c"]["source_map"]) == program.c_source.count("\n") + 1
    assert p["c"]["flags"] == "-O2 -fPIC"
    srcs = {r["src"] for r in p["nodes"] if r["src"]}
    assert "model.py:5" in srcs


def test_literals_are_tagged_not_confused_with_values(traced):
    g, res = traced
    p = trace_payload(res.trace)
    mul = next(r for r in p["nodes"] if r["op"] == "mul" and any(isinstance(x, dict) for x in r["reads"]))
    assert {"lit": "1.0"} in mul["reads"]
    assert to_json(g)  # the graph itself still serializes


def test_payload_of_a_real_compile_links_kernels_and_c_lines_to_graph_nodes():
    """With caten_lab.compiler: kernel node ids and source-map ids are nodes of the scheduled graph."""
    import numpy as np

    from caten_lab.compiler import compile as caten_compile
    from caten_lab.frontend import Tensor, build_graph
    from caten_lab.notebook.inspector import build_payload

    x = Tensor.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4), name="x")
    w = Tensor.from_numpy(np.ones((4, 5), dtype=np.float32), name="w")
    g, arrays = build_graph([((x @ w) * 1.0).relu().sum(axis=1)])
    prog = caten_compile(g, trace=True, backend="c")
    p = build_payload(prog, highlight_c=True, profile_chart=True)
    assert p["profile"]["png"]
    sched = next(i for i, q in enumerate(p["passes"]) if "schedule" in q["artifacts"])
    ids = {r["id"] for r in payload_graph(p, p["passes"][sched]["after"])}
    assert p["kernels"] and all(set(k["node_ids"]) <= ids for k in p["kernels"])
    mapped = {i for line in p["c"]["source_map"] for i in line}
    assert mapped and mapped <= ids
    assert len(p["c"]["lines_html"]) == len(p["c"]["source_map"]) == len(prog.c_source.splitlines())
    first, last = next(iter(p["c"]["kernel_lines"].values()))
    assert 1 <= first <= last <= len(p["c"]["source_map"])
    np.testing.assert_allclose(
        prog(arrays)[0],
        np.maximum(arrays["x"] @ arrays["w"], 0).sum(axis=1, keepdims=True).reshape(prog(arrays)[0].shape),
    )
