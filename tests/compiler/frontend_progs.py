"""Random frontend (Tensor) programs on hostile values, for the three-way differential fuzz:
the compiled C backend, the NumPy interpreter and a NumPy (or, where they differ, PyTorch-semantics)
reference must agree.

Inputs mix ordinary values with the values that break naive formulations: NaN, +-inf, -0.0, the
largest finite value and, for integers, the type's minimum and maximum (``~x`` vs ``-x``). Shapes may
have size-0 axes. Besides elementwise math, reductions and movement ops, a case can store into a
*derived* tensor (``y = f(x); y[window] = v``): the user's array behind ``x`` must not change.

A case whose NumPy reference raises (``max`` over an empty axis) must raise a ShapeError from the
frontend too. One example packs many cases into one ``realize`` call: one C compile checks them all.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from hypothesis import strategies as st

from caten_lab.frontend import Tensor

FLOAT = ("float16", "float32", "float64")
INT = ("int8", "uint8", "int32", "uint32", "int64")
SIGNED = ("int8", "int32", "int64")
ALL = ("bool", *INT, *FLOAT)


def specials(dtype: str, extremes: bool = True) -> np.ndarray:
    """The hostile values of ``dtype`` (``extremes``: include the largest magnitudes)."""
    if dtype not in FLOAT:
        extremes = True  # integer extremes are exact everywhere (two's complement wraps)
    if dtype == "bool":
        return np.array([False, True])
    if dtype in FLOAT:
        fi = np.finfo(dtype)
        vals = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1.0, -1.0, 0.5, -2.5, 3.0]
        if extremes:
            vals += [float(fi.max), float(fi.min), float(fi.tiny)]
        return np.array(vals, dtype=dtype)
    ii = np.iinfo(dtype)
    vals = [0, 1, 2, 3]
    if ii.min < 0:
        vals += [-1, -3]
    if extremes:
        vals += [ii.min, ii.max, ii.min + 1, ii.max - 1]
    return np.array(vals, dtype=dtype)


def hostile(rng: np.random.Generator, dtype: str, shape: tuple, extremes: bool = True) -> np.ndarray:
    """An array of ``shape`` where about half the elements are special values."""
    n = int(np.prod(shape))
    if dtype == "bool":
        return (rng.random(n) < 0.5).reshape(shape)
    if dtype in FLOAT:
        base = rng.uniform(-4, 4, n).astype(dtype)
    else:
        ii = np.iinfo(dtype)
        base = rng.integers(ii.min, ii.max, n, endpoint=True, dtype=dtype)
    sp = specials(dtype, extremes)
    pick = rng.random(n) < 0.5
    base[pick] = sp[rng.integers(0, len(sp), int(pick.sum()))]
    return base.reshape(shape)


# ---- NumPy references (where NumPy and torch differ, torch semantics; noted per op) ---------------


def _f64(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """Compute in float64 and round once to the operand dtype (as the frontend's composites do)."""

    def ref(*xs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*(x.astype(np.float64) for x in xs))).astype(xs[0].dtype)

    return ref


