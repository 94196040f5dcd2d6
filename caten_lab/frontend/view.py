"""A strided view over contiguous storage: shape, strides, offset and an optional validity mask.

Movement ops (reshape, permute, expand, slice with steps, pad) compose here, in plain Python, so a
chain of them becomes ONE AIR ``view`` node over a contiguous base. ``reshape`` returns None when the
result is not expressible as a single view; the caller then materializes a contiguous copy first.
Dimensions may be ints or symbolic ``Expr``; their arithmetic simplifies without graph nodes.
"""

from __future__ import annotations

from dataclasses import dataclass

from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.symbolic import Dim, Expr, floordiv, smax, smin


def _is_one(d: Dim) -> bool:
    return isinstance(d, int) and d == 1


def _is_zero(d: Dim) -> bool:
    return isinstance(d, int) and d == 0


def _clip(x: Dim, lo: Dim, hi: Dim) -> Dim:
    return smin(smax(x, lo), hi)


@dataclass(frozen=True, slots=True)
class View:
    shape: tuple
    strides: tuple
    offset: Dim = 0
    mask: tuple | None = None

    @staticmethod
    def contiguous(shape: tuple) -> View:
        return View(tuple(shape), contiguous_strides(tuple(shape)), 0, None)

    @property
    def is_contiguous(self) -> bool:
        """True when reading through this view is the identity on the storage."""
        if self.mask is not None or self.offset != 0:
            return False
        return all(
            _is_one(n) or s == c for n, s, c in zip(self.shape, self.strides, contiguous_strides(self.shape))
        )

    def _with(self, shape: tuple, strides: tuple, offset: Dim, mask: tuple | None) -> View:
        if mask is not None:  # canonical empty range: (0, 0)
            mask = tuple(
                (0, 0) if isinstance(lo, int) and isinstance(hi, int) and hi <= lo else (lo, hi)
                for lo, hi in mask
            )
        if mask is not None and all(lo == 0 and hi == n for (lo, hi), n in zip(mask, shape)):
            mask = None
        return View(tuple(shape), tuple(strides), offset, tuple(mask) if mask is not None else None)

    def permute(self, order: tuple[int, ...]) -> View:
        mask = tuple(self.mask[i] for i in order) if self.mask is not None else None
        return self._with(
            tuple(self.shape[i] for i in order), tuple(self.strides[i] for i in order), self.offset, mask
        )

    def expand(self, shape: tuple) -> View:
        """Broadcast size-1 dims to ``shape`` (stride 0)."""
        strides = tuple(s if old == new else 0 for old, new, s in zip(self.shape, shape, self.strides))
        mask = None
        if self.mask is not None:
            mask = tuple(
                m if old == new else ((0, new) if m != (0, 0) else (0, 0))
                for m, old, new in zip(self.mask, self.shape, shape)
            )
        return self._with(shape, strides, self.offset, mask)

    def slice(self, axis: int, start: Dim, length: Dim, step: int) -> View:
        """Keep ``length`` elements of ``axis`` starting at ``start`` with ``step`` (may be negative)."""
        shape, strides = list(self.shape), list(self.strides)
        offset = self.offset + start * strides[axis]
        shape[axis] = length
        strides[axis] = strides[axis] * step
        mask = list(self.mask) if self.mask is not None else None
        if mask is not None:
            lo, hi = mask[axis]
            if step == 1:
                nlo, nhi = _clip(lo - start, 0, length), _clip(hi - start, 0, length)
            elif step > 0:  # i = start + j*step is valid iff lo <= i < hi
                nlo = _clip(-floordiv(start - lo, step), 0, length)
                nhi = _clip(-floordiv(start - hi, step), 0, length)
            else:
                s = -step
                nlo = _clip(floordiv(start - hi, s) + 1, 0, length)
                nhi = _clip(floordiv(start - lo, s) + 1, 0, length)
            if isinstance(nlo, int) and isinstance(nhi, int) and nhi < nlo:
                nhi = nlo
            mask[axis] = (nlo, nhi)
        return self._with(tuple(shape), tuple(strides), offset, tuple(mask) if mask is not None else None)

    def pad(self, padding: tuple[tuple[Dim, Dim], ...]) -> View:
        """Grow each axis by (before, after) elements that read as zero."""
        shape, offset = [], self.offset
        mask = []
        for i, ((before, after), n, s) in enumerate(zip(padding, self.shape, self.strides)):
            shape.append(before + n + after)
            offset = offset - before * s
            lo, hi = self.mask[i] if self.mask is not None else (0, n)
            mask.append((lo + before, hi + before))
        return self._with(tuple(shape), self.strides, offset, tuple(mask))

    def reshape(self, new_shape: tuple) -> View | None:
        """The same elements in row-major order with ``new_shape``, or None if no single view does it."""
        if any(_is_zero(d) for d in self.shape) or any(_is_zero(d) for d in new_shape):
            return View.contiguous(new_shape)
        if self.is_contiguous:
            return View.contiguous(new_shape)
        mask = self.mask
        if mask is not None:
            for n, m in zip(self.shape, mask):  # a fully padded size-1 axis cannot be dropped
                if _is_one(n) and m != (0, 1):
                    return None
        old = [i for i, n in enumerate(self.shape) if not _is_one(n)]
        new = [j for j, n in enumerate(new_shape) if not _is_one(n)]
        # group boundaries are the prefix products both shapes share (exact polynomial equality)
        old_prefix: dict[Dim, int] = {}
        acc: Dim = 1
        for k, i in enumerate(old):
            acc = acc * self.shape[i]
            old_prefix.setdefault(acc, k + 1)
        new_strides: list[Dim] = [0] * len(new_shape)
        new_mask: list[tuple] = [(0, n) for n in new_shape]
        acc, start_old, start_new = 1, 0, 0
        for k, j in enumerate(new):
            acc = acc * new_shape[j]
            end_old = old_prefix.get(acc)
            if end_old is None or end_old <= start_old:
                continue
            group_old = old[start_old:end_old]
            group_new = new[start_new : k + 1]
            for a, b in zip(group_old, group_old[1:]):
                if self.strides[a] != self.strides[b] * self.shape[b]:
                    return None
            if mask is not None:
                masked = [i for i in group_old if mask[i] != (0, self.shape[i])]
                if masked:
                    if len(group_old) != 1 or len(group_new) != 1:
                        return None
                    new_mask[group_new[0]] = mask[group_old[0]]
            stride = self.strides[group_old[-1]]
            for jj in reversed(group_new):
                new_strides[jj] = stride
                stride = stride * new_shape[jj]
            start_old, start_new = end_old, k + 1
        if start_old != len(old) or start_new != len(new):
            return None
        return self._with(
            tuple(new_shape), tuple(new_strides), self.offset, tuple(new_mask) if mask is not None else None
        )


def is_expr(d: object) -> bool:
    return isinstance(d, Expr)
