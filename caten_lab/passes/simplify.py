"""Algebraic simplification: identities written as rewriter rules, applied to a fixed point.

Float semantics are IEEE by default. Rules that are only true up to rounding, NaN or infinities
(``x*0 -> 0``, ``x-x -> 0``, ``recip(recip x) -> x`` on floats) run only with ``fast_math=True``;
for ints and bools they are exact and always on. One deliberate exception: ``x + 0.0 -> x`` is
applied to floats too; it can only change the sign of a zero result (``-0.0 + 0.0`` is ``+0.0``),
and the two compare equal.

Besides the algebra, this pass also applies the view-folding and constant-folding rules
(:mod:`caten_lab.passes.fold_views`, :mod:`caten_lab.passes.const_fold`): a simplification often
exposes a fold and vice versa, and one joint fixed point leaves nothing for a second run.
"""

from __future__ import annotations

from caten_lab.air.node import Node
from caten_lab.air.rewriter import Match, Pat, Rule
from caten_lab.air.value import Value
from caten_lab.passes.base import RewritePass
from caten_lab.passes.const_fold import FOLD_ELEMENTWISE, FOLD_REDUCE
from caten_lab.passes.fold_views import IDENTITY_VIEW, VIEW_OF_CONST, VIEW_OF_VIEW
from caten_lab.passes.values import as_value, fill, reads_a_constant


def _not_float(n: Node) -> bool:
    return not n.dtype.is_float


def _is_int(n: Node) -> bool:
    return n.dtype.is_int


def _is_bool(n: Node) -> bool:
    return n.dtype.value == "bool"


def _signed_or_float(n: Node) -> bool:
    return n.dtype.value != "bool" and not n.dtype.is_unsigned


def _keep(name: str):  # noqa: ANN202 - returns a builder
    def build(m: Match) -> str:
        return as_value(m.graph, m[name], m.root)

    return build


def _const(value: object):  # noqa: ANN202 - returns a builder
    def build(m: Match) -> str:
        return fill(m.graph, m.root, value)

    return build


def _operand_dtype(m: Match, name: str):  # noqa: ANN202
    t = m.graph.type_of(m[name])
    return t[1] if t is not None else None


def _cast_same(m: Match) -> str | None:
    x = m["x"]
    return x if isinstance(x, Value) and _operand_dtype(m, "x") == m.root.dtype else None  # type: ignore[return-value]


# widening casts that convert back exactly
_LOSSLESS = {
    "bool": {"int8", "uint8", "int32", "uint32", "int64", "float16", "float32", "float64"},
    "int8": {"int32", "int64", "float16", "float32", "float64"},
    "uint8": {"int32", "uint32", "int64", "float16", "float32", "float64"},
    "int32": {"int64", "float64"},
    "uint32": {"int64", "float64"},
    "float16": {"float32", "float64"},
    "float32": {"float64"},
}


def _cast_roundtrip(m: Match) -> str | None:
    x = m["x"]
    inner = m.node("inner")
    src = _operand_dtype(m, "x")
    if not isinstance(x, Value) or inner is None or src is None or src != m.root.dtype:
        return None
    return x if inner.dtype.value in _LOSSLESS.get(src.value, ()) else None


def _neg(m: Match) -> str | None:
    x = m["x"]
    if not isinstance(x, Value):
        return None  # const_fold handles all-literal cases
    return m.graph.insert("neg", [x], source=m.root.source)


def _reduce_unit_axes(m: Match) -> str | None:
    """A max, or an integer or bool sum, over size-1 axes is its operand. A float sum is not quite: it
    starts at +0.0, so one -0.0 sums to +0.0 (the interpreter's and the C code's answer), and a
    ``recip`` after it would turn that sign into the sign of an infinity (found by the differential test)."""
    x = m["x"]
    t = m.graph.type_of(x)
    if t is None or not all(isinstance(t[0][a], int) and t[0][a] == 1 for a in m.root.attrs.axes):
        return None
    if m.root.attrs.op == "add" and m.root.dtype.is_float:
        return None
    return x  # type: ignore[return-value]


def _where_bool_select(m: Match) -> str | None:
    return m["c"] if isinstance(m["c"], Value) else None  # type: ignore[return-value]


def _where_not(m: Match) -> str | None:
    c = m["c"]
    return m.graph.insert("not", [c], source=m.root.source) if isinstance(c, Value) else None


def _ne_self(m: Match) -> str | None:
    dt = _operand_dtype(m, "x")
    if dt is not None and dt.is_float:
        return None  # NaN != NaN is true
    return fill(m.graph, m.root, False)


def _r(name: str, pat: Pat, build) -> Rule:  # noqa: ANN001
    """A rule; a pattern with a literal operand first checks cheaply that some operand is constant."""
    if pat.reads is not None and any(not isinstance(r, (str, Pat)) for r in pat.reads):
        pred = pat.where
        pat.where = reads_a_constant if pred is None else (lambda n: pred(n) and reads_a_constant(n))
    return Rule(name, pat, build)


