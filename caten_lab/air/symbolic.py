"""Symbolic integer expressions for shapes, strides and offsets.

Shape arithmetic stays out of the graph: a dimension is either an ``int`` or an :class:`Expr`,
a polynomial over named symbols (``Sym("seq")``) kept in a canonical sum-of-monomials form, so
``seq + pos - pos`` is ``seq`` and equal expressions hash equally. Floor division, modulo, max
and min of non-constant operands become opaque atoms inside monomials.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Union

from caten_lab.errors import SymbolError

# An atom is a symbol name or an opaque operation ("//", a, b) / ("%", a, b) / ("max", a, b) / ("min", a, b).
Atom = Union[str, tuple]  # noqa: UP007 - a runtime alias, kept compatible with the Dim alias below
Monomial = tuple  # sorted tuple of atoms (with repetition for powers)
Dim = Union[int, "Expr"]


def atom_key(a: Atom) -> str:
    """The sort key that puts the atoms of a monomial in canonical order."""
    return a if isinstance(a, str) else repr(a)




class Expr:
    """An integer polynomial over symbols; immutable and hashable. Constants are plain ints."""

    __slots__ = ("terms", "_hash")

    terms: tuple[tuple[Monomial, int], ...]

    def __init__(self, terms: Mapping[Monomial, int]) -> None:
        items = sorted(
            ((m, c) for m, c in terms.items() if c != 0), key=lambda mc: [atom_key(a) for a in mc[0]]
        )
        object.__setattr__(self, "terms", tuple(items))
        object.__setattr__(self, "_hash", hash(self.terms))

    # ---- construction helpers -------------------------------------------------------------
    @staticmethod
    def make(terms: Mapping[Monomial, int]) -> Dim:
        """Build an Expr, collapsing to an int when it is constant."""
        nz = {m: c for m, c in terms.items() if c != 0}
        if not nz:
            return 0
        if len(nz) == 1 and () in nz:
            return nz[()]
        return Expr(nz)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Expr is immutable")

    def __reduce__(self) -> tuple:  # pickle through the constructor (the slots are read-only)
        return (Expr, (dict(self.terms),))

    # ---- arithmetic -----------------------------------------------------------------------
    def _terms(self) -> dict[Monomial, int]:
        return dict(self.terms)

    def __add__(self, other: Dim) -> Dim:
        t = self._terms()
        for m, c in _as_terms(other).items():
            t[m] = t.get(m, 0) + c
        return Expr.make(t)

    __radd__ = __add__

    def __neg__(self) -> Dim:
        return Expr.make({m: -c for m, c in self.terms})

    def __sub__(self, other: Dim) -> Dim:
        return self + (-other)

    def __rsub__(self, other: Dim) -> Dim:
        return (-self) + other

    def __mul__(self, other: Dim) -> Dim:
        out: dict[Monomial, int] = {}
        for m1, c1 in self.terms:
            for m2, c2 in _as_terms(other).items():
                m = tuple(sorted(m1 + m2, key=atom_key))
                out[m] = out.get(m, 0) + c1 * c2
        return Expr.make(out)

    __rmul__ = __mul__

    def __floordiv__(self, other: Dim) -> Dim:
        return floordiv(self, other)

    def __rfloordiv__(self, other: Dim) -> Dim:
        return floordiv(other, self)

    def __mod__(self, other: Dim) -> Dim:
        return mod(self, other)

    def __rmod__(self, other: Dim) -> Dim:
        return mod(other, self)

    # ---- comparison / hashing -----------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        return isinstance(other, Expr) and self._hash == other._hash and self.terms == other.terms

    def __hash__(self) -> int:
        return self._hash

    def __bool__(self) -> bool:
        return True  # a non-constant expression is never the constant 0

    def __lt__(self, other: object) -> bool:
        raise SymbolError(
            f"cannot decide {self} < {other}: the comparison depends on symbol values",
            hint="compare after binding symbols, or restructure so the comparison is not needed",
        )

    __le__ = __gt__ = __ge__ = __lt__

    # ---- queries --------------------------------------------------------------------------
    def symbols(self) -> set[str]:
        out: set[str] = set()
        for m, _ in self.terms:
            for a in m:
                _collect_symbols(a, out)
        return out

    def evaluate(self, bindings: Mapping[str, int]) -> int:
        total = 0
        for m, c in self.terms:
            v = c
            for a in m:
                v *= _eval_atom(a, bindings)
            total += v
        return total

    def substitute(self, bindings: Mapping[str, Dim]) -> Dim:
        total: Dim = 0
        for m, c in self.terms:
            v: Dim = c
            for a in m:
                v = v * _subst_atom(a, bindings)
            total = total + v
        return total

    def render(self, name: callable = str) -> str:  # type: ignore[valid-type]
        """Render as a C / Python integer expression; ``name`` maps symbol names to identifiers."""
        parts = []
        for m, c in self.terms:
            factors = [_render_atom(a, name) for a in m]
            if c != 1 or not factors:
                factors.insert(0, str(c) if c >= 0 else f"({c})")
            parts.append("*".join(factors))
        return "(" + " + ".join(parts) + ")" if len(parts) > 1 else parts[0]

    def __repr__(self) -> str:
        return self.render()

    __str__ = __repr__

    def to_json(self) -> dict:
        return {"expr": [[c, [_atom_to_json(a) for a in m]] for m, c in self.terms]}

    @staticmethod
    def from_json(obj: dict) -> Dim:
        terms: dict[Monomial, int] = {}
        for c, atoms in obj["expr"]:
            m = tuple(sorted((_atom_from_json(a) for a in atoms), key=atom_key))
            terms[m] = terms.get(m, 0) + c
        return Expr.make(terms)


def Sym(name: str) -> Expr:  # noqa: N802 - reads like a type in user code
    """A named symbolic integer, bound at run time (e.g. ``Sym("seq")``)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise SymbolError(f"symbol name must be an identifier, got {name!r}")
    return Expr({(name,): 1})  # type: ignore[return-value]


