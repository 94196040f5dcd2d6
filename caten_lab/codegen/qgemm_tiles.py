"""The ``qgemm`` codegen pass: a quantized matmul over many rows (a prefill) in tiles, as a rule over the
kernel IR.

Lowered, a ``quant_matmul`` element is one helper call per (row, output feature): a dot product of a
weight row with an activation row (:mod:`caten_lab.codegen.lower_quant`)::

    FOR l in [0, rows)                         (the prompt's tokens)
      FOR j in [0, n)                          (the output features)
        x = cl_qdot_q4_1(k, &w[j * wb], &xq[l * xb]);  ... out[l, j] = f(x)

A decode step (one row) wants exactly that (the tiles with one row measured slower in SmolLM2's decode
step: its gate/up projections 2.5-3.1 against 1.7 ms at 32-256 weight rows per call, one thread). With many rows each weight row is unpacked from its blocks
once per row; the rule ``qgemm_tiles`` gives the nest a tile form in which one helper call multiplies
``QGEMM_N`` weight rows by ``QGEMM_M`` activation rows (``cl_qgemm_<type>``, codegen/c/quant.h, which
reuses each unpacked weight block across several rows) into a local tile, and the original body reads the
tile::

    IF rows >= QGEMM_MIN_ROWS
      FOR jt in [0, n) step QGEMM_N [tile]     (a column tile: its weight rows stay in cache)
        FOR lt in [0, rows) step QGEMM_M [qtile]
          float c[QGEMM_M * QGEMM_N]; cl_qgemm_q4_1(k, &w[jt * wb], wb, nn, &xq[lt * xb], xb, mm, c, QGEMM_N)
          FOR l in [lt, lt + mm): FOR j in [jt, jt + nn): x = c[(l - lt) * QGEMM_N + j - jt]; ... (as before)
    ELSE (the original nest)

Each value is the same dot product as the helper per element computes (the helpers agree to float rounding;
codegen/c/quant.h). The rule fires on a two-loop nest at a kernel's top level whose innermost body calls
``cl_qdot_*`` with a weight address linear in the inner variable and an activation address linear in the
outer one. It runs after the ``parallel`` pass: the tile loops run in parallel where the nest did (the
original nest, kept for short prompts, keeps its own parallel loops).
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import Addr, Alu, Call, Const, Decl, Eval, Expr, For, If, Load, Parallel, Stmt, Var
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import exprs_of, int_value, map_stmt_exprs, walk

I64, F32 = DType.int64, DType.float32
QGEMM_M = 64  # activation rows per helper call
QGEMM_N = 32  # weight rows per helper call (the column tile)
QGEMM_MIN_ROWS = 4  # fewer rows keep the per-element dot products
TILE_ROLE = "qtile"


def _coef(e: Expr, v: str) -> int | None:
    """``c`` when ``e`` is ``c * v`` (or ``v``), else None."""
    if isinstance(e, Var) and e.name == v:
        return 1
    if isinstance(e, Alu) and e.op == "mul" and len(e.args) == 2:
        a, b = e.args
        if isinstance(b, Var) and b.name == v and int_value(a) is not None:
            return int_value(a)
        if isinstance(a, Var) and a.name == v and int_value(b) is not None:
            return int_value(b)
    return None


def _qdots(body: tuple[Stmt, ...], row: str, col: str) -> list[tuple[Call, int, int]] | None:
    """The ``cl_qdot_*`` calls of ``body`` with their weight and activation row strides, or None when one
    does not read row ``col`` of the weight and row ``row`` of the activations."""
    out = []
    for s in walk(body):
        for e in exprs_of(s):
            if isinstance(e, Call) and e.fn.startswith("cl_qdot_"):
                _, w, x = e.args
                if not (isinstance(w, Addr) and isinstance(x, Addr) and w.index is not None and x.index is not None):
                    return None
                ws, xs = _coef(w.index, col), _coef(x.index, row)
                if not ws or not xs:
                    return None
                out.append((e, ws, xs))
    return out


def _i64(op: str, a: Expr, b: Expr) -> Expr:
    return Alu(op, (a, b), I64)


def qgemm_tiles(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    outer = body[i]
    if not isinstance(outer, For) or outer.role != "loop" or len(outer.body) != 1 or ctx.loops:
        return None
    inner = outer.body[0]
    if not isinstance(inner, For) or inner.role != "loop":
        return None
    if any(int_value(x) != v for x, v in ((outer.start, 0), (outer.step, 1), (inner.start, 0), (inner.step, 1))):
        return None
    if any(isinstance(s, For) for s in walk(inner.body)):
        return None
    rows = int_value(outer.stop)
    if rows is not None and rows < QGEMM_MIN_ROWS:
        return None
    calls = _qdots(inner.body, outer.var, inner.var)
    if not calls:
        return None
    o = outer.origin
    row, col = outer.var, inner.var
    jt, lt = f"{col}_qt", f"{row}_qt"
    nn, mm = f"{col}_qn", f"{row}_qm"
    head: list[Stmt] = [Decl(nn, I64, _i64("min", Const(QGEMM_N, I64), _i64("sub", inner.stop, Var(jt, I64))),
                             const=True, origin=o),
                        Decl(mm, I64, _i64("min", Const(QGEMM_M, I64), _i64("sub", outer.stop, Var(lt, I64))),
                             const=True, origin=o)]
    tiles: dict[Call, Load] = {}
    for k, (call, wstride, xstride) in enumerate(calls):
        if call in tiles:
            continue
        c = f"{col}_qc{k}"
        kk, w, x = call.args
        assert isinstance(w, Addr) and isinstance(x, Addr)
        head.append(Decl(c, F32, size=Const(QGEMM_M * QGEMM_N, I64), origin=o))
        head.append(Eval(Call(call.fn.replace("cl_qdot_", "cl_qgemm_"), (
            kk, replace(w, index=_i64("mul", Const(wstride, I64), Var(jt, I64))), Const(wstride, I64), Var(nn, I64),
            replace(x, index=_i64("mul", Const(xstride, I64), Var(lt, I64))), Const(xstride, I64), Var(mm, I64),
            Addr(c, None, F32), Const(QGEMM_N, I64)), F32, call.origin), origin=o))
        at = _i64("add", _i64("mul", _i64("sub", Var(row, I64), Var(lt, I64)), Const(QGEMM_N, I64)),
                  _i64("sub", Var(col, I64), Var(jt, I64)))
        tiles[call] = Load(c, at, F32, origin=call.origin)
    new_body = tuple(map_stmt_exprs(s, lambda e: tiles.get(e) if isinstance(e, Call) else None)
                     for s in inner.body)
    cols = replace(inner, start=Var(jt, I64), stop=_i64("add", Var(jt, I64), Var(nn, I64)), body=new_body,
                   parallel=None)
    rows_loop = replace(outer, start=Var(lt, I64), stop=_i64("add", Var(lt, I64), Var(mm, I64)), body=(cols,),
                        parallel=None)
    lt_loop = For(lt, Const(0, I64), outer.stop, Const(QGEMM_M, I64), (*head, rows_loop), role=TILE_ROLE, origin=o)
    # the tiles in parallel when the nest was (both tile loops: a prompt of 64 rows is one row tile)
    par = None if outer.parallel is None and inner.parallel is None else Parallel(2)
    jt_loop = For(jt, Const(0, I64), inner.stop, Const(QGEMM_N, I64), (lt_loop,), role="tile", parallel=par, origin=o)
    if rows is not None:
        return 1, [jt_loop]
    enough = Alu("ge", (outer.stop, Const(QGEMM_MIN_ROWS, I64)), DType.bool)
    return 1, [If(enough, (jt_loop,), (outer,), origin=o)]


QGEMM_RULES = (("qgemm_tiles", qgemm_tiles),)
