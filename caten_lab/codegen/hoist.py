"""Hoisting the output-independent part of a dot-product reduction out of the output loop, as a rule
over the kernel IR.

A matvec lowered in dot-product form is ``for j: acc = 0; for r: acc += f(x)[r] * W[j, r]``. When
``f`` is expensive (a LayerNorm, a GELU, a strided/divided gather of a transposed activation) and
does not depend on the output index ``j``, the nest recomputes ``f(x)[r]`` for every ``j``: ``n_out``
times too often, and the inner loop no longer vectorizes. The rule ``hoist_operands`` computes such
values once into local arrays before the output loop (``for h: hN[h] = f(x)[h]``) and the reduction
reads ``hN[r]``. The arithmetic is unchanged (the same operations on the same values), so results
are bit-identical.

It applies to a stage loop (constant extent, at most ``hoist_max`` elements: a local array per
thread) of plain statements directly inside an innermost main loop ``j``. A value is hoisted when it
is a temporary of the stage body that depends on the stage variable but on nothing defined in the
``j`` loop, is used by something that does, and is not a plain load (unit stride or constant in the
stage variable: cheap, and it vectorizes as it is).
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import Alu, Assign, Const, Decl, Expr, For, Load, Stmt, Store, Var
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import (
    exprs_of,
    int_value,
    map_stmt_exprs,
    substitute,
    trip_count,
    vars_of,
    walk,
)

HOIST_ROLE = "hoist"
HOIST_MAX = 16384  # default of the ``hoist_max`` option
I64 = DType.int64


def _coef(e: Expr, v: str) -> int | None:
    """The constant coefficient of variable ``v`` in an index expression linear in it (0: absent), else None."""
    if v not in vars_of(e):
        return 0
    if isinstance(e, Var):
        return 1
    if isinstance(e, Alu) and e.op in ("add", "sub"):
        a, b = (_coef(x, v) for x in e.args)
        if a is None or b is None:
            return None
        return a + b if e.op == "add" else a - b
    if isinstance(e, Alu) and e.op == "mul":
        x, y = e.args
        if int_value(x) is not None:
            c = _coef(y, v)
            return None if c is None else int_value(x) * c  # type: ignore[operator]
        if int_value(y) is not None:
            c = _coef(x, v)
            return None if c is None else int_value(y) * c  # type: ignore[operator]
    return None


def _plain_load(d: Decl, params: set[str], r: str) -> bool:
    return isinstance(d.init, Load) and d.init.buf in params and _coef(d.init.index, r) in (0, 1)


def _used(s: Stmt) -> set[str]:
    out = vars_of(s)
    out |= {e.buf for e in exprs_of(s) if isinstance(e, Load)}
    return out


def _innermost_main(s: Stmt) -> bool:
    return isinstance(s, For) and s.role == "loop" and not any(
        isinstance(x, For) and x.role == "loop" for x in walk(s.body))


def _names(fn_body: tuple[Stmt, ...]) -> set[str]:
    out: set[str] = set()
    for s in walk(fn_body):
        if isinstance(s, Decl | For):
            out.add(s.var)
    return out


class _Fresh:
    """Names not yet used in a function (its names are collected on first use)."""

    def __init__(self, fn_body: tuple[Stmt, ...], params: set[str]) -> None:
        self.body = fn_body
        self.params = params
        self.taken: set[str] | None = None
        self.n = 0

    def __call__(self, prefix: str) -> str:
        if self.taken is None:
            self.taken = _names(self.body) | self.params
        while True:
            self.n += 1
            name = f"{prefix}{self.n}"
            if name not in self.taken:
                self.taken.add(name)
                return name


def _hoist_stage(stage: For, j_defs: set[str], params: set[str], fresh: _Fresh, hoist_max: int):  # noqa: ANN202
    """(statements to put before the j loop, the new stage loop), or None."""
    k = trip_count(stage)
    if k is None or not 1 < k <= hoist_max or int_value(stage.start) != 0 or int_value(stage.step) != 1:
        return None
    if not all(isinstance(s, Decl | Assign | Store) for s in stage.body):
        return None
    r = stage.var
    decls = {s.var: s for s in stage.body if isinstance(s, Decl) and s.size is None}
    dep_j: set[str] = set()
    dep_r: set[str] = set()
    for s in stage.body:
        used = _used(s)
        if isinstance(s, Decl) and s.var in decls:
            if used & j_defs or used & dep_j:
                dep_j.add(s.var)
            if r in used or used & dep_r:
                dep_r.add(s.var)
    cands: list[str] = []
    order = {v: k for k, v in enumerate(decls)}
    for s in stage.body:  # maximal: used by a statement that depends on j
        target = s.var if isinstance(s, Decl) else None
        if target is not None and target not in dep_j:
            continue
        for v in sorted(_used(s) & order.keys(), key=order.__getitem__):
            if v not in dep_j and v in dep_r and v not in cands and not _plain_load(decls[v], params, r):
                cands.append(v)
    if not cands:
        return None
    need = _closure(cands, decls)
    # values that read nothing from the enclosing loops (a dequantization's nibble masks: functions of the
    # stage index alone) get a loop of their own, so a later pass can keep them out of per-row copies
    local = {r} | params
    outer: dict[str, bool] = {}  # reads something defined outside the stage body (one pass, program order)
    for s in stage.body:
        if isinstance(s, Decl) and s.var in decls:
            u = _used(s)
            outer[s.var] = bool(u - local - decls.keys()) or any(outer.get(x, True) for x in u & decls.keys())
    tables = [v for v in cands if not outer[v]]
    before: list[Stmt] = []
    reads: dict[str, Expr] = {}
    for group in (tables, [v for v in cands if outer[v]]):
        if group:
            before += _hoist_loop(stage, group, _closure(group, decls), decls, fresh, k, reads)
    body: list[Stmt] = []
    for s in stage.body:
        if isinstance(s, Decl) and s.var in reads:
            continue
        body.append(_rewrite(s, reads))
    live: set[str] = set()
    kept: list[Stmt] = []
    for s in reversed(body):  # drop temporaries only the hoisted values used
        if isinstance(s, Decl) and s.var in need and s.var not in live:
            continue
        live |= _used(s)
        kept.append(s)
    return before, replace(stage, body=tuple(reversed(kept)))


def _closure(values: list[str], decls: dict[str, Decl]) -> set[str]:
    """``values`` and the temporaries of the stage body they are computed from."""
    out: set[str] = set()
    stack = list(values)
    while stack:
        x = stack.pop()
        if x not in out:
            out.add(x)
            stack.extend(_used(decls[x]) & decls.keys())
    return out


def _hoist_loop(stage: For, group: list[str], need: set[str], decls: dict[str, Decl], fresh: _Fresh, k: int,
                reads: dict[str, Expr]) -> list[Stmt]:
    """The arrays of ``group`` and the loop that fills them (``reads``: how the stage reads each)."""
    h = fresh("h")
    to_h = {stage.var: Var(h, I64)}
    hbody: list[Stmt] = [replace(s, init=substitute(s.init, to_h)) for s in stage.body
                         if isinstance(s, Decl) and s.var in need]  # type: ignore[arg-type]
    out: list[Stmt] = []
    for v in group:
        d = decls[v]
        arr = fresh("hv")
        out.append(Decl(arr, d.dtype, size=Const(k, I64), origin=d.origin))
        hbody.append(Store(arr, Var(h, I64), Var(v, d.dtype), origin=d.origin))
        reads[v] = Load(arr, Var(stage.var, I64), d.dtype, origin=d.origin)
    origin = decls[group[0]].origin
    out.append(For(h, Const(0, I64), Const(k, I64), Const(1, I64), tuple(hbody), role=HOIST_ROLE, origin=origin))
    return out


def _rewrite(s: Stmt, reads: dict[str, Expr]) -> Stmt:
    return map_stmt_exprs(s, lambda x: reads.get(x.name) if isinstance(x, Var) else None)


def hoist_operands(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    j = body[i]
    if not _innermost_main(j) or not any(isinstance(s, For) and s.role == "stage" for s in j.body):
        return None
    assert isinstance(j, For)
    params = {p.name for p in ctx.function.params if p.pointer}
    fresh = _Fresh(ctx.function.body, {p.name for p in ctx.function.params})
    limit = int(ctx.options.get("hoist_max", HOIST_MAX))
    before: list[Stmt] = []
    new_body: list[Stmt] = []
    for s in j.body:
        got = None
        if isinstance(s, For) and s.role == "stage":
            j_defs = {j.var} | _names(tuple(x for x in j.body if x is not s))
            got = _hoist_stage(s, j_defs, params, fresh, limit)
        if got is None:
            new_body.append(s)
            continue
        before.extend(got[0])
        new_body.append(got[1])
    if not before:
        return None
    return 1, [*before, replace(j, body=tuple(new_body))]


HOIST_RULES = (("hoist_operands", hoist_operands),)
