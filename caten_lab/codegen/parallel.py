"""OpenMP parallel loops as rules over the kernel IR: where a kernel runs in parallel, and never a
parallel loop inside another.

``parallel_nest`` (one rule, at the top level of each function) decides ``For.parallel`` (which the
``team`` pass then turns into chunks the threads of one team claim, codegen/team.py) from the
function's estimated work (``Function.meta["work"]``, an int64 expression: symbolic sizes are only
known at run time, so the threshold becomes the region's ``if`` condition) and two options,
``threads`` and ``parallel_work`` (operations below which a kernel stays serial):

- output rows: a kernel whose one main loop follows serial pre-loops at the top level (after
  hoisting, the last-position LayerNorm + lm_head of a decoder: mean/var stages and ``h[r] =
  norm(x)[r]``, then ``for j < vocab``) runs the main loop in parallel; the pre-loops stay serial;
- otherwise a body that is one loop nest runs its outer loop in parallel, collapsed with perfectly
  nested loops while the outer trip count alone may not feed every thread; a symbolic outer loop (a
  sequence length, 1 in decode) additionally marks the first big loop inside it parallel, and only
  runs the outer one in parallel when it has at least ``threads`` iterations.

``unnest_parallel`` then removes nesting: ``#pragma omp parallel for if(rows >= 2)`` around a loop
holding another parallel loop makes the inner region *nested* even when the outer one is inactive,
and libgomp starts fresh threads for nested teams on every call (no thread pool). The outer
condition picks one of two copies at run time instead: the rows loop in parallel (inner loops
serial), or the rows loop serial with the inner loop parallel (a top-level region, pooled threads).
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import BODIES, Alu, Const, Expr, For, Function, If, Parallel, Stmt
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import int_value, trip_count, walk

# operations below which a kernel stays serial: splitting it costs the team a barrier and the cache lines
# its threads share (the wake-up per region that an OpenMP region paid is gone: codegen/team.py)
PARALLEL_WORK = 1 << 15
MAIN_ROLES = ("loop", "tile", "collapsed")
I64 = DType.int64


def _free(s: For) -> bool:
    return s.parallel is None and not s.simd and not s.unroll


def _ge(a: Expr, b: int) -> Expr:
    return Alu("ge", (a, Const(b, I64)), DType.bool)


def _inner_candidate(outer: For) -> int | None:
    """Position of the first loop directly inside ``outer`` that is a tile loop or a big main loop."""
    for j, s in enumerate(outer.body):
        if isinstance(s, For) and _free(s):
            stop = int_value(s.stop)
            if s.role == "tile" or s.role == "loop" and (stop is None or stop >= 64):
                return j
    return None


def plan_parallel(fn: Function, threads: int, min_work: int) -> tuple[int, For] | None:
    """(position in ``fn.body``, the loop with its parallel fields set), or None: stays serial."""
    if threads <= 1:
        return None
    work = fn.get("work", Const(1, I64))
    small = isinstance(work, Const) and work.value < min_work
    cond_work = None if isinstance(work, Const) else _ge(work, min_work)
    tops = [(i, s) for i, s in enumerate(fn.body) if isinstance(s, For)]
    mains = [(i, s) for i, s in tops if s.role in MAIN_ROLES]
    if len(mains) < len(tops) and len(mains) == 1 and _free(mains[0][1]) and mains[0][1].role == "loop":
        i, first = mains[0]  # output rows after serial pre-loops
        rows = trip_count(first)
        if small or rows is not None and rows < 2 * threads:
            return None
        return i, replace(first, parallel=Parallel(1, cond_work))
    if small or len(tops) != 1:
        return None
    i, first = tops[0]
    if first.role not in MAIN_ROLES or not _free(first) or len(mains) < len(tops):
        return None
    chain = [first]
    while len(chain) < 3:
        cur = chain[-1]
        if (trip_count(cur) or 0) >= 4 * threads:
            break
        if len(cur.body) == 1 and isinstance(cur.body[0], For) and cur.body[0].role in ("loop", "tile") \
                and _free(cur.body[0]):
            chain.append(cur.body[0])
            continue
        break
    conds = [] if cond_work is None else [cond_work]
    body = first.body
    if len(chain) == 1 and int_value(first.stop) is None:
        j = _inner_candidate(first)
        if j is not None:
            inner = replace(body[j], parallel=Parallel(1, cond_work))
            body = (*body[:j], inner, *body[j + 1:])
            conds.append(_ge(first.stop, threads))
    cond = None
    for c in conds:
        cond = c if cond is None else Alu("land", (cond, c), DType.bool)
    return i, replace(first, body=body, parallel=Parallel(len(chain), cond))


def parallel_nest(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    if ctx.loops or body is not ctx.function.body or not isinstance(body[i], For):
        return None
    plan = plan_parallel(ctx.function, int(ctx.options.get("threads", 1)),
                         int(ctx.options.get("parallel_work", PARALLEL_WORK)))
    if plan is None or plan[0] != i:
        return None
    return 1, [plan[1]]


def _serial(body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    """``body`` with every parallel loop inside it made serial."""
    out = []
    for s in body:
        subs = BODIES.get(type(s), ())
        if subs:
            s = replace(s, **{f: _serial(getattr(s, f)) for f in subs})
        if isinstance(s, For) and s.parallel is not None:
            s = replace(s, parallel=None)
        out.append(s)
    return tuple(out)


def unnest_parallel(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    s = body[i]
    if not isinstance(s, For) or s.parallel is None:
        return None
    if not any(isinstance(x, For) and x.parallel is not None for x in walk(s.body)):
        return None
    par = replace(s, body=_serial(s.body))
    if s.parallel.cond is None:
        return 1, [par]
    return 1, [If(s.parallel.cond, (par,), (replace(s, parallel=None),), origin=s.origin)]


PARALLEL_RULES = (("parallel_nest", parallel_nest),)
UNNEST_RULES = (("unnest_parallel", unnest_parallel),)
