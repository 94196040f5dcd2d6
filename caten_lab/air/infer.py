"""Shape and dtype rules of the primitive ops: the result type of a node from its operands' types."""

from __future__ import annotations

from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.ops import COMPARE, OPS
from caten_lab.errors import AirError

Type = tuple[tuple, DType]


def _literal_dtype(v: Any) -> DType:
    if isinstance(v, bool):
        return DType.bool
    if isinstance(v, int):
        return DType.int64
    return DType.float32


def _fmt_shape(s: tuple) -> str:
    return "(" + ", ".join(str(d) for d in s) + ")"


def infer_type(op: str, attrs: Any, reads: list, read_types: list[Type | None], source: str | None) -> Type:
    """Result (shape, dtype) of ``op``; AirError when operand shapes/dtypes do not fit."""
    cat = OPS[op].category
    if cat == "buffer":
        if op == "view":
            return attrs.shape, _need(op, read_types, 0, source)[1]
        if op == "store":
            dst = _need(op, read_types, 0, source)
            src = read_types[1]
            if src is not None and tuple(src[0]) != tuple(attrs.shape):
                raise AirError(
                    f"store: source shape {_fmt_shape(src[0])} does not match the window shape {_fmt_shape(attrs.shape)}",
                    where=source,
                )
            return dst
        return attrs.shape, attrs.dtype
    if cat == "reduce":
        shape, dtype = _need(op, read_types, 0, source)
        for ax in attrs.axes:
            if ax >= len(shape):
                raise AirError(f"reduce: axis {ax} is out of range for shape {_fmt_shape(shape)}", where=source)
        return tuple(1 if i in attrs.axes else d for i, d in enumerate(shape)), dtype
    # elementwise: every value operand has the same shape; literals are scalars
    tensor_types = [t for t in read_types if t is not None]
    if not tensor_types:
        raise AirError(f"op {op!r} needs at least one value operand, got only literals {reads!r}", where=source)
    shape = tensor_types[0][0]
    for t in tensor_types[1:]:
        if tuple(t[0]) != tuple(shape):
            shapes = ", ".join(_fmt_shape(x[0]) for x in tensor_types)
            raise AirError(
                f"op {op!r}: operand shapes differ: {shapes}",
                where=source,
                hint="elementwise AIR ops need equal shapes; broadcast with a view (stride 0) first",
            )
    if op == "cast":
        return shape, attrs.dtype
    if op == "where":
        cond = read_types[0]
        if cond is not None and cond[1] != DType.bool:
            raise AirError(f"where: condition must be bool, got {cond[1].value}", where=source)
        arms = [t for t in read_types[1:] if t is not None]
        dtype = arms[0][1] if arms else _literal_dtype(reads[1])
        if any(t[1] != dtype for t in arms):
            raise AirError(f"where: branches have different dtypes {[t[1].value for t in arms]}", where=source)
        return shape, dtype
    dtype = tensor_types[0][1]
    if any(t[1] != dtype for t in tensor_types):
        raise AirError(
            f"op {op!r}: operand dtypes differ: {[t[1].value for t in tensor_types]}",
            where=source,
            hint="cast one operand first",
        )
    if op in ("idiv", "mod") and dtype.is_float:
        raise AirError(f"op {op!r} is integer-only, got {dtype.value}", where=source)
    if op in ("exp2", "log2", "sin", "sqrt", "recip") and not dtype.is_float:
        raise AirError(f"op {op!r} needs a float operand, got {dtype.value}", where=source, hint="cast to float32 first")
    if op in ("and", "or", "xor", "not") and dtype.is_float:
        raise AirError(f"op {op!r} needs bool or int operands, got {dtype.value}", where=source)
    if op in COMPARE:
        return shape, DType.bool
    return shape, dtype


def _need(op: str, read_types: list[Type | None], i: int, source: str | None) -> Type:
    t = read_types[i]
    if t is None:
        raise AirError(f"op {op!r}: operand {i} must be a value, not a literal", where=source)
    return t
