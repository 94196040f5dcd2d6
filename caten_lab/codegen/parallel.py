"""OpenMP placement for a kernel whose one main loop follows serial pre-loops at the top level.

After hoisting (:mod:`caten_lab.codegen.hoist`), the last-position LayerNorm + lm_head kernel of a
decoder is

    mean/var stages; h[r] = norm(x)[r]        # serial, n_embd elements
    for j < vocab: y[j] = sum_r h[r] * W[j, r] # the work: one weight row per j

The generic rule (:func:`caten_lab.codegen.loop_opts.parallelize`) only parallelizes a kernel whose
body is a single loop nest, so this shape would run on one core. Here the main loop runs in
parallel (each thread reads its share of the weight rows); the short pre-loops stay serial.
(Symbolic outer loops with a big output loop inside, the decode shape of every other matvec, are
handled by the generic rule.)
"""

from __future__ import annotations

import copy

from caten_lab.codegen.loopir import For, Function, If, Stmt, walk
from caten_lab.passes.indexing import c_expr

MAIN_ROLES = ("loop", "tile", "collapsed")


def _names() -> object:
    from caten_lab.codegen.lower import NAMES

    return NAMES


def parallelize_output_rows(fn: Function, threads: int, min_work: int) -> bool | None:
    """``omp parallel for`` on the one main loop after serial pre-loops; None when the generic rule
    should decide (no pre-loops, or not this shape)."""
    mains = [s for s in fn.body if isinstance(s, For) and s.role in MAIN_ROLES]
    pre = [s for s in fn.body if isinstance(s, For) and s.role not in MAIN_ROLES]
    if not pre or len(mains) != 1 or mains[0].pragma or mains[0].role != "loop":
        return None
    first = mains[0]
    work = fn.work
    if isinstance(work, int) and work < min_work:
        return False
    if first.stop.isdigit() and int(first.stop) < 2 * threads:
        return False
    cond = "" if isinstance(work, int) else f" if({c_expr(work, _names())} >= {min_work})"  # type: ignore[arg-type]
    first.pragma = f"omp parallel for{cond} schedule(static)"
    return True


def if_clause(pragma: str) -> str | None:
    """The condition of an OpenMP ``if(...)`` clause (parentheses balanced), or None."""
    at = pragma.find(" if(")
    if at < 0:
        return None
    i = at + 4
    depth = 1
    start = i
    while i < len(pragma) and depth:
        depth += {"(": 1, ")": -1}.get(pragma[i], 0)
        i += 1
    return pragma[start:i - 1] if depth == 0 else None


def _is_parallel(s: object) -> bool:
    return isinstance(s, For) and bool(s.pragma) and s.pragma.startswith("omp parallel for")  # type: ignore[union-attr]


def _unnest(s: Stmt) -> Stmt:
    if isinstance(s, If):
        s.then = [_unnest(x) for x in s.then]
        s.orelse = [_unnest(x) for x in s.orelse]
        return s
    if not _is_parallel(s) or not any(_is_parallel(x) for x in walk(s.body)):  # type: ignore[attr-defined]
        return s
    assert isinstance(s, For)
    par = copy.deepcopy(s)
    for x in walk(par.body):
        if _is_parallel(x):
            x.pragma = None  # type: ignore[attr-defined]
    cond = if_clause(s.pragma or "")
    if cond is None:
        return par
    ser = copy.deepcopy(s)
    ser.pragma = None
    return If(s.nodes, cond, [par], [ser])


def unnest_parallel(fn: Function) -> bool:
    """Never leave a parallel loop inside another one: choose between them with a C ``if``.

    ``#pragma omp parallel for if(rows >= 2)`` around a loop holding another ``omp parallel for``
    makes the inner region *nested* even when the outer one is inactive, and libgomp starts fresh
    threads for nested teams on every call (no thread pool): a decode step paid that for every
    LayerNorm+matvec kernel. Here the outer condition picks one of two copies at run time: the rows
    loop in parallel (inner pragmas dropped), or the rows loop serial with the inner loop parallel
    (a top-level region, served by the pooled threads)."""
    before = [id(s) for s in fn.body]
    fn.body = [_unnest(s) for s in fn.body]
    return [id(s) for s in fn.body] != before or any(isinstance(s, If) for s in fn.body)
