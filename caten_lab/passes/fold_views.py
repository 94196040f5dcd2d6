"""View folding: compose ``view(view(x))`` into one view, drop identity views, make views of consts consts.

Composition is exact: the outer view's flat index into the inner view's (contiguous) result is split
into the inner view's axes, which is only done when every outer axis walks along one inner axis
without carrying into the next. A mask on either view carries over (translated) when expressible;
otherwise the pair is left alone. Symbolic dims are handled when the inner view is a pure reshape.
"""

from __future__ import annotations

from typing import Any

from caten_lab.air.node import Node
from caten_lab.air.rewriter import Match, Pat, Rule
from caten_lab.air.shapes import contiguous_strides, numel
from caten_lab.air.symbolic import Expr
from caten_lab.passes.base import RewritePass
from caten_lab.passes.values import is_contiguous, is_positive_zero, is_reshape, same_dim


def _all_int(*seqs: Any) -> bool:
    for s in seqs:
        if s is None:
            continue
        for v in s:
            if isinstance(v, tuple):
                if not all(isinstance(x, int) for x in v):
                    return False
            elif not isinstance(v, int):
                return False
    return True


def _full_mask(shape: tuple, mask: tuple | None) -> bool:
    if mask is None:
        return True
    for d, (lo, hi) in zip(shape, mask):
        if not (
            isinstance(lo, int)
            and lo <= 0
            and (same_dim(hi, d) or (isinstance(hi, int) and isinstance(d, int) and hi >= d))
        ):
            return False
    return True


def is_identity_view(node: Node, operand_shape: tuple) -> bool:
    """The view reads its operand unchanged: same shape, row-major strides, offset 0, no effective mask."""
    a = node.attrs
    return (
        len(a.shape) == len(operand_shape)
        and all(same_dim(x, y) for x, y in zip(a.shape, operand_shape))
        and isinstance(a.offset, int)
        and a.offset == 0
        and is_contiguous(a.shape, a.strides)
        and _full_mask(a.shape, a.mask)
    )


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def compose(inner: Any, outer: Any, x_shape: tuple) -> dict | None:
    """Attributes of one view over ``x`` equal to ``outer`` applied to ``inner`` (a view of x), or None."""
    if is_reshape(inner.shape, inner.strides, inner.offset, inner.mask, x_shape):
        return {"shape": outer.shape, "strides": outer.strides, "offset": outer.offset, "mask": outer.mask}
    s1, st1, off1, m1 = inner.shape, inner.strides, inner.offset, inner.mask
    s2, st2, off2, m2 = outer.shape, outer.strides, outer.offset, outer.mask
    if not _all_int(s1, st1, s2, st2, m1, m2) or not isinstance(off1, int) or not isinstance(off2, int):
        return None
    if any(d == 0 for d in s1) or any(d == 0 for d in s2):
        return None
    # valid outer region per axis: [lo, hi)
    lo2 = [max(0, m2[k][0]) if m2 else 0 for k in range(len(s2))]
    hi2 = [min(s2[k], m2[k][1]) if m2 else s2[k] for k in range(len(s2))]
    if any(h <= lo for lo, h in zip(lo2, hi2)):
        return None
    c1 = contiguous_strides(s1)
    size1 = numel(s1)
    base = off2 + sum(lo * t for lo, t in zip(lo2, st2))
    if not 0 <= base < size1:
        return None
    p0 = [(base // c) % d for c, d in zip(c1, s1)]
    # map each moving outer axis to one inner axis
    axis_of: list[int | None] = []
    q: list[int] = []
    span_lo = list(p0)
    span_hi = list(p0)  # inclusive bounds of the inner index along each axis
    for k, t in enumerate(st2):
        n = hi2[k] - lo2[k]
        if n == 1 or t == 0:
            axis_of.append(None)
            q.append(0)
            continue
        best = None
        for m in range(len(s1)):
            if s1[m] > 1 and c1[m] <= abs(t):
                best = m
                break
        if best is None or abs(t) % c1[best]:
            return None
        qk = t // c1[best]
        axis_of.append(best)
        q.append(qk)
        if qk > 0:
            span_hi[best] += (n - 1) * qk
        else:
            span_lo[best] += (n - 1) * qk
    for m in range(len(s1)):
        if span_lo[m] < 0 or span_hi[m] >= s1[m]:
            return None  # the walk would carry into another axis
    # offset and strides of the composed view, in terms of the original outer index i = lo2 + i'
    offset = off1 + sum(p * s for p, s in zip(p0, st1))
    strides = []
    for k in range(len(s2)):
        m = axis_of[k]
        if m is None:
            strides.append(0)
            continue
        strides.append(q[k] * st1[m])
        offset -= lo2[k] * q[k] * st1[m]
    # masks: the outer valid region, narrowed by the inner mask where it bites
    lo, hi = list(lo2), list(hi2)
    if m1 is not None:
        for m, (a, b) in enumerate(m1):
            if a <= span_lo[m] and span_hi[m] < b:
                continue  # never masked along this axis
            movers = [k for k in range(len(s2)) if axis_of[k] == m]
            if len(movers) != 1:
                return None
            k = movers[0]
            qk = q[k]
            if qk > 0:
                first, last = _cdiv(a - p0[m], qk), (b - 1 - p0[m]) // qk
            else:
                first, last = _cdiv(p0[m] - b + 1, -qk), (p0[m] - a) // -qk
            lo[k] = max(lo[k], lo2[k] + first)
            hi[k] = min(hi[k], lo2[k] + last + 1)
            if hi[k] <= lo[k]:
                return None
    mask = None
    if any(lo[k] > 0 or hi[k] < s2[k] for k in range(len(s2))):
        mask = tuple((lo[k], hi[k]) for k in range(len(s2)))
    return {"shape": s2, "strides": tuple(strides), "offset": offset, "mask": mask}


# ---- rules ---------------------------------------------------------------------------------


def _identity(m: Match) -> str | None:
    x = m["x"]
    t = m.graph.type_of(x)
    return x if t is not None and is_identity_view(m.root, t[0]) else None  # type: ignore[return-value]


def _view_of_const(m: Match) -> str | None:
    c = m.node("c")
    assert c is not None
    v, a = m.root, m.root.attrs
    value = c.attrs.value
    if (
        a.mask is not None
        and not _full_mask(a.shape, a.mask)
        and not (not isinstance(value, Expr) and is_positive_zero(value))
    ):
        return None
    return m.graph.insert("const", [], value=value, shape=a.shape, dtype=v.dtype, source=v.source)


def _compose(m: Match) -> str | None:
    inner = m.node("inner")
    assert inner is not None
    x = inner.reads[0]
    t = m.graph.type_of(x)
    if t is None:
        return None
    attrs = compose(inner.attrs, m.root.attrs, t[0])
    if attrs is None:
        return None
    return m.graph.insert("view", [x], source=m.root.source, **attrs)


IDENTITY_VIEW = Rule("view(x) identity -> x", Pat("view", ["x"]), _identity)
VIEW_OF_CONST = Rule("view(const c) -> const c", Pat("view", [Pat("const", name="c")]), _view_of_const)
VIEW_OF_VIEW = Rule("view(view(x)) -> view(x)", Pat("view", [Pat("view", name="inner")]), _compose)

VIEW_RULES = [IDENTITY_VIEW, VIEW_OF_CONST, VIEW_OF_VIEW]


def fold_views_pass() -> RewritePass:
    return RewritePass(
        "fold_views",
        "compose view(view(x)), drop identity views, turn broadcast consts into consts",
        VIEW_RULES,
    )
