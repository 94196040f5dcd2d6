"""Random AIR programs for differential tests of the graph passes (hypothesis strategies + comparison).

Programs mix elementwise ops, literals and consts (incl. 0, 1, -1 so simplification fires),
const-only subexpressions (constant folding), duplicated subexpressions (CSE), dead nodes (DCE),
reductions broadcast back with stride-0 views, and view round trips (transpose, reshape, flip,
pad/slice, chains of views) so view folding has work to do.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from caten_lab.air import Graph, Sym, dtypes, interpret

FLOAT_UNARY = ("neg", "exp2", "sin", "sqrt", "log2", "recip")
INT_UNARY = ("neg", "not")
FLOAT_BINARY = ("add", "mul", "max")
INT_BINARY = ("add", "mul", "max", "and", "or", "xor")


def _lit(draw, dtype, allow_special=True):  # noqa: ANN001, ANN202
    if dtype.is_float:
        pool = [0.0, 1.0, -1.0, 0.5, 2.0, -3.25] if allow_special else [0.5, 2.0, -3.25]
        return draw(st.sampled_from(pool))
    pool = [0, 1, -1, 2, 3, -7] if allow_special else [2, 3, -7]
    return draw(st.sampled_from(pool))


@st.composite
def programs(draw, max_ops: int = 14):  # noqa: ANN001, ANN201
    """(graph, inputs) for a random program over float32 or int32 values of one 2-D shape."""
    g, inputs, _ = draw(_programs(max_ops=max_ops, symbolic=False))
    return g, inputs


@st.composite
def symbolic_programs(draw, max_ops: int = 14):  # noqa: ANN001, ANN201
    """(graph, inputs, symbols): the first dimension is the symbol ``n``, bound at run time."""
    return draw(_programs(max_ops=max_ops, symbolic=True))


@st.composite
def _programs(draw, max_ops: int, symbolic: bool):  # noqa: ANN001, ANN202
    dtype = draw(st.sampled_from([dtypes.float32, dtypes.int32]))
    a_int, b = draw(st.sampled_from([(2, 3), (3, 4), (1, 5), (4, 4)]))
    a = Sym("n") if symbolic else a_int
    symbols = {"n": a_int} if symbolic else {}
    shape = (a, b)
    concrete = (a_int, b)
    g = Graph()
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    inputs: dict[str, np.ndarray] = {}
    pool: list[str] = []
    for i in range(draw(st.integers(1, 3))):
        name = f"x{i}"
        pool.append(g.insert("allocate", [], shape=shape, dtype=dtype, name=name))
        if dtype.is_float:
            inputs[name] = rng.uniform(-2, 2, size=concrete).astype(np.float32)
        else:
            inputs[name] = rng.integers(-20, 20, size=concrete).astype(np.int32)
    unary = FLOAT_UNARY if dtype.is_float else INT_UNARY
    binary = FLOAT_BINARY if dtype.is_float else INT_BINARY

    def pick() -> str:
        return draw(st.sampled_from(pool))

    def const() -> str:
        v = _lit(draw, dtype)
        if draw(st.booleans()):
            return g.insert("const", [], value=v, shape=shape, dtype=dtype)
        c = g.insert("const", [], value=v, shape=(), dtype=dtype)
        c = g.insert("view", [c], shape=(1, 1), strides=(0, 0))
        return g.insert("view", [c], shape=shape, strides=(0, 0))

    for _ in range(draw(st.integers(1, max_ops))):
        kind = draw(
            st.sampled_from(
                [
                    "unary",
                    "binary",
                    "binary_lit",
                    "binary_const",
                    "const_expr",
                    "reduce",
                    "transpose",
                    "reshape",
                    "flip",
                    "pad",
                    "where",
                    "cast",
                    "dup",
                    "dead",
                    "double_neg",
                    "slice_chain",
                    "matmul",
                ]
            )
        )
        x = pick()
        if kind == "unary":
            op = draw(st.sampled_from(unary))
            v = g.insert(op, [x])
        elif kind == "binary":
            v = g.insert(draw(st.sampled_from(binary)), [x, pick()])
        elif kind == "binary_lit":
            lit = _lit(draw, dtype)
            op = draw(st.sampled_from(binary))
            v = g.insert(op, [x, lit] if draw(st.booleans()) else [lit, x])
        elif kind == "binary_const":
            op = draw(st.sampled_from(binary))
            v = g.insert(op, [x, const()] if draw(st.booleans()) else [const(), x])
        elif kind == "const_expr":
            op = draw(st.sampled_from(binary))
            c = g.insert(op, [const(), const()])
            if draw(st.booleans()):
                c = g.insert(draw(st.sampled_from(unary)), [c])
            v = g.insert("add", [x, c])
        elif kind == "reduce":
            axis = draw(st.integers(0, 1))
            r = g.insert("reduce", [x], op=draw(st.sampled_from(["add", "max"])), axes=(axis,))
            strides = (0, 1) if axis == 0 else (1, 0)
            v = g.insert("view", [r], shape=shape, strides=strides)
        elif kind == "transpose":
            t = g.insert("view", [x], shape=(b, a), strides=(1, b))
            if draw(st.booleans()):
                t = g.insert(draw(st.sampled_from(unary)), [t])
            v = g.insert("view", [t], shape=shape, strides=(1, a))
        elif kind == "reshape":
            f = g.insert("view", [x], shape=(a * b,), strides=(1,))
            if draw(st.booleans()):
                f = g.insert("view", [f], shape=(1, a * b), strides=(0, 1))
            v = g.insert("view", [f], shape=shape, strides=(b, 1))
        elif kind == "flip":
            axis = draw(st.integers(0, 1))
            strides, offset = ((-b, 1), (a - 1) * b) if axis == 0 else ((b, -1), b - 1)
            v = g.insert("view", [x], shape=shape, strides=strides, offset=offset)
        elif kind == "pad":
            lo0, hi0 = draw(st.integers(0, a_int - 1)), a
            lo1 = draw(st.integers(0, b - 1))
            v = g.insert("view", [x], shape=shape, strides=(b, 1), mask=((lo0, hi0), (lo1, b)))
        elif kind == "slice_chain":
            # slice a window (drop first row/col when possible), then pad it back: view of view
            r0, c0 = (1 if a_int > 1 else 0), (1 if b > 1 else 0)
            w = g.insert("view", [x], shape=(a - r0, b - c0), strides=(b, 1), offset=r0 * b + c0)
            v = g.insert(
                "view",
                [w],
                shape=shape,
                strides=(b - c0, 1),
                offset=-(r0 * (b - c0) + c0),
                mask=((r0, a), (c0, b)),
            )
        elif kind == "matmul":
            # x @ w with a fresh (b, b) weight: broadcast both to (a, b, b), multiply, sum over k
            name = f"w{len(inputs)}"
            w = g.insert("allocate", [], shape=(b, b), dtype=dtype, name=name)
            inputs[name] = (
                rng.uniform(-1, 1, size=(b, b)).astype(np.float32)
                if dtype.is_float
                else rng.integers(-5, 5, size=(b, b)).astype(np.int32)
            )
            x3 = g.insert("view", [x], shape=(a, b, b), strides=(b, 1, 0))
            w3 = g.insert("view", [w], shape=(a, b, b), strides=(0, b, 1))
            r = g.insert("reduce", [g.insert("mul", [x3, w3])], op="add", axes=(1,))
            v = g.insert("view", [r], shape=shape, strides=(b, 1))
        elif kind == "where":
            cond = g.insert("lt", [x, pick()])
            v = g.insert("where", [cond, pick(), draw(st.sampled_from([pick(), _lit(draw, dtype)]))])
        elif kind == "cast":
            wide = dtypes.float64 if dtype.is_float else dtypes.int64
            c = g.insert("cast", [x], dtype=wide)
            v = g.insert("cast", [c], dtype=dtype)
            if draw(st.booleans()):
                v = g.insert("cast", [v], dtype=dtype)
        elif kind == "dup":
            op = draw(st.sampled_from(binary))
            y = pick()
            v1 = g.insert(op, [x, y])
            v2 = g.insert(op, [y, x])
            v = g.insert("add", [v1, v2])
        elif kind == "dead":
            g.insert(draw(st.sampled_from(binary)), [x, pick()])
            continue
        else:  # double_neg
            op = "neg" if dtype.is_float or draw(st.booleans()) else "not"
            v = g.insert(op, [g.insert(op, [x])])
        pool.append(v)
    g.mark_output(pool[-1])
    if len(pool) > 2 and draw(st.booleans()):
        g.mark_output(draw(st.sampled_from(pool[:-1])))
    return g, inputs, symbols


def assert_same_results(expected: list[np.ndarray], got: list[np.ndarray]) -> None:
    """Exact for ints and bools; for floats equal up to a few ulps (NaN and inf must match)."""
    assert len(expected) == len(got)
    for e, o in zip(expected, got):
        assert e.shape == o.shape and e.dtype == o.dtype, (e.shape, o.shape, e.dtype, o.dtype)
        if e.dtype.kind == "f":
            finite = np.isfinite(e)
            scale = float(np.max(np.abs(e[finite]))) if finite.any() else 1.0
            np.testing.assert_allclose(o, e, rtol=1e-5, atol=1e-5 * max(1.0, scale), equal_nan=True)
            np.testing.assert_array_equal(np.isnan(o), np.isnan(e))
            np.testing.assert_array_equal(np.isinf(o), np.isinf(e))
        else:
            np.testing.assert_array_equal(o, e)


def run(g: Graph, inputs: dict[str, np.ndarray], symbols: dict[str, int] | None = None) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return interpret(g, inputs, symbols)  # type: ignore[return-value]
