"""Walking and rebuilding kernel-IR trees: statement paths, expression maps, substitution, small
constructors. (The nodes are in :mod:`caten_lab.codegen.kir`.)"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import (
    BODIES,
    COMPARE,
    NO_ORIGIN,
    Addr,
    Alu,
    Assign,
    Call,
    Cast,
    Check,
    Const,
    Decl,
    Expr,
    For,
    Load,
    Origin,
    Parallel,
    Stmt,
    Store,
    Var,
)

# ------------------------------------------------------------------------------------------ walking


def children(s: Stmt) -> tuple[tuple[str, tuple[Stmt, ...]], ...]:
    """The nested bodies of ``s`` as (field name, statements) pairs."""
    return tuple((f, getattr(s, f)) for f in BODIES.get(type(s), ()))


def walk(body: tuple[Stmt, ...]):  # noqa: ANN201 - generator of Stmt
    """Every statement of ``body``, pre-order."""
    for s in body:
        yield s
        for _, sub in children(s):
            yield from walk(sub)


def walk_paths(body: tuple[Stmt, ...], prefix: tuple = (), f: str = "body"):  # noqa: ANN201
    """``(path, stmt)`` pre-order. A path is a tuple of ``(field, index)`` steps from the function body
    (the first step's field is ``"body"``): ``(("body", 3), ("then", 0))`` is the first statement of
    the then-arm of the function's fourth statement."""
    for i, s in enumerate(body):
        p = (*prefix, (f, i))
        yield p, s
        for f2, sub in children(s):
            yield from walk_paths(sub, p, f2)


def exprs_of(x: Any):  # noqa: ANN201 - generator of Expr
    """Every expression node inside a statement or expression (pre-order), nested bodies excluded."""
    if isinstance(x, Expr):
        yield x
    for f in fields(x):
        if f.name in ("origin",) or f.name in BODIES.get(type(x), ()):
            continue
        v = getattr(x, f.name)
        if isinstance(v, Expr | Check | Parallel):
            yield from exprs_of(v)
        elif isinstance(v, tuple):
            for e in v:
                if isinstance(e, Expr):
                    yield from exprs_of(e)


def map_expr(e: Expr, fn: Any) -> Expr:
    """Rebuild ``e`` bottom-up, replacing each node ``x`` by ``fn(x)`` (None keeps it)."""
    if isinstance(e, Alu | Call):
        args = tuple(map_expr(a, fn) for a in e.args)
        if any(a is not b for a, b in zip(args, e.args)):
            e = replace(e, args=args)
    elif isinstance(e, Cast):
        x = map_expr(e.x, fn)
        if x is not e.x:
            e = replace(e, x=x)
    elif isinstance(e, Load):
        i = map_expr(e.index, fn)
        c = e.check if e.check is None else Check(map_expr(e.check.size, fn), e.check.tag)
        if i is not e.index or c != e.check:
            e = replace(e, index=i, check=c)
    elif isinstance(e, Addr) and e.index is not None:
        i = map_expr(e.index, fn)
        if i is not e.index:
            e = replace(e, index=i)
    out = fn(e)
    return e if out is None else out


def map_stmt_exprs(s: Stmt, fn: Any) -> Stmt:
    """``s`` (a Decl, Assign or Store; others unchanged) with :func:`map_expr` ``fn`` applied to its expressions."""
    if isinstance(s, Decl) and s.init is not None:
        return replace(s, init=map_expr(s.init, fn))
    if isinstance(s, Assign):
        return replace(s, value=map_expr(s.value, fn))
    if isinstance(s, Store):
        return replace(s, index=map_expr(s.index, fn), value=map_expr(s.value, fn))
    return s


def substitute(e: Expr, names: dict[str, Expr]) -> Expr:
    """``e`` with variables renamed/replaced (``names``: variable name -> expression)."""
    return map_expr(e, lambda x: names.get(x.name) if isinstance(x, Var) else None)


def vars_of(x: Any) -> set[str]:
    """Names of the variables read inside a statement's own expressions or an expression."""
    return {e.name for e in exprs_of(x) if isinstance(e, Var)}


def loads_of(x: Any) -> list[Load]:
    return [e for e in exprs_of(x) if isinstance(e, Load)]


# ------------------------------------------------------------------------------------------ helpers

I64 = DType.int64


def const(v: int | float | bool, dtype: DType = I64) -> Const:
    return Const(v, dtype)


def var(name: str, dtype: DType = I64) -> Var:
    return Var(name, dtype)


def alu(op: str, *args: Expr, dtype: DType | None = None, origin: Origin = NO_ORIGIN) -> Alu:
    """An ALU node; comparisons are bool, others take their first operand's type unless given."""
    if dtype is None:
        dtype = DType.bool if op in COMPARE else args[-1 if op == "where" else 0].dtype
    return Alu(op, tuple(args), dtype, origin)


def int_value(e: Expr) -> int | None:
    """The value of an integer constant, else None."""
    return e.value if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool) else None


def trip_count(loop: For) -> int | None:
    """Constant trip count of ``loop``, None when any bound is symbolic."""
    a, b, s = int_value(loop.start), int_value(loop.stop), int_value(loop.step)
    if a is None or b is None or s is None or s <= 0:
        return None
    return max(0, -(-(b - a) // s))


def straight_line(body: tuple[Stmt, ...]) -> bool:
    """Whether ``body`` is only scalar declarations, assignments and stores (no loop, branch or local array)."""
    return all(isinstance(s, Decl | Assign | Store) and not (isinstance(s, Decl) and s.size is not None) for s in body)
