"""Index arithmetic for fusion and lowering: views become index expressions, never copies.

Loop variables are symbols whose names start with ``__`` (user symbols never do); everything is an
``air.symbolic`` expression, so symbolic sizes flow through unchanged. The central operation is
:func:`unravel`: the coordinates of a flat storage position inside a contiguous shape. Done
naively it is a chain of ``//`` and ``%``; here each axis is simplified from the linear form of
the flat index and the loop bounds, so reshapes, permutes and broadcasts compose into plain
``i*stride`` sums. Results are memoized: identical transformer blocks hit the memo. Nothing here
knows C: codegen lowers these expressions to the kernel IR (``codegen/symbolic_kir.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.symbolic import Dim, Expr, atom_key, floordiv, mod, symbols_of

LOOP_PREFIX = "__"


def is_loop_var(name: str) -> bool:
    return name.startswith(LOOP_PREFIX)


def loop_var(name: str) -> Expr:
    """A loop variable as a symbolic expression (``name`` must start with ``__``)."""
    return Expr({(name,): 1})


_flat_memo: dict[tuple, Dim] = {}


def flat_index(coords: tuple, strides: tuple, offset: Dim = 0) -> Dim:
    """``offset + sum(c_k * s_k)``: the storage position of ``coords`` in a strided window (memoized)."""
    key = (coords, strides, offset)
    hit = _flat_memo.get(key)
    if hit is not None:
        return hit
    if len(_flat_memo) > 200_000:
        _flat_memo.clear()
    out = _flat_index(coords, strides, offset)
    _flat_memo[key] = out
    return out


def _flat_index(coords: tuple, strides: tuple, offset: Dim) -> Dim:
    f: Dim = offset
    for c, s in zip(coords, strides):
        if isinstance(c, int) and c == 0 or isinstance(s, int) and s == 0:
            continue
        f = f + c * s
    return f


_lv_memo: dict[Dim, frozenset[str]] = {}


def loop_vars_of(d: Dim) -> frozenset[str]:
    """The loop variables ``d`` depends on (memoized: expressions are immutable and hash fast)."""
    if isinstance(d, int):
        return frozenset()
    hit = _lv_memo.get(d)
    if hit is None:
        if len(_lv_memo) > 200_000:
            _lv_memo.clear()
        hit = frozenset(s for s in symbols_of(d) if is_loop_var(s))
        _lv_memo[d] = hit
    return hit


def _atom_has_loop(a: object) -> bool:
    if isinstance(a, str):
        return is_loop_var(a)
    return bool(loop_vars_of(a[1]) or loop_vars_of(a[2]))  # type: ignore[index]


def linear_form(d: Dim) -> tuple[dict[str, Dim], Dim] | None:
    """``d`` as ``sum(coef_v * v) + const`` over loop variables v, or None if not linear in them."""
    lin = linear_form_atoms(d)
    if lin is None or not all(isinstance(v, str) for v in lin[0]):
        return None
    return lin


def exact_div(a: Dim, b: Dim) -> Dim | None:
    """``a / b`` when it divides exactly as polynomials, else None."""
    if isinstance(b, int):
        if b == 0:
            return None
        if isinstance(a, int):
            return a // b if a % b == 0 else None
        if all(c % b == 0 for _, c in a.terms):
            return Expr.make({m: c // b for m, c in a.terms})
        return None
    if len(b.terms) != 1:
        return 1 if a == b else _poly_div(a, b)
    bm, bc = b.terms[0]
    if isinstance(a, int):
        return None
    out: dict = {}
    for m, c in a.terms:
        rest = list(m)
        for atom in bm:
            if atom in rest:
                rest.remove(atom)
            else:
                return None
        if c % bc:
            return None
        key = tuple(sorted(rest, key=atom_key))
        out[key] = out.get(key, 0) + c // bc
    return Expr.make(out)


def _grlex(m: tuple) -> tuple:
    """A monomial order compatible with multiplication (degree first, then the atoms' names)."""
    return (len(m), sorted((atom_key(x) for x in m), reverse=True))


def _poly_div(a: Dim, b: Expr) -> Dim | None:
    """``a / b`` for a divisor of several terms, by polynomial long division on leading terms.

    Attention over a KV cache reshapes ``[heads, seq, pos + seq]`` probabilities, so strides such as
    ``seq*pos + seq*seq`` must be seen as ``seq * (pos + seq)``; without this the unravelled index
    keeps a ``%``/``//`` by ``pos + seq`` per element. Exact division succeeds on leading terms in
    any fixed monomial order, so a failure here means "does not divide"."""
    if isinstance(a, int):
        return 0 if a == 0 else None
    lead_b, cb = max(b.terms, key=lambda mc: _grlex(mc[0]))
    q: Dim = 0
    r: Dim = a
    for _ in range(64):
        if isinstance(r, int):
            return q if r == 0 else None
        lead_r, cr = max(r.terms, key=lambda mc: _grlex(mc[0]))
        rest = list(lead_r)
        for atom in lead_b:
            if atom not in rest:
                return None
            rest.remove(atom)
        if cr % cb:
            return None
        t = Expr.make({tuple(sorted(rest, key=atom_key)): cr // cb})
        q = q + t
        r = r - t * b
    return None


def nonneg(d: Dim) -> bool:
    """Provably >= 0, taking every symbol, loop variable and opaque atom as >= 0."""
    if isinstance(d, int):
        return d >= 0
    return all(c >= 0 for _, c in d.terms)


def less(a: Dim, b: Dim) -> bool:
    """Provably ``a < b``."""
    return nonneg(b - a - 1)


def _range(coefs: Mapping[str, Dim], const: Dim, bounds: Mapping[str, Dim]) -> tuple[Dim, Dim] | None:
    lo: Dim = const
    hi: Dim = const
    for v, a in coefs.items():
        span = a * (bounds[v] - 1)
        if nonneg(a):
            hi = hi + span
        elif nonneg(-a):
            lo = lo + span
        else:
            return None
    return lo, hi


_memo: dict[tuple, tuple] = {}


def unravel(flat: Dim, shape: tuple, bounds: Mapping[str, Dim]) -> tuple:
    """Coordinates of storage position ``flat`` in a contiguous array of ``shape``.

    ``bounds`` gives the extent of every loop variable in ``flat`` (each runs over [0, extent)).
    """
    lv = sorted(loop_vars_of(flat))
    key = (flat, shape, tuple((v, bounds[v]) for v in lv))
    hit = _memo.get(key)
    if hit is not None:
        return hit
    out = _unravel(flat, shape, bounds)
    if len(_memo) > 200_000:
        _memo.clear()
    _memo[key] = out
    return out


def linear_form_atoms(d: Dim) -> tuple[dict, Dim] | None:
    """Like :func:`linear_form`, but a floor division or remainder of loop variables (what unravelling a
    reshape leaves, ``l // 3``, ``l % 3``) may stand where a loop variable does: the keys are loop
    variable names or those ``("//" | "%", x, e)`` atoms."""
    if isinstance(d, int):
        return {}, d
    coefs: dict = {}
    const: dict = {}
    for m, c in d.terms:
        loops = [a for a in m if _atom_has_loop(a)]
        if not loops:
            const[m] = const.get(m, 0) + c
            continue
        v = loops[0]
        if len(loops) != 1 or not isinstance(v, str) and v[0] not in ("//", "%"):
            return None
        rest = list(m)
        rest.remove(v)
        coefs[v] = coefs.get(v, 0) + Expr.make({tuple(rest): c})
    return coefs, Expr.make(const)


def _extents(coefs: Mapping, bounds: Mapping[str, Dim]) -> dict | None:
    """The extent of every key of an :func:`linear_form_atoms` form (values lie in [0, extent)), or None."""
    out: dict = {}
    for v in coefs:
        e = bounds.get(v) if isinstance(v, str) else _atom_extent(v, bounds)
        if e is None:
            return None
        out[v] = e
    return out


def _atom_extent(a: tuple, bounds: Mapping[str, Dim]) -> Dim | None:
    """``x // e`` or ``x % e`` lies in [0, extent) when x is provably >= 0 and e >= 1: the extent."""
    op, x, e = a
    if not nonneg(e - 1):
        return None
    lin = linear_form_atoms(x)
    ext = None if lin is None else _extents(lin[0], bounds)
    rng = None if ext is None or lin is None else _range(lin[0], lin[1], ext)
    if rng is None or not nonneg(rng[0]):
        return None
    return e if op == "%" else floordiv(rng[1], e) + 1


def _unravel(flat: Dim, shape: tuple, bounds: Mapping[str, Dim]) -> tuple:
    if any(isinstance(d, int) and d == 0 for d in shape):
        return tuple(0 for _ in shape)  # an empty array: no element is ever read
    strides = contiguous_strides(shape)
    lin = linear_form_atoms(flat)
    ext = None if lin is None else _extents(lin[0], bounds)
    if ext is None:
        lin = None
    else:
        bounds = {**bounds, **ext}
    out: list[Dim] = []
    for size, c_m in zip(shape, strides):
        if isinstance(size, int) and size == 1:
            out.append(0)
            continue
        out.append(_axis_coord(flat, lin, size, c_m, bounds))
    return tuple(out)


def _positive(d: Dim) -> bool:
    """Provably >= 1 for every size >= 1 (a nonzero polynomial with nonnegative coefficients)."""
    return nonneg(d) and not (isinstance(d, int) and d == 0)


def _key_term(v: object) -> Expr:
    """A key of an :func:`linear_form_atoms` form as an expression (a loop variable or a div/mod atom)."""
    return Expr({(v,): 1})


def _one_term_quotient(coefs: Mapping, const: Dim, c_m: Dim, size: Dim, bounds: Mapping) -> Dim | None:
    """``flat // c_m`` as ``v // k`` when ``flat = a*v + rest`` with ``c_m = k*a`` and ``0 <= rest < a``
    (then ``(a*v + rest) // (k*a) == v // k``): the head index of a reshape of ``(h, t, d)`` read at
    ``64*t + 64*seq*h + d``, over ``192*seq``, is ``h // 3`` (both ``flat`` and ``c_m`` symbolic)."""
    for v, a in coefs.items():
        k = exact_div(c_m, a)
        if k is None or not _positive(a) or not _positive(k):
            continue
        others = {w: b for w, b in coefs.items() if w != v}
        rng = _range(others, const, bounds)
        if rng is None or not nonneg(rng[0]) or not less(rng[1], a):
            continue
        out = floordiv(_key_term(v), k)
        return out if less(floordiv(bounds[v] - 1, k), size) else mod(out, size)
    return None


def _axis_coord(flat: Dim, lin: tuple | None, size: Dim, c_m: Dim, bounds: Mapping[str, Dim]) -> Dim:
    if lin is not None:
        coefs, const = lin
        cs = c_m * size
        mid: dict[str, Dim] = {}
        low_max: Dim = 0
        ok = True
        for v, a in coefs.items():
            if exact_div(a, cs) is not None:
                continue
            q = exact_div(a, c_m)
            if q is not None:
                mid[v] = q
            elif nonneg(a):
                low_max = low_max + a * (bounds[v] - 1)
            else:
                ok = False
                break
        q0: Dim = 0
        if ok:
            if isinstance(const, int) and isinstance(c_m, int):
                q0, r = divmod(const, c_m)
                low_max = low_max + r
            else:
                qc = exact_div(const, c_m)
                if qc is not None:
                    q0 = qc
                elif nonneg(const):
                    low_max = low_max + const
                else:
                    ok = False
        if ok and less(low_max, c_m):
            coord: Dim = q0
            for v, q in mid.items():
                coord = coord + q * _key_term(v)
            rng = _range(mid, q0, bounds)
            if rng is not None and nonneg(rng[0]) and less(rng[1], size):
                return coord
            return mod(coord, size)
        rng = _range(coefs, const, bounds)
        q = floordiv(flat, c_m)
        if rng is not None and nonneg(rng[0]) and less(rng[1], c_m * size):
            return _one_term_quotient(coefs, const, c_m, size, bounds) or q
        # terms that are whole multiples of c_m * size only add multiples of size to flat // c_m, which
        # the coordinate drops: the rest alone gives it (no % at all when it stays in [0, c_m * size)),
        # e.g. the block and sub-block coordinates along a row of a blocked (quantized) layout
        low = {v: a for v, a in coefs.items() if exact_div(a, cs) is None}
        if len(low) < len(coefs):
            rng = _range(low, const, bounds)
            if rng is not None and nonneg(rng[0]):
                rest: Dim = const
                for v, a in low.items():
                    rest = rest + a * _key_term(v)
                return floordiv(rest, c_m) if less(rng[1], cs) else mod(floordiv(rest, c_m), size)
        return _one_term_quotient(coefs, const, c_m, size, bounds) or mod(q, size)
    return mod(floordiv(flat, c_m), size)


def fold_divmod(d: Dim) -> Dim:
    """Rewrite ``c*E*(x // E) + c*(x % E)`` into ``c*x`` (what collapsing loops produces)."""
    if isinstance(d, int):
        return d
    terms = dict(d.terms)
    changed = True
    while changed:
        changed = False
        for m, c in list(terms.items()):
            if len(m) != 1 or not isinstance(m[0], tuple) or m[0][0] != "%":
                continue
            _, x, e = m[0]
            dm = (("//", x, e),)
            want = c * e
            if not isinstance(want, int):
                continue
            if terms.get(dm) == want:
                del terms[m]
                del terms[dm]
                for mm, cc in (x.terms if isinstance(x, Expr) else (((), x),)):
                    terms[mm] = terms.get(mm, 0) + cc * c
                terms = {k: v for k, v in terms.items() if v}
                changed = True
                break
    return Expr.make(terms)
