"""The pattern rewriter: matching, fixed point, cleanup, guards, recording and replay."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import caten_lab.air.rewriter as rewriter_mod
from caten_lab.air import (
    Graph,
    Pat,
    Rewriter,
    Rule,
    Value,
    dtypes,
    interpret,
    match,
    replay,
    rewrite,
    rule,
    to_json,
)
from caten_lab.air.rewriter import pattern_depth
from caten_lab.errors import AirError


def _x(g: Graph, shape=(4,), dtype=dtypes.float32, name="x") -> str:
    return g.insert("allocate", [], shape=shape, dtype=dtype, name=name)


MUL1 = Rule("x*1 -> x", Pat("mul", ["x", 1.0], commutative=True), lambda m: m["x"])
ADD0 = Rule("x+0 -> x", Pat("add", ["x", 0.0], commutative=True), lambda m: m["x"])
NEGNEG = Rule("neg(neg(x)) -> x", Pat("neg", [Pat("neg", ["x"])]), lambda m: m["x"])
MUL0 = Rule("x*0 -> 0", Pat("mul", ["x", 0.0], commutative=True), lambda m: 0.0)
XX = Rule("x+x -> x*2", Pat("add", ["x", "x"]), lambda m: m.graph.insert("mul", [m["x"], 2.0]))


def test_match_nested_with_captures(g):
    x = _x(g)
    a = g.insert("exp2", [g.insert("neg", [x])])
    p = Pat("exp2", [Pat("neg", ["inner"], name="n")], name="root")
    m = match(g, p, g.producer_of(a))
    assert m is not None and m["inner"] == x and m["root"] == a
    assert m.node("n") is g.producer_of(g.producer_of(a).reads[0])
    assert [n.op for n in m.nodes] == ["neg", "exp2"]
    assert match(g, Pat("exp2", [Pat("sin", ["y"])]), g.producer_of(a)) is None
    assert match(g, Pat(("sin", "exp2")), g.producer_of(a)) is not None
    assert match(g, Pat(None, [Pat("neg")]), g.producer_of(a)) is not None
    assert match(g, Pat("exp2", ["a", "b"]), g.producer_of(a)) is None  # operand count differs
    assert match(g, Pat("exp2", [Pat("neg")]), g.producer_of(x)) is None
    assert "exp2" in repr(p) and "as root" in repr(p)


def test_same_capture_name_must_bind_the_same_value(g):
    x, y = _x(g), _x(g, name="y")
    same = g.producer_of(g.insert("add", [x, x]))
    diff = g.producer_of(g.insert("add", [x, y]))
    lit = g.producer_of(g.insert("add", [x, 1.0]))
    p = Pat("add", ["a", "a"])
    assert match(g, p, same) is not None
    assert match(g, p, diff) is None and match(g, p, lit) is None
    one_int = g.producer_of(g.insert("mul", [g.insert("cast", [x], dtype=dtypes.int32), 1]))
    assert match(g, Pat("mul", ["a", "a"]), one_int) is None
    # a capture inside a nested pattern must agree with the outer one
    nested = g.producer_of(g.insert("mul", [g.insert("neg", [x]), x]))
    assert match(g, Pat("mul", [Pat("neg", ["a"]), "a"]), nested) is not None
    assert (
        match(g, Pat("mul", [Pat("neg", ["a"]), "a"]), g.producer_of(g.insert("mul", [nested.out, y])))
        is None
    )


def test_commutative_patterns(g):
    x = _x(g)
    left = g.producer_of(g.insert("mul", [1.0, x]))
    assert match(g, Pat("mul", ["x", 1.0]), left) is None
    m = match(g, Pat("mul", ["x", 1.0], commutative=True), left)
    assert m is not None and m["x"] == x
    # a failed first order must not leak captures into the second
    nx = g.insert("neg", [x])
    both = g.producer_of(g.insert("add", [x, nx]))
    m = match(g, Pat("add", ["a", Pat("neg", ["a"])], commutative=True), both)
    assert m is not None and m["a"] == x
    swapped = g.producer_of(g.insert("add", [nx, x]))
    m = match(g, Pat("add", ["a", Pat("neg", ["a"])], commutative=True), swapped)
    assert m is not None and m["a"] == x and len(m.nodes) == 2


def test_literal_patterns_match_literals_and_const_nodes(g):
    x = _x(g)
    one = g.insert("const", [], value=1.0, shape=(4,), dtype=dtypes.float32)
    two = g.insert("const", [], value=2.0, shape=(4,), dtype=dtypes.float32)
    t = g.insert("const", [], value=True, shape=(4,), dtype=dtypes.bool)
    p = Pat("mul", ["x", 1.0])
    assert match(g, p, g.producer_of(g.insert("mul", [x, 1.0]))) is not None
    assert match(g, p, g.producer_of(g.insert("mul", [x, 1]))) is not None  # 1 == 1.0
    assert match(g, p, g.producer_of(g.insert("mul", [x, one]))) is not None
    assert match(g, p, g.producer_of(g.insert("mul", [x, two]))) is None
    assert match(g, p, g.producer_of(g.insert("mul", [x, 2.0]))) is None
    b = g.insert("allocate", [], shape=(4,), dtype=dtypes.bool, name="b")
    assert match(g, Pat("and", ["b", 1]), g.producer_of(g.insert("and", [b, True]))) is None  # bool != int
    assert match(g, Pat("and", ["b", True]), g.producer_of(g.insert("and", [b, t]))) is not None


def test_attrs_and_where_filters(g):
    x = _x(g, shape=(2, 3))
    radd = g.producer_of(g.insert("reduce", [x], op="add", axes=(1,)))
    rmax = g.producer_of(g.insert("reduce", [x], op="max", axes=(1,)))
    p = Pat("reduce", attrs={"op": "max"})
    assert match(g, p, rmax) is not None and match(g, p, radd) is None
    assert match(g, Pat("reduce", attrs={"nope": 1}), rmax) is None
    wide = Pat("reduce", where=lambda n: n.attrs.axes == (1,) and n.shape == (2, 1))
    assert match(g, wide, radd) is not None
    assert match(g, Pat("reduce", where=lambda n: False), radd) is None


def test_rewrite_to_fixed_point_keeps_results(g):
    x = _x(g)
    v = x
    for _ in range(5):
        v = g.insert("mul", [g.insert("add", [v, 0.0]), 1.0])
    v = g.insert("neg", [g.insert("neg", [g.insert("neg", [g.insert("neg", [v])])])])
    out = g.insert("add", [v, g.insert("mul", [v, 0.0])])
    g.mark_output(out)
    before = interpret(g, {"x": np.arange(4, dtype=np.float32)})
    n = rewrite(g, [MUL1, ADD0, NEGNEG, MUL0])
    assert n == 5 + 5 + 2 + 2  # x*0 -> 0, then v + 0 -> v
    g.verify()
    assert g.outputs == [x] and len(g) == 1  # everything folded away, dead nodes dropped
    np.testing.assert_array_equal(interpret(g, {"x": np.arange(4, dtype=np.float32)})[0], before[0])
    assert Rewriter([MUL1, ADD0, NEGNEG, MUL0]).run(g) == 0


def test_nested_pattern_sees_changes_below_it(g):
    x = _x(g)
    a = g.insert("mul", [x, -1.0])
    b = g.insert("neg", [a])
    c = g.insert("add", [b, x])
    g.mark_output(c)
    # mul(x, -1) -> neg(x) produces a node that makes the depth-3 pattern below match
    to_neg = Rule("x*-1 -> neg x", Pat("mul", ["x", -1.0]), lambda m: m.graph.insert("neg", [m["x"]]))
    fold = Rule(
        "neg(neg(x))+y -> x+y",
        Pat("add", [Pat("neg", [Pat("neg", ["x"])]), "y"]),
        lambda m: m.graph.insert("add", [m["x"], m["y"]]),
    )
    assert pattern_depth(fold.pattern) == 3 and pattern_depth(Pat("mul", ["x", 1.0])) == 2
    assert Rewriter([fold, to_neg]).run(g) == 2
    final = g.producer_of(g.outputs[0])
    assert final.op == "add" and final.reads == [x, x] and len(g) == 2


def test_literal_results_are_materialized_where_needed(g):
    x = _x(g)
    z = g.insert("mul", [x, 0.0])
    r = g.insert("reduce", [z], op="add", axes=(0,))  # reduce cannot read a literal
    s = g.insert("sin", [z])  # would be left with no value operand
    a = g.insert("add", [x, z])  # fine with a literal
    g.mark_output(r)
    g.mark_output(s)
    g.mark_output(a)
    g.mark_output(z)  # an output cannot become a literal
    rec = []
    assert Rewriter([MUL0]).run(g, record=rec) == 1
    g.verify()
    const = g.producer_of(g.outputs[3])
    assert (
        const.op == "const"
        and const.attrs.value == 0.0
        and const.shape == (4,)
        and const.dtype is dtypes.float32
    )
    assert g.producer_of(g.outputs[0]).reads == [const.out]
    assert [p.id for p in rec[0].produced] == [const.id]
    outs = interpret(g, {"x": np.ones(4, np.float32)})
    np.testing.assert_array_equal(outs[1], np.zeros(4, np.float32))


def test_literal_result_stays_a_literal_for_elementwise_users(g):
    x = _x(g)
    a = g.insert("add", [x, g.insert("mul", [x, 0.0])])
    g.mark_output(a)
    Rewriter([MUL0]).run(g)
    assert g.producer_of(a).reads == [x, 0.0] and len(g) == 2


def test_builder_declining_leaves_no_trace(g):
    x = _x(g)
    out = g.insert("add", [x, x])
    g.mark_output(out)
    calls = []

    def decline(m):
        calls.append(m.root.id)
        m.graph.insert("neg", [m["x"]])  # scratch work, then give up
        return None

    def same(m):
        m.graph.insert("sin", [m["x"]])
        return m.root.out  # "no change"

    before = to_json(g)
    assert Rewriter([Rule("decline", Pat("add", ["x", "x"]), decline)]).run(g) == 0
    assert Rewriter([Rule("same", Pat("add", ["x", "x"]), same)]).run(g) == 0
    assert calls and to_json(g) == before
    # a declining rule does not stop the next rule for the same node
    assert Rewriter([Rule("decline", Pat("add", ["x", "x"]), decline), XX]).run(g) == 1
    assert g.producer_of(g.outputs[0]).op == "mul"


def test_dead_nodes_are_removed_but_shared_ones_kept(g):
    x = _x(g)
    n1 = g.insert("neg", [x])
    n2 = g.insert("neg", [n1])
    keep = g.insert("sin", [n1])  # n1 is still used here
    g.mark_output(g.insert("add", [n2, keep]))
    n2_id = g.producer_of(n2).id
    rec = []
    Rewriter([NEGNEG]).run(g, record=rec)
    assert g.producer_of(n2) is None and g.producer_of(n1) is not None
    assert rec[0].removed == [n2_id]  # the matched root only: n1 is still read by sin
    assert sorted(rec[0].matched) == sorted([n2_id, g.producer_of(n1).id])
    g.verify()


def test_max_rewrites_guard(g):
    x = _x(g)
    g.mark_output(g.insert("neg", [x]))
    flip = Rule("neg x -> neg(neg(neg x))", Pat("neg", ["x"]), lambda m: _wrap(m))
    with pytest.raises(AirError) as e:
        Rewriter([flip], name="looper").run(g, max_rewrites=50)
    assert "looper: more than 50 rewrites" in str(e.value) and "neg x -> neg(neg(neg x))" in str(e.value)
    assert g.journal is None  # restored even on error


def _wrap(m):
    gr = m.graph
    if len(gr) > 10_000:
        return None
    return gr.insert("neg", [gr.insert("neg", [gr.insert("neg", [m["x"]])])])


def test_stop_after(g):
    x = _x(g)
    v = x
    for _ in range(6):
        v = g.insert("mul", [v, 1.0])
    g.mark_output(v)
    assert Rewriter([MUL1]).run(g, stop_after=4) == 4
    assert Rewriter([MUL1]).run(g, stop_after=0) == 0
    assert Rewriter([MUL1]).run(g) == 2 and len(g) == 1


def test_recording_off_builds_no_records(g, monkeypatch):
    made = []

    class Spy(rewriter_mod.Rewrite):
        def __init__(self, *a, **k):
            made.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(rewriter_mod, "Rewrite", Spy)
    x = _x(g)
    g.mark_output(g.insert("mul", [g.insert("add", [x, 0.0]), 1.0]))
    h = g.copy()
    assert Rewriter([MUL1, ADD0]).run(g) == 2 and made == []
    rec = []
    assert Rewriter([MUL1, ADD0]).run(h, record=rec) == 2 and len(made) == 2 and len(rec) == 2


def test_record_contents(g):
    x = _x(g)
    a = g.insert("add", [x, x])
    g.mark_output(a)
    add_id = g.producer_of(a).id
    rec = []
    v0 = g.version
    Rewriter([XX]).run(g, record=rec)
    (rw,) = rec
    assert rw.rule == "x+x -> x*2" and rw.location.startswith("test_air_rewriter.py:")
    assert rw.matched == [add_id]
    assert rw.replaced[0] == a and rw.replaced[1] == g.outputs[0]
    assert [p.op for p in rw.produced] == ["mul"] and rw.removed == rw.matched
    assert rw.version > v0


def test_rule_decorator_and_location():
    @rule("double neg", Pat("neg", [Pat("neg", ["x"])]))
    def double_neg(m):
        return m["x"]

    assert isinstance(double_neg, Rule) and double_neg.name == "double neg"
    assert double_neg.location.startswith("test_air_rewriter.py:")


def test_rules_for_any_op_run_after_specific_ones(g):
    x = _x(g)
    g.mark_output(g.insert("sin", [g.insert("neg", [g.insert("neg", [x])])]))
    seen = []
    spy = Rule("spy", Pat(None), lambda m: seen.append(m.root.op))
    Rewriter([spy, NEGNEG]).run(g)
    assert "sin" in seen and "allocate" in seen
    assert [n.op for n in g.nodes] == ["allocate", "sin"]


# ---- replay: every prefix of the recorded rewrites rebuilds the state after that many --------


def _random_program(draw) -> Graph:
    g = Graph()
    vals = [_x(g), g.insert("allocate", [], shape=(4,), dtype=dtypes.float32, name="y")]
    for _ in range(draw(st.integers(3, 25))):
        kind = draw(st.sampled_from(["mul1", "add0", "mul0", "neg", "add", "mul", "xx", "mulm1"]))
        a = draw(st.sampled_from(vals))
        if kind == "mul1":
            v = g.insert("mul", draw(st.permutations([a, 1.0])))
        elif kind == "add0":
            v = g.insert("add", draw(st.permutations([a, 0.0])))
        elif kind == "mul0":
            v = g.insert("mul", [a, 0.0])
        elif kind == "mulm1":
            v = g.insert("mul", [a, -1.0])
        elif kind == "neg":
            v = g.insert("neg", [a])
        elif kind == "xx":
            v = g.insert("add", [a, a])
        else:
            v = g.insert(kind, [a, draw(st.sampled_from(vals))])
        vals.append(v)
    for v in draw(st.lists(st.sampled_from(vals), min_size=1, max_size=3, unique=True)):
        g.mark_output(v)
    return g


def _to_neg_with_scratch(m):
    m.graph.insert("sin", [m["x"]])  # scratch work the builder does not use: must be cleaned up
    return m.graph.insert("neg", [m["x"]])


TO_NEG = Rule("x*-1 -> neg x", Pat("mul", ["x", -1.0]), _to_neg_with_scratch)
ALL_RULES = [MUL1, ADD0, NEGNEG, MUL0, XX, TO_NEG]


@st.composite
def programs(draw):
    return _random_program(draw)


def _state(g: Graph) -> tuple:
    """Every node (dead ones too) in order, with values renamed to their producer's position.

    Equal states mean the same nodes in the same order: only the fresh ids of produced nodes differ
    between a replay (which reuses the recorded ids) and a re-run (which allocates new ones).
    """
    pos = {n.out: i for i, n in enumerate(g.nodes)}
    j = to_json(g)
    nodes = tuple(
        (d["op"], tuple(pos[Value.parse(r)] if isinstance(r, str) else str(r) for r in d["reads"]), str(d["attrs"]))
        for d in j["nodes"]
    )
    return nodes, tuple(pos[o] for o in g.outputs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_replay_of_every_prefix_reproduces_the_graph(g):
    start = g.copy()
    rec = []
    total = Rewriter(ALL_RULES).run(g, record=rec)
    assert total == len(rec)
    g.verify()
    inputs = {
        "x": np.array([1.5, -2.0, 0.0, 3.0], np.float32),
        "y": np.array([0.5, 4.0, -1.0, 2.0], np.float32),
    }
    for a, b in zip(interpret(start, inputs), interpret(g, inputs)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    assert Rewriter(ALL_RULES).run(g) == 0  # a fixed point
    assert all(n.op != "sin" for n in g.nodes)  # no scratch node survives
    for k in range(len(rec) + 1):
        stepped = start.copy()
        assert Rewriter(ALL_RULES).run(stepped, stop_after=k) == k
        replayed = replay(start.copy(), rec[:k])
        replayed.verify()
        assert replayed.structural_key() == stepped.structural_key()
        assert _state(replayed) == _state(stepped)
    final = replay(start.copy(), rec)
    assert _state(final) == _state(g)
    assert [n.id for n in final.nodes] == [n.id for n in g.nodes]  # the replay reuses the recorded ids


def test_a_builder_may_return_the_printed_value_id():
    g = Graph()
    x = g.insert("allocate", [], shape=(3,), dtype=dtypes.float32, name="x")
    g.mark_output(g.insert("sin", [g.insert("mul", [x, 1.0])]))
    assert rewrite(g, [Rule("x*1 -> x", Pat("mul", ["x", 1.0]), lambda m: str(m["x"]))]) == 1
    assert g.producer_of(g.outputs[0]).reads == [x]
    g.verify()
