"""The NumPy interpreter against hand-written NumPy for every op."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.air import Graph, Sym, dtypes, interpret, to_dtype
from caten_lab.errors import AirError, SymbolError

RNG = np.random.default_rng(7)


def run1(g: Graph, out: str, inputs: dict | None = None, symbols: dict | None = None) -> np.ndarray:
    g.outputs = [out]
    (res,) = interpret(g, inputs or {}, symbols)
    return res


def inp(g: Graph, name: str, arr: np.ndarray) -> str:
    return g.insert("allocate", [], shape=arr.shape, dtype=to_dtype(arr.dtype), name=name)


UNARY = {
    "neg": np.negative,
    "recip": np.reciprocal,
    "exp2": np.exp2,
    "log2": np.log2,
    "sin": np.sin,
    "sqrt": np.sqrt,
}


@pytest.mark.parametrize("op", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_unary_float(op, dtype):
    a = (RNG.random((3, 5)) * 4 + 0.25).astype(dtype)
    g = Graph()
    got = run1(g, g.insert(op, [inp(g, "a", a)]), {"a": a})
    want = UNARY[op](a)
    assert got.dtype == want.dtype == dtype and got.shape == (3, 5)
    np.testing.assert_allclose(got, want, rtol=1e-3 if dtype == np.float16 else 1e-6)


def test_not_and_neg_on_ints_and_bools():
    i = np.array([[0, 1, -3], [7, -8, 127]], np.int8)
    b = np.array([True, False, True])
    u = np.array([0, 1, 255], np.uint8)
    g = Graph()
    np.testing.assert_array_equal(run1(g, g.insert("not", [inp(g, "i", i)]), {"i": i}), ~i)
    np.testing.assert_array_equal(run1(g, g.insert("not", [inp(g, "b", b)]), {"b": b}), ~b)
    np.testing.assert_array_equal(run1(g, g.insert("neg", [inp(g, "i2", i)]), {"i2": i}), -i)
    np.testing.assert_array_equal(run1(g, g.insert("not", [inp(g, "u", u)]), {"u": u}), ~u)


BINARY_FLOAT = {"add": np.add, "mul": np.multiply, "max": np.maximum, "lt": np.less, "ne": np.not_equal}


@pytest.mark.parametrize("op", sorted(BINARY_FLOAT))
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64])
def test_binary(op, dtype):
    a = (RNG.standard_normal((4, 3)) * 10).astype(dtype)
    b = (RNG.standard_normal((4, 3)) * 10).astype(dtype)
    b[0, 0] = a[0, 0]
    g = Graph()
    x, y = inp(g, "a", a), inp(g, "b", b)
    got = run1(g, g.insert(op, [x, y]), {"a": a, "b": b})
    want = BINARY_FLOAT[op](a, b)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # with a literal on either side
    lit = 3 if np.issubdtype(dtype, np.integer) else 0.5
    got = run1(g, g.insert(op, [lit, x]), {"a": a})
    np.testing.assert_array_equal(got, BINARY_FLOAT[op](np.asarray(lit, dtype), a))


@pytest.mark.parametrize("op", ["and", "or", "xor"])
def test_bitwise_and_logical(op):
    fn = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]
    a = RNG.integers(-100, 100, (6,)).astype(np.int32)
    b = RNG.integers(-100, 100, (6,)).astype(np.int32)
    p, q = RNG.random(6) < 0.5, RNG.random(6) < 0.5
    g = Graph()
    np.testing.assert_array_equal(
        run1(g, g.insert(op, [inp(g, "a", a), inp(g, "b", b)]), {"a": a, "b": b}), fn(a, b)
    )
    got = run1(g, g.insert(op, [inp(g, "p", p), inp(g, "q", q)]), {"p": p, "q": q})
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, fn(p, q))


def _c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.int8])
def test_idiv_and_mod_truncate_like_c(dtype):
    pairs = [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3), (-6, 3), (0, -5), (-1, 4), (1, -4), (-9, 9)]
    a = np.array([p[0] for p in pairs], dtype)
    b = np.array([p[1] for p in pairs], dtype)
    g = Graph()
    x, y = inp(g, "a", a), inp(g, "b", b)
    q = run1(g, g.insert("idiv", [x, y]), {"a": a, "b": b})
    r = run1(g, g.insert("mod", [x, y]), {"a": a, "b": b})
    want_q = np.array([_c_div(p, d) for p, d in pairs], dtype)
    want_r = np.array([p - _c_div(p, d) * d for p, d in pairs], dtype)
    assert q.dtype == r.dtype == dtype
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(r, want_r)
    np.testing.assert_array_equal(q * b + r, a)
    # literal divisor
    np.testing.assert_array_equal(
        run1(g, g.insert("idiv", [x, -3]), {"a": a}), np.trunc(a / -3).astype(dtype)
    )
    np.testing.assert_array_equal(run1(g, g.insert("mod", [x, 4]), {"a": a}), np.fmod(a, 4).astype(dtype))


def test_where_and_cast():
    c = RNG.random((2, 3)) < 0.5
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    b = RNG.standard_normal((2, 3)).astype(np.float32)
    g = Graph()
    cv, av, bv = inp(g, "c", c), inp(g, "a", a), inp(g, "b", b)
    np.testing.assert_array_equal(
        run1(g, g.insert("where", [cv, av, bv]), {"c": c, "a": a, "b": b}), np.where(c, a, b)
    )
    got = run1(g, g.insert("where", [cv, av, -1.0]), {"c": c, "a": a})
    np.testing.assert_array_equal(got, np.where(c, a, np.float32(-1.0)))
    assert got.dtype == np.float32
    for dt in (np.int32, np.float16, np.bool_, np.uint8, np.float64):
        got = run1(g, g.insert("cast", [av], dtype=to_dtype(dt)), {"a": a * 10})
        np.testing.assert_array_equal(got, (a * 10).astype(dt))
        assert got.dtype == dt


def test_const_and_index():
    g = Graph()
    c = run1(g, g.insert("const", [], value=2.5, shape=(2, 3), dtype=dtypes.float16))
    np.testing.assert_array_equal(c, np.full((2, 3), 2.5, np.float16))
    assert c.dtype == np.float16
    for axis in range(3):
        got = run1(g, g.insert("index", [], shape=(2, 3, 4), axis=axis, dtype=dtypes.int32))
        want = np.indices((2, 3, 4), dtype=np.int32)[axis]
        np.testing.assert_array_equal(got, want)
    s = Sym("n")
    got = run1(g, g.insert("const", [], value=s * 2 + 1, shape=(s,), dtype=dtypes.int64), symbols={"n": 3})
    np.testing.assert_array_equal(got, np.full(3, 7, np.int64))
    scratch = run1(g, g.insert("allocate", [], shape=(2, 2), dtype=dtypes.int32))
    np.testing.assert_array_equal(scratch, np.zeros((2, 2), np.int32))


# ---- views -----------------------------------------------------------------------------------


def _view(a: np.ndarray, shape, strides, offset=0, mask=None) -> np.ndarray:
    """Reference: a view over a's flat storage, written with as_strided plus an explicit mask."""
    flat = np.ascontiguousarray(a).reshape(-1)
    out = np.zeros(shape, a.dtype)
    for idx in np.ndindex(*shape):
        if mask is not None and not all(lo <= i < hi for i, (lo, hi) in zip(idx, mask)):
            continue
        out[idx] = flat[offset + sum(i * s for i, s in zip(idx, strides))]
    return out


