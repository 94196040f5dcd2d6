"""Index tables that are constants per lane block: the ``lanes`` pass's lane blocks unrolled over a weight block.

The ``hoist`` pass fills tables of values that depend on the reduction index alone: the nibble mask
and scale of a Q4 block (``(r / 16) % 2 ? 0xF0 : 0x0F``, ``? 1/16 : 1``), a K-quant's sub-block. In a
lane loop each such read is a vector load per value, and the table's product by 1.0 is a real multiply.
When a weight block spans several lane blocks (Q4_1: 32 values, 16 lanes), :func:`unroll_span` gives
the unroll factor: the lane-block loop then steps over the whole span with one lane loop per sub-block
``j``, where ``r / L`` is ``blk / L + j`` and ``r / B`` (``B`` a multiple of the span) is ``blk / B``, and a
table that is periodic over the span and constant over each sub-block (:func:`table_constants`,
evaluated exactly at compile time) becomes that constant. The sum runs in the same order as before
(sub-block after sub-block), so results are bitwise the same. A block's scales, which depend on
``blk / B`` only, are converted once per span instead of once per lane block.
"""

from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, replace
from functools import lru_cache

from caten_lab.air.dtypes import DType
from caten_lab.codegen.hoist import HOIST_ROLE
from caten_lab.codegen.kir import (
    Alu,
    Cast,
    Const,
    Decl,
    Expr,
    For,
    Function,
    Load,
    Stmt,
    Store,
    Var,
)
from caten_lab.codegen.kir_names import expr_names
from caten_lab.codegen.kir_walk import int_value, loads_of, map_stmt_exprs, substitute, walk

I64 = DType.int64
MAX_UNROLL = 4


@dataclass(frozen=True)
class IndexTable:
    """A table ``buf[var] = value`` (``size`` entries) filled by a hoist loop; ``chain``: the declarations
    that compute ``value``, reading nothing but ``var``, constants and each other."""

    var: str
    size: int
    chain: tuple[Decl, ...]
    value: Expr


def _chain(value: Expr, decls: dict[str, tuple[int, Decl]], var: str) -> tuple[Decl, ...] | None:
    need, todo = set(), list(expr_names(value))
    while todo:
        n = todo.pop()
        if n == var or n in need:
            continue
        if n not in decls:
            return None  # reads something else (a parameter, a symbol, an outer variable)
        d = decls[n][1]
        if d.init is None or d.size is not None or loads_of(d.init):
            return None
        need.add(n)
        todo.extend(expr_names(d.init))
    if loads_of(value):
        return None
    return tuple(d for _, d in sorted(decls[n] for n in need))


def index_tables(fn: Function) -> dict[str, IndexTable]:
    """The index-only tables of ``fn``: every Store to the table is in a hoist loop at its index, with
    the same computation (the branches of a kernel, e.g. tiled prefill and decode, each fill a copy)."""
    writes: Counter[str] = Counter()
    sizes: dict[str, int | None] = {}
    loops: list[For] = []
    for s in walk(fn.body):
        if isinstance(s, Store):
            writes[s.buf] += 1
        elif isinstance(s, Decl) and s.size is not None:  # a name declared twice with two sizes: no table
            n = int_value(s.size)
            sizes[s.var] = n if sizes.get(s.var, n) == n else None
        elif isinstance(s, For) and s.role == HOIST_ROLE:
            loops.append(s)
    found: dict[str, list[IndexTable]] = {}
    for loop in loops:
        decls = {s.var: (i, s) for i, s in enumerate(loop.body) if isinstance(s, Decl)}
        for s in loop.body:
            if isinstance(s, Store) and s.index == Var(loop.var, I64) and sizes.get(s.buf):
                chain = _chain(s.value, decls, loop.var)
                if chain is not None:
                    found.setdefault(s.buf, []).append(_canonical(loop.var, sizes[s.buf], chain, s.value))  # type: ignore[arg-type]
    return {buf: ts[0] for buf, ts in found.items() if len(ts) == writes[buf] and all(t == ts[0] for t in ts)}


def _canonical(var: str, size: int, chain: tuple[Decl, ...], value: Expr) -> IndexTable:
    """The table over the index name ``_i`` (two copies of a table differ only by their loops' names)."""
    to = {var: Var("_i", I64)}
    return IndexTable("_i", size, tuple(replace(d, init=substitute(d.init, to)) for d in chain),  # type: ignore[arg-type]
                      substitute(value, to))


def unroll_span(blocks: set[int], lanes: int) -> int:
    """Lane blocks per unrolled step: the smallest block size above ``lanes`` over ``lanes`` (1: none),
    when every larger block size is a multiple of it and the factor is at most MAX_UNROLL."""
    above = sorted(b for b in blocks if b > lanes and b % lanes == 0)
    if not above or any(b % above[0] for b in above) or above[0] // lanes > MAX_UNROLL:
        return 1
    return above[0] // lanes


