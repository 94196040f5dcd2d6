"""Movement ops: reshape, permute, expand, slicing (with steps, negative indices, symbolic bounds),
pad, flip, cat/split/chunk and slice assignment (an AIR ``store``: in place once compiled).

Every movement composes into the View of its input, so a chain of them is one AIR ``view`` over a
contiguous base. A reshape that no single view can express first materializes the current view.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.shapes import broadcast_shapes, numel
from caten_lab.air.symbolic import Dim, Expr, floordiv
from caten_lab.frontend.errors import AxisError, DTypeError, ShapeError, SliceError, fmt_shape
from caten_lab.frontend.lazy import LazyNode
from caten_lab.frontend.promote import literal
from caten_lab.frontend.source import user_source
from caten_lab.frontend.view import View
from caten_lab.type_words import a_type

if TYPE_CHECKING:
    from caten_lab.frontend.tensor import Tensor


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


class MovementMixin:
    """Shape-changing ops that never copy (except the contiguous copy a reshape may need)."""

    __slots__ = ()

    # ---- helpers --------------------------------------------------------------------------
    def _axis(self: Tensor, axis: Any, op: str, ndim: int | None = None) -> int:
        n = self.ndim if ndim is None else ndim
        if not _is_int(axis):
            raise AxisError(f"{op}: axis {axis!r} is not an int", where=user_source())
        a = int(axis)
        if not -n <= a < max(n, 1) or (n == 0 and a not in (0, -1)):
            raise AxisError(
                f"{op}: axis {a} is out of range for a tensor of shape {fmt_shape(self.shape)} (rank {n})",
                where=user_source(),
                hint=f"valid axes are {-n}..{n - 1}" if n else "a 0-d tensor has no axes",
            )
        return a + n if a < 0 else a

    def _apply_view(self: Tensor, fn: Callable[[View], View | None], op: str) -> Tensor:
        node: LazyNode = self.node
        if node.op == "view" and node.folds:
            base, v = node.srcs[0], node.view
        else:
            base, v = node, View.contiguous(node.shape)
        nv = fn(v)
        if nv is None:  # not one view: the current view becomes a contiguous value, then view that
            base, nv = node, fn(View.contiguous(node.shape))
            assert nv is not None
        t = type(self)
        if nv.is_contiguous and nv.shape == base.shape:
            return t(base)
        attrs = {"shape": nv.shape, "strides": nv.strides, "offset": nv.offset, "mask": nv.mask}
        return t(LazyNode("view", (base,), attrs, nv.shape, base.dtype, user_source(), view=nv))

    def contiguous(self: Tensor) -> Tensor:
        """Stop view folding here: later views read this tensor's values as a new contiguous base."""
        node: LazyNode = self.node
        if node.op != "view" or not node.folds:
            return self
        copy = LazyNode("view", node.srcs, node.attrs, node.shape, node.dtype, user_source(), view=node.view)
        copy.folds = False
        return type(self)(copy)

    # ---- reshape family ---------------------------------------------------------------------
    def reshape(self: Tensor, *shape: Any) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        shape = tuple(int(d) if isinstance(d, np.integer) else d for d in shape)
        total = self.numel()
        if sum(1 for d in shape if _is_int(d) and d == -1) > 1:
            raise ShapeError(f"reshape: only one dimension can be -1, got {shape}", where=user_source())
        if any(_is_int(d) and d == -1 for d in shape):
            known = numel(tuple(d for d in shape if not (_is_int(d) and d == -1)))
            if isinstance(known, int) and known == 0:
                raise ShapeError(f"reshape: cannot infer -1 in {shape} for size 0", where=user_source())
            inferred = floordiv(total, known)
            shape = tuple(inferred if (_is_int(d) and d == -1) else d for d in shape)
        for d in shape:
            if isinstance(d, bool) or not (_is_int(d) or isinstance(d, Expr)) or (_is_int(d) and d < 0):
                raise ShapeError(f"reshape: bad dimension {d!r} in {shape}", where=user_source())
        if numel(shape) != total:
            raise ShapeError(
                f"reshape: cannot reshape {fmt_shape(self.shape)} ({total} elements) to {fmt_shape(shape)} "
                f"({numel(shape)} elements)",
                where=user_source(),
            )
        if tuple(shape) == self.shape:
            return self
        return self._apply_view(lambda v: v.reshape(tuple(shape)), "reshape")

    view = reshape

    def flatten(self: Tensor, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        if self.ndim == 0:
            return self.reshape(1)
        s, e = self._axis(start_dim, "flatten"), self._axis(end_dim, "flatten")
        shp = self.shape
        return self.reshape(*shp[:s], numel(shp[s : e + 1]), *shp[e + 1 :])

    def unsqueeze(self: Tensor, dim: int) -> Tensor:
        d = self._axis(dim, "unsqueeze", self.ndim + 1)
        shp = self.shape
        return self.reshape(*shp[:d], 1, *shp[d:])

    def squeeze(self: Tensor, dim: int | Sequence[int] | None = None) -> Tensor:
        shp = self.shape
        if dim is None:
            axes = {i for i, d in enumerate(shp) if _is_int(d) and d == 1}
        else:
            axes = {self._axis(a, "squeeze") for a in (dim if isinstance(dim, (tuple, list)) else (dim,))}
            axes = {a for a in axes if _is_int(shp[a]) and shp[a] == 1}
        return self.reshape(*(d for i, d in enumerate(shp) if i not in axes))

    # ---- permute / expand ---------------------------------------------------------------------
    def permute(self: Tensor, *order: Any) -> Tensor:
        if len(order) == 1 and isinstance(order[0], (tuple, list)):
            order = tuple(order[0])
        if len(order) != self.ndim:
            raise AxisError(
                f"permute: order {order} has {len(order)} axes, "
                f"the tensor {fmt_shape(self.shape)} has {self.ndim}",
                where=user_source(),
            )
        axes = tuple(self._axis(a, "permute") for a in order)
        if sorted(axes) != list(range(self.ndim)):
            raise AxisError(f"permute: {order} is not a permutation of the axes", where=user_source())
        if axes == tuple(range(self.ndim)):
            return self
        return self._apply_view(lambda v: v.permute(axes), "permute")

    def transpose(self: Tensor, dim0: int = -2, dim1: int = -1) -> Tensor:
        a, b = self._axis(dim0, "transpose"), self._axis(dim1, "transpose")
        order = list(range(self.ndim))
        order[a], order[b] = order[b], order[a]
        return self.permute(*order)

    @property
    def T(self: Tensor) -> Tensor:  # noqa: N802 - NumPy's name
        return self.permute(*reversed(range(self.ndim)))

    def movedim(self: Tensor, source: int, destination: int) -> Tensor:
        s, d = self._axis(source, "movedim"), self._axis(destination, "movedim")
        order = [i for i in range(self.ndim) if i != s]
        order.insert(d, s)
        return self.permute(*order)

    def expand(self: Tensor, *shape: Any) -> Tensor:
        """Broadcast to ``shape`` (``-1`` keeps a size; new leading axes are allowed), without copying."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        lead = len(shape) - self.ndim
        if lead < 0:
            raise ShapeError(
                f"expand: cannot expand {fmt_shape(self.shape)} to fewer axes {fmt_shape(shape)}",
                where=user_source(),
            )
        cur = (1,) * lead + tuple(self.shape)
        target = tuple(c if (_is_int(d) and d == -1) else d for c, d in zip(cur, shape))
        for c, d in zip(cur, target):
            if c != d and not (_is_int(c) and c == 1):
                raise ShapeError(
                    f"expand: cannot expand {fmt_shape(self.shape)} to {fmt_shape(shape)}",
                    where=user_source(),
                    hint="only size-1 axes can be expanded",
                )
        return self.broadcast_to(target)

    def broadcast_to(self: Tensor, shape: tuple) -> Tensor:
        shape = tuple(shape)
        if shape == self.shape:
            return self
        if broadcast_shapes("broadcast_to", self.shape, shape, where=user_source) != shape:
            raise ShapeError(
                f"broadcast_to: cannot broadcast {fmt_shape(self.shape)} to {fmt_shape(shape)}",
                where=user_source(),
            )
        x = self
        if len(shape) > self.ndim:
            x = self.reshape(*((1,) * (len(shape) - self.ndim)), *self.shape)
        return x._apply_view(lambda v: v.expand(shape), "expand")

    def expand_as(self: Tensor, other: Tensor) -> Tensor:
        return self.expand(other.shape)

    # ---- indexing --------------------------------------------------------------------------------
    def _index_plan(self: Tensor, idx: Any, op: str) -> tuple[list, tuple, tuple]:
        """Parse an index into (slices (axis, start, length, step), window shape, result shape)."""
        if not isinstance(idx, tuple):
            idx = (idx,)
        for e in idx:
            if type(e).__name__ == "Tensor" or isinstance(e, (list, np.ndarray)):
                raise SliceError(
                    f"{op}: indexing with a tensor or list is only supported as x[int_tensor] "
                    "(rows of the first axis)",
                    where=user_source(),
                    hint="use gather(dim, index) or nn.Embedding for other data-dependent indexing",
                )
            if not (e is None or e is Ellipsis or isinstance(e, slice) or _is_int(e) or isinstance(e, Expr)):
                raise SliceError(f"{op}: unsupported index {e!r} ({type(e).__name__})", where=user_source())
        n_ell = sum(1 for e in idx if e is Ellipsis)
        if n_ell > 1:
            raise SliceError(f"{op}: an index can only have one ellipsis (...)", where=user_source())
        shp = self.shape
        consumed = sum(1 for e in idx if e is not None and e is not Ellipsis)
        if consumed > len(shp):
            raise SliceError(
                f"{op}: too many indices ({consumed}) for a tensor of shape {fmt_shape(shp)}",
                where=user_source(),
            )
        if n_ell:
            k = idx.index(Ellipsis)
            idx = idx[:k] + (slice(None),) * (len(shp) - consumed) + idx[k + 1 :]
        else:
            idx = idx + (slice(None),) * (len(shp) - consumed)
        slices, window, result = [], [], []
        axis = 0
        for e in idx:
            if e is None:
                result.append(1)
                continue
            n = shp[axis]
            if isinstance(e, slice):
                start, length, step = _norm_slice(e, n, axis, shp, op)
                if not (step == 1 and length == n and (isinstance(start, int) and start == 0)):
                    slices.append((axis, start, length, step))
                window.append(length)
                result.append(length)
            else:
                i = int(e) if _is_int(e) else e
                if isinstance(i, int) and isinstance(n, int) and not -n <= i < n:
                    raise SliceError(
                        f"{op}: index {i} is out of range for axis {axis} of size {n} "
                        f"(shape {fmt_shape(shp)})",
                        where=user_source(),
                    )
                if isinstance(i, int) and i < 0:
                    i = i + n
                slices.append((axis, i, 1, 1))
                window.append(1)
            axis += 1
        return slices, tuple(window), tuple(result)

    def __getitem__(self: Tensor, idx: Any) -> Tensor:
        t = type(self)
        if isinstance(idx, t) and idx.dtype.is_int and self.ndim:
            return self._take_rows(idx)
        slices, window, result = self._index_plan(idx, "getitem")

        def apply(v: View) -> View:
            for axis, start, length, step in slices:
                v = v.slice(axis, start, length, step)
            return v

        out = self._apply_view(apply, "getitem") if slices else self
        return out.reshape(*result) if result != window else out

    def _take_rows(self: Tensor, ids: Tensor) -> Tensor:
        """``self[ids]`` for an integer tensor: rows of axis 0 (one-hot select and sum, exact). As in
        NumPy and torch, a negative id counts from the end; one outside [-n, n) raises when run."""
        n, rest = self.shape[0], self.shape[1:]
        ar = type(self)._make("index", (), (n,), DType.int64, shape=(n,), axis=0, dtype=DType.int64)
        hot = checked_index(ids, n, wrap_negative=True).unsqueeze(-1) == ar  # (*ids, n)
        flat = self.reshape(n, numel(rest))
        zero: Any = False if self.dtype == DType.bool else 0
        out = hot.unsqueeze(-1).where(flat, zero).sum(-2, dtype=self.dtype)
        return out.reshape(*ids.shape, *rest)

    def __setitem__(self: Tensor, idx: Any, value: Any) -> None:
        """Write ``value`` into a window of this tensor (a ``store``).

        On a bound tensor (``from_numpy``, a parameter or a state) the store is in place in its buffer;
        on a computed tensor it writes into a fresh copy, so the inputs it was computed from never change.
        """
        node: LazyNode = self.node
        if node.op == "view":
            raise SliceError(
                f"setitem: cannot assign into a view (shape {fmt_shape(self.shape)}, made by a movement op)",
                where=user_source(),
                hint="assign into the base tensor with a slice instead, e.g. cache[:, :, pos:pos + seq] = k",
            )
        slices, window, result = self._index_plan(idx, "setitem")
        v = View.contiguous(self.shape)
        for axis, start, length, step in slices:
            v = v.slice(axis, start, length, step)
        t = type(self)
        if isinstance(value, t):
            if broadcast_shapes("setitem", value.shape, result, where=user_source) != result:
                raise ShapeError(
                    f"setitem: value of shape {fmt_shape(value.shape)} "
                    f"does not fit the window {fmt_shape(result)}",
                    where=user_source(),
                )
            src: Any = value.cast(self.dtype).broadcast_to(result).reshape(*window).node
        elif isinstance(value, (int, float, bool, np.generic)):
            src = literal(value.item() if isinstance(value, np.generic) else value, self.dtype)
        else:
            raise DTypeError(f"setitem: cannot assign {a_type(value)}", where=user_source())
        root = node
        while root.op == "store":
            root = root.srcs[0]
        if root.op not in ("allocate", "const"):
            # a computed value (y = x * 1): store into a fresh copy of it. A store straight onto the
            # value would let a graph rewrite (x * 1 -> x) turn it into an in-place update of x's array.
            node = self._fresh_copy()
        attrs = {"shape": v.shape, "strides": v.strides, "offset": v.offset}
        new = LazyNode("store", (node, src), attrs, node.shape, node.dtype, user_source())
        if root.op == "allocate" and root.buffer is not None:
            root.buffer.pending = new
            root.buffer.owner = self
        self.node = new

    def _fresh_copy(self: Tensor) -> LazyNode:
        """This tensor's value written into a new scratch buffer (an unnamed ``allocate``)."""
        node: LazyNode = self.node
        shp, dt, where = node.shape, node.dtype, user_source()
        scratch = LazyNode("allocate", (), {"shape": shp, "dtype": dt}, shp, dt, where)
        v = View.contiguous(shp)
        attrs = {"shape": v.shape, "strides": v.strides, "offset": v.offset}
        return LazyNode("store", (scratch, node), attrs, shp, dt, where)

    # ---- pad / flip / cat / split -------------------------------------------------------------------
    def pad(self: Tensor, padding: Sequence[Any], value: Any = 0.0) -> Tensor:
        """torch.nn.functional.pad: ``padding`` pairs start at the LAST axis; negative pads crop."""
        if len(padding) % 2 or len(padding) // 2 > self.ndim:
            raise ShapeError(
                f"pad: padding {tuple(padding)} needs pairs for at most {self.ndim} axes",
                where=user_source(),
            )
        pads: list[tuple[Dim, Dim]] = [(0, 0)] * self.ndim
        for k in range(len(padding) // 2):
            pads[self.ndim - 1 - k] = (padding[2 * k], padding[2 * k + 1])
        x = self
        neg = [(_is_int(b) and b < 0, _is_int(a) and a < 0) for b, a in pads]
        if any(nb or na for nb, na in neg):
            x = x[
                tuple(
                    slice(-b if nb else None, (n + a) if na else None)
                    for (b, a), (nb, na), n in zip(pads, neg, self.shape)
                )
            ]
        pads = [
            (b if not (_is_int(b) and b < 0) else 0, a if not (_is_int(a) and a < 0) else 0) for b, a in pads
        ]
        if all(b == 0 and a == 0 for b, a in pads):
            return x
        out = x._apply_view(lambda v: v.pad(tuple(pads)), "pad")
        if value != 0:
            t = type(self)
            inside = t.full(x.shape, True, DType.bool)._apply_view(lambda v: v.pad(tuple(pads)), "pad")
            out = inside.where(out, value)
        return out

    def flip(self: Tensor, dims: int | Sequence[int]) -> Tensor:
        axes = [self._axis(a, "flip") for a in (dims if isinstance(dims, (tuple, list)) else (dims,))]
        return self[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(self.ndim))]

    def split(self: Tensor, split_size: Any, dim: int = 0) -> list[Tensor]:
        d = self._axis(dim, "split")
        n = self.shape[d]
        if _is_int(split_size):
            if split_size <= 0:
                raise ShapeError(f"split: split_size must be positive, got {split_size}", where=user_source())
            if not isinstance(n, int):
                raise ShapeError(
                    f"split: axis {d} has symbolic size {n}; pass explicit sizes", where=user_source()
                )
            sizes = [split_size] * (n // split_size) + ([n % split_size] if n % split_size else [])
            sizes = sizes or [0]
        else:
            sizes = list(split_size)
            if sum_dims(sizes) != n:
                raise ShapeError(f"split: sizes {sizes} do not add up to {n} (axis {d})", where=user_source())
        out, start = [], 0
        for s in sizes:
            idx = [slice(None)] * self.ndim
            idx[d] = slice(start, start + s)
            out.append(self[tuple(idx)])
            start = start + s
        return out

    def chunk(self: Tensor, chunks: int, dim: int = 0) -> list[Tensor]:
        d = self._axis(dim, "chunk")
        n = self.shape[d]
        if not isinstance(n, int):
            raise ShapeError(f"chunk: axis {d} has symbolic size {n}", where=user_source())
        if chunks <= 0:
            raise ShapeError(f"chunk: chunks must be positive, got {chunks}", where=user_source())
        size = max(1, -(-n // chunks))
        return self.split(size, d)

    # ---- masks from coordinates ------------------------------------------------------------------
    def _tri(self: Tensor, diagonal: int, upper: bool, op: str) -> Tensor:
        if self.ndim < 2:
            raise ShapeError(
                f"{op}: needs at least 2 axes, got shape {fmt_shape(self.shape)}", where=user_source()
            )
        t = type(self)
        rc = tuple(self.shape[-2:])
        row = t._make("index", (), rc, DType.int64, shape=rc, axis=0, dtype=DType.int64)
        col = t._make("index", (), rc, DType.int64, shape=rc, axis=1, dtype=DType.int64)
        keep = (col >= row + diagonal) if upper else (col <= row + diagonal)
        return keep.where(self, False if self.dtype == DType.bool else 0)  # keeps the dtype

    def triu(self: Tensor, diagonal: int = 0) -> Tensor:
        return self._tri(diagonal, True, "triu")

    def tril(self: Tensor, diagonal: int = 0) -> Tensor:
        return self._tri(diagonal, False, "tril")

    def gather(self: Tensor, dim: int, index: Tensor) -> Tensor:
        """torch.gather: ``out[..i..] = self[..index[..i..]..]`` along ``dim`` (one-hot select + sum)."""
        d = self._axis(dim, "gather")
        t = type(self)
        if not isinstance(index, t) or not index.dtype.is_int:
            raise DTypeError("gather: index must be an integer tensor", where=user_source())
        if index.ndim != self.ndim:
            raise ShapeError(
                f"gather: index {fmt_shape(index.shape)} and input {fmt_shape(self.shape)} "
                "need the same rank",
                where=user_source(),
            )
        n = self.shape[d]
        sl = tuple(slice(None) if i == d else slice(0, index.shape[i]) for i in range(self.ndim))
        x = self[sl].movedim(d, -1).unsqueeze(d)  # index.shape with 1 at d, then n
        x = x.expand(*index.shape, n)
        ar = t._make("index", (), (n,), DType.int64, shape=(n,), axis=0, dtype=DType.int64)
        onehot = checked_index(index, n).unsqueeze(-1) == ar  # as torch.gather: an index outside [0, n) raises
        zero: Any = False if self.dtype == DType.bool else 0
        return onehot.where(x, zero).sum(-1, dtype=self.dtype)  # one term is selected: exact, same dtype


def checked_index(ids: Tensor, size: Dim, *, wrap_negative: bool = False) -> Tensor:
    """``ids`` as int64 through AIR ``check_index``: an id outside [0, size) stops the program when it runs
    (RuntimeCheckError naming the node, at safety >= 1 and on the interpreter). ``wrap_negative``: a
    negative id of a signed dtype counts from the end first (NumPy/torch ``x[ids]``)."""
    x = ids.cast(DType.int64)
    if wrap_negative and not ids.dtype.is_unsigned:
        x = (x < 0).where(x + size, x)
    return type(ids)._make("check_index", (x.node,), x.shape, DType.int64, size=size)


def sum_dims(dims: Sequence[Dim]) -> Dim:
    total: Dim = 0
    for d in dims:
        total = total + d
    return total


def _norm_slice(e: slice, n: Dim, axis: int, shape: tuple, op: str) -> tuple[Dim, Dim, int]:
    """(start, length, step) of slice ``e`` over an axis of size ``n``."""
    step = 1 if e.step is None else e.step
    if not _is_int(step):
        raise SliceError(f"{op}: slice step {step!r} must be an int", where=user_source())
    step = int(step)
    if step == 0:
        raise SliceError(
            f"{op}: slice step cannot be zero (axis {axis}, shape {fmt_shape(shape)})", where=user_source()
        )
    start, stop = e.start, e.stop
    for b in (start, stop):
        if b is not None and not (_is_int(b) or isinstance(b, Expr)):
            raise SliceError(f"{op}: slice bound {b!r} must be an int or a Sym", where=user_source())
    if isinstance(n, int) and (start is None or _is_int(start)) and (stop is None or _is_int(stop)):
        r = range(n)[slice(None if start is None else int(start), None if stop is None else int(stop), step)]
        return (r.start if len(r) else 0), len(r), step
    if step < 0:
        raise SliceError(
            f"{op}: negative steps need concrete bounds (axis {axis} of size {n})", where=user_source()
        )
    start = 0 if start is None else (int(start) + n if _is_int(start) and start < 0 else start)
    stop = n if stop is None else (int(stop) + n if _is_int(stop) and stop < 0 else stop)
    if isinstance(start, int) and isinstance(n, int):
        start = min(start, n)
    if isinstance(stop, int) and isinstance(n, int):
        stop = min(stop, n)
    length = stop - start
    if isinstance(length, int):
        length = max(0, length)
    if step > 1:
        length = -floordiv(-length, step)
    return start, length, step
