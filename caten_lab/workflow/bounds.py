"""Indices proven in range at compile time, so the C renderer can drop their run-time check.

At safety >= 1 every array index of a compiled action is checked (``cl_act_ck`` in codegen/c/action.h). The
one pattern proven here instead is the counted loop over an array's own length::

    for i in range(len(a)):        # or range(a.shape[k]), range(0, n) with a constant n
        ... a[i] ...               # axis 0 of a (axis k; any axis of static size >= n)

It is sound when (all checked on the lowered CFG, nothing is guessed):

- the loop is a ``for ... in range(start, stop)`` with step 1 and a literal ``start >= 0`` (or
  ``i64(0)``): the
  hidden counter starts at ``start`` and only grows by one while ``counter < stop``;
- ``stop`` is ``Dim(a, k)`` of an array parameter ``a`` that the action never reassigns (its dims
  are the call's), or a non-negative integer constant;
- the loop variable ``i`` is assigned exactly once in the whole action, from the counter at the top
  of the loop body: inside the body it always holds the current counter value.

Only indices that are the plain name ``i`` inside the loop's body are proven (``a[i + 1]`` is still
checked). A counter held in i32 would wrap past 2^31 - 1 before reaching a larger dimension, so for
an i32 counter and a ``Dim`` stop the lowering emits one check before the loop that the stop fits
i32 (``cl_act_fits_i32``): a wrapped counter would otherwise be a negative index.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from caten_lab.workflow import ir
from caten_lab.workflow.types import ArrayType


@dataclass(frozen=True, slots=True)
class RangeFact:
    """Inside the body of the loop whose header is ``header``: ``0 <= var < bound``.

    The bound is ``array.shape[axis]`` when ``array`` is set, else the constant ``limit``.
    """

    header: int
    var: str
    counter: str
    stop: str
    array: str | None
    axis: int
    limit: int | None


def _int_const(e: object) -> int | None:
    if type(e) is ir.Const and type(e.value) is int:  # type: ignore[union-attr]
        return e.value  # type: ignore[union-attr, return-value]
    return None


def _start_const(e: object) -> int | None:
    """``0`` or ``i64(0)``: a literal loop start (cast to an integer type)."""
    if type(e) is ir.Cast and not e.to.is_float and e.to.bits > 1:  # type: ignore[union-attr]
        v = _int_const(e.operand)  # type: ignore[union-attr]
        return v if v is not None and v < 2 ** (e.to.bits - 1) else None  # type: ignore[union-attr]
    return _int_const(e)


def range_facts(act_ir: ir.ActionIR) -> dict[int, RangeFact]:
    """Loop header block id -> the fact its body may use; one linear pass over the statements."""
    assigns: Counter[str] = Counter()
    defs: dict[str, list[ir.Expr]] = {}
    for block in act_ir.blocks:
        for st in block.stmts:
            tp = type(st)
            if tp is ir.Assign:
                assigns[st.target] += 1  # type: ignore[union-attr]
                if st.target.startswith("__"):  # type: ignore[union-attr]
                    defs.setdefault(st.target, []).append(st.value)  # type: ignore[union-attr]
            elif tp is ir.AllocLocal:
                assigns[st.target] += 1  # type: ignore[union-attr]
    params = dict(act_ir.params)
    facts: dict[int, RangeFact] = {}
    for block in act_ir.blocks:
        t = block.term
        if type(t) is not ir.Branch:
            continue
        cond = t.cond  # type: ignore[union-attr]
        if not (
            type(cond) is ir.Compare
            and cond.op == "<"
            and type(cond.left) is ir.Name
            and type(cond.right) is ir.Name
            and cond.left.id.startswith("__")
            and cond.right.id.startswith("__")
        ):
            continue
        counter, stop = cond.left.id, cond.right.id
        cdefs, sdefs = defs.get(counter, []), defs.get(stop, [])
        if len(cdefs) != 2 or len(sdefs) != 1:
            continue
        start = _start_const(cdefs[0])
        step = cdefs[1]
        if start is None or start < 0:
            continue
        if not (
            type(step) is ir.Binary
            and step.op == "+"
            and type(step.left) is ir.Name
            and step.left.id == counter
            and _int_const(step.right) == 1
        ):
            continue
        body = act_ir.blocks[t.if_true]  # type: ignore[union-attr]
        if not body.stmts:
            continue
        first = body.stmts[0]
        if not (
            type(first) is ir.Assign
            and type(first.value) is ir.Name
            and first.value.id == counter
            and assigns[first.target] == 1
            and first.target not in params
        ):
            continue
        s = sdefs[0]
        limit = _int_const(s)
        if limit is not None:
            if limit >= 0:
                facts[block.id] = RangeFact(block.id, first.target, counter, stop, None, 0, limit)
            continue
        if (
            type(s) is ir.Dim
            and isinstance(params.get(s.array), ArrayType)
            and assigns[s.array] == 0
        ):
            facts[block.id] = RangeFact(block.id, first.target, counter, stop, s.array, s.axis, None)
    return facts


def proves(fact: RangeFact | None, array: str, dims: tuple, axis: int) -> bool:
    """True when ``fact`` shows that its variable indexes axis ``axis`` of ``array`` (dims ``dims``)."""
    if fact is None:
        return False
    if fact.array is not None:
        return fact.array == array and fact.axis == axis
    d = dims[axis]
    return isinstance(d, int) and fact.limit is not None and fact.limit <= d


def const_in_range(index: object, dims: tuple, axis: int) -> bool:
    """True for an integer literal index inside a dimension of static size (``buf[0]``)."""
    v = _int_const(index)
    d = dims[axis]
    return v is not None and isinstance(d, int) and 0 <= v < d
