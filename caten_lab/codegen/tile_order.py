"""Column tiles inside the rows when the whole other operand fits in L2, as a rule over the kernel IR.

``lower`` puts a vector-tile matmul's column-tile loop outermost: one K x 32 panel of the other operand
stays in cache while every row group uses it. Its epilogue then reads and writes the output-sized buffers
one 32-column strip at a time, down all the rows: with 4 KB pages every row group of a strip touches new
pages of each buffer. The GELU backward fused after the tiny training step's MLP matmul reads seven such
buffers (x, tanh(x), ... saved by the forward) and ran at 37 GFLOP/s, its epilogue costing more than its
multiply-adds. When the whole operand (K x N floats) fits in :data:`PANEL_BYTES`, the rule ``rows_outer``
moves the tile loop inside the row loops:

    FOR t [tile] (parallel)              FOR rows... (parallel: the tile loop's)
      FOR rows... (the jammed rows)  ->    row declarations
        row declarations; tile body          FOR t [tile]: tile body

so the epilogue walks each row group's columns contiguously and the operand is re-read from L2. Every
(row group, tile) pair runs the same statements as before, on its own outputs: the same values.

It fires on a column-tile loop whose body is a perfect nest of plain loops ending in a jammed row loop
(:mod:`caten_lab.codegen.row_jam`) that calls the register-tile helper (:mod:`caten_lab.codegen.sgemm_tiles`)
once with a constant reduction length, with constant bounds that do not depend on the tile.
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.codegen.kir import Call, Decl, Eval, For, Stmt
from caten_lab.codegen.kir_names import expr_names, used_names
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import int_value
from caten_lab.codegen.sgemm_tiles import HELPER

PANEL_BYTES = 512 * 1024  # half of a 1 MB L2: the operand, re-read per row group, next to the epilogue's rows


def _nest(t: For) -> list[For] | None:
    """The loops from ``t``'s body down to the jammed row loop (a perfect nest), or None."""
    out: list[For] = []
    body = t.body
    while len(body) == 1 and isinstance(body[0], For) and body[0].parallel is None:
        loop = body[0]
        if loop.role not in ("loop", "jammed") or t.var in expr_names(loop.start) | expr_names(loop.stop) | \
                expr_names(loop.step) or int_value(loop.stop) is None:
            return None
        out.append(loop)
        if loop.role == "jammed":
            return out
        body = loop.body
    return None


def _panel_floats(jammed: For) -> int | None:
    calls = [s.value for s in jammed.body if isinstance(s, Eval) and isinstance(s.value, Call)
             and s.value.fn == HELPER]
    if len(calls) != 1:
        return None
    return int_value(calls[0].args[-1])


def rule_rows_outer(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    t = body[i]
    if not (isinstance(t, For) and t.role == "tile" and int_value(t.start) == 0):
        return None
    n, step = int_value(t.stop), int_value(t.step)
    if n is None or step is None or (t.parallel is not None and (t.parallel.cond is not None
                                                               or t.parallel.collapse != 1)):
        return None
    nest = _nest(t)
    k = _panel_floats(nest[-1]) if nest else None
    if nest is None or k is None or k * n * 4 > PANEL_BYTES:
        return None
    jam = nest[-1]
    head: list[Stmt] = []
    for s in jam.body:  # the jam's row declarations do not depend on the tile: once per row group
        if not (isinstance(s, Decl) and s.size is None and t.var not in used_names(s)):
            break
        head.append(s)
    inner = replace(t, body=jam.body[len(head):], parallel=None)
    new: Stmt = replace(jam, body=(*head, inner))
    for loop in reversed(nest[:-1]):
        new = replace(loop, body=(new,))
    return 1, [replace(new, parallel=t.parallel)]  # type: ignore[arg-type]


TILE_ORDER_RULES = (("rows_outer", rule_rows_outer),)
