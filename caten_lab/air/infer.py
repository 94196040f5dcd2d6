"""Shape and dtype rules of the primitive ops: the result type of a node from its operands' types."""

from __future__ import annotations

from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.ops import COMPARE, OPS
from caten_lab.errors import AirError, CatenError
from caten_lab.formats import act_quant, gguf_quant

Type = tuple[tuple, DType]

_FLOAT_ONLY = frozenset({"exp2", "log2", "sin", "sqrt", "recip"})
_INT_ONLY = frozenset({"idiv", "mod"})
_NOT_FLOAT = frozenset({"and", "or", "xor", "not"})
_COMPARE = frozenset(COMPARE)
_CATEGORY = {name: spec.category for name, spec in OPS.items()}


def _literal_dtype(v: Any) -> DType:
    if isinstance(v, bool):
        return DType.bool
    if isinstance(v, int):
        return DType.int64
    return DType.float32


def _fmt_shape(s: tuple) -> str:
    return "(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def infer_type(op: str, attrs: Any, reads: list, read_types: list[Type | None], source: str | None) -> Type:
    """Result (shape, dtype) of ``op``; AirError when operand shapes/dtypes do not fit."""
    cat = _CATEGORY[op]
    if cat == "buffer":
        return _buffer_type(op, attrs, read_types, source)
    if cat == "quant":
        return _quant_type(op, attrs, read_types, source)
    if cat == "reduce":
        shape, dtype = _need(op, read_types, 0, source)
        for ax in attrs.axes:
            if ax >= len(shape):
                raise AirError(
                    f"reduce: axis {ax} is out of range for shape {_fmt_shape(shape)}",
                    where=source,
                    hint=f"axes must be < the rank {len(shape)}",
                )
        return tuple(1 if i in attrs.axes else d for i, d in enumerate(shape)), dtype
    # elementwise: every value operand has the same shape; literals are scalars
    first: Type | None = None
    for t in read_types:
        if t is not None:
            if first is None:
                first = t
            elif t[0] != first[0] and tuple(t[0]) != tuple(first[0]):
                shapes = ", ".join(_fmt_shape(x[0]) for x in read_types if x is not None)
                raise AirError(
                    f"op {op!r}: operand shapes differ: {shapes}",
                    where=source,
                    hint="elementwise AIR ops need equal shapes; broadcast with a view (stride 0) first",
                )
    if first is None:
        raise AirError(
            f"op {op!r} needs at least one value operand, got only literals {reads!r}",
            where=source,
            hint="materialize a scalar with const(value, shape, dtype) first",
        )
    shape = first[0]
    if op == "cast":
        return shape, attrs.dtype
    if op == "where":
        cond = read_types[0]
        if cond is not None and cond[1] != DType.bool:
            raise AirError(f"where: condition must be bool, got {cond[1].value}", where=source)
        arms = [t for t in read_types[1:] if t is not None]
        dtype = arms[0][1] if arms else _literal_dtype(reads[1])
        if any(t[1] != dtype for t in arms):
            raise AirError(
                f"where: branches have different dtypes {[t[1].value for t in arms]}",
                where=source,
                hint="cast one branch first",
            )
        return shape, dtype
    dtype = first[1]
    for t in read_types:
        if t is not None and t[1] != dtype:
            raise AirError(
                f"op {op!r}: operand dtypes differ: {[x[1].value for x in read_types if x is not None]}",
                where=source,
                hint="cast one operand first",
            )
    if op == "check_index" and not dtype.is_int:
        raise AirError(f"op 'check_index' needs an integer operand, got {dtype.value}", where=source)
    if op in _INT_ONLY and dtype.is_float:
        raise AirError(f"op {op!r} is integer-only, got {dtype.value}", where=source)
    if op in _FLOAT_ONLY and not dtype.is_float:
        raise AirError(
            f"op {op!r} needs a float operand, got {dtype.value}", where=source, hint="cast to float32 first"
        )
    if op in _NOT_FLOAT and dtype.is_float:
        raise AirError(f"op {op!r} needs bool or int operands, got {dtype.value}", where=source)
    if op in _COMPARE:
        return shape, DType.bool
    return shape, dtype


