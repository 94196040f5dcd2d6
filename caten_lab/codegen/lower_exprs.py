"""Typed kernel-IR expressions for AIR's elementwise ops, literals and reduction steps (used by the
lowering, :mod:`caten_lab.codegen.lower`).

Values are computed in their *compute type* (:func:`compute_dtype`): float16 is computed as float32
(a load of a float16 buffer is a float32 :class:`~caten_lab.codegen.kir.Load`; a cast to float16
rounds through ``Cast(float16)`` and back). Narrow integer wrap-around, bool logic and typed helpers
are the renderer's business (its op table), not the lowering's.
"""

from __future__ import annotations

from caten_lab.air.dtypes import DType
from caten_lab.air.symbolic import Dim
from caten_lab.air.symbolic import Expr as SymExpr
from caten_lab.codegen.kir import Alu, Cast, Const, Expr
from caten_lab.codegen.symbolic_kir import Names, dim_to_kir
from caten_lab.errors import CompileError

I64 = DType.int64
UNARY_OPS = frozenset({"neg", "not", "recip", "exp2", "log2", "sin", "sqrt"})
BINARY_OPS = frozenset({"add", "mul", "idiv", "mod", "max", "and", "or", "xor", "lt", "ne"})
_MIN = {DType.int8: -(1 << 7), DType.uint8: 0, DType.int32: -(1 << 31), DType.uint32: 0, DType.int64: -(1 << 63)}


def compute_dtype(dt: DType) -> DType:
    """The type values of ``dt`` are computed in (float16 is stored as _Float16, computed as float)."""
    return DType.float32 if dt == DType.float16 else dt


def literal(v: object, dt: DType, names: Names, memo: dict | None = None) -> Expr:
    """A constant of AIR type ``dt`` (a symbolic one is its int64 expression cast to ``dt``)."""
    ct = compute_dtype(dt)
    if isinstance(v, SymExpr):
        return Cast(dim_to_kir(v, names, memo), ct)
    if dt == DType.bool:
        return Const(bool(v), DType.bool)
    if dt.is_float:
        return Const(float(v), ct)  # type: ignore[arg-type]
    return Const(int(v), dt)  # type: ignore[call-overload]


def reduce_init(op: str, dt: DType) -> Expr:
    """The identity of reduction ``op`` (``add`` or ``max``) in type ``dt``."""
    ct = compute_dtype(dt)
    if op == "add":
        return Const(False, ct) if dt == DType.bool else Const(0.0 if dt.is_float else 0, ct)
    if dt.is_float:
        return Const(float("-inf"), ct)
    if dt == DType.bool:
        return Const(False, ct)
    return Const(_MIN[dt], dt)


def combine(op: str, acc: Expr, x: Expr, dt: DType) -> Expr:
    """One reduction step ``acc op x`` (``add``: sum, logical or for bool; ``max``: NaN-propagating max)."""
    return Alu("add" if op == "add" else "max", (acc, x), compute_dtype(dt))


def binary(op: str, a: Expr, b: Expr, dt: DType) -> Expr:
    """AIR binary op on operands of type ``dt`` (comparisons are bool)."""
    if op not in BINARY_OPS:
        raise CompileError(f"no kernel-IR lowering for binary op {op!r}")
    return Alu(op, (a, b), DType.bool if op in ("lt", "ne") else compute_dtype(dt))


def unary(op: str, a: Expr, dt: DType) -> Expr:
    if op not in UNARY_OPS:
        raise CompileError(f"no kernel-IR lowering for unary op {op!r}")
    return Alu(op, (a,), compute_dtype(dt))


def cast(x: Expr, dt: DType) -> Expr:
    """AIR ``cast`` of ``x`` to ``dt``: to bool is ``x != 0``; to float16 rounds to half precision."""
    if dt == DType.float16:
        return Cast(Cast(x, DType.float16), DType.float32)
    return Cast(x, dt)


def as_int64(x: Expr) -> Expr:
    return x if x.dtype == I64 else Cast(x, I64)


def where(c: Expr, a: Expr, b: Expr) -> Expr:
    return Alu("where", (c, a, b), a.dtype)


def i64(op: str, *args: Expr) -> Expr:
    """An int64 index op (``add sub mul min max``) or comparison (``lt ge ...``: bool)."""
    return Alu(op, tuple(args), DType.bool if op in ("lt", "ge", "le", "gt", "eq", "ne", "land") else I64)


def work_max(a: Dim, b: Dim) -> Dim:
    """An upper bound of max(a, b) for a kernel's per-element work (``Function.meta['work']``)."""
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if isinstance(a, int) and a <= 1:
        return b
    if isinstance(b, int) and b <= 1:
        return a
    # symbolic: the sum bounds max(a, b) (both are non-negative trip counts) without raising the
    # degree. A product here made three (pos + seq)-long reductions of a decode attention kernel a
    # cubic "work" that crossed the parallel threshold at pos = 8, so every decode step paid 12
    # thread wake-ups for a kernel of a few thousand flops (1 ms at 2 threads, 0.07 ms serial).
    return a + b
