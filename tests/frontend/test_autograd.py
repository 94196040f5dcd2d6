"""Reverse-mode autodiff against torch.autograd: every frontend op, on the interpreter and compiled C.

Each case builds ``loss = sum(f(inputs) * w)`` with a random ``w`` (so every output element gets its
own upstream gradient), calls ``loss.backward()`` and compares each input's ``.grad`` with PyTorch's
on the same values.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
import pytest
import torch
import torch.nn.functional as TF  # noqa: N812
from hypothesis import given, settings
from hypothesis import strategies as st

import caten_lab
from caten_lab.config import settings as caten_settings
from caten_lab.errors import CatenError
from caten_lab.frontend import Tensor, grad, no_grad
from caten_lab.frontend.build import realize
from caten_lab.nn import functional as F

Fn = Callable[..., object]


def _ce(x, t):  # noqa: ANN001, ANN202 - works on both libraries
    lp = x.log_softmax(-1)
    return -lp.gather(1, t).sum()


def _ce_torch(x, t):  # noqa: ANN001, ANN202
    return TF.cross_entropy(x, t[:, 0], reduction="sum")


# name: (input shapes, caten function, torch function or None for the same code, positive inputs)
CASES: dict[str, tuple[list, Fn, Fn | None, bool]] = {
    "add broadcast": ([(3, 4), (4,)], lambda a, b: a + b, None, False),
    "sub rbroadcast": ([(3, 1), (1, 5)], lambda a, b: a - b, None, False),
    "mul broadcast": ([(2, 3, 4), (3, 1)], lambda a, b: a * b, None, False),
    "div": ([(3, 4), (3, 4)], lambda a, b: a / b, None, True),
    "rdiv scalar": ([(5,)], lambda a: 2.0 / a, None, True),
    "neg": ([(4,)], lambda a: -a, None, False),
    "exp": ([(3, 4)], lambda a: a.exp(), None, False),
    "log": ([(3, 4)], lambda a: a.log(), None, True),
    "sqrt": ([(3, 4)], lambda a: a.sqrt(), None, True),
    "rsqrt": ([(3, 4)], lambda a: a.rsqrt(), None, True),
    "sin cos tan": ([(6,)], lambda a: a.sin() + a.cos() * a.tan(), None, False),
    "sigmoid tanh": ([(3, 4)], lambda a: a.sigmoid() * a.tanh(), None, False),
    "relu": ([(10,)], lambda a: a.relu(), None, False),
    "gelu tanh": (
        [(3, 5)],
        lambda a: a.gelu(approximate="tanh"),
        lambda a: TF.gelu(a, approximate="tanh"),
        False,
    ),
    "gelu erf": ([(3, 5)], lambda a: a.gelu(), lambda a: TF.gelu(a), False),
    "silu": ([(7,)], lambda a: a.silu(), lambda a: TF.silu(a), False),
    "abs": ([(7,)], lambda a: a.abs(), None, False),
    "pow int": ([(5,)], lambda a: a**3, None, False),
    "pow float": ([(5,)], lambda a: a**1.7, None, True),
    "square": ([(5,)], lambda a: a.square(), None, False),
    "maximum": ([(4, 3), (3,)], lambda a, b: a.maximum(b), lambda a, b: torch.maximum(a, b), False),
    "minimum": ([(4, 3), (4, 3)], lambda a, b: a.minimum(b), lambda a, b: torch.minimum(a, b), False),
    "clamp": ([(9,)], lambda a: a.clamp(-0.5, 0.7), None, False),
    "where": (
        [(3, 4), (3, 4)],
        lambda a, b: (a > b).where(a * 2, b),
        lambda a, b: torch.where(a > b, a * 2, b),
        False,
    ),
    "sum axis": ([(3, 4, 5)], lambda a: a.sum(axis=1), None, False),
    "sum keepdim": ([(3, 4, 5)], lambda a: a.sum(axis=(0, 2), keepdim=True), None, False),
    "mean": ([(3, 4)], lambda a: a.mean(axis=-1), None, False),
    "var": ([(3, 6)], lambda a: a.var(axis=1), None, False),
    "max axis": ([(4, 6)], lambda a: a.max(axis=1), lambda a: a.amax(dim=1), False),
    "min all": ([(4, 6)], lambda a: a.min(), lambda a: a.amin(), False),
    "logsumexp": ([(3, 5)], lambda a: a.logsumexp(1), lambda a: a.logsumexp(1), False),
    "softmax": ([(3, 5)], lambda a: a.softmax(-1), None, False),
    "log_softmax": ([(3, 5)], lambda a: a.log_softmax(0), lambda a: a.log_softmax(0), False),
    "matmul": ([(3, 4), (4, 5)], lambda a, b: a @ b, None, False),
    "matmul batch broadcast": ([(2, 1, 3, 4), (5, 4, 2)], lambda a, b: a @ b, None, False),
    "matmul vector": ([(4,), (4, 3)], lambda a, b: a @ b, None, False),
    "reshape permute": (
        [(2, 3, 4)],
        lambda a: a.reshape(6, 4).T.reshape(2, 2, 6).permute(2, 0, 1),
        None,
        False,
    ),
    "expand": ([(3, 1)], lambda a: a.expand(3, 4) * 1.5, None, False),
    "slice steps": ([(6, 7)], lambda a: a[1::2, ::-3], lambda a: a[1::2].flip(1)[:, ::3], False),
    "slice overlap": ([(8,)], lambda a: a[1:5] * a[3:7], None, False),
    "flip": ([(3, 4)], lambda a: a.flip(1) * a.flip((0, 1)), lambda a: a.flip(1) * a.flip((0, 1)), False),
    "pad": ([(2, 3)], lambda a: a.pad((1, 2, 0, 1)), lambda a: TF.pad(a, (1, 2, 0, 1)), False),
    "cat": (
        [(2, 3), (4, 3)],
        lambda a, b: Tensor.cat([a, b * 2], 0),
        lambda a, b: torch.cat([a, b * 2], 0),
        False,
    ),
    "split": ([(5, 4)], lambda a: a.split(2, 0)[1] * a.split(2, 0)[2].sum(), None, False),
    "triu": ([(4, 4)], lambda a: a.triu(1), None, False),
    "transpose matmul": ([(3, 4)], lambda a: a @ a.T, None, False),
    "cast float16": ([(3, 4)], lambda a: (a.half() * 2).float(), None, False),
    "layer norm": (
        [(3, 8), (8,), (8,)],
        lambda x, w, b: F.layer_norm(x, w, b),
        lambda x, w, b: TF.layer_norm(x, (8,), w, b),
        False,
    ),
    "rms norm": (
        [(3, 8), (8,)],
        lambda x, w: F.rms_norm(x, w),
        lambda x, w: TF.rms_norm(x, (8,), w, eps=1e-6),
        False,
    ),
}

INT_CASES: dict[str, tuple[list, Fn, Fn | None]] = {
    # (float input shapes, function of (floats..., ints))
    "row lookup": ([(6, 3)], lambda w, ids: w[ids] * 2, None),
    "gather": ([(4, 5)], lambda x, ids: x.gather(1, ids % 5), lambda x, ids: x.gather(1, ids % 5)),
    "cross entropy": ([(4, 5)], lambda x, ids: _ce(x, ids % 5), lambda x, ids: _ce_torch(x, ids % 5)),
}


def _arrays(shapes: list, positive: bool, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        a = rng.uniform(0.3, 2.0, s) if positive else rng.uniform(-2.0, 2.0, s)
        out.append(a.astype(np.float32))
    return out


def _torch_grads(fn: Fn, arrays: list, weight: np.ndarray | None, extra: tuple = ()) -> tuple:
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = fn(*ts, *extra)
    w = torch.tensor(weight) if weight is not None else torch.ones(())
    (out * w).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


def _caten_loss(fn: Fn, arrays: list, weight: np.ndarray | None, extra: tuple = ()) -> tuple:
    ts = [Tensor.from_numpy(a, requires_grad=True) for a in arrays]
    out = fn(*ts, *extra)
    w = Tensor.from_numpy(weight) if weight is not None else 1.0
    return ts, out, (out * w).sum()


def _weight(fn: Fn, arrays: list, extra: tuple, seed: int) -> np.ndarray:
    shape = fn(*(torch.tensor(a) for a in arrays), *extra).shape
    return np.random.default_rng(seed + 1).uniform(-1.0, 1.0, tuple(shape)).astype(np.float32)


def _check(name: str, got: list, want: list, rtol: float = 2e-4, atol: float = 2e-5) -> None:
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, (name, i, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{name}: gradient of input {i}")


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_matches_torch_on_the_interpreter(name: str) -> None:
    shapes, fn, tfn, positive = CASES[name]
    arrays = _arrays(shapes, positive, zlib.crc32(name.encode()) % 1000)
    w = _weight(tfn or fn, arrays, (), 7)
    ts, _, loss = _caten_loss(fn, arrays, w)
    loss.backward()
    _, want = _torch_grads(tfn or fn, arrays, w)
    _check(name, [t.grad.numpy() for t in ts], want)


@pytest.mark.parametrize("name", list(INT_CASES))
def test_gradient_through_integer_indices_matches_torch(name: str) -> None:
    shapes, fn, tfn = INT_CASES[name]
    arrays = _arrays(shapes, False, 3)
    ids = np.array([[0], [5], [2], [2]], dtype=np.int64)  # repeated ids: their gradients add
    w = _weight(tfn or fn, arrays, (torch.tensor(ids),), 5)
    ts, _, loss = _caten_loss(fn, arrays, w, (Tensor.from_numpy(ids),))
    loss.backward()
    _, want = _torch_grads(tfn or fn, arrays, w, (torch.tensor(ids),))
    _check(name, [t.grad.numpy() for t in ts], want)


@pytest.mark.c_backend
def test_every_gradient_case_on_compiled_c_in_one_program() -> None:
    """All cases' gradients in one realize: one C compile (the default backend) checks them all."""
    want, grads = [], []
    for name, (shapes, fn, tfn, positive) in CASES.items():
        arrays = _arrays(shapes, positive, zlib.crc32(name.encode()) % 1000)
        w = _weight(tfn or fn, arrays, (), 7)
        ts, _, loss = _caten_loss(fn, arrays, w)
        grads += grad(loss, ts)
        want += [(name, g) for g in _torch_grads(tfn or fn, arrays, w)[1]]
    ids = np.array([[1], [0], [3], [1]], dtype=np.int64)
    for name, (shapes, fn, tfn) in INT_CASES.items():
        arrays = _arrays(shapes, False, 11)
        w = _weight(tfn or fn, arrays, (torch.tensor(ids),), 5)
        ts, _, loss = _caten_loss(fn, arrays, w, (Tensor.from_numpy(ids),))
        grads += grad(loss, ts)
        want += [(name, g) for g in _torch_grads(tfn or fn, arrays, w, (torch.tensor(ids),))[1]]
    got = realize(grads, {})
    for (name, w), g in zip(want, got):
        _check(name, [g], [w])