def _buffer_type(op: str, attrs: Any, read_types: list[Type | None], source: str | None) -> Type:
    if op == "view":
        _check_rank(op, attrs, source)
        if attrs.mask is not None and len(attrs.mask) != len(attrs.shape):
            raise AirError(
                f"view: mask has {len(attrs.mask)} (lo, hi) pairs for a rank-{len(attrs.shape)} shape",
                where=source,
                hint="give one (lo, hi) pair per axis",
            )
        return attrs.shape, _need(op, read_types, 0, source)[1]
    if op == "store":
        _check_rank(op, attrs, source)
        dst = _need(op, read_types, 0, source)
        src = read_types[1]
        if src is not None and tuple(src[0]) != tuple(attrs.shape):
            raise AirError(
                f"store: source shape {_fmt_shape(src[0])} does not match the window shape "
                f"{_fmt_shape(attrs.shape)}",
                where=source,
            )
        return dst
    if op == "index" and not 0 <= attrs.axis < len(attrs.shape):
        raise AirError(
            f"index: axis {attrs.axis} is out of range for shape {_fmt_shape(attrs.shape)}",
            where=source,
            hint=f"axis must be in 0..{len(attrs.shape) - 1}",
        )
    return attrs.shape, attrs.dtype


def _quant_type(op: str, attrs: Any, read_types: list[Type | None], source: str | None) -> Type:
    """``quant_rows``: float32 (..., k) -> uint8 (..., row bytes); ``quant_matmul``: uint8 (..., row bytes)
    and a 1-d uint8/int8 weight of n * (its row bytes) -> float32 (..., n). Sizes of the quantized axes are
    static ints (block counts)."""
    try:
        if op == "quant_rows":
            shape, dtype = _need(op, read_types, 0, source)
            if dtype != DType.float32 or not shape or not isinstance(shape[-1], int):
                raise AirError(f"quant_rows: needs float32 rows of a static length, got {dtype.value}"
                               f"{_fmt_shape(shape)}", where=source)
            return (*shape[:-1], act_quant.act_row_bytes(shape[-1], attrs.block)), DType.uint8
        xs, xt = _need(op, read_types, 0, source)
        ws, wt = _need(op, read_types, 1, source)
        rb = act_quant.act_row_bytes(attrs.k, act_quant.act_block(attrs.wtype))
        if xt != DType.uint8 or not xs or xs[-1] != rb:
            raise AirError(f"quant_matmul: the rows must be uint8 (..., {rb}) from quant_rows, got "
                           f"{xt.value}{_fmt_shape(xs)}", where=source)
        want = attrs.n * gguf_quant.row_bytes(attrs.wtype, attrs.k, "quant_matmul")
        if wt not in (DType.uint8, DType.int8) or len(ws) != 1 or ws[0] != want:
            raise AirError(f"quant_matmul: the weight must be the 1-d uint8/int8 bytes of a ({attrs.n}, {attrs.k}) "
                           f"{attrs.wtype} tensor ({want} bytes), got {wt.value}{_fmt_shape(ws)}", where=source)
        return (*xs[:-1], attrs.n), DType.float32
    except AirError:
        raise
    except CatenError as e:  # a format rule (block size, unknown weight type)
        raise AirError(f"{op}: {e.message}", where=source, hint=e.hint) from None


def _check_rank(op: str, attrs: Any, source: str | None) -> None:
    if len(attrs.strides) != len(attrs.shape):
        raise AirError(
            f"{op}: {len(attrs.strides)} strides for the rank-{len(attrs.shape)} shape "
            f"{_fmt_shape(attrs.shape)}",
            where=source,
            hint="give one stride per axis (0 broadcasts)",
        )


def _need(op: str, read_types: list[Type | None], i: int, source: str | None) -> Type:
    t = read_types[i]
    if t is None:
        raise AirError(f"op {op!r}: operand {i} must be a value, not a literal", where=source)
    return t
