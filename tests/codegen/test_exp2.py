"""``cl_exp2_f32`` (codegen/c/runtime.h): the compiled float exp2 against the correctly rounded result.

The helper replaced libmvec's exp2f, whose vector variant leaves its fast path for every vector holding
a result below 2^-126 (masked attention scores). It must stay within 1 ulp of exp2 computed in float64
and rounded once, over the whole float range, with the IEEE special values exact."""

import numpy as np
import pytest

from caten_lab.frontend import Tensor

pytestmark = pytest.mark.c_backend


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Distance in units of the last place (float32 bit patterns as ordered integers)."""
    def ordered(v: np.ndarray) -> np.ndarray:
        i = v.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(got) - ordered(want))


def _exp2_c(x: np.ndarray) -> np.ndarray:
    return Tensor.from_numpy(x).exp2().numpy()


def test_exp2_within_one_ulp_over_the_float_range():
    rng = np.random.default_rng(7)
    x = np.concatenate([
        np.linspace(-152.0, 130.0, 400_003, dtype=np.float32),   # the whole range: denormals to inf
        rng.uniform(-1.0, 1.0, 200_000).astype(np.float32),      # softmax-like arguments
        rng.uniform(-30.0, 0.0, 200_000).astype(np.float32),
        np.arange(-149, 128, dtype=np.float32),                  # integers: exact powers of two
        np.float32([-126.5, -127.0, -149.0, -149.5, -150.0, 127.99999, 128.0, -0.0, 0.0, 1e-30, -1e-30]),
    ])
    got = _exp2_c(x)
    with np.errstate(over="ignore"):
        want = np.exp2(x.astype(np.float64)).astype(np.float32)
    assert _ulps(got, want).max() <= 1
    ints = np.arange(-149, 128)
    assert np.array_equal(_exp2_c(ints.astype(np.float32)), np.exp2(ints.astype(np.float64)).astype(np.float32))


def test_exp2_special_values():
    x = np.float32([np.inf, -np.inf, np.nan, -3.4028235e38, 3.4028235e38, -1000.0, 1000.0])
    got = _exp2_c(x)
    assert got[0] == np.inf and got[1] == 0.0 and np.isnan(got[2])
    assert got[3] == 0.0 and got[4] == np.inf and got[5] == 0.0 and got[6] == np.inf
    assert not np.signbit(got[[1, 3, 5]]).any()


def test_softmax_with_masked_scores_matches_numpy():
    """A causal mask's -FLT_MAX scores give exact zeros, the rest numpy's softmax."""
    rng = np.random.default_rng(3)
    s = rng.standard_normal((4, 64, 64)).astype(np.float32)
    s[:, np.triu_indices(64, 1)[0], np.triu_indices(64, 1)[1]] = np.finfo(np.float32).min
    e = np.exp(s.astype(np.float64) - s.max(-1, keepdims=True))
    want = e / e.sum(-1, keepdims=True)
    got = Tensor.from_numpy(s).softmax(-1).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
    assert (got[:, np.triu_indices(64, 1)[0], np.triu_indices(64, 1)[1]] == 0).all()