def is_sym(x: object) -> bool:
    return isinstance(x, Expr)


def _as_terms(x: Dim) -> dict[Monomial, int]:
    if isinstance(x, Expr):
        return dict(x.terms)
    if isinstance(x, bool) or not isinstance(x, int):
        raise SymbolError(f"symbolic arithmetic needs ints or symbols, got {x!r} ({type(x).__name__})")
    return {(): x}


def _opaque(op: str, a: Dim, b: Dim) -> Dim:
    return Expr({((op, a, b),): 1})


def floordiv(a: Dim, b: Dim) -> Dim:
    """Floor division that simplifies when every coefficient divides evenly."""
    if isinstance(a, int) and isinstance(b, int):
        return a // b
    if isinstance(b, int):
        if b == 1:
            return a
        if b > 0 and all(c % b == 0 for _, c in a.terms):  # type: ignore[union-attr]
            return Expr.make({m: c // b for m, c in a.terms})  # type: ignore[union-attr]
    if a == b:
        return 1
    return _opaque("//", a, b)


def mod(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return a % b
    if isinstance(b, int) and b > 0 and all(c % b == 0 for _, c in a.terms):  # type: ignore[union-attr]
        return 0
    if a == b:
        return 0
    return _opaque("%", a, b)


def smax(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return max(a, b)
    if a == b:
        return a
    return _opaque("max", *sorted((a, b), key=repr))


def smin(a: Dim, b: Dim) -> Dim:
    if isinstance(a, int) and isinstance(b, int):
        return min(a, b)
    if a == b:
        return a
    return _opaque("min", *sorted((a, b), key=repr))


def evaluate(d: Dim, bindings: Mapping[str, int]) -> int:
    """The integer value of a dimension under ``bindings`` (SymbolError if a symbol is unbound)."""
    return d if isinstance(d, int) else d.evaluate(bindings)


def symbols_of(d: Dim) -> set[str]:
    return d.symbols() if isinstance(d, Expr) else set()


def render(d: Dim, name: callable = str) -> str:  # type: ignore[valid-type]
    return str(d) if isinstance(d, int) else d.render(name)


def dim_to_json(d: Dim) -> int | dict:
    return d if isinstance(d, int) else d.to_json()


def dim_from_json(x: int | dict) -> Dim:
    return x if isinstance(x, int) else Expr.from_json(x)


def _collect_symbols(a: Atom, out: set[str]) -> None:
    if isinstance(a, str):
        out.add(a)
    else:
        for x in a[1:]:
            out |= symbols_of(x)


def _eval_atom(a: Atom, bindings: Mapping[str, int]) -> int:
    if isinstance(a, str):
        try:
            return bindings[a]
        except KeyError:
            raise SymbolError(
                f"symbol {a!r} is not bound", hint=f"pass a value for {a!r} (e.g. symbols={{'{a}': 8}})"
            ) from None
    op, x, y = a
    xv, yv = evaluate(x, bindings), evaluate(y, bindings)
    if op == "//":
        return xv // yv
    if op == "%":
        return xv % yv
    if op == "max":
        return max(xv, yv)
    return min(xv, yv)


def _subst_atom(a: Atom, bindings: Mapping[str, Dim]) -> Dim:
    if isinstance(a, str):
        return bindings.get(a, Expr({(a,): 1}))
    op, x, y = a
    xs = x.substitute(bindings) if isinstance(x, Expr) else x
    ys = y.substitute(bindings) if isinstance(y, Expr) else y
    return {"//": floordiv, "%": mod, "max": smax, "min": smin}[op](xs, ys)


def _render_atom(a: Atom, name: callable) -> str:  # type: ignore[valid-type]
    if isinstance(a, str):
        return name(a)
    op, x, y = a
    xs, ys = render(x, name), render(y, name)
    if op in ("max", "min"):
        return f"{op}({xs}, {ys})"
    return f"({xs} {op} {ys})"


def _atom_to_json(a: Atom) -> object:
    if isinstance(a, str):
        return a
    return [a[0], dim_to_json(a[1]), dim_to_json(a[2])]


def _atom_from_json(a: object) -> Atom:
    if isinstance(a, str):
        return a
    op, x, y = a  # type: ignore[misc]
    return (op, dim_from_json(x), dim_from_json(y))
