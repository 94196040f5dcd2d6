"""Matching and dependence analysis of the ``rowblock`` pass (:mod:`caten_lab.codegen.rowblock`): which loop
nests it tiles, and which of their statements depend on the row or on the output feature."""

from __future__ import annotations

from dataclasses import dataclass

from caten_lab.codegen.kir import Assign, Comment, Decl, For, Function, Stmt, Store
from caten_lab.codegen.kir_names import declared_names, target, used_names
from caten_lab.codegen.kir_walk import int_value, straight_line, walk

MAIN_ROLES = ("loop", "tile", "collapsed")


# -------------------------------------------------------------------------------------- matching


@dataclass
class Nest:
    rows: For
    cols: For
    reds: list[For]  # the reductions of the output-feature loop, in order (a fused gate/up pair has two)


def match(fn: Function, body: tuple[Stmt, ...], i: int) -> Nest | None:
    """The rows / output-features / reduction nest at ``body[i]`` when ``body`` is the function body and
    this is its one main loop, in the shape the rowblock module docstring draws."""
    if body is not fn.body:
        return None
    rows = body[i]
    if not isinstance(rows, For) or rows.role != "loop":
        return None
    if sum(1 for s in body if isinstance(s, For) and s.role in MAIN_ROLES) != 1:
        return None
    if int_value(rows.stop) is not None or int_value(rows.start) != 0 or int_value(rows.step) != 1 or not rows.body:
        return None
    cols = rows.body[-1]
    if not isinstance(cols, For) or cols.role != "loop" or int_value(cols.stop) is None \
            or int_value(cols.start) != 0 or int_value(cols.step) != 1:
        return None
    if any(isinstance(s, For) and s.role in MAIN_ROLES for s in rows.body[:-1]):
        return None
    if not all(isinstance(s, For | Decl | Assign | Store | Comment) for s in cols.body):
        return None
    reds = [s for s in cols.body if isinstance(s, For)]
    if not reds or not all(plain_reduction(red) for red in reds):
        return None
    return Nest(rows, cols, reds)


def plain_reduction(red: For) -> bool:
    return red.role == "stage" and red.simd and bool(red.reduction) and red.parallel is None and straight_line(red.body)


def row_statements(pre: tuple[Stmt, ...], lv: str) -> tuple[set[int], set[str]]:
    """The statements of ``pre`` whose values depend on the row ``lv`` (ids) and the names they define:
    what is copied per row. The rest (a dequantization's mask tables) is computed once, before the tiles."""
    defs = {id(x): declared_names(x) | {y.buf if isinstance(y, Store) else y.var for y in walk((x,))
                                        if isinstance(y, Store | Assign)} for x in pre}
    touched = {id(x): used_names(x) | defs[id(x)] for x in pre}
    dep = {lv}
    rows: set[int] = set()
    changed = True
    while changed:  # a second sweep picks up an array declared before the loop that fills it
        changed = False
        for x in pre:
            if id(x) not in rows and touched[id(x)] & dep:  # reads a row's value, or writes an array a row's loop fills
                rows.add(id(x))
                dep |= defs[id(x)]
                changed = True
    return rows, dep - {lv}


def dependence_closure(flat: list[Stmt], uses: dict[int, set[str]], seed: set[str]) -> set[str]:
    """``seed`` plus every scalar written from an expression that reads a name already in the set
    (statements in program order; a second sweep picks up accumulators read before their update)."""
    dep = set(seed)
    changed = True
    while changed:
        changed = False
        for s in flat:
            t = target(s)
            if t is not None and t not in dep and uses[id(s)] & dep:
                dep.add(t)
                changed = True
    return dep
