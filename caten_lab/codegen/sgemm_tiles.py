"""The ``sgemm`` codegen pass: a jammed float32 matmul tile's reduction as one helper call, a rule over the
kernel IR.

After ``row_jam`` (:mod:`caten_lab.codegen.row_jam`) a vector-tile matmul accumulates 12 output rows of 32
columns per step of the reduction::

    FOR r in [0, K) [stage]
      x_q = a[base_q + r * ak]                                   (q < 12: one value of each row)
      FOR w in [0, 32) [vector] simd:  xb = b[base_b + r * bk + w];  acc_q[w] += x_q * xb   (every q)

gcc vectorizes the ``w`` loop into two 16-float halves, broadcasts the twelve ``x_q`` before them and,
with 24 accumulators and 12 broadcasts live, spills five accumulators to the stack on every step. The rule
``sgemm_tile`` replaces the stage loop with

    cl_sgemm_12x32(acc_0, ..., acc_11, &a[base_0], ..., &a[base_11], ak, &b[base_b], bk, K)

(codegen/c/sgemm.h): the same multiply-adds in the same order per output (bitwise the same tile), with the
accumulators in registers and each row's broadcast used right away. A 512x3072 @ 3072x768 on one core:
88 -> 96 GFLOP/s. The helper accumulates into the tile (it does not zero it), so a reduction over several
axes (a weight gradient summed over batch and sequence: two nested stage loops) calls it per step of the
outer ones.

It fires on exactly that form: 12 rows (``row_jam``'s default) of 32 columns (``lower``'s ``vector_tile``),
float32 loads without bounds checks, ``a``'s index linear in ``r`` with a constant step and ``b``'s linear in
``r`` and ``w`` with a constant step and unit stride in ``w``.
"""

from __future__ import annotations

from caten_lab.air.dtypes import DType
from caten_lab.codegen.collapse import coefficients, to_dim
from caten_lab.codegen.kir import Addr, Alu, Call, Const, Decl, Eval, Expr, For, Load, Stmt, Store, Var
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import int_value, substitute

I64, F32 = DType.int64, DType.float32
ROWS, COLS = 12, 32  # the helper's tile: cl_sgemm_12x32
HELPER = "cl_sgemm_12x32"


def _linear(e: Expr, names: tuple[str, ...]) -> tuple[list[int], Expr] | None:
    """(the constant coefficient of each of ``names`` in index ``e``, ``e`` with them set to 0), or None when
    ``e`` is not linear in them with constant coefficients."""
    d = to_dim(e)
    lin = None if d is None else coefficients(d, list(names))
    if lin is None or not all(isinstance(c, int) for c in lin[0]):
        return None
    return list(lin[0]), substitute(e, {n: Const(0, I64) for n in names})  # type: ignore[arg-type]


def _rows(heads: tuple[Stmt, ...]) -> dict[str, Load] | None:
    """x_q -> its load of ``a``, for the stage loop's leading declarations."""
    out: dict[str, Load] = {}
    for d in heads:
        if not (isinstance(d, Decl) and d.size is None and d.dtype == F32 and isinstance(d.init, Load)
                and d.init.dtype == F32 and d.init.check is None):
            return None
        out[d.var] = d.init
    return out


def _lanes(loop: For, rows: dict[str, Load]) -> tuple[Load, list[tuple[str, str]], dict[str, Expr]] | None:
    """(the load of ``b``, the (accumulator, x_q) pairs, the lane's index declarations) of the vector loop."""
    env: dict[str, Expr] = {}
    b: tuple[str, Load] | None = None
    prods: dict[str, str] = {}
    pairs: list[tuple[str, str]] = []
    w = Var(loop.var, I64)
    for s in loop.body:
        if isinstance(s, Decl) and s.size is None and s.init is not None:
            v = s.init
            if s.dtype == I64:
                env[s.var] = substitute(v, env)
            elif s.dtype == F32 and isinstance(v, Load) and b is None and v.dtype == F32 and v.check is None:
                b = (s.var, v)
            elif (s.dtype == F32 and isinstance(v, Alu) and v.op == "mul" and b is not None
                  and all(isinstance(x, Var) for x in v.args)):
                names = {x.name for x in v.args}  # type: ignore[union-attr]
                x = names - {b[0]}
                if len(names) != 2 or b[0] not in names or not x or next(iter(x)) not in rows:
                    return None
                prods[s.var] = next(iter(x))
            else:
                return None
        elif isinstance(s, Store) and s.index == w and s.check is None:
            v = s.value
            if not (isinstance(v, Alu) and v.op == "add" and v.dtype == F32 and v.args[0] == Load(s.buf, w, F32)
                    and isinstance(v.args[1], Var) and v.args[1].name in prods):
                return None
            pairs.append((s.buf, prods[v.args[1].name]))
        else:
            return None
    if b is None or len(pairs) != ROWS or {x for _, x in pairs} != set(rows) or len({a for a, _ in pairs}) != ROWS:
        return None
    return b[1], pairs, env


def rule_sgemm(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    s = body[i]
    if not (isinstance(s, For) and s.role == "stage" and not s.simd and s.parallel is None
            and int_value(s.start) == 0 and int_value(s.step) == 1 and len(s.body) == ROWS + 1):
        return None
    inner = s.body[-1]
    if not (isinstance(inner, For) and inner.role == "vector" and int_value(inner.start) == 0
            and int_value(inner.stop) == COLS and int_value(inner.step) == 1):
        return None
    rows = _rows(s.body[:-1])
    found = _lanes(inner, rows) if rows is not None else None
    if found is None or len({ld.buf for ld in rows.values()}) != 1:  # type: ignore[union-attr]
        return None
    bload, pairs, env = found
    params = {p.name for p in ctx.function.params}
    if any(acc in params for acc, _ in pairs):
        return None  # the tile must be the kernel's local arrays
    r, w = s.var, inner.var
    a_at: dict[str, Expr] = {}
    steps: set[int] = set()
    for x, ld in rows.items():  # type: ignore[union-attr]
        lin = _linear(ld.index, (r,))
        if lin is None:
            return None
        steps.add(lin[0][0])
        a_at[x] = lin[1]
    lin_b = _linear(substitute(bload.index, env), (r, w))
    if lin_b is None or len(steps) != 1 or lin_b[0][1] != 1:
        return None
    abuf = next(iter(rows.values())).buf  # type: ignore[union-attr]
    args: list[Expr] = [Var(acc, F32) for acc, _ in pairs]
    args += [Addr(abuf, a_at[x], F32) for _, x in pairs]
    args += [Const(steps.pop(), I64), Addr(bload.buf, lin_b[1], F32), Const(lin_b[0][0], I64), s.stop]
    return 1, [Eval(Call(HELPER, tuple(args), F32), origin=s.origin)]


SGEMM_RULES = (("sgemm_tile", rule_sgemm),)