# ---- broadcasting and reductions over random shapes (hypothesis) -----------------------------------------

_BINARY = {
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
    "sub": lambda a, b: a - b,
    "max": lambda a, b: a.maximum(b) if isinstance(a, Tensor) else torch.maximum(a, b),
}


@st.composite
def _broadcast_pair(draw: st.DrawFn) -> tuple[tuple, tuple]:
    full = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    a = tuple(d if draw(st.booleans()) else 1 for d in full)
    b = tuple(d if draw(st.booleans()) else 1 for d in full)
    return a, b[draw(st.integers(0, len(b) - 1)) :]


@settings(max_examples=40, deadline=None)
@given(
    shapes=_broadcast_pair(),
    op=st.sampled_from(sorted(_BINARY)),
    axis=st.integers(-1, 3),
    seed=st.integers(0, 99),
)
def test_broadcast_then_reduce_gradients_match_torch(shapes: tuple, op: str, axis: int, seed: int) -> None:
    fn = _BINARY[op]

    def f(a, b):  # noqa: ANN001, ANN202
        y = fn(a, b)
        ax = min(axis, y.ndim - 1)
        return y.sum(axis=ax) if isinstance(y, Tensor) else y.sum(dim=ax)

    arrays = _arrays(list(shapes), False, seed)
    w = _weight(f, arrays, (), seed)
    ts, _, loss = _caten_loss(f, arrays, w)
    loss.backward()
    _check(op, [t.grad.numpy() for t in ts], _torch_grads(f, arrays, w)[1])


