"""The NumPy interpreter of AIR: the reference semantics every backend is tested against.

Values are NumPy arrays of the node's shape and dtype. A ``view`` gathers from the flat contiguous
storage of its operand (``offset + sum(i_k * stride_k)``), which covers broadcasting (stride 0),
negative strides and padding (positions outside ``mask`` read 0). ``store`` scatters into a copy of
its destination (the compiled backends do it in place). The quantized matmul ops run
:mod:`caten_lab.formats.act_quant`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.symbolic import evaluate
from caten_lab.air.value import Value
from caten_lab.errors import AirError, RuntimeCheckError, SymbolError
from caten_lab.formats import act_quant


def _dims(shape: tuple, sym: Mapping[str, int], node: Node) -> tuple[int, ...]:
    out = tuple(evaluate(d, sym) for d in shape)
    for d in out:
        if d < 0:
            raise SymbolError(
                f"node {node.id} ({node.op}) has a negative dimension {out} under {dict(sym)}",
                where=node.source,
            )
    return out


def strided_index(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> np.ndarray:
    """Flat storage indices of a strided window, as an int64 array of ``shape``."""
    idx = np.full(shape, offset, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(shape, strides)):
        if s == 0 or n == 1:
            continue
        r = np.arange(n, dtype=np.int64) * s
        idx += r.reshape((n,) + (1,) * (len(shape) - axis - 1))
    return idx


def mask_array(shape: tuple[int, ...], mask: tuple[tuple[int, int], ...]) -> np.ndarray:
    valid = np.ones(shape, dtype=bool)
    for axis, (lo, hi) in enumerate(mask):
        r = np.arange(shape[axis])
        m = (r >= lo) & (r < hi)
        valid &= m.reshape((shape[axis],) + (1,) * (len(shape) - axis - 1))
    return valid


def _check_bounds(idx: np.ndarray, size: int, n: Node) -> None:
    """A view must stay inside its operand's storage (NumPy would silently wrap negative indices)."""
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise AirError(
            f"node {n.id} (view) reads outside its operand (storage indices {idx.min()}..{idx.max()}, "
            f"size {size})",
            where=n.source,
            hint="check the view's offset/strides, or mask the out-of-range positions",
        )


def _trunc_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.floor_divide(a, b)
        r = np.remainder(a, b)
        fix = (r != 0) & ((a < 0) ^ (b < 0))
    return np.where(fix, q + 1, q).astype(a.dtype, copy=False)


