"""Shape/dtype inference check: re-derive every node's type from its operands and report disagreements.

Besides the op rules of :mod:`caten_lab.air.infer`, it checks what inference does not: attribute
ranks (a view's strides and mask match its shape), non-negative concrete dims, unique reduce axes,
and that a view with concrete sizes only reads inside its operand's storage. Symbolic dims are
compared as canonical polynomials; the symbols the graph uses are stored in
``ctx.artifacts["graph_symbols"]``. One ShapeError lists every problem found.
"""

from __future__ import annotations

from caten_lab.air.graph import Graph
from caten_lab.air.infer import infer_type
from caten_lab.air.node import Node
from caten_lab.air.symbolic import Expr
from caten_lab.air.value import Value
from caten_lab.errors import CatenError, ShapeError
from caten_lab.passes.base import FunctionPass, PassContext

MAX_REPORTED = 12


def _fmt_type(shape: tuple, dtype: object) -> str:
    return f"{dtype}[{', '.join(str(d) for d in shape)}]"


def _dims_ok(shape: tuple) -> bool:
    return all(
        isinstance(d, Expr) or (isinstance(d, int) and not isinstance(d, bool) and d >= 0) for d in shape
    )


def _window_problem(a: object, storage_shape: tuple, mask: tuple | None, what: str) -> str | None:
    """A strided window (view or store) must stay inside its storage; only concrete sizes are checked."""
    shape, strides, offset = a.shape, a.strides, a.offset  # type: ignore[attr-defined]
    rank = len(shape)
    if len(strides) != rank:
        return f"has {len(strides)} strides for a rank-{rank} shape"
    if mask is not None and len(mask) != rank:
        return f"has a mask of {len(mask)} axes for a rank-{rank} shape"
    size = 1
    for d in storage_shape:
        if d.__class__ is not int:
            return None  # symbolic: checked at run time by the safety levels
        size *= d
    lo = hi = offset
    if lo.__class__ is not int:
        return None
    for k in range(rank):
        d, s = shape[k], strides[k]
        if d.__class__ is not int or s.__class__ is not int:
            return None
        first, last = 0, d - 1
        if mask is not None:
            m_lo, m_hi = mask[k]
            if m_lo.__class__ is not int or m_hi.__class__ is not int:
                return None
            first, last = max(first, m_lo), min(last, m_hi - 1)
        if last < first:
            return None  # touches nothing
        if s >= 0:
            lo, hi = lo + first * s, hi + last * s
        else:
            lo, hi = lo + last * s, hi + first * s
    if lo < 0 or hi >= size:
        return f"{what} storage indices {lo}..{hi}, outside its operand's {size} elements"
    return None


def check_types(g: Graph) -> tuple[list[str], set[str]]:
    """Problems found (one line each) and the symbols used by the graph.

    Each node is checked against its operands' recorded types, so no sort is needed: if every node
    agrees with its operands, the whole graph is consistent. O(N + E).
    """
    problems: list[str] = []
    symbols: set[str] = set()
    seen_shapes: dict[tuple, bool] = {}  # shapes repeat a lot: validate each distinct one once
    producer_of = g.producer_of
    for n in g.nodes:
        shape_ok = seen_shapes.get(n.shape)
        if shape_ok is None:
            shape_ok = seen_shapes[n.shape] = _dims_ok(n.shape)
            for d in n.shape:
                if isinstance(d, Expr):
                    symbols |= d.symbols()
        if not shape_ok:
            problems.append(f"{_head(n)} has an invalid shape {n.shape}{_where(n)}")
            continue
        read_types: list = []
        for r in n.reads:
            if r.__class__ is Value:
                p = producer_of(r)  # type: ignore[arg-type]
                if p is None:
                    problems.append(f"{_head(n)} reads {r!r}, which no node writes{_where(n)}")
                    break
                read_types.append((p.shape, p.dtype))
            else:
                read_types.append(None)
        else:
            try:
                shape, dtype = infer_type(n.op, n.attrs, n.reads, read_types, n.source)
            except CatenError as exc:
                problems.append(f"{_head(n)}: {exc.message}{_where(n)}")
                continue
            if dtype != n.dtype or (shape != n.shape and tuple(shape) != tuple(n.shape)):
                problems.append(
                    f"{_head(n)} is recorded as {_fmt_type(n.shape, n.dtype.value)} but its operands give "
                    f"{_fmt_type(shape, dtype.value)}{_where(n)}"
                )
            op = n.op
            if op == "view" or op == "store":
                msg = _window_problem(
                    n.attrs,
                    read_types[0][0],
                    getattr(n.attrs, "mask", None),
                    "reads" if op == "view" else "writes",
                )
                if msg:
                    problems.append(f"{_head(n)} {msg}{_where(n)}")
            elif op == "reduce" and len(set(n.attrs.axes)) != len(n.attrs.axes):
                problems.append(f"{_head(n)} reduces an axis twice: axes={n.attrs.axes}{_where(n)}")
    for o in g.outputs:
        if producer_of(o) is None:
            problems.append(f"output {o!r} is not written by any node")
    return problems, symbols


def _head(n: Node) -> str:
    return f"node {n.id} ({n.op}, {n.out})"


def _where(n: Node) -> str:
    return f" (at {n.source})" if n.source else ""


def _run(g: Graph, ctx: PassContext) -> Graph:
    problems, symbols = check_types(g)
    ctx.artifacts["graph_symbols"] = sorted(symbols)
    if problems:
        more = len(problems) - MAX_REPORTED
        lines = problems[:MAX_REPORTED] + ([f"... and {more} more"] if more > 0 else [])
        raise ShapeError(
            f"type check found {len(problems)} problem(s):\n  " + "\n  ".join(lines),
            hint="a pass or the frontend built a node whose type or attributes disagree with its operands",
        )
    return g


def typecheck_pass() -> FunctionPass:
    return FunctionPass(
        "typecheck", "re-derive every node's shape and dtype (symbolic too) and check them", _run
    )