# ---- semantics: accumulation, in-place stores, no_grad, detach, errors --------------------------------------


def test_backward_accumulates_like_torch() -> None:
    a = np.arange(4, dtype=np.float32)
    t = Tensor.from_numpy(a, requires_grad=True)
    (t * t).sum().backward()
    (t * 3).sum().backward()
    np.testing.assert_allclose(t.grad.numpy(), 2 * a + 3)


@pytest.mark.c_backend
@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_gradient_through_a_store_into_a_state(backend: str) -> None:
    """``cache[:, 1:3] = x`` then reading the cache: x gets the gradient of its window only."""
    with caten_settings(backend=backend):
        _store_into_state()


def _store_into_state() -> None:
    cache = Tensor.from_numpy(np.zeros((2, 5), np.float32))
    x = Tensor.from_numpy(np.ones((2, 2), np.float32), requires_grad=True)
    cache[:, 1:3] = x * 2
    w = np.arange(10, dtype=np.float32).reshape(2, 5)
    (cache * Tensor.from_numpy(w)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * w[:, 1:3])


@pytest.mark.c_backend
@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_gradient_of_an_overwritten_window_of_a_computed_value(backend: str) -> None:
    with caten_settings(backend=backend):
        _overwritten_window()


def _overwritten_window() -> None:
    a = np.arange(6, dtype=np.float32)
    ta = Tensor.from_numpy(a, requires_grad=True)
    y = ta * 3
    y[2:4] = 0.0  # the overwritten elements no longer depend on a
    y.sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), [3, 3, 0, 0, 3, 3])
    tt = torch.tensor(a, requires_grad=True)
    yt = tt * 3
    yt[2:4] = 0.0
    yt.sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), tt.grad.numpy())


