"""Loop-IR optimizations applied after lowering: OpenMP parallel loops and small unrolls.

(Collapsing contiguous loops and the tiled, vectorized matmul reduction are decided during lowering,
where the index expressions are known; see :mod:`caten_lab.codegen.lower`.)
"""

from __future__ import annotations

from caten_lab.codegen.loopir import For, Function, walk
from caten_lab.passes.indexing import c_expr

PARALLEL_WORK = 1 << 15  # estimated operations below which a kernel stays single-threaded
UNROLL_MAX = 8


def _names() -> object:
    from caten_lab.codegen.lower import NAMES

    return NAMES


def parallelize(fn: Function, threads: int) -> bool:
    """``omp parallel for`` on the first top-level loop nest, collapsed with perfectly nested loops while
    the outer trip count alone may not feed every thread; guarded by ``if(work >= threshold)`` when sizes
    are symbolic. Returns whether a pragma was added."""
    if threads <= 1:
        return False
    work = fn.work
    if isinstance(work, int) and work < PARALLEL_WORK:
        return False
    loops = [s for s in fn.body if isinstance(s, For)]
    if len(loops) != 1:
        return False
    first = loops[0]
    if first.role not in ("loop", "tile", "collapsed") or first.pragma:
        return False
    chain = [first]
    while len(chain) < 3:
        cur = chain[-1]
        if cur.stop.isdigit() and int(cur.stop) >= 4 * threads:
            break
        if len(cur.body) == 1 and isinstance(cur.body[0], For) and cur.body[0].role in ("loop", "tile"):
            chain.append(cur.body[0])
            continue
        break
    for inner in chain[1:]:
        inner.pragma = ""  # part of the collapsed nest: no other pragma may sit between the loops
    clause = f" collapse({len(chain)})" if len(chain) > 1 else ""
    cond = "" if isinstance(work, int) else f" if({c_expr(work, _names())} >= {PARALLEL_WORK})"  # type: ignore[arg-type]
    first.pragma = f"omp parallel for{clause}{cond} schedule(static)"
    return True


def unroll_small(fn: Function) -> int:
    """``#pragma GCC unroll`` on innermost loops with a small constant trip count."""
    n = 0
    for s in walk(fn.body):
        if isinstance(s, For) and s.pragma is None and s.stop.isdigit() and s.start == "0" \
                and int(s.stop) <= UNROLL_MAX and not any(isinstance(b, For) for b in s.body):
            s.pragma = f"GCC unroll {UNROLL_MAX}"
            n += 1
    return n
