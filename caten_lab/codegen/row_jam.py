"""The ``row_jam`` codegen pass: unroll-and-jam the rows of a vector-tile matmul, as a rule over the kernel IR.

A matmul whose reduced operand is not contiguous along the reduction (a weight gradient ``g^T x``, a
backward ``g @ W``, any ``x @ W`` with ``W`` stored [in, out]) is lowered with a tile of ``vector_tile``
output columns held in a local array (``acc[32]``), one output row at a time:

    FOR row in [0, n)                          float32 acc[32]; acc[:] = 0
      FOR r in [0, K) [stage]                  x = a[row, r]
        FOR w in [0, 32) [vector] simd         acc[w] += x * b[r, t + w]
      FOR j in [0, 32) [vector]                out[row, t + j] = acc[j]

Every step loads 32 values of ``b`` for 32 multiply-adds: the loop is bound by loads, and ``b`` is read once
per row. The rule ``jam_rows`` makes ``rows`` rows share each load of ``b``:

    FOR row in [0, n) step R                   row_q = min(row + q, n - 1)  (q < R; plain row + q when R | n)
      acc_q[:] = 0                             for every q, in one loop
      FOR r in [0, K) [stage]                  x_q = a[row_q, r]
        FOR w [vector] simd                    bw = b[r, t + w]; acc_q[w] += x_q * bw   for every q
      FOR j [vector]                           out[row_q, t + j] = acc_q[j]

Statements are copied per row when they read the row (or a name that does, transitively) or write per-row
storage (the accumulator arrays declared in the row's body); the others (the ``b`` load, index math) stay
once, so the copies share them. Rows past the end are clamped to the last one: recomputed and stored with
identical values by the same iteration. A symbolic row count (a sequence length) keeps the original nest
for fewer rows than a jam, so a decode step (one row) does not compute its row ``rows`` times: the choice is
made once, around the whole nest. Each output's sum is unchanged (same terms, same order), so results
are bit-identical to the unjammed code; gcc keeps the R accumulator tiles in registers. Measured on the
backward of a 2x768 GPT-2's lm_head (512 x 4096 @ 4096 x 768): 100 -> 40 ms.

The rule fires only on that form: a loop whose body declares an accumulator array updated inside a
``vector`` loop within a ``stage`` loop, with no scalar (``simd reduction``) accumulators, no branches and
no loop bounds that depend on the row (the dot-product form is :mod:`~caten_lab.codegen.rowblock`'s).
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import BODIES, Alu, Assign, Const, Decl, Expr, For, If, Stmt, Store, Var
from caten_lab.codegen.kir_names import expr_names, names_in, rename, used_names
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import int_value, loads_of, straight_line, walk

I64 = DType.int64
JAM_ROWS = 12  # 12 rows x 32 lanes: 24 AVX-512 accumulators, 2 loads of b and 12 broadcasts per 24 FMAs
# (4 x 64 before: 16 accumulators, a load per 4 FMAs; the 2x768 GPT-2 training step's matmuls 100-130 ->
# 140-155 GFLOP/s on one core)


def _is_tile_body(body: tuple[Stmt, ...]) -> bool:
    """The row body of a vector-tile matmul: a local accumulator array updated in a vector loop of a stage."""
    arrays = {s.var for s in body if isinstance(s, Decl) and s.size is not None}
    for s in body:
        if isinstance(s, For) and s.role == "stage":
            for x in walk((s,)):
                if isinstance(x, For) and x.role == "vector" and any(
                        isinstance(y, Store) and y.buf in arrays for y in x.body):
                    return True
    return False


def _allowed(body: tuple[Stmt, ...]) -> bool:
    for s in walk(body):
        if not isinstance(s, (Decl, For, Store, Assign)):
            return False  # a branch, a call, a loop with a break: leave it
        if isinstance(s, For) and s.reduction:
            return False  # a scalar simd reduction: another form
    return True


def _row_dependent(row: str, body: tuple[Stmt, ...]) -> set[str]:
    """``row`` and the names declared in ``body`` that hold a per-row value: local arrays (per-row storage)
    and names whose value reads a row-dependent name (to a fixpoint: a later assignment can make one)."""
    dep = {row}
    declared = {s.var for s in walk(body) if isinstance(s, Decl)}
    dep |= {s.var for s in walk(body) if isinstance(s, Decl) and s.size is not None}
    changed = True
    while changed:
        changed = False
        for s in walk(body):
            if isinstance(s, Decl) and s.var not in dep and expr_names(s) & dep:
                dep.add(s.var)
                changed = True
            elif isinstance(s, (Assign, Store)):
                tgt = s.var if isinstance(s, Assign) else s.buf
                if tgt in declared and tgt not in dep and expr_names(s) & dep:
                    dep.add(tgt)
                    changed = True
    return dep


def _touches(s: Stmt, dep: set[str]) -> bool:
    return bool(used_names(s) & dep) or any(isinstance(x, Decl) and x.var in dep for x in walk((s,)))


def _jam(body: tuple[Stmt, ...], dep: set[str], maps: list[dict[str, str]]) -> list[Stmt] | None:
    out: list[Stmt] = []
    for s in body:
        if not _touches(s, dep):
            out.append(s)  # row-independent: once, shared by the copies
        elif isinstance(s, For):
            if (expr_names(s.start) | expr_names(s.stop) | expr_names(s.step)) & dep:
                return None  # a trip count that depends on the row
            inner = _jam(s.body, dep, maps)
            if inner is None:
                return None
            out.append(replace(s, body=tuple(inner)))
        else:
            out.extend(rename(s, m) for m in maps)
    return out


def _jam_loop(s: For, rows: int, taken: set[str]) -> For | None:
    """``s`` with its rows jammed, or None when it is not a vector-tile row loop."""
    if rows < 2 or int_value(s.step) != 1 or int_value(s.start) != 0 or s.role == "vector":
        return None
    if not _allowed(s.body) or not _is_tile_body(s.body):
        return None
    n = int_value(s.stop)
    if n is not None and n < rows:
        return None
    dep = _row_dependent(s.var, s.body)
    suffix = "_j"
    while any(f"{d}{suffix}0" in taken for d in dep):
        suffix += "j"
    maps = [{d: f"{d}{suffix}{q}" for d in dep} for q in range(rows)]
    inner = _jam(s.body, dep, maps)
    if inner is None:
        return None
    row = Var(s.var, I64)
    last = Alu("sub", (s.stop, Const(1, I64)), I64)
    heads: list[Stmt] = []
    for q in range(rows):
        at: Expr = Alu("add", (row, Const(q, I64)), I64) if q else row
        if n is None or n % rows:
            at = Alu("min", (at, last), I64)
        heads.append(Decl(maps[q][s.var], I64, at, const=True, origin=s.origin))
    return replace(s, step=Const(rows, I64), body=tuple(heads + [_simd_epilogue(x) for x in inner]), role="jammed")


def _simd_epilogue(s: Stmt) -> Stmt:
    """The tile's epilogue ``FOR j [vector]: out[row_q, t + j] = f(acc_q[j], ...)`` marked ``simd``. gcc left
    it scalar (it cannot rule out that the rows' clamped stores overlap across iterations): twelve rows of
    a fused GELU backward cost more than the tile's multiply-adds. Each iteration stores its own column of
    each row (rows past the end store the last row's values again: the same values), so the iterations
    are independent when nothing in the loop reads a buffer it stores."""
    if not isinstance(s, For) or s.role != "vector" or s.simd or not straight_line(s.body):
        return s
    stored = {x.buf for x in s.body if isinstance(x, Store)}
    if not stored or any(ld.buf in stored for x in s.body for ld in loads_of(x)):
        return s
    return replace(s, simd=True)


def _map_loops(s: Stmt, rows: int, taken: set[str], conds: list[Expr]) -> Stmt:
    """``s`` with every vector-tile row loop inside it jammed; the row counts that are symbolic go to
    ``conds`` (each jam needs ``count >= rows``)."""
    if isinstance(s, For):
        jammed = _jam_loop(s, rows, taken)
        if jammed is not None:
            if int_value(s.stop) is None:
                conds.append(Alu("ge", (s.stop, Const(rows, I64)), DType.bool))
            return jammed
    fields = BODIES.get(type(s), ())
    if not fields:
        return s
    new = {f: tuple(_map_loops(x, rows, taken, conds) for x in getattr(s, f)) for f in fields}
    if all(all(a is b for a, b in zip(new[f], getattr(s, f))) for f in fields):
        return s
    return replace(s, **new)


def jam_rows(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    """At a statement of the function body: its nest with every vector-tile row loop jammed. A symbolic row
    count (a sequence length) chooses at run time: fewer rows than a jam (a decode step) run the original
    nest, so one row is not computed ``rows`` times; the test wraps the whole nest (an OpenMP collapse needs
    its loops perfectly nested)."""
    if ctx.loops:
        return None  # only at the top: the run-time choice goes around the whole nest
    s = body[i]
    rows = int(ctx.options.get("rows", JAM_ROWS))
    conds: list[Expr] = []
    new = _map_loops(s, rows, names_in(ctx.function), conds)
    if new is s:
        return None
    if not conds:
        return 1, [new]
    cond = conds[0]
    for c in conds[1:]:
        cond = Alu("land", (cond, c), DType.bool)
    return 1, [If(cond, (new,), (s,), origin=getattr(s, "origin", new.origin))]


ROW_JAM_RULES = (("jam_rows", jam_rows),)
