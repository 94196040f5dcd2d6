"""Shape arithmetic every layer shares: element counts, row-major strides, NumPy broadcasting.

Dimensions are ints or symbolic ``Expr`` (see ``air.symbolic``). The frontend, the graph passes,
lowering and the export all need these; they live here, at the bottom, so none of them has to
import another's module for them. Results are cached: shapes repeat across layers, and products of
symbolic dims are not free.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from caten_lab.air.symbolic import Dim
from caten_lab.errors import ShapeError


def fmt_shape(shape: tuple) -> str:
    """``shape`` as Python prints a tuple: ``(2, 3)``, ``(4,)``, ``()``."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def numel(shape: tuple) -> Dim:
    """The product of the dims of ``shape`` (1 for a scalar)."""
    return _numel(tuple(shape))


@lru_cache(maxsize=4096)
def _numel(shape: tuple) -> Dim:
    out: Dim = 1
    for d in shape:
        out = out * d
    return out


def contiguous_strides(shape: tuple) -> tuple:
    """Row-major strides of ``shape``, in elements (ints or symbolic)."""
    return _contiguous_strides(tuple(shape))


@lru_cache(maxsize=4096)
def _contiguous_strides(shape: tuple) -> tuple:
    strides: list[Dim] = []
    acc: Dim = 1
    for d in reversed(shape):
        strides.append(acc)
        acc = acc * d
    return tuple(reversed(strides))


def broadcast_shapes(op: str, *shapes: tuple, where: Callable[[], str | None] | None = None) -> tuple:
    """NumPy broadcasting of ``shapes``: the shape they all broadcast to.

    Raises ShapeError naming ``op``, the shapes and the first axis that does not fit. ``where`` is
    called only then, to say where the user wrote the op (e.g. ``frontend.source.user_source``).
    """
    ndim = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for i in range(ndim):
        dim: Dim = 1
        for s in shapes:
            k = i - (ndim - len(s))
            if k < 0:
                continue
            d = s[k]
            if isinstance(d, int) and d == 1:
                continue
            if isinstance(dim, int) and dim == 1:
                dim = d
            elif dim != d:
                raise ShapeError(
                    f"{op}: shapes {' and '.join(fmt_shape(x) for x in shapes)} cannot be broadcast "
                    f"(axis {i - ndim}: {dim} vs {d})",
                    where=where() if where is not None else None,
                    hint="sizes must be equal or 1 on every axis (aligned from the right)",
                )
        out.append(dim)
    return tuple(out)
