"""Small helpers the graph passes share: reading constant operands and materializing replacements."""

from __future__ import annotations

import math
from contextvars import ContextVar
from typing import Any

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node, Read
from caten_lab.air.shapes import contiguous_strides, numel
from caten_lab.air.symbolic import Expr
from caten_lab.air.value import Value

_NO = object()

# The graph a RewritePass is rewriting, so node-level pattern guards (``Pat(where=...)`` sees only the
# node) can look at operands' producers and reject a node cheaply. Unset, every guard says "maybe".
REWRITING: ContextVar[Graph | None] = ContextVar("caten_lab_rewriting_graph", default=None)


def reads_a_constant(node: Node) -> bool:
    """Guard: some operand is a literal or a ``const`` node (True when the graph is unknown)."""
    g = REWRITING.get()
    if g is None:
        return True
    for r in node.reads:
        if r.__class__ is not Value:
            return True
        p = g.producer_of(r)  # type: ignore[arg-type]
        if p is not None and p.op == "const":
            return True
    return False


def reads_only_constants(node: Node) -> bool:
    """Guard: every operand is a literal or a ``const`` node (True when the graph is unknown)."""
    g = REWRITING.get()
    if g is None:
        return True
    for r in node.reads:
        if r.__class__ is Value:
            p = g.producer_of(r)  # type: ignore[arg-type]
            if p is None or p.op != "const":
                return False
    return True


def known_value(g: Graph, read: Read) -> Any:
    """The scalar a read always holds (a literal, or the value of a ``const`` node), else ``NOT_CONST``."""
    if not isinstance(read, Value):
        return read
    n = g.producer_of(read)
    if n is not None and n.op == "const":
        return n.attrs.value
    return _NO


NOT_CONST = _NO


def is_concrete(v: Any) -> bool:
    """A plain Python scalar (not a symbolic Expr, not NOT_CONST)."""
    return isinstance(v, (int, float, bool))


def is_positive_zero(v: Any) -> bool:
    """True for 0, False and +0.0 (a mask pads with +0, so only these equal the padding)."""
    if isinstance(v, float):
        return v == 0.0 and math.copysign(1.0, v) > 0
    return isinstance(v, (int, bool)) and v == 0


def fill(g: Graph, like: Node, value: Any) -> str:
    """A ``const`` of ``like``'s shape and dtype holding ``value`` (cast to a matching Python type)."""
    dt = like.dtype
    if not isinstance(value, Expr):
        value = bool(value) if dt.value == "bool" else float(value) if dt.is_float else int(value)
    return g.insert("const", [], value=value, shape=like.shape, dtype=dt, source=like.source)


def as_value(g: Graph, read: Read, like: Node) -> str:
    """``read`` itself when it is a value; a literal becomes a ``const`` shaped like ``like``."""
    return read if isinstance(read, Value) else fill(g, like, read)


def same_dim(a: Any, b: Any) -> bool:
    """Equality of two dims (int or Expr) without ever comparing an Expr to an int by order."""
    if isinstance(a, Expr) or isinstance(b, Expr):
        return isinstance(a, Expr) and isinstance(b, Expr) and a == b
    return a == b


def is_contiguous(shape: tuple, strides: tuple) -> bool:
    """Strides are row-major for ``shape`` (axes of size 1 may have any stride)."""
    if len(shape) != len(strides):
        return False
    for d, s, c in zip(shape, strides, contiguous_strides(shape)):
        if isinstance(d, int) and d == 1:
            continue
        if not same_dim(s, c):
            return False
    return True


def is_reshape(shape: tuple, strides: tuple, offset: Any, mask: Any, operand_shape: tuple) -> bool:
    """A view window that reads all of its (contiguous) operand's storage in order, under another shape: a
    pure reshape (row-major strides, offset 0, no mask, the same element count)."""
    return (mask is None and isinstance(offset, int) and offset == 0 and is_contiguous(tuple(shape), tuple(strides))
            and same_dim(numel(tuple(shape)), numel(tuple(operand_shape))))


def topological_nodes(g: Graph) -> list[Node]:
    """The nodes producers-first: insertion order when it already is (one cheap check), else a sort."""
    nodes = g.nodes
    defined: set[str] = set()
    add = defined.add
    for n in nodes:
        for r in n.reads:
            if r.__class__ is Value and r not in defined:
                return g.toposort()
        add(n.out)
    return nodes