@lru_cache(maxsize=256)
def table_constants(t: IndexTable, span: int, lanes: int) -> tuple[Const, ...] | None:
    """Per sub-block ``j`` of a span, the constant the table holds at every ``h`` with ``h % span`` in
    ``[j lanes, (j+1) lanes)`` (None: the table is not such a step function, or cannot be evaluated).
    Every entry is evaluated (a table has at most hoist_max entries), the first span first."""
    if t.size % span:
        return None
    try:
        first = [_evaluate(t, h) for h in range(span)]
        subs = [set(first[j * lanes:(j + 1) * lanes]) for j in range(span // lanes)]
        if any(len(v) != 1 for v in subs) or any(_evaluate(t, h) != first[h % span] for h in range(span, t.size)):
            return None
    except _NotConstant:
        return None
    return tuple(Const(v.pop(), _dtype(t.value, t)) for v in subs)


class _NotConstant(Exception):
    pass


def _dtype(e: Expr, t: IndexTable) -> DType:
    if isinstance(e, Var):
        d = next((d for d in t.chain if d.var == e.name), None)
        return d.dtype if d is not None else I64
    return e.dtype  # type: ignore[attr-defined]


_INT_OPS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "max": max, "min": min,
}


def _evaluate(t: IndexTable, h: int) -> int | float | bool:
    env: dict[str, int | float | bool] = {t.var: h}
    for d in t.chain:
        env[d.var] = _cast(_eval(d.init, env), d.dtype)  # type: ignore[arg-type]
    return _cast(_eval(t.value, env), _dtype(t.value, t))


def _cast(v: int | float | bool, dt: DType) -> int | float | bool:
    if dt == DType.bool:
        return bool(v)
    if dt == DType.float32:
        return _F32.unpack(_F32.pack(float(v)))[0]
    if dt == DType.float64:
        return float(v)
    if dt.is_int:  # two's complement wrap to the type's width, as C's conversions do (-fwrapv)
        bits, unsigned = _INT_TYPES.get(dt) or _INT_TYPES.setdefault(dt, (dt.itemsize * 8, dt.np.kind == "u"))
        w = int(v) & ((1 << bits) - 1)
        return w if unsigned or w < 1 << (bits - 1) else w - (1 << bits)
    raise _NotConstant


_F32 = struct.Struct("<f")
_INT_TYPES: dict[DType, tuple[int, bool]] = {}


def _eval(e: Expr, env: dict[str, int | float | bool]) -> int | float | bool:
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        if e.name not in env:
            raise _NotConstant
        return env[e.name]
    if isinstance(e, Cast):
        return _cast(_eval(e.x, env), e.dtype)
    if not isinstance(e, Alu):
        raise _NotConstant
    a = [_eval(x, env) for x in e.args]
    if e.op == "where":
        return a[1] if a[0] else a[2]
    if e.dtype.is_float or any(isinstance(x, float) for x in a):
        raise _NotConstant  # float arithmetic in an index table: not worth the exactness argument
    if e.op == "div" and a[1] != 0:
        q = abs(int(a[0])) // abs(int(a[1]))
        return q if (a[0] >= 0) == (a[1] > 0) else -q  # C's truncating division
    if e.op in _INT_OPS and len(a) == 2:
        return _INT_OPS[e.op](a[0], a[1])
    if e.op == "not" and e.dtype == DType.bool:
        return not a[0]
    raise _NotConstant


def sub_block(s: Stmt, blk: str, j: int, lanes: int, span: int, v: str,
              consts: dict[str, tuple[Const, ...]]) -> Stmt:
    """Statement ``s`` of a lane loop (lane block at ``blk``) for sub-block ``j`` of a span starting at
    ``blk`` (a multiple of ``span``): ``blk`` -> ``blk + j lanes``, where ``(blk + j lanes) / B`` is
    ``blk / B`` for ``B`` a multiple of the span and ``blk / B + j lanes / B`` for ``B`` dividing it, and
    the reads ``table[v]`` of ``consts`` -> the sub-block's constant."""
    shifted = Alu("add", (Var(blk, I64), Const(j * lanes, I64)), I64)

    def fn(e: Expr) -> Expr | None:
        if j and e == Var(blk, I64):
            return shifted
        if j and isinstance(e, Alu) and e.op == "div" and e.args[0] == shifted:
            b = int_value(e.args[1])
            base = Alu("div", (Var(blk, I64), e.args[1]), I64)
            if b is not None and b > 0 and b % span == 0:
                return base
            if b is not None and b > 0 and span % b == 0:
                return Alu("add", (base, Const(j * lanes // b, I64)), I64)
        if isinstance(e, Load) and e.buf in consts and e.index == Var(v, I64):
            return consts[e.buf][j]
        return None

    return map_stmt_exprs(s, fn)
