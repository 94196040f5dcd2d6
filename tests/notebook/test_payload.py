"""The Inspector's JSON document: compact, faithful to the trace, and replayable per rewrite."""

from __future__ import annotations

import json

import pytest

from caten_lab.air import Graph
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


def test_constants_print_rounded_and_short_ones_unchanged():
    from caten_lab.notebook.payload import node_record

    g = Graph()
    a = g.insert("allocate", [], shape=(4,), dtype="float32", name="a")
    m = g.insert("mul", [a, 0.0013020833333333333])
    one = g.insert("mul", [m, 1.0])
    big = g.insert("mul", [one, 123456789.0])
    g.mark_output(big)
    reads = [node_record(n)["reads"] for n in g.nodes[1:]]
    assert reads[0][1] == {"lit": "0.00130208"}
    assert reads[1][1] == {"lit": "1.0"}  # short reprs stay as they are
    assert reads[2][1] == {"lit": "1.23457e+08"}
    assert float(reads[0][1]["lit"]) == pytest.approx(0.0013020833333333333, rel=1e-5)


def _rng_program():
    import numpy as np

    from caten_lab.compiler import compile as caten_compile
    from caten_lab.frontend import Tensor, build_graph

    x = Tensor.randn(4, 8)
    w = Tensor.from_numpy(np.ones((8, 3), dtype=np.float32), name="w")
    g, _ = build_graph([(x @ w).relu()])
    return g, caten_compile(g, trace=True, backend="c")


def test_random_number_internals_are_one_group_and_the_model_is_not():
    """Tensor.randn's Threefry + Box-Muller nodes carry "grp"; the matmul, relu and weight do not."""
    g, prog = _rng_program()
    p = trace_payload(prog.trace, program=prog)
    first = payload_graph(p, p["passes"][0]["before"])
    grouped = [r for r in first if r.get("grp")]
    rest = [r for r in first if not r.get("grp")]
    assert len({r["grp"] for r in grouped}) == 1 and grouped[0]["grp"].startswith("rng ")
    # every uint32 op (the generator) and the float conversion (log2, sqrt, sin) are in the group
    assert all(r.get("grp") for r in first if r["dtype"] == "uint32")
    assert {"xor", "idiv", "log2", "sqrt", "sin", "cast"} <= {r["op"] for r in grouped}
    # the model itself is not: the weight, the matmul's reduce, the relu (max), the output
    ops_rest = {r["op"] for r in rest}
    assert {"allocate", "reduce", "max"} <= ops_rest
    assert len(grouped) > 10 * len(rest)
    # the group ends where the random tensor is used: the group's values are read by a node outside it
    grouped_out = {r["out"] for r in grouped}
    assert any(x in grouped_out for r in rest for x in r["reads"] if isinstance(x, str))


def test_rng_groups_needs_the_generator_on_one_source_line():
    """A uint32 xor written by the user (no generator around it) on another line stays its own node;
    arithmetic on another line than the random call is not swallowed."""
    from caten_lab.notebook.payload import rng_groups

    def rec(i, op, reads, dtype="uint32", src="cell:1"):
        return {"id": i, "op": op, "out": f"v{i}", "reads": reads, "dtype": dtype, "src": src}

    recs = [
        rec(1, "index", []),
        rec(2, "add", ["v1", {"lit": "3"}]),
        rec(3, "xor", ["v2", "v1"]),
        rec(4, "cast", ["v3"], dtype="float32"),
        rec(5, "mul", ["v4", {"lit": "2.0"}], dtype="float32", src="cell:2"),  # the user's own line
        rec(6, "allocate", [], dtype="float32", src="cell:1"),
        rec(7, "add", ["v4", "v6"], dtype="float32"),  # reads a non-random value: not random
    ]
    assert rng_groups(recs) == {1: "cell:1", 2: "cell:1", 3: "cell:1", 4: "cell:1"}
    assert rng_groups([r for r in recs if r["op"] != "xor"]) == {}


def test_value_names_name_buffers_and_outputs(program):
    p = trace_payload(program.trace, program=program)
    names = p["value_names"]
    a = next(r for r in p["nodes"] if r["op"] == "allocate")
    assert names[a["out"]] == "a"
    final = p["graphs"][p["passes"][-1]["after"]]
    assert names[final["outputs"][0]] == "out0"
    assert p["version"] == 3


def test_a_kv_cache_update_is_named_after_its_buffer():
    """GPT-2's cache updates are `store` nodes (graph outputs): named after the cache, not v53 / out1."""
    import numpy as np

    from caten_lab.frontend import Tensor, build_graph
    from caten_lab.nn.gpt2 import GPT2, GPT2Config

    model = GPT2(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=1))
    g, _ = build_graph([model(Tensor.from_numpy(np.array([[1, 2]], dtype=np.int64), name="tokens"), 0)])
    p = trace_payload(_OneGraphTrace(g))
    names = p["value_names"]
    outs = p["graphs"][0]["outputs"]
    stores = [r for r in p["nodes"] if r["op"] == "store"]
    assert len(stores) == 2 and {s["out"] for s in stores} <= set(outs)
    assert sorted(names[s["out"]] for s in stores) == [
        "transformer.h.0.attn.cache_k",
        "transformer.h.0.attn.cache_v",
    ]
    assert names[outs[0]] == "out0"
    tokens = next(r for r in p["nodes"] if r["attrs"].get("name") == "tokens")
    assert names[tokens["out"]] == "tokens"


class _OneGraphTrace:
    """A trace of one pass that changed nothing: enough for trace_payload."""

    def __init__(self, g):
        self.records = [
            type("Rec", (), {"name": "noop", "before": g, "after": g, "rewrites": [], "changed": False})()
        ]
