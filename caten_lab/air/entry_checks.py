"""What symbol values a graph can run with: the constraints its windows and shapes put on them.

A ``view`` or ``store`` reads or writes a strided window of its operand's storage; with symbolic
shapes, strides, offsets or masks (``cache[:, :, pos:pos + seq] = k``) whether that window stays
inside the buffer depends on the symbol values of the call. :func:`entry_checks` derives, once per
graph, every such condition as a symbolic expression that must be ``>= 0`` (``lo >= 0`` and
``size - 1 - hi >= 0`` for each window, ``d >= 0`` for every symbolic dimension), drops those that
hold for every non-negative binding (a polynomial with non-negative coefficients) and merges equal
expressions: the twelve layers of a transformer window their KV caches with the same symbols, so
a decode program has a handful of distinct conditions. :meth:`EntryChecks.check` evaluates them
for one binding (O(distinct conditions)) and raises :class:`SymbolError` naming the symbol values,
the node's source line and the condition in words ("pos + seq <= 128").

The frontend's ``execute`` and a compiled ``Program`` both call this, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from math import gcd

from caten_lab.air.graph import Graph
from caten_lab.air.node import Node
from caten_lab.air.serialize import decode_value, encode_value
from caten_lab.air.symbolic import Dim, Expr, evaluate, smax, smin, symbols_of
from caten_lab.errors import SymbolError

__all__ = ["EntryChecks", "Site", "entry_checks", "condition_text"]


@dataclass(frozen=True, slots=True)
class Site:
    """One node that needs a condition: a window (``guards``: the window is empty, so it touches
    nothing, unless every guard is > 0) or a dimension (``lo`` is the dimension, no guards)."""

    kind: str  # "low" (window start >= 0), "high" (window end < size) or "dim" (dimension >= 0)
    node_id: int
    op: str
    source: str | None
    guards: tuple[Dim, ...]
    lo: Dim
    hi: Dim
    size: Dim
    buffer: str | None  # the name of the windowed input, when it is one
    buffer_shape: tuple


def _provably_nonnegative(e: Dim) -> bool:
    """True when ``e >= 0`` for every non-negative symbol binding (no opaque atoms, no negative term)."""
    if isinstance(e, int):
        return e >= 0
    return all(c >= 0 and all(isinstance(a, str) for a in m) for m, c in e.terms)


def _numel(shape: Iterable[Dim]) -> Dim:
    n: Dim = 1
    for d in shape:
        n = n * d
    return n


def _window_extent(shape: tuple, strides: tuple, offset: Dim, mask: tuple | None
                   ) -> tuple[Dim, Dim, tuple[Dim, ...]] | None:
    """(lowest index, highest index, guards) of a window; None when it is empty for every binding."""
    lo: Dim = offset
    hi: Dim = offset
    guards: list[Dim] = []
    for i, (n, s) in enumerate(zip(shape, strides)):
        first: Dim = 0
        last: Dim = n - 1
        extent: Dim = n
        if mask is not None:
            mlo, mhi = mask[i]
            if _provably_nonnegative(mlo):
                first = mlo
            elif not _provably_nonnegative(-mlo):  # (a mask starting at or before 0 starts at 0)
                first = smax(0, mlo)
            if _provably_nonnegative(n - mhi):
                last = mhi - 1
            elif not _provably_nonnegative(mhi - n):  # (a mask ending at or past n ends at n)
                last = smin(n, mhi) - 1
            extent = last - first + 1
        if isinstance(extent, int):
            if extent <= 0:
                return None
        else:
            guards.append(extent)
        if _provably_nonnegative(s):  # also a symbolic contiguous stride (a product of symbols)
            lo, hi = lo + s * first, hi + s * last
        elif _provably_nonnegative(-s):
            lo, hi = lo + s * last, hi + s * first
        else:
            a, b = s * first, s * last
            lo, hi = lo + smin(a, b), hi + smax(a, b)
    return lo, hi, tuple(dict.fromkeys(guards))


class EntryChecks:
    """The distinct conditions ``expr >= 0`` a graph needs, each with the nodes that need it."""

    __slots__ = ("conditions", "symbols")

    def __init__(self, conditions: list[tuple[Dim, tuple[Site, ...]]]) -> None:
        self.conditions = conditions
        self.symbols = sorted(set().union(*(symbols_of(e) for e, _ in conditions))) if conditions else []

    def __len__(self) -> int:
        return len(self.conditions)

    def check(self, sym: Mapping[str, int]) -> None:
        """Raise SymbolError when ``sym`` violates a condition that a non-empty window or a dimension needs."""
        try:
            for e, sites in self.conditions:
                if (e if e.__class__ is int else e.evaluate(sym)) >= 0:  # type: ignore[union-attr]
                    continue
                for site in sites:
                    if all(evaluate(g, sym) > 0 for g in site.guards):
                        raise _error(e, site, sym)
        except ZeroDivisionError:  # a symbolic // or % whose divisor is 0 under this binding
            raise SymbolError(f"a shape or window divides by a symbol that is 0 under {dict(sym)}",
                              hint="bind the symbols to values that make every divisor positive") from None

    def to_json(self) -> list:
        """JSON data (a program's stored interface, models/warm_start.py); :meth:`from_json` rebuilds it."""
        return [[encode_value(e), [[s.kind, s.node_id, s.op, s.source, encode_value(s.guards), encode_value(s.lo),
                                    encode_value(s.hi), encode_value(s.size), s.buffer, encode_value(s.buffer_shape)]
                                   for s in sites]] for e, sites in self.conditions]

    @classmethod
    def from_json(cls, data: list) -> EntryChecks:
        return cls([(decode_value(e), tuple(Site(str(k), int(i), str(op), src, decode_value(g), decode_value(lo),
                                                 decode_value(hi), decode_value(size), buf, decode_value(shape))
                                            for k, i, op, src, g, lo, hi, size, buf, shape in sites))
                    for e, sites in data])

    def describe(self) -> list[str]:
        """One line per condition, e.g. ``pos + seq <= 128  (store at model.py:12, 'cache')``."""
        out = []
        for e, sites in self.conditions:
            s = sites[0]
            where = f"{s.op} at {s.source}" if s.source else f"{s.op} node {s.node_id}"
            out.append(f"{condition_text(e)}  ({where}{f', {s.buffer!r}' if s.buffer else ''}"
                       f"{f', +{len(sites) - 1} more' if len(sites) > 1 else ''})")
        return out


def _normalized(e: Dim) -> Dim:
    """``e`` divided by the gcd of its coefficients (the same condition ``e >= 0``): ``128*(256 - pos - seq)``
    and ``32*(256 - pos - seq)`` from two buffers become one condition."""
    if isinstance(e, int):
        return e
    g = 0
    for _, c in e.terms:
        g = gcd(g, c)
    return Expr.make({m: c // g for m, c in e.terms}) if g > 1 else e


def condition_text(e: Dim) -> str:
    """``e >= 0`` in words with the terms on their natural sides: ``16*(128 - pos - seq)`` -> ``pos + seq <= 128``."""
    if isinstance(e, int):
        return f"{e} >= 0"
    g = 0
    for _, c in e.terms:
        g = gcd(g, c)
    g = g or 1
    pos: dict = {}
    neg: dict = {}
    for m, c in e.terms:
        (pos if c > 0 else neg)[m] = abs(c) // g
    return f"{_plain(Expr.make(neg) if neg else 0)} <= {_plain(Expr.make(pos) if pos else 0)}"


def _plain(d: Dim) -> str:
    """A dimension as a user writes it: ``n - 5`` rather than ``((-5) + n)``."""
    if isinstance(d, int):
        return str(d)
    terms = sorted(d.terms, key=lambda mc: (mc[1] < 0, mc[0] == ()))
    out = ""
    for i, (m, c) in enumerate(terms):
        mono = str(Expr.make({m: 1})) if m else ""
        mag = abs(c)
        body = mono if mag == 1 and mono else f"{mag}*{mono}" if mono else str(mag)
        out += (body if c > 0 else f"-{body}") if i == 0 else (f" + {body}" if c > 0 else f" - {body}")
    return out


def _shape_text(shape: tuple) -> str:
    return "(" + ", ".join(_plain(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _bound(sym: Mapping[str, int], *dims: Dim) -> dict[str, int]:
    names = sorted(set().union(*(symbols_of(d) for d in dims)))
    return {s: sym[s] for s in names if s in sym}


def _error(e: Dim, site: Site, sym: Mapping[str, int]) -> SymbolError:
    values = _bound(sym, e, site.lo, site.hi, site.size, *site.guards)
    cond = condition_text(e)
    if site.kind == "dim":
        return SymbolError(
            f"{site.op} (node {site.node_id}) would get a negative dimension {_plain(site.lo)} = "
            f"{evaluate(site.lo, sym)} under {values}: it needs {cond}",
            where=site.source,
            hint=f"choose symbol values with {cond} (a slice whose end comes before its start?)",
        )
    lo, hi, size = evaluate(site.lo, sym), evaluate(site.hi, sym), evaluate(site.size, sym)
    what = "writes" if site.op == "store" else "reads"
    buf = f"{site.buffer!r} (shape {_shape_text(site.buffer_shape)})" if site.buffer \
        else f"a buffer of shape {_shape_text(site.buffer_shape)}"
    return SymbolError(
        f"{site.op} {what} elements {lo}..{hi} of {buf}, which has {size} elements, under {values}: "
        f"symbol(s) {', '.join(values) or '(none)'} out of range; the window needs {cond}",
        where=site.source,
        hint=f"{cond.replace(' <= ', ' must not exceed ')} for this window (with a KV cache: the position "
             f"plus the new tokens must fit its length); nothing was run",
    )


def _windowed(g: Graph, n: Node, memo: dict) -> Iterable[tuple[Dim, Site]]:
    """The (normalized condition, site) pairs of one view/store. The symbolic arithmetic is done once per
    distinct window (``memo``): the layers of a transformer repeat the same windows."""
    a = n.attrs
    src = g.producer_of(n.reads[0])
    if src is None:
        return
    mask = getattr(a, "mask", None)
    key = (a.shape, a.strides, a.offset, mask, src.shape)
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = _window_conditions(*key)
    if not hit:
        return
    guards, lo, hi, size, conds = hit
    name = src.attrs.name if src.op == "allocate" else None
    for kind, e in conds:
        yield e, Site(kind, n.id, n.op, n.source, guards, lo, hi, size, name, tuple(src.shape))


def _window_conditions(shape: tuple, strides: tuple, offset: Dim, mask: tuple | None, src_shape: tuple) -> tuple:
    """(guards, lo, hi, size, [(kind, normalized condition)]) of a window, or () when it needs nothing."""
    dims = (*shape, *strides, offset, *src_shape, *(x for lh in (mask or ()) for x in lh))
    if not any(isinstance(d, Expr) for d in dims):
        return ()  # a static window: checked when the node was made
    ext = _window_extent(tuple(shape), tuple(strides), offset, mask)
    if ext is None:
        return ()
    lo, hi, guards = ext
    size = _numel(src_shape)
    conds = [(kind, _normalized(e)) for kind, e in (("low", lo), ("high", size - 1 - hi))
             if not _provably_nonnegative(e)]
    return (guards, lo, hi, size, conds) if conds else ()


def _sites(g: Graph, live: set[int] | None, memo: dict) -> Iterable[tuple[Dim, Site]]:
    seen_dims: set[Dim] = set()  # dimensions already known to need nothing
    for n in g:
        if live is not None and n.id not in live:
            continue
        windowed = n.op in ("view", "store")
        for shape in ((n.shape, n.attrs.shape) if windowed else (n.shape,)):
            for d in shape:
                if d.__class__ is Expr and d not in seen_dims:
                    if _provably_nonnegative(d):
                        seen_dims.add(d)
                    else:
                        yield _normalized(d), Site("dim", n.id, n.op, n.source, (), d, d, 0, None, tuple(shape))
        if windowed:
            yield from _windowed(g, n, memo)


def entry_checks(*graphs: Graph | None, live_only: bool = True) -> EntryChecks:
    """The conditions of ``graphs`` (e.g. the user's graph and the compiled one), merged by expression.

    Only nodes the outputs depend on count when ``live_only`` (a dead window never runs). Dimension
    conditions come first (a negative dimension is the root cause), sites of earlier graphs before later
    ones (the user's own node is named when it has the condition too). O(nodes) once per graph, with the
    symbolic arithmetic done once per distinct window.
    """
    dims: dict[Dim, list[Site]] = {}
    windows: dict[Dim, list[Site]] = {}
    memo: dict = {}
    for g in graphs:
        if g is None:
            continue
        live = g.live_nodes() if live_only else None
        for e, site in _sites(g, live, memo):
            (dims if site.kind == "dim" else windows).setdefault(e, []).append(site)
    conds = [(e, tuple(s)) for e, s in dims.items()] + [(e, tuple(s)) for e, s in windows.items()]
    return EntryChecks(conds)