def _c_mod(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.fmod(a, b).astype(a.dtype, copy=False)


def _binary(op: str, a: Any, b: Any, dtype: DType) -> np.ndarray:
    if op == "add":
        return np.add(a, b, dtype=dtype.np) if dtype != DType.bool else np.logical_or(a, b)
    if op == "mul":
        return np.multiply(a, b, dtype=dtype.np) if dtype != DType.bool else np.logical_and(a, b)
    if op == "max":
        return np.maximum(a, b).astype(dtype.np, copy=False)
    if op == "idiv":
        return _trunc_div(np.asarray(a, dtype.np), np.asarray(b, dtype.np))
    if op == "mod":
        return _c_mod(np.asarray(a, dtype.np), np.asarray(b, dtype.np))
    if op == "and":
        return np.bitwise_and(np.asarray(a, dtype.np), np.asarray(b, dtype.np))
    if op == "or":
        return np.bitwise_or(np.asarray(a, dtype.np), np.asarray(b, dtype.np))
    if op == "xor":
        return np.bitwise_xor(np.asarray(a, dtype.np), np.asarray(b, dtype.np))
    if op == "lt":
        return np.less(a, b)
    if op == "ne":
        return np.not_equal(a, b)
    raise AirError(f"interpreter: unknown binary op {op!r}")


_UNARY = {
    "exp2": np.exp2,
    "log2": np.log2,
    "sin": np.sin,
    "sqrt": np.sqrt,
}


def run_node(
    n: Node, args: list[Any], sym: Mapping[str, int], inputs: Mapping[str, np.ndarray]
) -> np.ndarray:
    """Evaluate one node given its operand values (arrays for value reads, Python scalars for literals)."""
    op = n.op
    a = n.attrs
    dt = n.dtype.np
    if int in map(type, args):  # an int literal wraps into its operand's type, as in the C backend
        args = _wrap_int_literals(n, args)
    if op == "allocate":
        shape = _dims(a.shape, sym, n)
        if a.name is None:
            return np.zeros(shape, dtype=dt)
        if a.name not in inputs:
            raise AirError(
                f"input {a.name!r} is not bound",
                where=n.source,
                hint=f"pass {a.name}=<array of shape {shape}>",
            )
        arr = np.asarray(inputs[a.name])
        if arr.shape != shape:
            raise AirError(f"input {a.name!r}: expected shape {shape}, got {arr.shape}", where=n.source)
        return arr.astype(dt, copy=False)
    if op == "const":
        v = evaluate(a.value, sym) if not isinstance(a.value, (int, float, bool)) else a.value
        if type(v) is int and n.dtype.is_int:
            (v,) = _wrap_int_literals(n, [v])
        return np.full(_dims(a.shape, sym, n), v, dtype=dt)
    if op == "index":
        shape = _dims(a.shape, sym, n)
        r = np.arange(shape[a.axis], dtype=dt).reshape((shape[a.axis],) + (1,) * (len(shape) - a.axis - 1))
        return np.broadcast_to(r, shape).copy()
    if op == "view":
        shape = _dims(a.shape, sym, n)
        strides = tuple(evaluate(s, sym) for s in a.strides)
        flat = np.ascontiguousarray(args[0]).reshape(-1)
        idx = strided_index(shape, strides, evaluate(a.offset, sym))
        if a.mask is None:
            _check_bounds(idx, flat.size, n)
            return np.asarray(flat[idx]) if idx.size else np.zeros(shape, dtype=dt)  # 0-d: an array, not a scalar
        mask = tuple((evaluate(lo, sym), evaluate(hi, sym)) for lo, hi in a.mask)
        valid = mask_array(shape, mask)
        out = np.zeros(shape, dtype=dt)
        inside = idx[valid]
        _check_bounds(inside, flat.size, n)
        out[valid] = flat[inside]
        return out
    if op == "store":
        dst = np.array(args[0], dtype=dt, copy=True)
        flat = dst.reshape(-1)
        shape = _dims(a.shape, sym, n)
        idx = strided_index(shape, tuple(evaluate(s, sym) for s in a.strides), evaluate(a.offset, sym))
        if idx.size and (idx.min() < 0 or idx.max() >= flat.size):
            raise AirError(
                f"store writes outside its destination (indices {idx.min()}..{idx.max()}, size {flat.size})",
                where=n.source,
            )
        flat[idx] = np.broadcast_to(np.asarray(args[1], dtype=dt), shape)
        return dst
    if op == "quant_rows":
        return act_quant.quantize_rows(args[0], a.block)
    if op == "quant_matmul":
        return act_quant.quant_matmul(args[0], args[1], a.wtype, a.n, a.k)
    if op == "reduce":
        x = args[0]
        if a.op == "add":
            return np.add.reduce(x, axis=a.axes, keepdims=True, dtype=dt)
        if x.size == 0:
            fill = -np.inf if n.dtype.is_float else np.iinfo(dt).min if n.dtype.is_int else False
            return np.full(tuple(1 if i in a.axes else d for i, d in enumerate(x.shape)), fill, dtype=dt)
        return np.maximum.reduce(x, axis=a.axes, keepdims=True)
    shape = _dims(n.shape, sym, n)
    with np.errstate(all="ignore"):
        if op == "neg":
            out = np.negative(args[0]) if n.dtype != DType.bool else np.logical_not(args[0])
        elif op == "recip":
            out = np.reciprocal(np.asarray(args[0], dt))
        elif op == "not":
            out = np.logical_not(args[0]) if n.dtype == DType.bool else np.invert(np.asarray(args[0], dt))
        elif op in _UNARY:
            out = _UNARY[op](np.asarray(args[0], dt))
        elif op == "cast":
            out = np.asarray(args[0]).astype(dt)
        elif op == "where":
            out = np.where(args[0], args[1], args[2])
        elif op == "check_index":
            out = np.asarray(args[0], dt)
            _check_index(out, evaluate(a.size, sym), n)
        else:
            if op in ("idiv", "mod") and n.dtype.is_int and np.any(np.asarray(args[1]) == 0):
                raise RuntimeCheckError(
                    f"integer division by zero (AIR node {n.id}: {op})",
                    where=n.source,
                    hint="an integer // or % on a tensor has a zero divisor: replace the zeros before dividing",
                )
            out = _binary(op, args[0], args[1], n.dtype)
    return (
        np.broadcast_to(np.asarray(out, dtype=dt), shape).copy()
        if np.shape(out) != shape
        else np.asarray(out, dtype=dt)
    )


def _wrap_int_literals(n: Node, args: list[Any]) -> list[Any]:
    """Python int literals among ``args`` wrapped into their operand's integer type (two's complement), as
    the C backend computes them: ``codegen.lower.literal`` reduces an unsigned literal modulo 2**bits
    (``x + -1`` on uint8 adds 255, ``x < -1`` compares with 255), and C converts a signed one to the
    operand type (``x + 200`` on int8 adds -56) except in a compare, which C and NumPy both make in the
    wider type. NumPy would raise OverflowError for an out-of-range literal instead."""
    compare = n.op in ("lt", "ne")
    if compare:  # a compare's literal has the type of its other operand
        npdt = next((x.dtype for x in args if isinstance(x, np.ndarray)), None)
    else:
        npdt = n.dtype.np
    if npdt is None or npdt.kind not in "ui" or (compare and npdt.kind == "i"):
        return args
    bits = 8 * npdt.itemsize
    mask = (1 << bits) - 1
    if npdt.kind == "u":
        return [x & mask if type(x) is int else x for x in args]
    half = 1 << (bits - 1)
    return [((x + half) & mask) - half if type(x) is int else x for x in args]


def _check_index(ids: np.ndarray, size: int, n: Node) -> None:
    """``check_index``: every index in [0, size), else RuntimeCheckError (as the C backend at safety >= 1)."""
    if ids.size == 0:
        return
    bad = (ids < 0) | (ids >= size)
    if bad.any():
        first = ids.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
        raise RuntimeCheckError(
            f"index {int(first)} out of range for an axis of {size} (AIR node {n.id}: check_index)",
            where=n.source,
            hint="a gather/x[ids]/embedding index must lie in [0, size): fix or clip the ids",
        )


def interpret(
    g: Graph,
    inputs: Mapping[str, np.ndarray] | None = None,
    symbols: Mapping[str, int] | None = None,
    *,
    keep: bool = False,
) -> list[np.ndarray] | dict[str, np.ndarray]:
    """Run ``g``; returns the output arrays in order (or every value when ``keep``).

    Only the nodes the outputs depend on are run, unless ``keep`` (then every node is).
    """
    inputs = inputs or {}
    sym = dict(symbols or {})
    for k, v in sym.items():
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise SymbolError(f"symbol {k!r} must be bound to a non-negative int, got {v!r}")
    env: dict[Value, np.ndarray] = {}
    order = g.toposort()
    if not keep:  # only what the outputs depend on (dead nodes may read inputs nobody bound)
        live = g.live_nodes()
        order = [n for n in order if n.id in live]
    remaining = {}
    if not keep:
        for n in order:
            for r in n.reads:
                if r.__class__ is Value:
                    remaining[r] = remaining.get(r, 0) + 1
    outs = set(g.outputs)
    for n in order:
        args = [env[r] if r.__class__ is Value else r for r in n.reads]
        env[n.out] = run_node(n, args, sym, inputs)
        if not keep:
            for r in n.reads:
                if r.__class__ is Value:
                    remaining[r] -= 1
                    if remaining[r] == 0 and r not in outs:
                        del env[r]
    if keep:
        return env
    return [env[o] for o in g.outputs]