def test_no_grad_and_detach_stop_gradients() -> None:
    a = np.array([1.0, 2.0, 3.0], np.float32)
    t = Tensor.from_numpy(a, requires_grad=True)
    with no_grad():
        c = t * 5
    assert not c.requires_grad and t.requires_grad and (t * 2).requires_grad
    ((t * t.detach()).sum() + (c * t).sum()).backward()
    np.testing.assert_allclose(t.grad.numpy(), a + 5 * a)  # d/dt (t * const) + (const * t)


def test_grad_of_an_intermediate_value_and_unused_inputs() -> None:
    a = Tensor.from_numpy(np.array([1.0, -2.0], np.float32), requires_grad=True)
    b = Tensor.from_numpy(np.array([3.0, 4.0], np.float32))
    h = a * 2
    (gh, ga, gb) = caten_lab.grad((h * h).sum(), [h, a, b], allow_unused=True)  # the package-level name
    np.testing.assert_allclose(gh.numpy(), [4.0, -8.0])
    np.testing.assert_allclose(ga.numpy(), [8.0, -16.0])
    assert gb is None
    with pytest.raises(CatenError, match="does not affect"):
        grad((h * h).sum(), [b])


def test_clear_errors() -> None:
    t = Tensor.from_numpy(np.ones((2, 3), np.float32), requires_grad=True)
    with pytest.raises(CatenError, match="single value") as e:
        (t * 2).backward()
    assert "test_autograd.py" in str(e.value)
    with pytest.raises(CatenError, match="nothing this value depends on"):
        Tensor.from_numpy(np.ones(3, np.float32)).sum().backward()
    with pytest.raises(CatenError, match="floating-point"):
        Tensor.from_numpy(np.ones(3, np.int32)).sum().backward()
    with pytest.raises(CatenError, match="only a bound tensor"):
        (t * 2).requires_grad_()


def test_backward_nodes_carry_the_forward_source_line() -> None:
    t = Tensor.from_numpy(np.ones(3, np.float32), requires_grad=True)
    y = t.exp()  # the line every node of exp's gradient names
    line = y.source
    y.sum().backward()
    g = t.grad
    assert g.source == line
