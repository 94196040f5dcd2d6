"""Each graph pass does what it claims, on small hand-written graphs checked against the interpreter."""

from __future__ import annotations

import math

import numpy as np
import pytest

from caten_lab.air import Graph, Sym, dtypes, interpret
from caten_lab.air.ops import make_attrs
from caten_lab.errors import ShapeError
from caten_lab.passes import (
    PassContext,
    const_fold_pass,
    cse_pass,
    dce_pass,
    simplify_pass,
    typecheck_pass,
)
from caten_lab.passes.cse import eliminate_common_subexpressions
from caten_lab.passes.dce import eliminate_dead_code


def _run(p, g: Graph) -> Graph:  # noqa: ANN001
    out = p.run(g, PassContext())
    out.verify()
    return out


def _ops(g: Graph) -> list[str]:
    return [n.op for n in g.toposort()]


def _input(g: Graph, shape=(2, 3), dtype=dtypes.float32, name="x") -> str:  # noqa: ANN001
    return g.insert("allocate", [], shape=shape, dtype=dtype, name=name)


# ---- typecheck ------------------------------------------------------------------------------


def test_typecheck_accepts_a_good_graph_and_lists_symbols():
    g = Graph()
    n = Sym("n")
    x = _input(g, (n, 4))
    g.mark_output(g.insert("reduce", [g.insert("exp2", [x])], op="add", axes=(1,)))
    ctx = PassContext()
    typecheck_pass().run(g, ctx)
    assert ctx.artifacts["graph_symbols"] == ["n"]


def test_typecheck_reports_every_mismatch_with_its_source():
    g = Graph()
    x = _input(g)
    a = g.insert("sin", [x], source="model.py:12")
    b = g.insert("add", [a, x], source="model.py:13")
    g.producer_of(a).dtype = dtypes.float64
    g.producer_of(b).shape = (3, 2)
    g.mark_output(b)
    with pytest.raises(ShapeError) as info:
        typecheck_pass().run(g, PassContext())
    msg = str(info.value)
    assert "2 problem(s)" in msg or "problem(s)" in msg
    assert "recorded as float64[2, 3] but its operands give float32[2, 3]" in msg and "model.py:12" in msg
    assert "model.py:13" in msg


def test_typecheck_symbolic_mismatch():
    g = Graph()
    x = _input(g, (Sym("n"), 2))
    y = g.insert("neg", [x])
    g.producer_of(y).shape = (Sym("m"), 2)
    g.mark_output(y)
    with pytest.raises(
        ShapeError, match=r"recorded as float32\[m, 2\] but its operands give float32\[n, 2\]"
    ):
        typecheck_pass().run(g, PassContext())


def test_typecheck_catches_view_problems():
    g = Graph()
    x = _input(g, (2, 3))
    g.mark_output(g.insert("view", [x], shape=(2, 3), strides=(3, 2)))  # reads index 7 of 6
    with pytest.raises(ShapeError, match="outside its operand's 6 elements"):
        typecheck_pass().run(g, PassContext())
    g = Graph()
    x = _input(g, (2, 3))
    v = g.insert("view", [x], shape=(2, 3), strides=(3, 1))
    g.producer_of(v).attrs = make_attrs("view", {"shape": (2, 3), "strides": (3,)})  # bypass insert's checks
    g.mark_output(v)
    with pytest.raises(ShapeError, match="1 strides for (a|the) rank-2 shape"):
        typecheck_pass().run(g, PassContext())
    g = Graph()
    x = _input(g, (2, 3))
    g.mark_output(
        g.insert(
            "store",
            [x, g.insert("const", [], value=1.0, shape=(2,), dtype=dtypes.float32)],
            shape=(2,),
            strides=(1,),
            offset=5,
        )
    )
    with pytest.raises(ShapeError, match="writes storage indices 5..6, outside its operand's 6 elements"):
        typecheck_pass().run(g, PassContext())
    g = Graph()  # a masked pad never reads outside: accepted
    x = _input(g, (2,))
    g.mark_output(g.insert("view", [x], shape=(4,), strides=(1,), offset=-1, mask=((1, 3),)))
    typecheck_pass().run(g, PassContext())


# ---- const_fold -----------------------------------------------------------------------------


def test_const_fold_collapses_a_const_chain():
    g = Graph()
    x = _input(g)
    c2 = g.insert("const", [], value=2.0, shape=(2, 3), dtype=dtypes.float32)
    c3 = g.insert("const", [], value=3.0, shape=(2, 3), dtype=dtypes.float32)
    s = g.insert("sin", [g.insert("add", [c2, c3])])
    y = g.insert("mul", [x, g.insert("mul", [s, 0.5])])
    g.mark_output(y)
    data = {"x": np.ones((2, 3), np.float32)}
    expected = interpret(g, data)[0]
    out = _run(const_fold_pass(), g)
    assert _ops(out) == ["allocate", "const", "mul"]
    const = next(n for n in out.nodes if n.op == "const")
    assert const.attrs.value == float(np.float32(np.sin(np.float32(5.0))) * np.float32(0.5))
    np.testing.assert_array_equal(interpret(out, data)[0], expected)


