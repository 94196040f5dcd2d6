"""Max and min reductions in explicit vector lanes: a rule of the ``lanes`` codegen pass.

A float ``max`` reduction (a softmax's row maximum) is a chain ``acc = cl_max_f32(acc, x)`` through every
element. gcc cannot vectorize it: AIR's ``max`` propagates NaN, so it is not the ``MAX_EXPR`` gcc knows
how to reassociate, and the loop runs one compare per element on the latency of the chain (the logits'
row maxima of a 2048 x 4096 training batch: 14 ms, 0.6 GFLOP/s). Here the loop

    FOR r in [0, K):  x = f(r); acc = max(acc, x)

becomes

    float acc_l[L]; acc_l[:] = acc                              # L lanes (16 floats: one AVX-512 register)
    FOR acc_b in [0, K - (L-1)) step L
      FOR acc_i in [0, L) [simd]: r = acc_b + acc_i; x = f(r); acc_l[acc_i] = max(acc_l[acc_i], x)
    FOR r in [K - K % L, K): x = f(r); acc = max(acc, x)        # the tail, as before
    acc_l[i] = max(acc_l[i], acc_l[i + h]) for h = L/2 ... 1;  acc = max(acc, acc_l[0])

Unlike a sum, max and min give the same value in any order (a NaN anywhere still wins, since ``cl_max``
keeps a NaN in either argument); only the sign of a zero maximum can differ (+0 against -0). Applied to
loops with one such accumulator and a straight-line body (:func:`caten_lab.codegen.kir_walk.straight_line`).
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import Alu, Assign, Const, Decl, For, Load, Stmt, Store, Var
from caten_lab.codegen.kir_names import expr_names, names_in, used_names
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import int_value, straight_line

I64 = DType.int64
ORDER_FREE = frozenset({"max", "min"})  # reductions whose value does not depend on the order of the terms


def _update(loop: For) -> Assign | None:
    """The one statement ``acc = max(acc, e)`` (or ``min``) of ``loop``, with ``acc`` read nowhere else."""
    ups = [s for s in loop.body if isinstance(s, Assign)]
    if len(ups) != 1:
        return None
    up = ups[0]
    v = up.value
    if not (isinstance(v, Alu) and v.op in ORDER_FREE and v.dtype in (DType.float32, DType.float64)
            and v.args[0] == Var(up.var, v.dtype)):
        return None
    if up.var in expr_names(v.args[1]) or any(up.var in used_names(s) for s in loop.body if s is not up):
        return None
    return up


def rule_max_lanes(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    loop = body[i]
    if not isinstance(loop, For) or loop.role != "stage" or loop.simd or loop.parallel is not None:
        return None
    if int_value(loop.start) != 0 or int_value(loop.step) != 1 or not loop.body or not straight_line(loop.body):
        return None
    up = _update(loop)
    if up is None:
        return None
    ct = up.value.dtype  # type: ignore[union-attr]
    lanes = max(1, int(ctx.options["lanes"].vector_bytes) // ct.itemsize)
    k = int_value(loop.stop)
    if lanes < 2 or lanes & (lanes - 1) or (k is not None and k < 2 * lanes):
        return None
    arr, lane, blk = f"{up.var}_l", f"{up.var}_i", f"{up.var}_b"
    if {arr, lane, blk} & names_in(ctx.function):
        return None
    return 1, _split(loop, up, ct, lanes, arr, lane, blk)


def _split(loop: For, up: Assign, ct: DType, lanes: int, arr: str, lane: str, blk: str) -> list[Stmt]:
    op, org, at = up.value.op, loop.origin, Var(lane, I64)  # type: ignore[union-attr]

    def cell(ix: Alu | Var | Const = at) -> Load:
        return Load(arr, ix, ct, origin=org)

    def lane_loop(n: int, stmts: tuple[Stmt, ...]) -> For:
        return For(lane, Const(0, I64), Const(n, I64), Const(1, I64), stmts, "vector", simd=n >= 8,
                   unroll=0 if n >= 8 else 4, origin=org)

    inner: list[Stmt] = [Decl(loop.var, I64, Alu("add", (Var(blk, I64), at), I64), True, origin=org)]
    for s in loop.body:
        inner.append(Store(arr, at, Alu(op, (cell(), s.value.args[1]), ct), origin=s.origin)  # type: ignore[union-attr]
                     if s is up else s)
    k, L = loop.stop, Const(lanes, I64)
    kc = int_value(k)
    stop = Const(kc - (lanes - 1), I64) if kc is not None else Alu("sub", (k, Const(lanes - 1, I64)), I64)
    out: list[Stmt] = [Decl(arr, ct, size=L, origin=org), lane_loop(lanes, (Store(arr, at, Var(up.var, ct), origin=org),)),
                       For(blk, Const(0, I64), stop, L, (lane_loop(lanes, tuple(inner)),), "stage", origin=org)]
    if kc is None or kc % lanes:
        # a symbolic length rounds down with a mask (lanes is a power of two): no division in a decode step
        tail = Const(kc - kc % lanes, I64) if kc is not None else Alu("and", (k, Const(-lanes, I64)), I64)
        out.append(replace(loop, start=tail))
    h = lanes // 2
    while h >= 1:
        pair = Alu(op, (cell(), cell(Alu("add", (at, Const(h, I64)), I64))), ct)
        out.append(lane_loop(h, (Store(arr, at, pair, origin=org),)))
        h //= 2
    out.append(Assign(up.var, Alu(op, (Var(up.var, ct), cell(Const(0, I64))), ct), origin=up.origin))
    return out