VIEW_CASES = [
    ("reshape", (4, 6), (6, 1), 0, None),
    ("transpose", (6, 4), (1, 6), 0, None),
    ("broadcast row", (3, 4, 6), (0, 6, 1), 0, None),
    ("broadcast col", (4, 6), (6, 0), 2, None),
    ("reverse", (24,), (-1,), 23, None),
    ("reverse rows", (4, 6), (-6, 1), 18, None),
    ("slice with offset", (2, 3), (6, 2), 7, None),
    ("pad", (6, 8), (6, 1), -7, ((1, 5), (1, 7))),
    ("pad and broadcast", (3, 6, 8), (0, 6, 1), -7, ((0, 3), (1, 5), (1, 7))),
    ("shrink by mask", (4, 6), (6, 1), 0, ((1, 3), (0, 6))),
    ("diagonal", (4,), (7,), 0, None),
    ("sliding windows", (4, 3), (5, 1), 0, None),
]


@pytest.mark.parametrize(
    ("name", "shape", "strides", "offset", "mask"), VIEW_CASES, ids=[c[0] for c in VIEW_CASES]
)
def test_views(name, shape, strides, offset, mask):
    a = np.arange(24, dtype=np.float32).reshape(4, 6) + 1
    g = Graph()
    got = run1(
        g,
        g.insert("view", [inp(g, "a", a)], shape=shape, strides=strides, offset=offset, mask=mask),
        {"a": a},
    )
    np.testing.assert_array_equal(got, _view(a, shape, strides, offset, mask))


