"""Loop annotations as rule tables over the kernel IR: ``simd`` and ``unroll``.

Each rule looks at one statement (``rule(body, i, ctx) -> (1, [new loop]) | None``, see
:mod:`caten_lab.codegen.kir_rewrite`) and sets a structured field of a ``For``; the renderer turns
the fields into pragmas. Options come from ``ctx.options`` (``unroll_max``).

- ``simd_sum``: the innermost ``stage`` loop of a float sum (one accumulator ``acc = acc + x``, a body
  of plain statements) is ``simd`` with ``reduction(+: acc)``: gcc then vectorizes the dot products.
- ``simd_lanes``: a ``vector`` loop that only writes lanes of local arrays (the matmul tile's
  accumulator init and update) is ``simd``.
- ``unroll_small``: an innermost loop (or the innermost stage loop of a reduction) with a small
  constant trip count unrolls; never a loop inside a collapsed parallel nest (no pragma may sit
  between collapsed loops).
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.codegen.kir import Alu, Assign, Decl, For, Stmt, Store, Var
from caten_lab.codegen.kir_rewrite import RuleContext
from caten_lab.codegen.kir_walk import int_value, walk

UNROLL_MAX = 8  # default of the ``unroll_max`` option


def _plain(body: tuple[Stmt, ...]) -> bool:
    return all(isinstance(s, Decl | Assign | Store) for s in body)


def _free(s: For) -> bool:
    return s.parallel is None and not s.simd and not s.unroll


def sum_accumulator(loop: For) -> str | None:
    """The accumulator of a float sum loop (``acc = acc + x`` its one assignment, no nested control), or None."""
    if not _plain(loop.body):
        return None
    assigns = [s for s in loop.body if isinstance(s, Assign)]
    if len(assigns) != 1:
        return None
    a = assigns[0]
    v = a.value
    if not (isinstance(v, Alu) and v.op == "add" and v.dtype.is_float and v.args[0] == Var(a.var, v.dtype)):
        return None
    if any(isinstance(s, Decl) and s.var == a.var for s in loop.body):
        return None
    return a.var


def simd_sum(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    s = body[i]
    if not isinstance(s, For) or s.role != "stage" or not _free(s):
        return None
    acc = sum_accumulator(s)
    if acc is None:
        return None
    return 1, [replace(s, simd=True, reduction=(acc,))]


def simd_lanes(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    s = body[i]
    if not isinstance(s, For) or s.role != "vector" or not _free(s):
        return None
    params = {p.name for p in ctx.function.params}
    stores = [x for x in s.body if isinstance(x, Store)]
    if not stores or any(x.buf in params for x in stores):
        return None
    return 1, [replace(s, simd=True)]


SIMD_RULES = (("simd_sum", simd_sum), ("simd_lanes", simd_lanes))


def in_collapsed_nest(ctx: RuleContext) -> bool:
    """Whether the loop about to be looked at is an inner loop of a collapsed parallel nest."""
    depth = len(ctx.loops)
    for d, outer in enumerate(ctx.loops):
        if isinstance(outer, For) and outer.parallel is not None and depth - d < outer.parallel.collapse:
            return True
    return False


def _innermost_stage(s: For) -> bool:
    """A reduction's innermost stage loop: no stage loop of the same reduction inside it."""
    return s.role == "stage" and not any(isinstance(x, For) and x.role == "stage" and x.origin == s.origin
                                         for x in walk(s.body))


def unroll_small(body: tuple[Stmt, ...], i: int, ctx: RuleContext) -> tuple[int, list[Stmt]] | None:
    s = body[i]
    if not isinstance(s, For) or not _free(s) or int_value(s.start) != 0:
        return None
    limit = int(ctx.options.get("unroll_max", UNROLL_MAX))
    stop = int_value(s.stop)
    if limit < 2 or stop is None or stop > limit or int_value(s.step) != 1 or in_collapsed_nest(ctx):
        return None
    innermost = not any(isinstance(b, For) for b in s.body)
    if not (innermost or _innermost_stage(s)):
        return None
    return 1, [replace(s, unroll=limit)]


UNROLL_RULES = (("unroll_small", unroll_small),)
