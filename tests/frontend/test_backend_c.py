"""Tensor.numpy() through the default compiled C backend gives the same results as NumPy."""

import numpy as np
import pytest

from caten_lab.air.symbolic import Sym
from caten_lab.config import config
from caten_lab.frontend import Tensor

pytestmark = pytest.mark.c_backend


def test_default_backend_is_c():
    assert config().backend == "c"


def test_elementwise_reduce_softmax_matmul_on_c():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 5)).astype(np.float32)
    b = rng.standard_normal((5, 3)).astype(np.float32)
    ta, tb = Tensor.from_numpy(a), Tensor.from_numpy(b)
    np.testing.assert_allclose((ta.exp() * 2 - 1).sum(axis=1).numpy(), (np.exp(a) * 2 - 1).sum(axis=1), rtol=1e-5)
    e = np.exp(a - a.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(ta.softmax(-1).numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.T[1:, ::-2].numpy(), a.T[1:, ::-2])


def test_slice_assignment_in_place_on_c():
    cache = np.zeros((2, 8), np.float32)
    t = Tensor.from_numpy(cache)
    pos = Sym("pos")
    new = Tensor.from_numpy(np.ones((2, 3), np.float32))
    t[:, pos : pos + 3] = new
    out = t.numpy(pos=2)
    expect = np.zeros((2, 8), np.float32)
    expect[:, 2:5] = 1
    np.testing.assert_array_equal(out, expect)


OVERLAPPING_ASSIGNMENTS = {
    # name: (what the Tensor does, what NumPy does on a copy of the right-hand side)
    "shift right": (lambda t: t.__setitem__((slice(None), slice(1, None)), t[:, :-1]), lambda a: a[:, :-1].copy(), (slice(None), slice(1, None))),
    "shift left": (lambda t: t.__setitem__((slice(None), slice(None, -1)), t[:, 1:]), lambda a: a[:, 1:].copy(), (slice(None), slice(None, -1))),
    "reverse rows": (lambda t: t.__setitem__(slice(None), t[::-1]), lambda a: a[::-1].copy(), slice(None)),
    "transpose": (lambda t: t.__setitem__(slice(None), t.T), lambda a: a.T.copy(), slice(None)),
    "prefix sum step": (lambda t: t.__setitem__((slice(None), slice(1, None)), t[:, 1:] + t[:, :-1]), lambda a: a[:, 1:] + a[:, :-1], (slice(None), slice(1, None))),
}


@pytest.mark.parametrize("name", list(OVERLAPPING_ASSIGNMENTS))
def test_assignment_whose_source_overlaps_its_destination(name):
    """x[window] = f(x): the source must read x as it was before the store (NumPy semantics)."""
    assign, rhs, window = OVERLAPPING_ASSIGNMENTS[name]
    a = np.arange(36, dtype=np.float32).reshape(6, 6) * 1.5
    expect = a.copy()
    expect[window] = rhs(a)
    state = a.copy()
    t = Tensor.from_numpy(state, name="state")
    assign(t)
    np.testing.assert_array_equal(t.numpy(), expect)
    np.testing.assert_array_equal(state, expect)  # the named input is updated in place
