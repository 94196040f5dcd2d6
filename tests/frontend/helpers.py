"""Shared helpers for frontend tests: NumPy/torch references and error-location checks."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from caten_lab.frontend import Tensor

RNG = np.random.default_rng(0)


def arr(*shape: int, dtype: str = "float32", low: float = -3.0, high: float = 3.0) -> np.ndarray:
    if dtype == "bool":
        return RNG.random(shape) < 0.5
    if "int" in dtype:
        return RNG.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return RNG.uniform(low, high, size=shape).astype(dtype)


def T(a: np.ndarray) -> Tensor:  # noqa: N802
    return Tensor.from_numpy(a)


def tt(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(a))


def close(got: np.ndarray, want: object, atol: float = 1e-5, rtol: float = 1e-5) -> None:
    if isinstance(want, torch.Tensor):
        want = want.numpy()
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    if got.dtype == np.bool_ or np.issubdtype(got.dtype, np.integer):
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), atol=atol, rtol=rtol, equal_nan=True
        )


def raises_here(exc: type, fn, *fragments: str) -> BaseException:  # noqa: ANN001
    """Call ``fn`` (a lambda written on the caller's line) and check the error names the caller's line."""
    caller = sys._getframe(1)
    where = f"{caller.f_code.co_filename}:{caller.f_lineno}"
    with pytest.raises(exc) as info:
        fn()
    text = str(info.value)
    assert where in text, f"{where!r} not in {text!r}"
    for frag in fragments:
        assert frag in text, f"{frag!r} not in {text!r}"
    return info.value
