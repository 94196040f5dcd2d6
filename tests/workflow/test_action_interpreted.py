"""Accepted subset examples run in interpreted mode with correct results (vs plain Python/NumPy)."""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

import math

import numpy as np
import pytest
import wf_examples as ex

from caten_lab.errors import CatenError, ShapeError


def py_floor_ops(x, y):
    return x // y, x % y


def test_dot_matches_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(37).astype(np.float32)
    b = rng.standard_normal(37).astype(np.float32)
    assert ex.dot(a, b) == pytest.approx(float(a @ b), rel=1e-5)


@pytest.mark.parametrize("n", [1, 6, 27, 97, 871])
def test_collatz(n):
    steps, m = 0, n
    while m != 1:
        m = m // 2 if m % 2 == 0 else 3 * m + 1
        steps += 1
    assert ex.collatz(n) == steps


def test_matvec_writes_output():
    rng = np.random.default_rng(1)
    m, v, out = rng.random((5, 3)), rng.random(3), np.zeros(5)
    assert ex.matvec(m, v, out) is None
    np.testing.assert_allclose(out, m @ v)


def test_local_array_break_and_call():
    a = np.arange(4, dtype=np.float32)
    # buf = 0 1 4 9 16 ...; stops before 16 when limit is 10
    assert ex.squares_until(a, 10) == pytest.approx(14.0 + 14.0)
    assert ex.squares_until(a, 100) == pytest.approx(14.0 + sum(k * k for k in range(8)))


@pytest.mark.parametrize("x,y", [(17, 5), (-17, 5), (17, -5), (-17, -5), (300, 7), (0, 3)])
def test_int_ops(x, y):
    q, r = x // y, x % y
    expect = (
        q * 1000003
        + r * 10007
        + ((x & 0xFF) | (y ^ 5)) * 101
        + ((abs(x) << 2) >> 1)
        + (min(x, y, 7) + max(x, -y)) * 7
        + (1 if x > y else -1)
        + ~x
    )
    assert ex.int_ops(x, y) == expect


@pytest.mark.parametrize("x,y", [(7.5, 2.0), (-7.5, 2.0), (7.5, -2.0), (1.25, 0.5)])
def test_float_ops(x, y):
    expect = (x // y) * 1000.0 + (x % y) * 10.0 + x / y - x + abs(y) + min(x, y) - max(x, 2.5)
    assert ex.float_ops(x, y) == pytest.approx(expect)


def test_division_gives_float():
    assert ex.div_promotes(7, 2) == 3.5


@pytest.mark.parametrize("args", [(0, 10, 1), (0, 10, 3), (10, 0, -3), (5, 5, 1), (-4, 9, 2), (3, -8, -1)])
def test_range_forms(args):
    vals = list(range(*args))
    assert ex.count_range(*args) == len(vals) * 100000 + sum(vals)


def test_while_true_break_continue():
    assert ex.skip_odd(10) == 2 + 4 + 6 + 8 + 10


def test_for_else():
    a = np.array([4, 8, 15, 16], dtype=np.int32)
    assert ex.for_else(a, 15) == 2
    assert ex.for_else(a, 99) == -1


def test_swap_sort():
    a = np.random.default_rng(3).integers(-50, 50, 40).astype(np.int32)
    expect = np.sort(a)
    ex.swap_sort(a)
    np.testing.assert_array_equal(a, expect)


def test_bytes_hist():
    data = np.frombuffer("héllo wörld".encode(), dtype=np.uint8).copy()
    hist = np.zeros(256, dtype=np.int32)
    assert ex.bytes_hist(data, hist) == len(set(data.tolist()))
    np.testing.assert_array_equal(hist, np.bincount(data, minlength=256))


@pytest.mark.parametrize(
    "x,y,flag", [(1, 2, False), (-1, 2, True), (3, 3, True), (150, 1, False), (5, 5, False)]
)
def test_logic(x, y, flag):
    ok = (x > 0 and y > 0) or (flag and not x > y)
    assert ex.logic(x, y, flag) == (ok and 0 <= x < 100)


def test_annotated_and_retyped_variable_and_global_constant():
    assert ex.annotated(4) == pytest.approx(4.0 + 4.5 * 3)


def test_negative_step():
    assert ex.countdown(9) == 9 + 7 + 5 + 3 + 1


def test_fib_tuple_assignment():
    assert ex.fib(50) == 12586269025


def test_clamp_2d():
    a = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    expect = np.clip(a, -1, 1)
    changed = int(((a < -1) | (a > 1)).sum())
    assert ex.clamp_all(a, -1.0, 1.0) == changed
    np.testing.assert_array_equal(a, expect)


def test_calls_between_actions():
    a = np.array([12, 18, 30, 42], dtype=np.int64)
    assert ex.gcd_sum(a) == math.gcd(*a.tolist())


def test_callee_defined_after_caller():
    assert ex.later_caller(20) == 41


def test_argument_checks():
    a32 = np.zeros(3, dtype=np.float32)
    with pytest.raises(ShapeError, match="dtype float32"):
        ex.dot(np.zeros(3), a32)
    with pytest.raises(ShapeError, match="symbolic dim 'n'"):
        ex.dot(a32, np.zeros(4, dtype=np.float32))
    with pytest.raises(ShapeError, match="dimension"):
        ex.dot(np.zeros((3, 1), dtype=np.float32), a32)
    with pytest.raises(CatenError, match="must be i64"):
        ex.collatz(2.5)
    with pytest.raises(CatenError, match="does not fit in i32"):
        ex.int_ops(2**40, 1)
    with pytest.raises(CatenError, match="takes 2 argument"):
        ex.dot(a32)
    with pytest.raises(ShapeError, match="axis 0 must be 256"):
        ex.bytes_hist(np.zeros(3, dtype=np.uint8), np.zeros(10, dtype=np.int32))
    with pytest.raises(CatenError, match="must be boolean"):
        ex.logic(1, 2, 1)


def test_ir_dump_lists_blocks():
    text = ex.collatz.ir.dump()
    assert "action collatz(n: i64) -> i32" in text
    assert "branch (n != 1)" in text
    assert repr(ex.collatz).startswith("<action collatz(")