def test_views_match_numpy_idioms():
    a = np.arange(24, dtype=np.int64).reshape(4, 6)
    g = Graph()
    x = inp(g, "a", a)
    cases = [
        (g.insert("view", [x], shape=(6, 4), strides=(1, 6)), a.T),
        (g.insert("view", [x], shape=(4, 6), strides=(6, -1), offset=5), a[:, ::-1]),
        (g.insert("view", [x], shape=(2, 4, 6), strides=(0, 6, 1)), np.broadcast_to(a, (2, 4, 6))),
        (g.insert("view", [x], shape=(2, 2), strides=(12, 2), offset=1), a[::2, 1:5:2]),
        (g.insert("view", [x], shape=(6, 8), strides=(6, 1), offset=-7, mask=((1, 5), (1, 7))), np.pad(a, 1)),
    ]
    g.outputs = [v for v, _ in cases]
    for got, (_, want) in zip(interpret(g, {"a": a}), cases):
        np.testing.assert_array_equal(got, want)


def test_view_chains_read_the_previous_view_contiguously():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    g = Graph()
    t = g.insert("view", [inp(g, "a", a)], shape=(3, 2), strides=(1, 3))  # a.T
    r = g.insert("view", [t], shape=(6,), strides=(1,))  # reshape of the (materialized) transpose
    np.testing.assert_array_equal(run1(g, r, {"a": a}), a.T.reshape(-1))


def test_view_out_of_bounds_is_an_error():
    a = np.arange(6, dtype=np.float32)
    g = Graph()
    v = g.insert("view", [inp(g, "a", a)], shape=(4,), strides=(2,))
    with pytest.raises(AirError, match="outside"):
        run1(g, v, {"a": a})
    g2 = Graph()
    v2 = g2.insert("view", [inp(g2, "a", a)], shape=(3,), strides=(1,), offset=-1)
    with pytest.raises(AirError, match="outside"):
        run1(g2, v2, {"a": a})


# ---- store -----------------------------------------------------------------------------------


def test_store_windows():
    dst = np.zeros((4, 6), np.float32)
    src = np.arange(6, dtype=np.float32).reshape(2, 3) + 1
    g = Graph()
    d, s = inp(g, "dst", dst), inp(g, "src", src)
    # rows 1..2, columns 2..4
    w = g.insert("store", [d, s], shape=(2, 3), strides=(6, 1), offset=8)
    want = dst.copy()
    want[1:3, 2:5] = src
    np.testing.assert_array_equal(run1(g, w, {"dst": dst, "src": src}), want)
    # a strided (every other column) window, then a second store on top of the first
    w2 = g.insert("store", [w, s], shape=(2, 3), strides=(12, 2), offset=1)
    want2 = want.copy()
    want2[0:4:2, 1:6:2] = src
    np.testing.assert_array_equal(run1(g, w2, {"dst": dst, "src": src}), want2)
    # a literal source fills the window; the caller's array is not modified by the interpreter
    w3 = g.insert("store", [d, 9.0], shape=(4,), strides=(6,), offset=5)
    want3 = dst.copy()
    want3[:, 5] = 9.0
    np.testing.assert_array_equal(run1(g, w3, {"dst": dst}), want3)
    assert not dst.any()


def test_store_outside_destination_is_an_error():
    g = Graph()
    d = g.insert("allocate", [], shape=(4,), dtype=dtypes.float32)
    w = g.insert("store", [d, 1.0], shape=(3,), strides=(2,), offset=0)
    with pytest.raises(AirError, match="outside its destination"):
        run1(g, w)


# ---- reductions ------------------------------------------------------------------------------


@pytest.mark.parametrize("axes", [(0,), (1,), (2,), (0, 2), (0, 1, 2), ()])
@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.float16])
def test_reduce_add_and_max(axes, dtype):
    a = (RNG.standard_normal((3, 4, 5)) * 5).astype(dtype)
    g = Graph()
    x = inp(g, "a", a)
    s = run1(g, g.insert("reduce", [x], op="add", axes=axes), {"a": a})
    m = run1(g, g.insert("reduce", [x], op="max", axes=axes), {"a": a})
    assert s.shape == m.shape == tuple(1 if i in axes else d for i, d in enumerate(a.shape))
    assert s.dtype == m.dtype == dtype
    want_s = np.sum(a, axis=axes, keepdims=True, dtype=dtype)
    tol = 2e-2 if dtype == np.float16 else 1e-5
    np.testing.assert_allclose(s.astype(np.float64), want_s.astype(np.float64), rtol=tol, atol=tol)
    np.testing.assert_array_equal(m, np.max(a, axis=axes, keepdims=True))


def test_reduce_over_empty_axes_gives_identities():
    g = Graph()
    a = np.zeros((0, 3), np.float32)
    x = inp(g, "a", a)
    np.testing.assert_array_equal(
        run1(g, g.insert("reduce", [x], op="add", axes=(0,)), {"a": a}), np.zeros((1, 3))
    )
    m = run1(g, g.insert("reduce", [x], op="max", axes=(0,)), {"a": a})
    assert m.shape == (1, 3) and np.all(np.isneginf(m))
    i = np.zeros((2, 0), np.int32)
    y = inp(g, "i", i)
    mi = run1(g, g.insert("reduce", [y], op="max", axes=(1,)), {"i": i})
    np.testing.assert_array_equal(mi, np.full((2, 1), np.iinfo(np.int32).min, np.int32))


