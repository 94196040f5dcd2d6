"""Register blocking over rows for prefill matmuls: each weight row read serves ``ROWS`` input rows.

A matmul lowered in dot-product form (see :mod:`caten_lab.codegen.hoist`) is

    for i < seq:               pre(i)  (norm statistics, hoisted operands)
        for j < n_out:         acc = 0; for r: acc += a(i, r) * W[j, r];  epilogue(i, j, acc)

and reads all of ``W`` once per row ``i``: with a prompt, W streams from L3/DRAM ``seq`` times. Here,
when ``seq >= ROWS`` at run time, ``ROWS`` consecutive rows are computed together: ``pre`` runs once
per row into renamed copies, and the reduction keeps one accumulator per row, so each ``W[j, r]`` is
loaded once for ``ROWS`` rows. Statements that do not depend on the row (the weight load and its
dequantization) are emitted once. Rows past the end are clamped to the last row (recomputed, and
stored with identical values by the same thread). Decode (``seq < ROWS``) runs the original nest.
Each row's arithmetic is unchanged, so results equal the unblocked code.
"""

from __future__ import annotations

import copy
import re

from caten_lab.codegen.loopir import Assign, For, Function, If, Stmt, walk

ROWS = 4


def _names_in(s: Stmt) -> set[str]:
    """Names declared by ``s`` or anywhere inside it."""
    out: set[str] = set()
    for x in walk([s]):
        if isinstance(x, Assign) and (x.ctype or x.array):
            out.add(x.target)
    return out


def _texts(s: Stmt) -> list[str]:
    out: list[str] = []
    for x in walk([s]):
        if isinstance(x, Assign):
            out += [x.expr, x.index or "", x.target if not x.ctype and not x.array else ""]
        elif isinstance(x, For):
            out += [x.start, x.stop, x.pragma or ""]
        elif isinstance(x, If):
            out.append(x.cond)
    return out


def _renamer(names: set[str], q: int):  # noqa: ANN202 - returns a str -> str function
    if not names:
        return lambda t: t
    pat = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b")
    return lambda t: pat.sub(lambda m: f"{m.group(1)}_{q}", t) if t else t


def _rename(s: Stmt, ren) -> Stmt:  # noqa: ANN001
    s = copy.deepcopy(s)
    for x in walk([s]):
        if isinstance(x, Assign):
            x.expr, x.target = ren(x.expr), ren(x.target)
            x.index = ren(x.index) if x.index is not None else None
        elif isinstance(x, For):
            x.start, x.stop = ren(x.start), ren(x.stop)
            x.pragma = ren(x.pragma) if x.pragma else x.pragma
        elif isinstance(x, If):
            x.cond = ren(x.cond)
    return s


def _mentions(texts: list[str], names: set[str]) -> bool:
    if not names:
        return False
    pat = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b")
    return any(pat.search(t) for t in texts if t)


def _match(fn: Function) -> tuple[For, For, For] | None:
    mains = [s for s in fn.body if isinstance(s, For) and s.role in ("loop", "tile", "collapsed")]
    if len(mains) != 1:
        return None
    rows = mains[0]
    if rows.role != "loop" or rows.stop.isdigit() or rows.step != "1" or not rows.body:
        return None
    cols = rows.body[-1]
    if not isinstance(cols, For) or cols.role != "loop" or not cols.stop.isdigit() or cols.step != "1":
        return None
    if any(isinstance(s, For) and s.role in ("loop", "tile", "collapsed") for s in rows.body[:-1]):
        return None
    reds = [s for s in cols.body if isinstance(s, For)]
    if len(reds) != 1 or any(isinstance(s, If) for s in cols.body):
        return None
    red = reds[0]
    if red.role != "stage" or not (red.pragma or "").startswith("omp simd reduction(+:"):
        return None
    if not all(isinstance(s, Assign) for s in red.body):
        return None
    return rows, cols, red


def block_rows(fn: Function) -> bool:
    """Rewrite ``fn`` in place when it has the shape above; returns whether it did."""
    m = _match(fn)
    if m is None:
        return False
    rows, cols, red = m
    lv = rows.var
    pre = rows.body[:-1]
    dep: set[str] = {lv}
    for s in pre:
        dep |= _names_in(s)
    # statements of the column loop (and the reduction body) that depend on the row, to a fixed point
    flat = [s for s in cols.body if not isinstance(s, For)] + list(red.body)
    changed = True
    while changed:
        changed = False
        for s in flat:
            assert isinstance(s, Assign)
            if s.index is None and s.target not in dep and _mentions([s.expr], dep):
                dep.add(s.target)
                changed = True
    row_names = dep - {lv}
    rens = [_renamer(row_names | {lv}, q) for q in range(ROWS)]

    def dup(s: Stmt) -> list[Stmt]:
        if isinstance(s, Assign) and s.target not in dep and not _mentions(_texts(s), dep):
            return [s]
        return [_rename(s, r) for r in rens]

    blk = f"{lv}b"
    body: list[Stmt] = [Assign(rows.nodes, f"{lv}_{q}", f"cl_min64({blk} + {q}, {rows.stop} - 1)", "const int64_t")
                        for q in range(ROWS)]
    for q in range(ROWS):
        body += [_rename(s, rens[q]) for s in pre]
    new_red = For(red.nodes, red.var, red.start, red.stop, red.step, [], None, red.role)
    for s in red.body:
        new_red.body += dup(s)
    accs = red.pragma[len("omp simd reduction(+:"):-1].split(",")  # type: ignore[index]
    new_red.pragma = "omp simd reduction(+:" + ",".join(
        (f"{a}_{q}" if a in dep else a) for a in accs for q in range(ROWS)) + ")"
    collapsed = "collapse(" in (rows.pragma or "")
    cols_pragma = None if collapsed or cols.pragma == "" else cols.pragma
    new_cols = For(cols.nodes, cols.var, cols.start, cols.stop, cols.step, [], cols_pragma, cols.role)
    for s in cols.body:
        new_cols.body += [new_red] if s is red else dup(s)
    body.append(new_cols)
    pragma = re.sub(r" collapse\(\d+\)", "", rows.pragma) if rows.pragma else rows.pragma  # no longer a perfect nest
    blocked = For(rows.nodes, blk, "0", rows.stop, str(ROWS), body, pragma, "loop")
    original = copy.deepcopy(rows)
    i = fn.body.index(rows)
    fn.body[i] = If(rows.nodes, f"{rows.stop} >= {ROWS}", [blocked], [original])
    return True
