"""Symbolic integers (``air.symbolic`` Dim/Expr) as kernel-IR expressions: the one lowering of index
arithmetic, sizes and bounds.

An expression is a sum of monomials; each becomes ``coef * atom * atom ...`` (int64 multiplies) and
the sum a chain of adds. Atoms are symbol names (through :class:`Names`, which maps them to the C
identifiers of the function) or opaque operations: ``max``/``min`` become the ALU ops of the same
name; ``//`` and ``%`` become C's truncating ``/`` (the ``div`` op) and ``a - (a / b) * b`` when both
operands are provably non-negative (no zero-divisor guard: index divisors are positive extents), else
the floor forms ``floordiv``/``floormod``.
"""

from __future__ import annotations

from caten_lab.air.dtypes import DType
from caten_lab.air.symbolic import Dim
from caten_lab.codegen.kir import Alu, Const, Expr, Var
from caten_lab.passes.indexing import is_loop_var, nonneg

I64 = DType.int64


class Names(dict):
    """Symbol name -> identifier in one function: loop variables (``__l0``) drop their ``__`` prefix,
    user symbols get ``S_`` (``seq`` -> ``S_seq``). A lowering owns one and may bind a symbol to any
    identifier first (a clamped gather index)."""

    def __missing__(self, key: str) -> str:
        v = key[2:] if is_loop_var(key) else f"S_{key}"
        self[key] = v
        return v


def dim_to_kir(d: Dim, names: Names, memo: dict | None = None) -> Expr:
    """``d`` as an int64 kernel-IR expression (``memo``: Dim -> Expr, shared by one lowering)."""
    if isinstance(d, int):
        return Const(d, I64)
    if memo is not None:
        hit = memo.get(d)
        if hit is not None:
            return hit
    out: Expr | None = None
    for m, c in d.terms:
        factors = [_atom(a, names, memo) for a in m]
        term: Expr | None = None if c == 1 and factors else Const(c, I64)
        for f in factors:
            term = f if term is None else Alu("mul", (term, f), I64)
        assert term is not None
        out = term if out is None else Alu("add", (out, term), I64)
    assert out is not None
    if memo is not None:
        memo[d] = out
    return out


def _atom(a: object, names: Names, memo: dict | None) -> Expr:
    if isinstance(a, str):
        return Var(names[a], I64)
    op, x, y = a  # type: ignore[misc]
    xs, ys = dim_to_kir(x, names, memo), dim_to_kir(y, names, memo)
    if op in ("max", "min"):
        return Alu(op, (xs, ys), I64)
    if not (nonneg(x) and nonneg(y)):
        return Alu("floordiv" if op == "//" else "floormod", (xs, ys), I64)
    q = Alu("div", (xs, ys), I64)
    return q if op == "//" else Alu("sub", (xs, Alu("mul", (q, ys), I64)), I64)
