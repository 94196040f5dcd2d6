"""The lazy Tensor: every operation records a LazyNode (one future AIR node) instead of computing.

Nothing runs until ``numpy()``: then the DAG reachable from the tensor becomes an AIR graph
(``build_graph``) and runs through ``realize.execute``. Movement ops live in movement.py, math in
elementwise.py, reductions and matmul in reduce.py; this module holds the core and the plumbing
(broadcasting, dtype promotion, the node constructor that records the user's source line).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten_lab.air.dtypes import DType, to_dtype
from caten_lab.air.shapes import broadcast_shapes, numel
from caten_lab.air.symbolic import Dim, Expr
from caten_lab.frontend.build import realize
from caten_lab.frontend.elementwise import ElementwiseMixin
from caten_lab.frontend.errors import DTypeError, ShapeError, fmt_shape
from caten_lab.frontend.lazy import Buffer, LazyNode, buffer_node
from caten_lab.frontend.movement import MovementMixin
from caten_lab.frontend.promote import DEFAULT_FLOAT, literal, promote, promote_scalar
from caten_lab.frontend.reduce import ReduceMixin
from caten_lab.frontend.source import user_source

Scalar = int | float | bool


def as_dtype(dtype: Any, op: str = "dtype") -> DType:
    try:
        return to_dtype(dtype)
    except ValueError as exc:
        raise DTypeError(f"{op}: {exc}", where=user_source()) from None


def check_dim(d: Any, op: str) -> Dim:
    if isinstance(d, (np.integer,)):
        d = int(d)
    if isinstance(d, bool) or not isinstance(d, (int, Expr)):
        raise ShapeError(f"{op}: dimension {d!r} is not an int or a Sym", where=user_source())
    if isinstance(d, int) and d < 0:
        raise ShapeError(f"{op}: negative dimension {d}", where=user_source())
    return d


def norm_shape(shape: Any, op: str) -> tuple:
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = shape[0]
    return tuple(check_dim(d, op) for d in shape)


class Tensor(MovementMixin, ElementwiseMixin, ReduceMixin):
    """A lazy n-d array. ``shape`` may hold symbolic dims (``Sym``); ``numpy(**symbols)`` realizes it."""

    __slots__ = ("node", "__weakref__")
    __hash__ = object.__hash__  # == builds a comparison, so identity hashing must be explicit

    def __init__(self, node: LazyNode) -> None:
        self.node = node

    # ---- properties --------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        return self.node.shape

    @property
    def dtype(self) -> DType:
        return self.node.dtype

    @property
    def ndim(self) -> int:
        return len(self.node.shape)

    @property
    def source(self) -> str | None:
        return self.node.source

    def numel(self) -> Dim:
        return numel(self.shape)

    def size(self, axis: int | None = None) -> Any:
        return self.shape if axis is None else self.shape[self._axis(axis, "size")]

    def __len__(self) -> int:
        if not self.shape or not isinstance(self.shape[0], int):
            raise TypeError("len() of a 0-d or symbolically sized tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"<Tensor {self.node.op} {self.dtype.value}{fmt_shape(self.shape)}>"

    def __bool__(self) -> bool:
        raise TypeError("the truth value of a lazy Tensor is undefined; call .numpy() first")

    # ---- node construction ---------------------------------------------------------------
    @staticmethod
    def _make(air_op: str, srcs: tuple, shape: tuple, dtype: DType, /, **attrs: Any) -> Tensor:
        return Tensor(LazyNode(air_op, srcs, attrs, shape, dtype, user_source()))

    @staticmethod
    def full(shape: Any, value: Scalar | Expr, dtype: Any = None) -> Tensor:
        """A tensor filled with ``value`` (which may be symbolic, e.g. ``pos + 1``)."""
        shape = norm_shape(shape if isinstance(shape, (tuple, list)) else (shape,), "full")
        if dtype is None:
            dt = (
                DType.bool
                if isinstance(value, bool)
                else DType.int64
                if isinstance(value, (int, Expr))
                else DEFAULT_FLOAT
            )
        else:
            dt = as_dtype(dtype, "full")
        if isinstance(value, np.generic):
            value = value.item()
        if not isinstance(value, Expr):
            value = literal(value, dt)
        return Tensor._make("const", (), shape, dt, value=value, shape=shape, dtype=dt)

    @staticmethod
    def from_numpy(
        array: Any, name: str | None = None, dtype: Any = None, *, requires_grad: bool = False
    ) -> Tensor:
        """Bind a NumPy array, kept by reference: assignments into *this* tensor (``x[0] = 1``) write
        back into it when realized. A tensor computed from it (``y = x * 1``) is a new value: storing
        into ``y`` never changes the array, and tensors built before an assignment keep the old values.
        ``requires_grad``: ``backward()`` accumulates this tensor's gradient in ``.grad``."""
        arr = np.asarray(array)
        if arr.dtype == np.float64 and dtype is None:
            arr = arr.astype(np.float32)
        dt = as_dtype(dtype if dtype is not None else arr.dtype, "from_numpy")
        if arr.dtype != dt.np or not arr.flags.c_contiguous or not arr.flags.writeable:
            arr = np.array(arr, dtype=dt.np, order="C", copy=True)
        buf = Buffer(tuple(arr.shape), dt, arr, name=name)
        buf.requires_grad = requires_grad
        return Tensor.from_buffer(buf)

    @staticmethod
    def placeholder(shape: Any, dtype: Any = DEFAULT_FLOAT, name: str | None = None) -> Tensor:
        """A named input bound when the graph runs (``execute(graph, {name: array}, symbols)``)."""
        shape = norm_shape(shape if isinstance(shape, (tuple, list)) else (shape,), "placeholder")
        return Tensor.from_buffer(Buffer(shape, as_dtype(dtype, "placeholder"), None, name=name))

    @staticmethod
    def from_buffer(buf: Buffer) -> Tensor:
        t = Tensor(buffer_node(buf))
        buf.owner = t
        return t

    # ---- dtype plumbing ----------------------------------------------------------------------
    def cast(self, dtype: Any) -> Tensor:
        dt = as_dtype(dtype, "cast")
        if dt == self.dtype:
            return self
        return Tensor._make("cast", (self.node,), self.shape, dt, dtype=dt)

    to = cast

    def float(self) -> Tensor:
        return self.cast(DType.float32)

    def half(self) -> Tensor:
        return self.cast(DType.float16)

    def int(self) -> Tensor:
        return self.cast(DType.int32)

    def long(self) -> Tensor:
        return self.cast(DType.int64)

    def bool(self) -> Tensor:
        return self.cast(DType.bool)

    # ---- elementwise plumbing ------------------------------------------------------------------
    def _operands(self, op: str, others: tuple, out: DType | None = None) -> tuple[list, DType, tuple]:
        """Promote and broadcast ``self`` and ``others`` (Tensors or Python scalars).

        Returns (operands, dtype, shape): Tensors broadcast to ``shape`` and cast to ``dtype``; scalars
        become literals of ``dtype``. A symbolic scalar becomes a ``const`` tensor.
        """
        items: list = [self]
        for o in others:
            if isinstance(o, np.generic):
                o = o.item()
            if isinstance(o, Expr):
                o = Tensor.full((), o, DType.int64)
            elif isinstance(o, np.ndarray):
                o = Tensor.from_numpy(o)
            elif not isinstance(o, (Tensor, int, float, bool)):
                raise DTypeError(f"{op}: unsupported operand {o!r} ({type(o).__name__})", where=user_source())
            items.append(o)
        tensors = [t for t in items if isinstance(t, Tensor)]
        dt = tensors[0].dtype
        for t in tensors[1:]:
            dt = promote(dt, t.dtype)
        for s in items:
            if not isinstance(s, Tensor):
                dt = promote_scalar(dt, s)
        if out is not None:
            dt = out
        shape = broadcast_shapes(op, *(t.shape for t in tensors), where=user_source) if len(tensors) > 1 else tensors[0].shape
        ops = [t.cast(dt).broadcast_to(shape) if isinstance(t, Tensor) else literal(t, dt) for t in items]
        return ops, dt, shape

    @staticmethod
    def _ew(air_op: str, operands: list, shape: tuple, dtype: DType) -> Tensor:
        srcs = tuple(o.node if isinstance(o, Tensor) else o for o in operands)
        return Tensor._make(air_op, srcs, shape, dtype)

    def _binary(self, op: str, air_op: str, other: Any, reverse: bool = False) -> Tensor:
        (a, b), dt, shape = self._operands(op, (other,))
        if reverse:
            a, b = b, a
        if not isinstance(a, Tensor) and not isinstance(b, Tensor):
            raise DTypeError(f"{op}: needs a tensor operand", where=user_source())
        out_dt = DType.bool if air_op in ("lt", "ne") else dt
        return Tensor._ew(air_op, [a, b], shape, out_dt)

    def _unary(self, air_op: str) -> Tensor:
        return Tensor._make(air_op, (self.node,), self.shape, self.dtype)

    def _float(self) -> Tensor:
        return self if self.dtype.is_float else self.cast(DEFAULT_FLOAT)

    # ---- realization -------------------------------------------------------------------------
    def numpy(self, **symbols: int) -> np.ndarray:
        """Build the AIR graph of this tensor, run it, and return the values as a NumPy array."""
        return realize([self], symbols)[0]

    def item(self, **symbols: int) -> Any:
        return self.numpy(**symbols).item()

    def tolist(self, **symbols: int) -> Any:
        return self.numpy(**symbols).tolist()