def _np(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def ref(*xs: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(fn(*xs))

    return ref


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    if x.shape[axis] == 0:  # torch: an empty softmax is empty (NumPy's max would raise)
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _torch(fn: Callable[..., torch.Tensor]) -> Callable[..., np.ndarray]:
    """A torch reference in float64, rounded once to the operand dtype (NumPy has no erf)."""

    def ref(*xs: np.ndarray) -> np.ndarray:
        return fn(*(torch.from_numpy(x.astype(np.float64)) for x in xs)).numpy().astype(xs[0].dtype)

    return ref


def _sign_torch(x: np.ndarray) -> np.ndarray:  # torch.sign(nan) is 0 (np.sign gives nan)
    return np.nan_to_num(np.sign(x), nan=0.0).astype(x.dtype) if x.dtype.kind == "f" else np.sign(x)


def _int_divisor(b: np.ndarray) -> np.ndarray:
    return np.where(b == 0, np.ones_like(b), b)  # integer // 0 is another helper's error case


@dataclass(frozen=True)
class Op:
    name: str
    arity: int
    dtypes: tuple[str, ...]
    run: Callable[..., Any]  # on Tensors
    ref: Callable[..., np.ndarray]  # on arrays
    extremes: bool = True  # may the inputs hold the largest magnitudes?
    divisor: bool = False  # the second operand is an integer divisor (no zeros)


UNARY = [
    Op("neg", 1, (*SIGNED, *FLOAT), lambda x: -x, _np(np.negative)),
    Op("abs", 1, (*INT, *FLOAT), lambda x: x.abs(), _np(np.abs)),
    Op("sign", 1, (*SIGNED, *FLOAT), lambda x: x.sign(), _np(_sign_torch)),
    Op("invert", 1, ("bool", *INT), lambda x: ~x, _np(np.invert)),
    Op("logical_not", 1, ALL, lambda x: x.logical_not(), _np(np.logical_not)),
    Op("square", 1, (*INT, *FLOAT), lambda x: x.square(), _np(np.square)),
    Op("sqrt", 1, FLOAT, lambda x: x.sqrt(), _f64(np.sqrt)),
    Op("exp", 1, FLOAT, lambda x: x.exp(), _f64(np.exp)),
    Op("log", 1, FLOAT, lambda x: x.log(), _f64(np.log)),
    Op("sigmoid", 1, FLOAT, lambda x: x.sigmoid(), _f64(_sigmoid)),
    Op("tanh", 1, FLOAT, lambda x: x.tanh(), _f64(np.tanh)),
    Op("relu", 1, (*SIGNED, *FLOAT), lambda x: x.relu(), _np(lambda a: np.maximum(a, 0).astype(a.dtype))),
    Op("floor", 1, FLOAT, lambda x: x.floor(), _np(np.floor)),
    Op("ceil", 1, FLOAT, lambda x: x.ceil(), _np(np.ceil)),
    Op("trunc", 1, FLOAT, lambda x: x.trunc(), _np(np.trunc)),
    # erf is a polynomial with |error| < 1.5e-7 (documented): exact enough for float32, not float64
    Op("erf", 1, ("float16", "float32"), lambda x: x.erf(), _torch(torch.erf)),
    Op("gelu", 1, ("float16", "float32"), lambda x: x.gelu(), _torch(torch.nn.functional.gelu)),
    Op("silu", 1, FLOAT, lambda x: x.silu(), _torch(torch.nn.functional.silu)),
    Op("cos", 1, FLOAT, lambda x: x.cos(), _f64(np.cos), extremes=False),
    Op("square float", 1, FLOAT, lambda x: x ** 2, _np(np.square)),
    Op("pow 3", 1, (*INT, *FLOAT), lambda x: x ** 3, _np(lambda a: a * a * a)),
    Op("pow 0.5", 1, FLOAT, lambda x: x ** 0.5, _f64(np.sqrt)),
    Op("pow -1", 1, FLOAT, lambda x: x ** -1, _f64(np.reciprocal)),
    Op("reciprocal", 1, FLOAT, lambda x: x.reciprocal(), _f64(np.reciprocal)),
    Op("clamp", 1, (*SIGNED, *FLOAT), lambda x: x.clamp(-2, 1), _np(lambda a: np.clip(a, -2, 1).astype(a.dtype))),
    Op("clamp lo>hi", 1, (*SIGNED, *FLOAT), lambda x: x.clamp(1, -2),
       _np(lambda a: np.minimum(np.maximum(a, 1), -2).astype(a.dtype))),
    Op("cast float32", 1, ("bool", *INT, *FLOAT), lambda x: x.cast("float32"), _np(lambda a: a.astype(np.float32))),
    Op("cast bool", 1, ALL, lambda x: x.cast("bool"), _np(lambda a: a.astype(bool))),
    Op("cast int64", 1, ("bool", *INT), lambda x: x.cast("int64"), _np(lambda a: a.astype(np.int64))),
    Op("cast int8", 1, ("bool", *INT), lambda x: x.cast("int8"), _np(lambda a: a.astype(np.int8))),
]

BINARY = [
    Op("add", 2, (*INT, *FLOAT), lambda x, y: x + y, _np(np.add)),
    Op("sub", 2, (*INT, *FLOAT), lambda x, y: x - y, _np(np.subtract)),
    Op("mul", 2, (*INT, *FLOAT), lambda x, y: x * y, _np(np.multiply)),
    Op("div", 2, FLOAT, lambda x, y: x / y, _f64(np.divide), extremes=False),
    Op("floordiv", 2, (*INT, *FLOAT), lambda x, y: x // y, _np(np.floor_divide), extremes=False, divisor=True),
    Op("mod", 2, (*INT, *FLOAT), lambda x, y: x % y, _np(np.remainder), extremes=False, divisor=True),
    Op("maximum", 2, ALL, lambda x, y: x.maximum(y), _np(np.maximum)),
    Op("minimum", 2, ALL, lambda x, y: x.minimum(y), _np(np.minimum)),
    Op("lt", 2, ALL, lambda x, y: x < y, _np(np.less)),
    Op("le", 2, ALL, lambda x, y: x <= y, _np(np.less_equal)),
    Op("eq", 2, ALL, lambda x, y: x == y, _np(np.equal)),
    Op("ne", 2, ALL, lambda x, y: x != y, _np(np.not_equal)),
    Op("ge", 2, ALL, lambda x, y: x >= y, _np(np.greater_equal)),
    Op("and", 2, ("bool", *INT), lambda x, y: x & y, _np(np.bitwise_and)),
    Op("xor", 2, ("bool", *INT), lambda x, y: x ^ y, _np(np.bitwise_xor)),
    Op("where", 2, ALL, lambda x, y: (x != y).where(x, y), _np(lambda a, b: np.where(a != b, a, b))),
]


def _sum_ref(a: np.ndarray, axis: Any) -> np.ndarray:  # torch: ints sum to int64, bool too
    if a.dtype.kind in "biu":
        return np.sum(a.astype(np.int64), axis=axis)
    with np.errstate(all="ignore"):
        return np.sum(a.astype(np.float64), axis=axis).astype(a.dtype)


def _mean_ref(a: np.ndarray, axis: Any) -> np.ndarray:
    with np.errstate(all="ignore"):
        out = np.mean(a.astype(np.float64), axis=axis)
    return np.asarray(out).astype(a.dtype if a.dtype.kind == "f" else np.float32)


REDUCE = [  # (name, dtypes, run(x, axis), ref(a, axis), extremes)
    ("sum", (*INT, *FLOAT, "bool"), lambda x, ax: x.sum(ax), _sum_ref, False),
    ("mean", FLOAT, lambda x, ax: x.mean(ax), _mean_ref, False),
    ("max", ALL, lambda x, ax: x.max(ax), lambda a, ax: np.max(a, axis=ax), True),
    ("min", ALL, lambda x, ax: x.min(ax), lambda a, ax: np.min(a, axis=ax), True),
    ("argmax", ALL, lambda x, ax: x.argmax(ax), lambda a, ax: np.argmax(a, axis=ax).astype(np.int64), True),
    ("argmin", ALL, lambda x, ax: x.argmin(ax), lambda a, ax: np.argmin(a, axis=ax).astype(np.int64), True),
    ("var", FLOAT, lambda x, ax: x.var(ax), lambda a, ax: _var_ref(a, ax), False),
    ("logsumexp", FLOAT, lambda x, ax: x.logsumexp(ax if ax is not None else tuple(range(x.ndim))),
     lambda a, ax: _torch(lambda t: torch.logsumexp(t, ax if ax is not None else tuple(range(t.ndim))))(a), False),
    ("log_softmax", FLOAT, lambda x, ax: x.log_softmax(ax),
     lambda a, ax: _torch(lambda t: torch.log_softmax(t, ax))(a) if a.shape[ax] else a.copy(), False),
    ("softmax", FLOAT, lambda x, ax: x.softmax(ax), lambda a, ax: _f64(lambda v: _softmax(v, ax))(a), False),
]


def _var_ref(a: np.ndarray, axis: Any) -> np.ndarray:  # torch: correction 1; n <= 1 gives NaN
    with np.errstate(all="ignore"):
        n = a.size if axis is None else a.shape[axis]
        out = np.var(a.astype(np.float64), axis=axis, ddof=1) if n > 1 else np.full(
            np.sum(a, axis=axis).shape, np.nan)
    return np.asarray(out).astype(a.dtype)


@dataclass
class Case:
    """One checked result: ``tensor`` must realize to ``want`` (same shape, dtype and values)."""

    label: str
    tensor: Tensor
    want: np.ndarray


@dataclass
class Batch:
    cases: list[Case] = field(default_factory=list)
    inputs: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # (bound array, its copy)
    raised: list[str] = field(default_factory=list)  # labels of cases that (correctly) raised

    def bind(self, a: np.ndarray) -> Tensor:
        self.inputs.append((a, a.copy()))
        return Tensor.from_numpy(a, dtype=a.dtype)


def _shape(draw: Any, min_rank: int = 1) -> tuple:
    rank = draw(st.integers(min_rank, 3))
    return tuple(draw(st.sampled_from([0, 1, 2, 3, 4] if i == 0 else [1, 2, 3, 4, 0])) for i in range(rank))


def _case_elementwise(draw: Any, b: Batch, rng: np.random.Generator) -> None:
    op = draw(st.sampled_from(UNARY + BINARY))
    dt = draw(st.sampled_from(op.dtypes))
    shape = _shape(draw)
    arrays = [hostile(rng, dt, shape, op.extremes) for _ in range(op.arity)]
    if op.divisor and dt not in FLOAT:
        arrays[1] = _int_divisor(arrays[1])
    want = op.ref(*arrays)
    got = op.run(*(b.bind(a) for a in arrays))
    b.cases.append(Case(f"{op.name} {dt}{list(shape)}", got, want))


def _case_reduce(draw: Any, b: Batch, rng: np.random.Generator) -> None:
    name, dts, run, ref, extremes = draw(st.sampled_from(REDUCE))
    dt = draw(st.sampled_from(dts))
    shape = _shape(draw)
    axis = draw(st.sampled_from([None, *range(len(shape))])) if "softmax" not in name else draw(
        st.integers(0, len(shape) - 1))
    a = hostile(rng, dt, shape, extremes)
    label = f"{name}(axis={axis}) {dt}{list(shape)}"
    try:
        want = np.asarray(ref(a, axis))
    except ValueError:  # NumPy: no identity for an empty max/min/argmax
        from caten_lab.errors import ShapeError

        try:
            run(b.bind(a), axis)
        except ShapeError as e:
            assert "empty" in str(e), (label, str(e))
            b.raised.append(label)
            return
        raise AssertionError(f"{label}: NumPy raises (empty axis), the frontend did not") from None
    b.cases.append(Case(label, run(b.bind(a), axis), want))


def _case_movement(draw: Any, b: Batch, rng: np.random.Generator) -> None:
    kind = draw(st.sampled_from(["triu", "tril", "gather", "flip", "pad", "cat", "slice", "rows", "matmul"]))
    dt = draw(st.sampled_from(ALL))
    shape = _shape(draw, min_rank=2 if kind in ("triu", "tril") else 1)
    # a float matmul of the largest magnitudes overflows in float32 at a point that depends on the sum's
    # order (inf, or inf + -inf = nan), which the float64 reference cannot know: NaN/inf/-0.0 only there
    a = hostile(rng, dt, shape, extremes=not (kind == "matmul" and dt in FLOAT))
    x = b.bind(a)
    k = draw(st.integers(-2, 2))
    if kind in ("triu", "tril"):
        got, want = getattr(x, kind)(k), getattr(np, kind)(a, k)
    elif kind == "gather":
        ax = draw(st.integers(0, len(shape) - 1))
        ishape = list(shape)
        ishape[ax] = draw(st.integers(0, 3)) if shape[ax] else 0
        idx = rng.integers(0, max(shape[ax], 1), size=ishape).astype(np.int64)
        got, want = x.gather(ax, Tensor.from_numpy(idx)), np.take_along_axis(a, idx, ax)
    elif kind == "flip":
        ax = draw(st.integers(0, len(shape) - 1))
        got, want = x.flip(ax), np.flip(a, ax)
    elif kind == "pad":
        p = (draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        got = x.pad(p, value=0)
        want = np.pad(a, [(0, 0)] * (len(shape) - 1) + [p])
    elif kind == "cat":
        c = hostile(rng, dt, (draw(st.integers(0, 2)), *shape[1:]))
        got, want = Tensor.cat([x, b.bind(c)], 0), np.concatenate([a, c], 0)
    elif kind == "rows":  # x[int tensor]
        ids = rng.integers(0, max(shape[0], 1), size=(draw(st.integers(0, 3)),)).astype(np.int32)
        if not shape[0]:
            ids = ids[:0]
        got, want = x[Tensor.from_numpy(ids)], a[ids]
    elif kind == "matmul" and dt not in ("bool", "float16"):
        w = hostile(rng, dt, (shape[-1], draw(st.integers(0, 3))), extremes=False)
        got = x @ b.bind(w)
        if dt in FLOAT:
            with np.errstate(all="ignore"):
                want = (a.astype(np.float64) @ w.astype(np.float64)).astype(dt)
        else:  # integer matmul wraps in its own dtype, as torch does
            want = (a.astype(np.int64) @ w.astype(np.int64)).astype(dt)
    else:
        lo, hi = sorted(draw(st.lists(st.integers(-5, 5), min_size=2, max_size=2)))
        step = draw(st.sampled_from([1, 2, -1]))
        sl = slice(lo, hi, step) if step > 0 else slice(hi, lo, step)
        got, want = x[sl], a[sl]
    b.cases.append(Case(f"{kind} {dt}{list(shape)}", got, np.asarray(want)))


DERIVE = [  # y = f(x): simple derived tensors, several of which simplify back to x in the compiler
    ("x * 1", lambda x: x * 1, lambda a: a * 1),
    ("x + 0", lambda x: x + 0, lambda a: a + 0),
    ("maximum(x, x)", lambda x: x.maximum(x), lambda a: np.maximum(a, a)),
    ("x * 2", lambda x: x * 2, lambda a: a * 2),
    ("x.flip(0) + 0", lambda x: x.flip(0) + 0, lambda a: np.flip(a, 0) + 0),
]


def _case_store(draw: Any, b: Batch, rng: np.random.Generator) -> None:
    """y = f(x); y[window] = v (a scalar, or a tensor broadcast into the window); maybe twice."""
    name, fx, fa = draw(st.sampled_from(DERIVE))
    dt = draw(st.sampled_from(("bool", *INT, *FLOAT) if name in ("maximum(x, x)",) else (*INT, *FLOAT)))
    shape = _shape(draw)
    a = hostile(rng, dt, shape)
    x = b.bind(a)
    with np.errstate(all="ignore"):
        want = np.array(fa(a.copy()), dtype=a.dtype)
    y = fx(x)
    for _ in range(draw(st.integers(1, 2))):
        lo, hi = sorted(draw(st.lists(st.integers(-4, 4), min_size=2, max_size=2)))
        window = (slice(lo, hi, draw(st.sampled_from([1, 2]))),)
        if len(shape) > 1 and draw(st.booleans()):
            window += (draw(st.integers(0, shape[1] - 1)),) if shape[1] else (slice(None),)
        target = want[window]
        if draw(st.booleans()):
            v = specials(dt)[draw(st.integers(0, len(specials(dt)) - 1))]
            y[window] = v.item()
            want[window] = v
        else:
            src = hostile(rng, dt, target.shape[1:] if target.ndim and draw(st.booleans()) else target.shape)
            y[window] = b.bind(src)
            want[window] = src
    b.cases.append(Case(f"store into {name} {dt}{list(shape)}", y, want))


@st.composite
def frontend_batch(draw: Any, n_cases: int = 8) -> Batch:
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    b = Batch()
    makers = [_case_elementwise, _case_elementwise, _case_reduce, _case_movement, _case_store]
    for _ in range(n_cases):
        draw(st.sampled_from(makers))(draw, b, rng)
    return b
