"""Common-subexpression elimination by hash-consing in one topological sweep (O(N + E)).

Two nodes are the same computation when they have the same op, attributes, type and operands
(operands of commutative ops in a canonical order). ``allocate`` (distinct buffers) and ``store``
(a write with in-place meaning once compiled) are never merged. Float literals and const values
are compared by ``repr`` so ``0.0`` and ``-0.0`` stay distinct.
"""

from __future__ import annotations

from typing import Any

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.rewriter import Rewrite
from caten_lab.air.value import Value
from caten_lab.passes.base import FunctionPass, PassContext
from caten_lab.passes.values import topological_nodes

COMMUTATIVE = frozenset({"add", "mul", "max", "and", "or", "xor", "ne"})
NEVER_MERGED = frozenset({"allocate", "store"})


def _freeze(v: Any) -> Any:
    if isinstance(v, float):
        return ("float", repr(v))
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    return v


def node_key(n: Node) -> tuple:
    """What makes two nodes interchangeable."""
    reads: tuple = tuple(n.reads)
    if not all(r.__class__ is Value for r in reads):
        reads = tuple(r if r.__class__ is Value else _freeze(r) for r in reads)
    if len(reads) == 2 and n.op in COMMUTATIVE:
        a, b = reads
        if (b < a) if (a.__class__ is Value and b.__class__ is Value) else (repr(b) < repr(a)):
            reads = (b, a)
    op = n.op
    # attrs objects are frozen dataclasses (hashable, compared by value); only const's scalar value
    # needs care, because 0.0 == -0.0 and 1 == 1.0 == True
    attrs = (n.attrs, _freeze(n.attrs.value)) if op == "const" else n.attrs
    return (op, attrs, n.dtype, n.shape, reads)


def eliminate_common_subexpressions(g: Graph, record: list[Rewrite] | None = None) -> int:
    """Merge duplicate nodes into their first occurrence; returns how many were removed."""
    seen: dict[tuple, Node] = {}
    merged = 0
    for n in topological_nodes(g):
        if n.op in NEVER_MERGED:
            continue
        key = node_key(n)
        first = seen.get(key)
        if first is None:
            seen[key] = n
            continue
        g.replace_uses(n.out, first.out)
        g.remove(n.id)
        merged += 1
        if record is not None:
            record.append(
                Rewrite(
                    rule=f"cse: {n.op}",
                    location="cse.py",
                    matched=[n.id, first.id],
                    produced=[],
                    replaced=(n.out, first.out),
                    removed=[n.id],
                    version=g.version,
                )
            )
    return merged


def _run(g: Graph, ctx: PassContext) -> Graph:
    eliminate_common_subexpressions(g, ctx.rewrites)
    return g


def cse_pass() -> FunctionPass:
    return FunctionPass("cse", "merge nodes computing the same thing (hash-consing, one sweep)", _run)