# ---- symbolic shapes, size 0, errors --------------------------------------------------------


def _softmax_graph() -> tuple[Graph, str]:
    n = Sym("n")
    g = Graph()
    x = g.insert("allocate", [], shape=(n, 4), dtype=dtypes.float32, name="x")
    mx = g.insert("reduce", [x], op="max", axes=(1,))
    mxb = g.insert("view", [mx], shape=(n, 4), strides=(1, 0))
    e = g.insert(
        "exp2", [g.insert("mul", [g.insert("add", [x, g.insert("neg", [mxb])]), 1.4426950408889634])]
    )
    den = g.insert("view", [g.insert("reduce", [e], op="add", axes=(1,))], shape=(n, 4), strides=(1, 0))
    out = g.insert("mul", [e, g.insert("recip", [den])])
    g.mark_output(out)
    return g, out


@pytest.mark.parametrize("n", [1, 3, 7, 0])
def test_symbolic_shapes_softmax(n):
    g, _ = _softmax_graph()
    x = RNG.standard_normal((n, 4)).astype(np.float32)
    (got,) = interpret(g, {"x": x}, {"n": n})
    e = np.exp(x - x.max(axis=1, keepdims=True)) if n else x
    want = e / e.sum(axis=1, keepdims=True) if n else x
    assert got.shape == (n, 4)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_symbolic_view_offsets_and_masks():
    n = Sym("n")
    g = Graph()
    x = g.insert("allocate", [], shape=(n,), dtype=dtypes.float32, name="x")
    last = g.insert("view", [x], shape=(1,), strides=(1,), offset=n - 1)
    padded = g.insert("view", [x], shape=(n + 2,), strides=(1,), offset=-1, mask=((1, n + 1),))
    g.outputs = [last, padded]
    a = np.arange(5, dtype=np.float32) + 1
    got_last, got_pad = interpret(g, {"x": a}, {"n": 5})
    np.testing.assert_array_equal(got_last, a[-1:])
    np.testing.assert_array_equal(got_pad, np.pad(a, 1))


def test_size_zero_dims_everywhere():
    g = Graph()
    a = np.zeros((0, 4), np.float32)
    x = inp(g, "a", a)
    y = g.insert("sin", [g.insert("add", [x, 1.0])])
    v = g.insert("view", [y], shape=(4, 0), strides=(1, 4))
    i = g.insert("index", [], shape=(0, 3), axis=1, dtype=dtypes.int32)
    s = g.insert("store", [x, 2.0], shape=(0, 4), strides=(4, 1))
    g.outputs = [y, v, i, s]
    outs = interpret(g, {"a": a})
    assert [o.shape for o in outs] == [(0, 4), (4, 0), (0, 3), (0, 4)]


def test_interpret_errors_and_keep():
    g, out = _softmax_graph()
    with pytest.raises(AirError, match="input 'x' is not bound"):
        interpret(g, {}, {"n": 2})
    with pytest.raises(SymbolError, match="'n' is not bound"):
        interpret(g, {"x": np.zeros((2, 4), np.float32)})
    with pytest.raises(AirError, match="expected shape"):
        interpret(g, {"x": np.zeros((3, 4), np.float32)}, {"n": 2})
    with pytest.raises(SymbolError, match="non-negative"):
        interpret(g, {"x": np.zeros((2, 4), np.float32)}, {"n": -1})
    env = interpret(g, {"x": np.zeros((2, 4), np.float32)}, {"n": 2}, keep=True)
    assert isinstance(env, dict) and len(env) == len(g) and out in env
    np.testing.assert_allclose(env[out], np.full((2, 4), 0.25, np.float32))


def test_interpreter_follows_dependencies_not_insertion_order():
    g = Graph()
    x = g.insert("allocate", [], shape=(3,), dtype=dtypes.float32, name="x")
    a = g.insert("neg", [x])
    b = g.insert("exp2", [x])
    g.set_read(g.producer_of(a), 0, b)  # a now reads b, which is inserted after it
    g.mark_output(a)
    x_val = np.array([0.0, 1.0, 2.0], np.float32)
    np.testing.assert_array_equal(interpret(g, {"x": x_val})[0], -np.exp2(x_val))


def test_outputs_do_not_alias_inputs():
    g = Graph()
    x = g.insert("allocate", [], shape=(3,), dtype=dtypes.float32, name="x")
    g.mark_output(g.insert("store", [x, 1.0], shape=(1,), strides=(1,), offset=0))
    a = np.zeros(3, np.float32)
    (res,) = interpret(g, {"x": a})
    assert res[0] == 1.0 and a[0] == 0.0
