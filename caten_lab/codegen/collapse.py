"""Collapsing a perfectly nested elementwise loop nest into one loop, as a rule over the kernel IR.

``for a < A: for b < B: p0[B*a + b] = f(p1[B*a + b], ...)`` becomes ``for f < A*B: p0[f] = ...``:
one loop over every element, which vectorizes and splits across threads whatever the shape. The rule
``collapse_nest`` applies when the loop variables of the nest appear only in load and store indices
(no ``index`` value, no mask condition) and every such index is linear in them with the strides of the
nest itself (``c*B`` for ``a``, ``c`` for ``b``): then ``c*f`` is the same position. A broadcast or a
transposed access (stride 0 or out of order) keeps the nest. Index arithmetic is redone on
``air.symbolic`` polynomials, so symbolic extents collapse too.
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air.dtypes import DType
from caten_lab.air.symbolic import Dim
from caten_lab.air.symbolic import Expr as SymExpr
from caten_lab.codegen.kir import (
    Addr,
    Alu,
    Assign,
    Call,
    Cast,
    Const,
    Decl,
    Expr,
    For,
    Load,
    Stmt,
    Store,
    Var,
)
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import exprs_of, int_value, map_expr, walk
from caten_lab.codegen.symbolic_kir import dim_to_kir

I64 = DType.int64


class _Same(dict):
    """Identifiers map to themselves (the polynomials here are over C identifiers already)."""

    def __missing__(self, key: str) -> str:
        return key


def to_dim(e: Expr) -> Dim | None:
    """An int64 expression of adds, subs and multiplies of constants and variables as a polynomial."""
    if isinstance(e, Const) and int_value(e) is not None:
        return int_value(e)
    if isinstance(e, Var):
        return SymExpr({(e.name,): 1})
    if isinstance(e, Alu) and e.op in ("add", "sub", "mul") and e.dtype == I64:
        a, b = to_dim(e.args[0]), to_dim(e.args[1])
        if a is None or b is None:
            return None
        return a + b if e.op == "add" else a - b if e.op == "sub" else a * b
    return None


def coefficients(d: Dim, names: list[str]) -> tuple[list[Dim], Dim] | None:
    """``d`` as ``sum(c_k * names[k]) + rest``, or None when not linear in the names."""
    if isinstance(d, int):
        return [0] * len(names), d
    coefs: list[dict] = [{} for _ in names]
    rest: dict = {}
    for m, c in d.terms:
        hits = [a for a in m if isinstance(a, str) and a in names]
        if not hits:
            rest[m] = rest.get(m, 0) + c
            continue
        if len(hits) != 1:
            return None
        k = names.index(hits[0])
        mm = list(m)
        mm.remove(hits[0])
        coefs[k][tuple(mm)] = coefs[k].get(tuple(mm), 0) + c
    return [SymExpr.make(c) for c in coefs], SymExpr.make(rest)


def _nest(s: For) -> list[For]:
    chain = [s]
    while len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], For):
        chain.append(chain[-1].body[0])
    return chain


def _plain_loop(s: Stmt) -> bool:
    return isinstance(s, For) and s.role == "loop" and int_value(s.start) == 0 and int_value(s.step) == 1 \
        and s.parallel is None and not s.simd and not s.unroll


def _fresh(ctx: RuleContext) -> str:
    taken = {x.var for x in walk(ctx.function.body) if isinstance(x, Decl | For)}
    taken |= {p.name for p in ctx.function.params}
    name, n = "f", 0
    while name in taken:
        n += 1
        name = f"f{n}"
    return name


def collapse_nest(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    s = body[i]
    if not _plain_loop(s) or any(isinstance(x, For) and x.role == "loop" for x in ctx.loops):
        return None
    assert isinstance(s, For)
    nest = _nest(s)
    if len(nest) < 2 or not all(_plain_loop(x) for x in nest):
        return None
    inner = nest[-1].body
    if not all(isinstance(x, Decl | Assign | Store) for x in inner):
        return None
    names = [x.var for x in nest]
    stops = [to_dim(x.stop) for x in nest]
    if any(d is None for d in stops):
        return None
    strides: list[Dim] = [1] * len(nest)
    for k in range(len(nest) - 2, -1, -1):
        strides[k] = strides[k + 1] * stops[k + 1]  # type: ignore[operator]
    total: Dim = strides[0] * stops[0]  # type: ignore[operator]
    f = _fresh(ctx)
    fvar = SymExpr({(f,): 1})

    def index(e: Expr) -> Expr | None:
        """The collapsed form of index ``e``, or None when it is not the nest's own linearization."""
        d = to_dim(e)
        lin = None if d is None else coefficients(d, names)
        if lin is None:
            return None
        coefs, rest = lin
        c = coefs[-1]
        if any(ck != c * sk for ck, sk in zip(coefs, strides)):
            return None
        return dim_to_kir(c * fvar + rest, _Same())

    def uses_nest(e: Expr) -> bool:
        return any(isinstance(x, Var) and x.name in names for x in exprs_of(e))

    def allowed(e: Expr) -> bool:
        """Loop variables only inside indices that collapse (checked top-down, before rewriting)."""
        if isinstance(e, Load):
            if e.check is not None and uses_nest(e.check.size):
                return False
            return index(e.index) is not None if uses_nest(e.index) else allowed(e.index)
        if isinstance(e, Var):
            return e.name not in names
        return all(allowed(a) for a in _operands(e))

    def rewrite(e: Expr) -> Expr | None:
        if isinstance(e, Load) and uses_nest(e.index):
            return replace(e, index=index(e.index))
        return None

    new: list[Stmt] = []
    for x in inner:
        if isinstance(x, Store):
            if uses_nest(x.index) and index(x.index) is None or not allowed(x.value) or \
                    x.check is not None and uses_nest(x.check.size):
                return None
            ix = index(x.index) if uses_nest(x.index) else x.index
            new.append(replace(x, index=ix, value=map_expr(x.value, rewrite)))
            continue
        e = x.init if isinstance(x, Decl) else x.value  # type: ignore[union-attr]
        if e is None:
            new.append(x)
            continue
        if not allowed(e):
            return None
        e = map_expr(e, rewrite)
        new.append(replace(x, init=e) if isinstance(x, Decl) else replace(x, value=e))
    loop = For(f, Const(0, I64), dim_to_kir(total, _Same()), Const(1, I64), tuple(new), role="collapsed",
               origin=s.origin)
    return 1, [loop]


def _operands(e: Expr) -> tuple[Expr, ...]:
    if isinstance(e, Alu | Call):
        return e.args
    if isinstance(e, Cast):
        return (e.x,)
    if isinstance(e, Addr):
        return () if e.index is None else (e.index,)
    return ()


COLLAPSE_RULES = (("collapse_nest", collapse_nest),)
