"""Symbolic dimensions: canonical polynomial form, simplification, evaluation, substitution, JSON."""

from __future__ import annotations

import itertools

import pytest

from caten_lab.air import Expr, Sym
from caten_lab.air.symbolic import (
    dim_from_json,
    dim_to_json,
    evaluate,
    floordiv,
    is_sym,
    mod,
    render,
    smax,
    smin,
    symbols_of,
)
from caten_lab.errors import CatenError, SymbolError

n, m, k = Sym("n"), Sym("m"), Sym("k")


def test_normal_form_is_canonical():
    assert n + m == m + n and hash(n + m) == hash(m + n)
    assert (n + 1) * (m + 2) == n * m + 2 * n + m + 2
    assert (n + m) * (n - m) == n * n - m * m
    assert n * m * k == k * (m * n)
    assert 3 * n - n - 2 * n == 0 and isinstance(3 * n - n - 2 * n, int)
    assert n + m - m == n and (n + m - m).terms == n.terms
    assert (n + 5) - n == 5 and isinstance((n + 5) - n, int)
    assert 2 + n - 2 == n
    neg_n = -n
    assert -neg_n == n and 0 - n == neg_n
    assert n != m and n != n + 1 and n != 1
    assert len({n + m, m + n, n * 1 + m}) == 1


def test_immutability_and_truthiness():
    with pytest.raises(AttributeError):
        n.terms = ()
    assert bool(n) and is_sym(n) and not is_sym(3)


def test_floordiv_and_mod_simplify_when_exact():
    assert (2 * n + 4) // 2 == n + 2
    assert (6 * n) % 3 == 0
    assert n // 1 == n and n // n == 1 and n % n == 0
    assert floordiv(7, 2) == 3 and mod(-7, 2) == 1  # ints: Python floor semantics
    q = (n + 1) // 2  # not exact: an opaque atom
    assert isinstance(q, Expr) and q == (n + 1) // 2 and q != n // 2
    assert 10 // n != n and isinstance(10 % n, Expr)
    assert smax(3, 5) == 5 and smin(3, 5) == 3 and smax(n, n) == n and smin(n, n) == n
    assert smax(n, m) == smax(m, n) and smin(n, m) == smin(m, n)


def test_evaluate_matches_python_arithmetic():
    exprs = [
        lambda a, b: a * b + 3 * a - 7,
        lambda a, b: (a + 1) * (b + 2) - a * b,
        lambda a, b: (a + b) // 3 + (a * b) % 5,
        lambda a, b: smax(a, b) * 2 - smin(a, b),
        lambda a, b: (2 * a + 4) // 2,
    ]
    for f, (a, b) in itertools.product(exprs, [(0, 0), (1, 7), (5, 3), (12, 12), (9, 2)]):
        e = f(n, m)
        want = f(a, b)  # on plain ints the same operators (and smax/smin) compute the reference value
        assert evaluate(e, {"n": a, "m": b}) == want, (e, a, b)
    assert evaluate(7, {}) == 7


def test_substitute():
    e = n * m + 2 * n
    assert e.substitute({"n": 3}) == 3 * m + 6
    assert e.substitute({"n": k + 1, "m": 2}) == 4 * k + 4
    assert e.substitute({"n": 2, "m": 5}) == 14 and isinstance(e.substitute({"n": 2, "m": 5}), int)
    assert ((n + 1) // 2).substitute({"n": 5}) == 3
    assert smax(n, m).substitute({"n": 4, "m": 9}) == 9
    assert e.substitute({}) == e


def test_symbols_and_render():
    e = n * m + (k + 1) // 2
    assert e.symbols() == {"n", "m", "k"} and symbols_of(e) == {"n", "m", "k"} and symbols_of(4) == set()
    assert render(n + 1) in ("(1 + n)", "(n + 1)") and render(5) == "5"
    assert eval(render(n * m - 3 * n + 2), {"n": 4, "m": 6}) == 4 * 6 - 12 + 2  # renders valid Python
    c_name = render(n * 2, lambda s: f"sym_{s}")
    assert "sym_n" in c_name
    assert str(n - m) == repr(n - m)


def test_json_round_trip():
    for e in [n, n * m - 3, (n + 1) // 2 + k % 4, smax(n, m * 2) - smin(k, 3), 7]:
        j = dim_to_json(e)
        back = dim_from_json(j)
        assert back == e and type(back) is type(e)
        if isinstance(e, Expr):
            assert Expr.from_json(e.to_json()) == e


def test_errors():
    with pytest.raises(SymbolError) as err:
        evaluate(n + m, {"n": 1})
    assert "'m' is not bound" in str(err.value) and "symbols=" in str(err.value)
    assert isinstance(err.value, CatenError)
    with pytest.raises(SymbolError, match="cannot decide"):
        _ = n < m
    with pytest.raises(SymbolError, match="cannot decide"):
        _ = n + 1 > n
    with pytest.raises(SymbolError, match="cannot decide"):
        _ = (3).__le__(n) is NotImplemented and n >= 3  # int <= Expr falls back to Expr.__ge__
    with pytest.raises(SymbolError, match="identifier"):
        Sym("not a name")
    with pytest.raises(SymbolError, match="ints or symbols"):
        _ = n + 1.5
    with pytest.raises(SymbolError, match="ints or symbols"):
        _ = n * True
