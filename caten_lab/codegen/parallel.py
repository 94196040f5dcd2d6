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

from caten_lab.codegen.loopir import For, Function
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
