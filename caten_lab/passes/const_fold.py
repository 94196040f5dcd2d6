"""Constant folding: an elementwise op, cast or reduction whose operands are all constants becomes a const.

The value is computed by the reference interpreter on 0-d operands, so it is bit-identical to what the
interpreter would compute element by element (same dtype, same wrap-around, same NaN/inf behaviour).
Integer consts holding symbolic values fold through add/mul/neg/max symbolically.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten_lab.air.interpreter import run_node
from caten_lab.air.node import Node
from caten_lab.air.ops import ELEMENTWISE
from caten_lab.air.rewriter import Match, Pat, Rule
from caten_lab.air.symbolic import Expr, smax
from caten_lab.air.value import Value
from caten_lab.passes.base import RewritePass
from caten_lab.passes.fold_views import VIEW_OF_CONST
from caten_lab.passes.values import NOT_CONST, fill, is_concrete, known_value, reads_only_constants


def fold_scalar(node: Node, operands: list[Any], operand_dtypes: list[Any]) -> Any:
    """``node``'s op on scalar operands, as the interpreter computes it; a Python scalar of node's dtype."""
    args = [np.asarray(v, dtype=dt.np) if dt is not None else v for v, dt in zip(operands, operand_dtypes)]
    shadow = Node(node.op, node.writes, list(node.reads), node.attrs, node.dtype, (), node.source, id=node.id)
    return run_node(shadow, args, {}, {}).item()


_SYMBOLIC_OPS = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "max": smax,
}


def _fold_elementwise(m: Match) -> str | None:
    g, n = m.graph, m.root
    values = [known_value(g, r) for r in n.reads]
    if any(v is NOT_CONST for v in values):
        return None
    if n.op == "check_index" and not (is_concrete(values[0]) and isinstance(n.attrs.size, int)
                                      and 0 <= values[0] < n.attrs.size):
        return None  # an index out of range (or not known to be in range) is checked when the program runs
    if all(is_concrete(v) for v in values):
        dtypes = [g.type_of(r)[1] if isinstance(r, Value) else None for r in n.reads]  # type: ignore[index]
        return fill(g, n, fold_scalar(n, values, dtypes))
    # symbolic integer arithmetic
    if not n.dtype.is_int or not all(isinstance(v, (int, Expr)) and not isinstance(v, bool) for v in values):
        return None
    if n.op == "neg":
        return fill(g, n, -values[0])
    if n.op == "cast":
        return fill(g, n, values[0])
    fn = _SYMBOLIC_OPS.get(n.op)
    return fill(g, n, fn(values[0], values[1])) if fn is not None else None


def _fold_reduce(m: Match) -> str | None:
    g, n = m.graph, m.root
    c = m.node("c")
    assert c is not None
    value = c.attrs.value
    sizes = [c.shape[a] for a in n.attrs.axes]
    if not all(isinstance(d, int) for d in sizes):
        return None
    count = int(np.prod(sizes)) if sizes else 1
    if count == 0:
        return None
    if isinstance(value, Expr):  # symbolic int: max keeps it, a sum multiplies it
        return fill(g, n, value if n.attrs.op == "max" else value * count) if n.dtype.is_int else None
    if not is_concrete(value):
        return None
    if n.attrs.op == "max" or count == 1:
        return fill(g, n, value)
    if n.dtype.is_float and value != 0:
        return None  # a float sum is rounded step by step; only exact cases fold
    if n.dtype.value == "bool":
        return fill(g, n, value)  # add on bool is logical or
    if n.dtype.is_float:
        return fill(g, n, value)  # 0.0 (either sign) summed stays itself
    with np.errstate(over="ignore"):  # wraps exactly like the interpreter's sum in this dtype
        total = np.array(value).astype(n.dtype.np) * np.array(count).astype(n.dtype.np)
    return fill(g, n, total.item())


FOLD_ELEMENTWISE = Rule(
    "fold elementwise op of consts", Pat(ELEMENTWISE, where=reads_only_constants), _fold_elementwise
)
FOLD_REDUCE = Rule("fold reduce of const", Pat("reduce", [Pat("const", name="c")]), _fold_reduce)

CONST_FOLD_RULES = [FOLD_ELEMENTWISE, FOLD_REDUCE, VIEW_OF_CONST]


def const_fold_pass() -> RewritePass:
    return RewritePass(
        "const_fold", "fold ops, casts and reductions whose operands are all constants", CONST_FOLD_RULES
    )
