"""Errors name the op, the shapes and the user's line; every node remembers its source line."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.errors import CatenError, ShapeError
from caten_lab.frontend import AxisError, DTypeError, SliceError, Tensor, build_graph, cat

from .helpers import T, arr, raises_here


def test_broadcast_mismatch() -> None:
    a, b = T(arr(2, 3)), T(arr(4))
    raises_here(ShapeError, lambda: a + b, "add", "(2, 3)", "(4,)")
    raises_here(ShapeError, lambda: a.where(a, b), "where", "(4,)")


def test_bad_axis() -> None:
    a = T(arr(2, 3))
    raises_here(AxisError, lambda: a.sum(2), "sum", "axis 2", "(2, 3)")
    raises_here(AxisError, lambda: a.softmax(-3), "axis -3")
    raises_here(AxisError, lambda: a.permute(0, 0), "permute")
    raises_here(AxisError, lambda: a.transpose(0, 5), "transpose", "axis 5")
    raises_here(AxisError, lambda: a.sum((0, 0)), "repeats")


def test_bad_dtype_mix() -> None:
    a = T(arr(2, 3))
    raises_here(DTypeError, lambda: a & a, "and", "float32")
    raises_here(DTypeError, lambda: a.gather(0, a), "gather", "integer")
    raises_here(DTypeError, lambda: a + "x", "add", "str")
    raises_here(DTypeError, lambda: a.cast("complex64"), "cast")
    raises_here(DTypeError, lambda: -(a > 0), "neg", "bool")


def test_bad_slices() -> None:
    a = T(arr(2, 3))
    raises_here(SliceError, lambda: a[::0], "step", "zero")
    raises_here(SliceError, lambda: a[5], "index 5", "size 2")
    raises_here(SliceError, lambda: a[0, 0, 0], "too many indices", "(2, 3)")
    raises_here(SliceError, lambda: a[..., ...], "ellipsis")
    raises_here(SliceError, lambda: a[a > 0], "gather")
    raises_here(SliceError, lambda: a["x"], "unsupported index")
    assert isinstance(pytest.raises(IndexError, lambda: a[7]).value, CatenError)  # also a Python IndexError


def test_shape_errors_in_movement_and_matmul() -> None:
    a = T(arr(2, 3))
    raises_here(ShapeError, lambda: a.reshape(4, 2), "reshape", "(2, 3)", "(4, 2)")
    raises_here(ShapeError, lambda: a.expand(4, 3), "expand", "(2, 3)", "(4, 3)")
    raises_here(ShapeError, lambda: a @ a, "matmul", "(2, 3)", "3 vs 2")
    raises_here(ShapeError, lambda: cat([a, T(arr(2, 4))], 0), "cat", "(2, 3)", "(2, 4)")
    raises_here(ShapeError, lambda: a.split([1, 2]), "split", "do not add up")
    raises_here(ShapeError, lambda: a.pad((1, 1, 1, 1, 1, 1)), "pad")

    raises_here(ShapeError, lambda: a.__setitem__(0, T(arr(4))), "setitem", "(4,)", "(3,)")
    v = a.T
    raises_here(SliceError, lambda: v.__setitem__(0, 1.0), "setitem", "view")


def test_nodes_remember_the_user_line() -> None:
    a = T(arr(2, 3))
    line = __import__("sys")._getframe().f_lineno + 1
    y = (a.exp() + 1).softmax(-1).sum()
    g, _ = build_graph([y])
    sources = {n.source for n in g.nodes if n.op != "allocate"}
    assert sources == {f"{__file__}:{line}"}, sources
    alloc = [n for n in g.nodes if n.op == "allocate"][0]
    assert alloc.source.split(":")[0].endswith("helpers.py")  # from_numpy was called in the T() helper


def test_unbound_placeholder_is_a_clear_error() -> None:
    x = Tensor.placeholder((2,), "float32", name="tokens")
    with pytest.raises(CatenError, match="tokens"):
        (x + 1).numpy()


def test_errors_are_caten_errors() -> None:
    for exc in (AxisError, DTypeError, SliceError):
        assert issubclass(exc, CatenError)
    assert np.asarray(T(arr(1)).numpy()).shape == (1,)
