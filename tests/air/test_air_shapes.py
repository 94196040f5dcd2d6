"""Shared shape arithmetic (air/shapes.py): element counts, row-major strides and broadcasting agree
with NumPy on concrete shapes and keep symbolic dims symbolic; a mismatch names the op, the shapes and
the axis."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from caten_lab.air import Sym
from caten_lab.air.shapes import broadcast_shapes, contiguous_strides, fmt_shape, numel
from caten_lab.air.symbolic import evaluate
from caten_lab.errors import ShapeError

n, m = Sym("n"), Sym("m")
shapes = st.lists(st.integers(0, 5), max_size=5).map(tuple)


@settings(max_examples=200, deadline=None)
@given(shapes)
def test_numel_and_strides_match_numpy(shape: tuple) -> None:
    a = np.empty(shape, np.float32)
    assert numel(shape) == a.size
    if a.size:  # NumPy's strides of an empty array are not row-major products
        assert contiguous_strides(shape) == tuple(s // a.itemsize for s in a.strides)


def test_symbolic_dims_stay_symbolic() -> None:
    assert numel((n, 3, m)) == 3 * n * m
    assert contiguous_strides((n, 3, m)) == (3 * m, m, 1)
    s = contiguous_strides([2, n])  # a list is a shape too (and cached as a tuple)
    assert s == (n, 1) and evaluate(s[0], {"n": 7}) == 7
    assert numel(()) == 1 and contiguous_strides(()) == ()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0, 1, 2, 3]), max_size=4).map(tuple), min_size=1, max_size=3))
def test_broadcast_matches_numpy(shape_list: list[tuple]) -> None:
    try:
        want = np.broadcast_shapes(*shape_list)
    except ValueError:
        with pytest.raises(ShapeError, match="cannot be broadcast"):
            broadcast_shapes("op", *shape_list)
        return
    assert broadcast_shapes("op", *shape_list) == want


def test_broadcast_of_symbolic_dims_and_the_error() -> None:
    assert broadcast_shapes("add", (n, 1, 3), (m, 1)) == (n, m, 3)
    assert broadcast_shapes("add", (1,), (n,)) == (n,)
    calls = []
    with pytest.raises(ShapeError) as err:
        broadcast_shapes("add", (n, 3), (m, 3), where=lambda: calls.append(1) or "prog.py:7")
    assert err.value.message == "add: shapes (n, 3) and (m, 3) cannot be broadcast (axis -2: n vs m)"
    assert err.value.where == "prog.py:7" and calls == [1]
    assert "equal or 1" in err.value.hint
    broadcast_shapes("add", (2, 3), (3,), where=lambda: calls.append(2))
    assert calls == [1]  # ``where`` is asked only when the shapes do not fit
    assert fmt_shape((4,)) == "(4,)" and fmt_shape(()) == "()" and fmt_shape((n, 2)) == "(n, 2)"
