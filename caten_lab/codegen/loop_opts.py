"""Loop-IR optimizations applied after lowering: OpenMP parallel loops and small unrolls.

(Collapsing contiguous loops and the tiled, vectorized matmul reduction are decided during lowering,
where the index expressions are known; see :mod:`caten_lab.codegen.lower`.)
"""

from __future__ import annotations

from caten_lab.codegen.loopir import For, Function, walk
from caten_lab.codegen.parallel import parallelize_output_rows
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
    placed = parallelize_output_rows(fn, threads, PARALLEL_WORK)  # matvec shapes (decode): see parallel.py
    if placed is not None:
        return placed
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
        if _trip(cur) >= 4 * threads:
            break
        if len(cur.body) == 1 and isinstance(cur.body[0], For) and cur.body[0].role in ("loop", "tile"):
            chain.append(cur.body[0])
            continue
        break
    for inner in chain[1:]:
        inner.pragma = ""  # part of the collapsed nest: no other pragma may sit between the loops
    clause = f" collapse({len(chain)})" if len(chain) > 1 else ""
    conds = [] if isinstance(work, int) else [f"{c_expr(work, _names())} >= {PARALLEL_WORK}"]  # type: ignore[arg-type]
    if len(chain) == 1 and not first.stop.isdigit():
        # a symbolic outer loop (a sequence length) may run once (decode): then parallelize the
        # first big loop inside instead. Nested parallelism is off, so only one of the two is active.
        inner = _inner_parallel_candidate(first)
        if inner is not None:
            inner_if = f" if({conds[0]})" if conds else ""
            conds.append(f"{first.stop} >= {threads}")
            inner.pragma = f"omp parallel for{inner_if} schedule(static)"
    cond = f" if({' && '.join(conds)})" if conds else ""
    first.pragma = f"omp parallel for{clause}{cond} schedule(static)"
    return True


def _trip(loop: For) -> int:
    """Constant trip count of a loop (0 when symbolic)."""
    if not loop.stop.isdigit():
        return 0
    step = int(loop.step) if loop.step.isdigit() else 1
    return -(-int(loop.stop) // step)


def _inner_parallel_candidate(outer: For) -> For | None:
    """The first loop directly inside ``outer``'s body that is a tile loop or a big main loop."""
    for s in outer.body:
        if isinstance(s, For) and s.pragma is None and (
                s.role == "tile" or s.role == "loop" and (not s.stop.isdigit() or int(s.stop) >= 64)):
            return s
    return None


def unroll_small(fn: Function) -> int:
    """``#pragma GCC unroll`` on innermost loops with a small constant trip count."""
    n = 0
    for s in walk(fn.body):
        if isinstance(s, For) and s.pragma is None and s.stop.isdigit() and s.start == "0" \
                and int(s.stop) <= UNROLL_MAX and not any(isinstance(b, For) for b in s.body):
            s.pragma = f"GCC unroll {UNROLL_MAX}"
            n += 1
    return n
