"""Interpreter nits found by the differential fuzz (issue 13), each checked against the C backend and a
NumPy reference: a 0-d view is an array (it was a NumPy scalar), and an int literal on an unsigned dtype
wraps modulo 2**bits as the C backend renders it, and one out of a signed dtype's range wraps as C
converts it (the interpreter raised OverflowError)."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.air import Graph, dtypes
from caten_lab.air.interpreter import interpret
from caten_lab.compiler import compile


def both(g: Graph, inputs: dict) -> list[np.ndarray]:
    """The interpreter's outputs, after checking the C backend's are the same (values, dtype and shape)."""
    want = interpret(g, {k: v.copy() for k, v in inputs.items()})
    got = compile(g, backend="c")({k: v.copy() for k, v in inputs.items()})
    for w, c in zip(want, got):
        assert isinstance(w, np.ndarray) and w.dtype == c.dtype and w.shape == c.shape
        np.testing.assert_array_equal(w, c)
    return want


@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_a_0d_view_is_an_array(dtype: str) -> None:
    dt = getattr(dtypes, dtype)
    g = Graph()
    x = g.insert("allocate", [], shape=(2, 3), dtype=dt, name="x")
    g.mark_output(g.insert("view", [x], shape=(), strides=(), offset=4))
    a = (np.arange(6).reshape(2, 3) % 4).astype(dt.np)
    (out,) = both(g, {"x": a})
    assert out.shape == () and out.dtype == a.dtype and out == a.reshape(-1)[4]


U8 = np.array([0, 1, 7, 128, 254, 255], np.uint8)
U32 = np.array([0, 1, 3, 2**31, 2**32 - 1, 12345], np.uint32)
I8 = np.array([-128, -57, -1, 0, 1, 127], np.int8)
I32 = np.array([-2**31, -7, 0, 5, 2**31 - 1, 99], np.int32)


def _wrap(v: int, a: np.ndarray) -> np.integer:
    """``v`` in ``a``'s type, two's complement."""
    return np.array(v % (1 << (8 * a.itemsize)), np.uint64).astype(a.dtype)[()]


@pytest.mark.parametrize(("op", "a", "lit", "ref"), [
    ("add", U8, -1, lambda a, m: (a.astype(np.int64) - 1) % 256),
    ("add", U32, -5, lambda a, m: (a.astype(np.int64) - 5) % 2**32),
    ("mul", U32, -3, lambda a, m: (a.astype(object) * (2**32 - 3)) % 2**32),
    ("and", U8, -2, lambda a, m: a & m),
    ("xor", U8, -1, lambda a, m: ~a),
    ("max", U8, -1, lambda a, m: np.maximum(a, m)),
    ("lt", U8, -1, lambda a, m: a < m),
    ("ne", U32, -1, lambda a, m: a != m),
    ("mod", U8, -3, lambda a, m: a % m),
    ("add", I8, 200, lambda a, m: (a.astype(np.int64) + 200 + 128) % 256 - 128),
    ("mul", I8, 130, lambda a, m: (a.astype(np.int64) * 130 + 128) % 256 - 128),
    ("add", I32, 2**40 + 3, lambda a, m: (a.astype(np.int64) + 3 + 2**31) % 2**32 - 2**31),
    ("max", I8, 200, lambda a, m: np.maximum(a, -56)),
    ("idiv", I8, 200, lambda a, m: np.trunc(a / -56)),
    ("lt", I8, 200, lambda a, m: np.ones(a.shape, bool)),  # a compare is made in the wider type, in C too
    ("ne", I8, -200, lambda a, m: np.ones(a.shape, bool)),
])
def test_int_literal_out_of_its_dtype_wraps_as_in_c(op: str, a: np.ndarray, lit: int, ref) -> None:  # noqa: ANN001
    dt = getattr(dtypes, a.dtype.name)
    g = Graph()
    x = g.insert("allocate", [], shape=a.shape, dtype=dt, name="x")
    g.mark_output(g.insert(op, [x, lit]))
    (out,) = both(g, {"x": a})
    want = np.asarray(ref(a, _wrap(lit, a)))
    np.testing.assert_array_equal(out, want.astype(out.dtype))


def test_negative_literal_in_const_store_and_where_on_unsigned() -> None:
    g = Graph()
    x = g.insert("allocate", [], shape=(6,), dtype=dtypes.uint8, name="x")
    c = g.insert("const", [], value=-1, shape=(6,), dtype=dtypes.uint8)
    g.mark_output(g.insert("add", [x, c]))
    g.mark_output(g.insert("store", [g.insert("add", [x, 0]), -2], shape=(2,), strides=(1,), offset=1))
    g.mark_output(g.insert("where", [g.insert("lt", [x, 100]), -3, x]))
    outs = both(g, {"x": U8})
    np.testing.assert_array_equal(outs[0], (U8.astype(np.int64) + 255) % 256)
    np.testing.assert_array_equal(outs[1], np.array([0, 254, 254, 128, 254, 255], np.uint8))
    np.testing.assert_array_equal(outs[2], np.where(U8 < 100, 253, U8).astype(np.uint8))