def test_const_fold_casts_and_int_wraparound():
    g = Graph()
    c = g.insert("const", [], value=3.7, shape=(2,), dtype=dtypes.float32)
    i = g.insert("cast", [c], dtype=dtypes.int32)
    big = g.insert("const", [], value=2**31 - 1, shape=(2,), dtype=dtypes.int32)
    wrapped = g.insert("add", [big, 1])
    g.mark_output(g.insert("add", [i, wrapped]))
    expected = interpret(g)[0]
    out = _run(const_fold_pass(), g)
    assert _ops(out) == ["const"]
    np.testing.assert_array_equal(interpret(out)[0], expected)
    assert out.nodes[0].attrs.value == 3 - 2**31


def test_const_fold_symbolic_ints_and_reductions():
    n = Sym("n")
    g = Graph()
    c = g.insert("const", [], value=n, shape=(3,), dtype=dtypes.int64)
    s = g.insert("mul", [g.insert("add", [c, 1]), 2])
    r = g.insert("reduce", [s], op="add", axes=(0,))
    m = g.insert(
        "reduce",
        [g.insert("const", [], value=-1.5, shape=(4, 2), dtype=dtypes.float32)],
        op="max",
        axes=(0, 1),
    )
    g.mark_output(r)
    g.mark_output(m)
    out = _run(const_fold_pass(), g)
    assert _ops(out) == ["const", "const"]
    assert out.producer_of(out.outputs[0]).attrs.value == (n + 1) * 2 * 3
    for sym in (0, 5):
        for a, b in zip(interpret(out, symbols={"n": sym}), interpret(g, symbols={"n": sym})):
            np.testing.assert_array_equal(a, b)


def test_const_fold_keeps_inexact_float_sums():
    g = Graph()
    c = g.insert("const", [], value=0.1, shape=(1000,), dtype=dtypes.float32)
    g.mark_output(g.insert("reduce", [c], op="add", axes=(0,)))
    out = _run(const_fold_pass(), g)
    assert "reduce" in _ops(out)


def test_const_fold_nan_and_inf():
    g = Graph()
    z = g.insert("const", [], value=0.0, shape=(2,), dtype=dtypes.float32)
    g.mark_output(g.insert("recip", [z]))
    g.mark_output(
        g.insert(
            "log2", [g.insert("neg", [g.insert("const", [], value=1.0, shape=(2,), dtype=dtypes.float32)])]
        )
    )
    out = _run(const_fold_pass(), g)
    assert _ops(out) == ["const", "const"]
    inf, nan = interpret(out)
    assert np.all(np.isinf(inf)) and np.all(np.isnan(nan))


# ---- simplify -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "dtype", "expect_ops"),
    [
        (lambda g, x: g.insert("add", [x, 0.0]), dtypes.float32, ["allocate"]),
        (lambda g, x: g.insert("mul", [1.0, x]), dtypes.float32, ["allocate"]),
        (lambda g, x: g.insert("mul", [x, 0]), dtypes.int32, ["const"]),
        (lambda g, x: g.insert("mul", [x, 0.0]), dtypes.float32, ["allocate", "mul"]),  # NaN * 0 is NaN
        (lambda g, x: g.insert("neg", [g.insert("neg", [x])]), dtypes.float32, ["allocate"]),
        (lambda g, x: g.insert("not", [g.insert("not", [x])]), dtypes.int32, ["allocate"]),
        (
            lambda g, x: g.insert("recip", [g.insert("recip", [x])]),
            dtypes.float32,
            ["allocate", "recip", "recip"],
        ),
        (lambda g, x: g.insert("max", [x, x]), dtypes.float32, ["allocate"]),
        (lambda g, x: g.insert("xor", [x, x]), dtypes.int32, ["const"]),
        (lambda g, x: g.insert("lt", [x, x]), dtypes.float32, ["const"]),
        (lambda g, x: g.insert("ne", [x, x]), dtypes.float32, ["allocate", "ne"]),  # NaN != NaN
        (lambda g, x: g.insert("ne", [x, x]), dtypes.int32, ["const"]),
        (lambda g, x: g.insert("cast", [x], dtype=dtypes.float32), dtypes.float32, ["allocate"]),
        (
            lambda g, x: g.insert("cast", [g.insert("cast", [x], dtype=dtypes.int64)], dtype=dtypes.int32),
            dtypes.int32,
            ["allocate"],
        ),
        (
            lambda g, x: g.insert("cast", [g.insert("cast", [x], dtype=dtypes.int8)], dtype=dtypes.int32),
            dtypes.int32,
            ["allocate", "cast", "cast"],  # narrowing: not a round trip
        ),
        (lambda g, x: g.insert("where", [True, x, g.insert("neg", [x])]), dtypes.float32, ["allocate"]),
        (lambda g, x: g.insert("where", [g.insert("lt", [x, 1.0]), x, x]), dtypes.float32, ["allocate"]),
        (lambda g, x: g.insert("mul", [x, -1]), dtypes.int32, ["allocate", "neg"]),
        (lambda g, x: g.insert("add", [x, g.insert("neg", [x])]), dtypes.int32, ["const"]),
        (lambda g, x: g.insert("add", [x, g.insert("neg", [x])]), dtypes.float32, ["allocate", "neg", "add"]),
        (lambda g, x: g.insert("idiv", [x, 1]), dtypes.int32, ["allocate"]),
        (
            lambda g, x: g.insert(
                "reduce", [g.insert("reduce", [x], op="add", axes=(1,))], op="max", axes=(1,)
            ),
            dtypes.float32,
            ["allocate", "reduce"],
        ),
    ],
)
def test_simplify_rules(build, dtype, expect_ops):
    g = Graph()
    x = _input(g, dtype=dtype)
    g.mark_output(build(g, x))
    rng = np.random.default_rng(0)
    data = rng.uniform(-3, 3, (2, 3)).astype(dtype.np)
    data.flat[0] = np.nan if dtype.is_float else data.flat[0]
    expected = interpret(g, {"x": data})[0]
    out = _run(simplify_pass(), g)
    assert _ops(out) == expect_ops
    got = interpret(out, {"x": data})[0]
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)


