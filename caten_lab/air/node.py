"""A single AIR node: an op, the values it writes, what it reads, and its typed attributes."""

from __future__ import annotations

import itertools
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.infer import infer_type
from caten_lab.air.ops import OPS, attrs_items, make_attrs, spec_of
from caten_lab.air.value import Value, is_value
from caten_lab.errors import AirError

__all__ = ["Literal", "Node", "Read", "Value", "is_value", "make_node", "reserve_node_ids"]

Literal = int | float | bool
Read = Value | int | float | bool  # a value id or a literal scalar

_node_ids = itertools.count(1)


def reserve_node_ids(upto: int) -> None:
    """Make sure fresh node ids are greater than ``upto`` (after loading nodes with explicit ids)."""
    global _node_ids
    nxt = next(_node_ids)
    _node_ids = itertools.count(max(nxt, upto + 1))


class Node:
    """One operation. ``shape``/``dtype`` describe the value ``out`` it writes.

    Every AIR op writes exactly one value, held in the ``out`` slot rather than a one-element
    tuple: one object less per node, and the hottest field of every pass is one attribute load.
    ``source`` is the user's ``file:line`` that created the node, for error messages and the notebook.
    """

    __slots__ = ("id", "op", "out", "reads", "attrs", "dtype", "shape", "source")

    def __init__(
        self,
        op: str,
        writes: tuple[Value, ...],
        reads: list[Read],
        attrs: Any,
        dtype: DType,
        shape: tuple,
        source: str | None = None,
        id: int | None = None,
    ) -> None:
        self.id = next(_node_ids) if id is None else id
        self.op = op
        if len(writes) == 1:
            self.out = writes[0]
        else:
            self.writes = writes  # () -> no value yet; more than one: refused there
        self.reads = reads
        self.attrs = attrs
        self.dtype = dtype
        self.shape = shape
        self.source = source

    @property
    def writes(self) -> tuple[Value, ...]:
        """``(out,)``; ``()`` for a node whose value is not assigned yet."""
        return () if self.out is None else (self.out,)

    @writes.setter
    def writes(self, values: tuple[Value, ...]) -> None:
        if len(values) > 1:
            raise AirError(
                f"node {self.id} ({self.op}) would write {len(values)} values: an AIR node writes one",
                hint="split it into one node per value",
            )
        self.out = values[0] if values else None

    def value_reads(self) -> list[Value]:
        return [r for r in self.reads if r.__class__ is Value]  # type: ignore[misc]

    def copy(self) -> Node:
        c = Node.__new__(Node)
        c.id, c.op, c.out, c.reads = self.id, self.op, self.out, list(self.reads)
        c.attrs, c.dtype, c.shape, c.source = self.attrs, self.dtype, self.shape, self.source
        return c

    def __repr__(self) -> str:
        args = ", ".join(repr(r) for r in self.reads)
        attrs = ", ".join(f"{k}={_fmt(v)}" for k, v in attrs_items(self.attrs))
        inner = ", ".join(x for x in (args, attrs) if x)
        shape = ", ".join(str(d) for d in self.shape)
        return f"{self.out} = {self.op}({inner}) : {self.dtype.value}[{shape}]"


def _fmt(v: Any) -> str:
    if isinstance(v, DType):
        return v.value
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    return repr(v) if isinstance(v, str) else str(v)


def make_node(
    op: str,
    reads: list[Read],
    attrs: dict[str, Any] | None = None,
    *,
    writes: tuple[Value, ...],
    read_types: list[tuple[tuple, DType] | None],
    source: str | None = None,
) -> Node:
    """Validate and build a node. ``read_types[i]`` is (shape, dtype) of read i, or None for a literal.

    Rejects an unknown op, unknown/missing/ill-typed attributes, a wrong operand count and operand
    types that do not fit, each with an AirError naming the op and what is accepted.
    """
    spec = OPS.get(op) or spec_of(op)
    if len(reads) != spec.n_reads:
        raise AirError(
            f"op {op!r} takes {spec.n_reads} operand(s), got {len(reads)}: {reads!r}",
            where=source,
            hint=f"{op!r}: {spec.doc}",
        )
    for r in reads:
        if r.__class__ not in _READ_TYPES and (isinstance(r, str) or not isinstance(r, (int, float, bool))):
            raise AirError(
                f"op {op!r}: operand {r!r} ({type(r).__name__}) is neither a value id nor a scalar literal",
                where=source,
                hint="operands are value ids (Value, returned by Graph.insert) or Python int/float/bool",
            )
    a = make_attrs(op, attrs) if attrs else make_attrs(op, {})
    shape, dtype = infer_type(op, a, reads, read_types, source)
    return Node(op, writes, list(reads), a, dtype, shape, source)


_READ_TYPES = frozenset({Value, int, float, bool})
