"""The primitive AIR op set: one typed, slotted attribute class per op, registered by name.

Every op is declared here once, with its operand count, category and attributes. Anything richer
(sub, div, exp, softmax, matmul, ...) is built from these by the frontend.

Semantics (all elementwise ops need operands of identical shape; a literal read is a scalar):

- arithmetic: ``add mul neg recip idiv mod max``  (idiv/mod truncate toward zero, as C does)
- math:       ``exp2 log2 sin sqrt``
- logic:      ``and or xor not``                  (bitwise on ints, logical on bools)
- compare:    ``lt ne``                           (output bool)
- select:     ``where(cond, a, b)``
- ``cast``    converts the element type
- buffers:    ``allocate`` (a named external buffer: input, weight or state; or fresh scratch),
              ``const`` (fill a shape with one scalar, possibly symbolic),
              ``view`` (shape/strides/offset/mask over the contiguous storage of its operand;
              stride 0 broadcasts, a mask pads with zeros),
              ``store`` (write ``src`` into a strided window of ``dst``; yields the new ``dst``),
              ``index`` (the coordinate along one axis: the "index components" arange)
- reductions: one explicit op, ``reduce(x)`` with ``op`` in {add, max} over ``axes``. Reduced axes
  stay as size 1 (keepdim), so a reduction never changes rank; the frontend reshapes. An explicit
  op (rather than a flag on binary ops) keeps patterns and fusion rules simple to read.
- quantized matmul (a weight kept in its GGUF blocks, as llama.cpp runs it; the arithmetic is
  :mod:`caten_lab.formats.act_quant`): ``quant_rows(x)`` quantizes each row (last axis) of a float32
  tensor into 8-bit blocks of ``block`` values (uint8 bytes); ``quant_matmul(xq, w)`` multiplies those
  rows with the (``n``, ``k``) weight whose bytes (type ``wtype``) are the 1-d ``w``: ``(..., n)``
  float32. Integer block dot products, not a sum of products: no other op can say it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from caten_lab.air.dtypes import DType, to_dtype
from caten_lab.air.symbolic import Dim, Expr
from caten_lab.air.value import Value
from caten_lab.errors import AirError

# ---- attribute value kinds ----------------------------------------------------------------


class AttrKind:
    """How one attribute value is checked and normalized; ``accepted`` is shown in errors."""

    accepted: ClassVar[str] = "?"

    @staticmethod
    def check(v: Any) -> Any:  # returns the normalized value or raises ValueError
        raise NotImplementedError


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v.__class__ is not Value


def _is_dim(v: Any) -> bool:
    return _is_int(v) or isinstance(v, Expr)


class IntK(AttrKind):
    accepted = "an int"

    @staticmethod
    def check(v: Any) -> int:
        if not _is_int(v):
            raise ValueError
        return v


class StrK(AttrKind):
    accepted = "a str"

    @staticmethod
    def check(v: Any) -> str:
        if not isinstance(v, str):
            raise ValueError
        return v


class OptStrK(AttrKind):
    accepted = "a str or None"

    @staticmethod
    def check(v: Any) -> str | None:
        if v is not None and not isinstance(v, str):
            raise ValueError
        return v


class BoolK(AttrKind):
    accepted = "a bool"

    @staticmethod
    def check(v: Any) -> bool:
        if not isinstance(v, bool):
            raise ValueError
        return v


class DTypeK(AttrKind):
    accepted = "a DType (e.g. dtypes.float32) or its name"

    @staticmethod
    def check(v: Any) -> DType:
        if isinstance(v, bool) or v is None:
            raise ValueError
        return to_dtype(v)


class DimK(AttrKind):
    accepted = "an int or a symbolic dimension (Sym)"

    @staticmethod
    def check(v: Any) -> Dim:
        if not _is_dim(v):
            raise ValueError
        return v


class ShapeK(AttrKind):
    accepted = "a tuple of ints or symbolic dimensions"

    @staticmethod
    def check(v: Any) -> tuple:
        if v.__class__ is not tuple:
            if not isinstance(v, (tuple, list)):
                raise ValueError
            v = tuple(v)
        for d in v:
            if d.__class__ is not int and not _is_dim(d):  # fast path: plain ints
                raise ValueError
        return v


class AxesK(AttrKind):
    accepted = "a tuple of non-negative ints"

    @staticmethod
    def check(v: Any) -> tuple:
        if not isinstance(v, (tuple, list)) or not all(_is_int(a) and a >= 0 for a in v):
            raise ValueError
        return tuple(v)


class MaskK(AttrKind):
    accepted = "None or a tuple of (lo, hi) pairs of ints/symbolic dims, one per axis"

    @staticmethod
    def check(v: Any) -> tuple | None:
        if v is None:
            return None
        if not isinstance(v, (tuple, list)):
            raise ValueError
        out = []
        for p in v:
            if not isinstance(p, (tuple, list)) or len(p) != 2 or not all(_is_dim(x) for x in p):
                raise ValueError
            out.append((p[0], p[1]))
        return tuple(out)


class ScalarK(AttrKind):
    accepted = "an int, float, bool or symbolic dimension"

    @staticmethod
    def check(v: Any) -> Any:
        if not isinstance(v, (int, float, bool, Expr)):
            raise ValueError
        return v


class ReduceOpK(AttrKind):
    accepted = "'add' or 'max'"

    @staticmethod
    def check(v: Any) -> str:
        if v not in ("add", "max"):
            raise ValueError
        return v


# ---- the registry -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OpSpec:
    """What AIR knows about one op."""

    name: str
    attrs_cls: type
    n_reads: int
    category: str  # "unary" | "binary" | "ternary" | "reduce" | "buffer" | "quant"
    doc: str
    kinds: dict[str, type[AttrKind]]
    defaults: dict[str, Any]


OPS: dict[str, OpSpec] = {}


def _register(name: str, n_reads: int, category: str, doc: str, fields: dict[str, Any]) -> type:
    """Declare an op and generate its slotted attribute class.

    ``fields`` maps attribute name to an AttrKind, or to ``(AttrKind, default)``.
    """
    kinds: dict[str, type[AttrKind]] = {}
    defaults: dict[str, Any] = {}
    dc_fields: list[Any] = []
    for fname, spec in fields.items():
        kind, default = spec if isinstance(spec, tuple) else (spec, dataclasses.MISSING)
        kinds[fname] = kind
        if default is not dataclasses.MISSING:
            defaults[fname] = default
            dc_fields.append((fname, Any, dataclasses.field(default=default)))
        else:
            dc_fields.append((fname, Any))
    cls_name = "".join(p.capitalize() for p in name.split("_")) + "Attrs"
    cls = dataclasses.make_dataclass(cls_name, dc_fields, slots=True, frozen=True, eq=True)
    cls.__doc__ = f"Attributes of AIR op {name!r}: {doc}"
    cls.__module__ = __name__
    globals()[cls_name] = cls
    OPS[name] = OpSpec(name, cls, n_reads, category, doc, kinds, defaults)
    return cls


UNARY = ("neg", "recip", "exp2", "log2", "sin", "sqrt", "not")
BINARY = ("add", "mul", "idiv", "mod", "max", "and", "or", "xor", "lt", "ne")
COMPARE = ("lt", "ne")
ELEMENTWISE = (*UNARY, *BINARY, "where", "cast", "check_index")

_UNARY_DOCS = {
    "neg": "-x",
    "recip": "1/x",
    "exp2": "2**x",
    "log2": "log2(x)",
    "sin": "sin(x)",
    "sqrt": "sqrt(x)",
    "not": "logical not (bool) or bitwise not (int)",
}
_BINARY_DOCS = {
    "add": "a + b",
    "mul": "a * b",
    "idiv": "integer a / b, truncating toward zero",
    "mod": "integer remainder with the sign of a (C %)",
    "max": "max(a, b)",
    "and": "a & b",
    "or": "a | b",
    "xor": "a ^ b",
    "lt": "a < b (bool)",
    "ne": "a != b (bool)",
}
for _n in UNARY:
    _register(_n, 1, "unary", _UNARY_DOCS[_n], {})
for _n in BINARY:
    _register(_n, 2, "binary", _BINARY_DOCS[_n], {})
_register("where", 3, "ternary", "cond ? a : b", {})
_register("cast", 1, "unary", "convert element type", {"dtype": DTypeK})
_register(
    "check_index",
    1,
    "unary",
    "an integer index, unchanged; one outside [0, size) stops the program (safety >= 1; gather, x[ids])",
    {"size": DimK},
)
_register("reduce", 1, "reduce", "reduce over axes, keeping them as size 1", {"op": ReduceOpK, "axes": AxesK})
_register(
    "allocate",
    0,
    "buffer",
    "a buffer: named (bound at run time: an input, weight or state) or fresh scratch",
    {"shape": ShapeK, "dtype": DTypeK, "name": (OptStrK, None)},
)
_register(
    "const",
    0,
    "buffer",
    "a shape filled with one scalar",
    {"value": ScalarK, "shape": ShapeK, "dtype": DTypeK},
)
_register(
    "view",
    1,
    "buffer",
    "a strided window over the operand's contiguous storage (stride 0 broadcasts, mask pads with 0)",
    {"shape": ShapeK, "strides": ShapeK, "offset": (DimK, 0), "mask": (MaskK, None)},
)
_register(
    "store",
    2,
    "buffer",
    "write src into a strided window of dst, yielding the updated dst (in place once compiled)",
    {"shape": ShapeK, "strides": ShapeK, "offset": (DimK, 0)},
)
_register(
    "quant_rows",
    1,
    "quant",
    "each row (last axis) of a float32 tensor as 8-bit blocks of `block` (32 or 256) values: uint8 bytes",
    {"block": IntK},
)
_register(
    "quant_matmul",
    2,
    "quant",
    "rows quantized by quant_rows times the (n, k) weight whose GGUF bytes of type `wtype` are w, transposed",
    {"wtype": StrK, "n": IntK, "k": IntK},
)
_register(
    "index",
    0,
    "buffer",
    "the coordinate along `axis` of each element",
    {"shape": ShapeK, "axis": IntK, "dtype": DTypeK},
)


def spec_of(op: str) -> OpSpec:
    try:
        return OPS[op]
    except KeyError:
        raise AirError(
            f"unknown AIR op {op!r}",
            hint=f"accepted ops: {', '.join(sorted(OPS))}",
        ) from None


def make_attrs(op: str, attrs: dict[str, Any]) -> Any:
    """Validate ``attrs`` for ``op`` and build its attribute object (AirError on any mistake)."""
    if not attrs:
        shared = _NO_ATTRS.get(op)
        if shared is not None:  # attribute-less op: one shared (frozen) instance
            return shared
    spec = spec_of(op)
    for key in attrs:
        if key not in spec.kinds:
            known = ", ".join(spec.kinds) or "none"
            raise AirError(f"op {op!r} has no attribute {key!r}", hint=f"attributes of {op!r}: {known}")
    values = {}
    for key, kind in spec.kinds.items():
        if key not in attrs:
            if key in spec.defaults:
                values[key] = spec.defaults[key]
                continue
            raise AirError(f"op {op!r} is missing attribute {key!r}", hint=f"{key!r} must be {kind.accepted}")
        try:
            values[key] = kind.check(attrs[key])
        except ValueError:
            raise AirError(
                f"op {op!r}: attribute {key!r} = {attrs[key]!r} has the wrong type",
                hint=f"{key!r} must be {kind.accepted}",
            ) from None
    return spec.attrs_cls(**values)


_NO_ATTRS: dict[str, Any] = {name: spec.attrs_cls() for name, spec in OPS.items() if not spec.kinds}


def attrs_items(attrs: Any) -> tuple[tuple[str, Any], ...]:
    """The attribute (name, value) pairs in declaration order."""
    return tuple((f, getattr(attrs, f)) for f in attrs.__slots__)


def attrs_as_dict(attrs: Any) -> dict[str, Any]:
    return dict(attrs_items(attrs))


def op_names() -> list[str]:
    return sorted(OPS)


Builder = Callable[..., Any]