def test_simplify_fast_math_is_opt_in():
    g = Graph()
    x = _input(g)
    g.mark_output(g.insert("recip", [g.insert("recip", [x])]))
    g.mark_output(g.insert("mul", [x, 0.0]))
    out = _run(simplify_pass(fast_math=True), g.copy())
    assert _ops(out).count("recip") == 0 and "mul" not in _ops(out)
    assert "fast-math" in simplify_pass(fast_math=True).description


def test_simplify_output_replaced_by_literal_gets_a_const():
    g = Graph()
    x = _input(g, dtype=dtypes.bool)
    g.mark_output(g.insert("and", [x, False]))
    out = _run(simplify_pass(), g)
    assert out.producer_of(out.outputs[0]).op == "const"
    assert not interpret(out, {"x": np.ones((2, 3), bool)})[0].any()


# ---- cse ------------------------------------------------------------------------------------


def test_cse_merges_duplicates_including_commuted_operands():
    g = Graph()
    x, y = _input(g), _input(g, name="y")
    a1, a2 = g.insert("add", [x, y]), g.insert("add", [y, x])
    s1, s2 = g.insert("sin", [a1]), g.insert("sin", [a2])
    g.mark_output(g.insert("mul", [s1, s2]))
    g.mark_output(s2)
    data = {"x": np.full((2, 3), 0.5, np.float32), "y": np.full((2, 3), 0.25, np.float32)}
    expected = interpret(g, data)
    rec: list = []
    assert eliminate_common_subexpressions(g, rec) == 2
    g.verify()
    assert _ops(g) == ["allocate", "allocate", "add", "sin", "mul"]
    assert [r.rule for r in rec] == ["cse: add", "cse: sin"]
    assert g.outputs[1] == s1
    for e, o in zip(expected, interpret(g, data)):
        np.testing.assert_array_equal(e, o)


def test_cse_keeps_signed_zeros_buffers_and_stores_apart():
    g = Graph()
    x = _input(g)
    p = g.insert("const", [], value=0.0, shape=(2, 3), dtype=dtypes.float32)
    n = g.insert("const", [], value=-0.0, shape=(2, 3), dtype=dtypes.float32)
    s1 = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32)
    s2 = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32)
    w1 = g.insert("store", [s1, x], shape=(2, 3), strides=(3, 1))
    w2 = g.insert("store", [s2, x], shape=(2, 3), strides=(3, 1))
    out = g.insert("add", [g.insert("recip", [p]), g.insert("recip", [n])])
    for v in (out, w1, w2):
        g.mark_output(v)
    before = len(g)
    _run(cse_pass(), g)
    assert len(g) == before
    assert np.all(np.isnan(interpret(g, {"x": np.ones((2, 3), np.float32)})[0]))  # inf + -inf


def test_cse_is_linear_on_a_long_chain():
    g = Graph()
    x = _input(g, (4,))
    a = b = x
    for _ in range(5000):
        a = g.insert("sin", [a])
        b = g.insert("sin", [b])
    g.mark_output(g.insert("add", [a, b]))
    assert eliminate_common_subexpressions(g) == 5000
    assert len(g) == 5002


# ---- dce ------------------------------------------------------------------------------------


def test_dce_removes_only_dead_nodes():
    g = Graph()
    x = _input(g)
    keep = g.insert("sin", [x])
    dead = g.insert("exp2", [g.insert("neg", [x])])
    g.insert("add", [dead, keep])
    g.mark_output(keep)
    rec: list = []
    assert eliminate_dead_code(g, rec) == 3
    assert _ops(g) == ["allocate", "sin"] and len(rec) == 1 and len(rec[0].removed) == 3
    out = _run(dce_pass(), g)
    assert len(out) == 2


def test_math_helpers_sanity():
    assert math.copysign(1.0, -0.0) < 0  # the distinction CSE and view folding rely on