SAFE_RULES = [
    # additive / multiplicative identities
    _r("x+0 -> x", Pat("add", ["x", 0], commutative=True, where=lambda n: not _is_bool(n)), _keep("x")),
    _r("x*1 -> x", Pat("mul", ["x", 1], commutative=True, where=lambda n: not _is_bool(n)), _keep("x")),
    _r("x*0 -> 0 (int)", Pat("mul", ["x", 0], commutative=True, where=_is_int), _const(0)),
    _r("x*-1 -> -x", Pat("mul", ["x", -1], commutative=True, where=_signed_or_float), _neg),
    _r("x+(-x) -> 0 (int)", Pat("add", ["x", Pat("neg", ["x"])], commutative=True, where=_is_int), _const(0)),
    _r("x//1 -> x", Pat("idiv", ["x", 1]), _keep("x")),
    _r("x%1 -> 0", Pat("mod", ["x", 1]), _const(0)),
    # bool logic (add is or, mul is and on bools)
    _r("x|false -> x", Pat(("add", "or", "xor"), ["x", False], commutative=True), _keep("x")),
    _r("x&true -> x", Pat(("mul", "and"), ["x", True], commutative=True), _keep("x")),
    _r("x&false -> false", Pat(("mul", "and"), ["x", False], commutative=True), _const(False)),
    _r("x|true -> true", Pat(("add", "or"), ["x", True], commutative=True), _const(True)),
    _r("x|x -> x (bool)", Pat(("add", "mul"), ["x", "x"], where=_is_bool), _keep("x")),
    # bitwise ints
    _r("x|0 -> x", Pat(("or", "xor"), ["x", 0], commutative=True, where=_is_int), _keep("x")),
    _r("x&0 -> 0", Pat("and", ["x", 0], commutative=True, where=_is_int), _const(0)),
    _r("x&x -> x", Pat(("and", "or", "max"), ["x", "x"]), _keep("x")),
    _r("x^x -> 0", Pat("xor", ["x", "x"]), _const(0)),
    # involutions
    _r("-(-x) -> x", Pat("neg", [Pat("neg", ["x"])]), _keep("x")),
    _r("not(not x) -> x", Pat("not", [Pat("not", ["x"])]), _keep("x")),
    # comparisons of a value with itself
    _r("x<x -> false", Pat("lt", ["x", "x"]), _const(False)),
    _r("x!=x -> false (int)", Pat("ne", ["x", "x"]), _ne_self),
    # max with the bottom element
    _r("max(x,-inf) -> x", Pat("max", ["x", float("-inf")], commutative=True), _keep("x")),
    # select
    _r("where(true,a,b) -> a", Pat("where", [True, "a", "b"]), _keep("a")),
    _r("where(false,a,b) -> b", Pat("where", [False, "a", "b"]), _keep("b")),
    _r("where(c,a,a) -> a", Pat("where", ["c", "a", "a"]), _keep("a")),
    _r("where(c,true,false) -> c", Pat("where", ["c", True, False]), _where_bool_select),
    _r("where(c,false,true) -> not c", Pat("where", ["c", False, True]), _where_not),
    # casts
    _r("cast(x) to its own dtype -> x", Pat("cast", ["x"]), _cast_same),
    _r(
        "cast(cast(x)) lossless round trip -> x",
        Pat("cast", [Pat("cast", ["x"], name="inner")]),
        _cast_roundtrip,
    ),
    # reductions over size-1 axes
    _r("reduce over size-1 axes -> x", Pat("reduce", ["x"]), _reduce_unit_axes),
    # views and constants, so the pass reaches one fixed point with what the rules above expose
    IDENTITY_VIEW,
    VIEW_OF_CONST,
    VIEW_OF_VIEW,
    FOLD_ELEMENTWISE,
    FOLD_REDUCE,
]


FAST_MATH_RULES = [
    _r("recip(recip x) -> x (fast-math)", Pat("recip", [Pat("recip", ["x"])]), _keep("x")),
    _r(
        "x*0 -> 0 (fast-math)",
        Pat("mul", ["x", 0], commutative=True, where=lambda n: n.dtype.is_float),
        _const(0),
    ),
    _r(
        "x+(-x) -> 0 (fast-math)",
        Pat("add", ["x", Pat("neg", ["x"])], commutative=True, where=lambda n: n.dtype.is_float),
        _const(0),
    ),
]


def simplify_rules(*, fast_math: bool = False) -> list[Rule]:
    return SAFE_RULES + (FAST_MATH_RULES if fast_math else [])


def simplify_pass(*, fast_math: bool = False) -> RewritePass:
    desc = "algebraic identities (x+0, x*1, -(-x), where(true,..), casts) plus view and const folding"
    return RewritePass(
        "simplify", desc + (" with fast-math" if fast_math else ""), simplify_rules(fast_math=fast_math)
    )
