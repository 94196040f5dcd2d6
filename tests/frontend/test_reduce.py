"""Reductions, softmax and matmul against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

from .helpers import T, arr, close, tt

AXES = [None, 0, 1, -1, (0, 2), (-1, -3), 2]


def _tor_axis(axis):  # noqa: ANN001, ANN202
    return tuple(range(3)) if axis is None else axis


@pytest.mark.parametrize("axis", AXES)
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_mean_var(axis, keepdim: bool) -> None:  # noqa: ANN001
    a = arr(2, 3, 4)
    ta = tt(a)
    ax = _tor_axis(axis)
    close(T(a).sum(axis, keepdim).numpy(), ta.sum(ax, keepdim=keepdim), atol=1e-5)
    close(T(a).mean(axis, keepdim).numpy(), ta.mean(ax, keepdim=keepdim), atol=1e-6)
    close(T(a).var(axis, keepdim).numpy(), ta.var(ax, keepdim=keepdim), atol=1e-5)
    close(T(a).var(axis, keepdim, correction=0).numpy(), ta.var(ax, keepdim=keepdim, correction=0), atol=1e-5)
    close(T(a).std(axis, keepdim).numpy(), ta.std(ax, keepdim=keepdim), atol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
@pytest.mark.parametrize("keepdim", [False, True])
def test_max_min_argmax(axis: int, keepdim: bool) -> None:
    a = arr(3, 4, 5)
    a[0, 1, :2] = a.max() + 1  # ties: the first index wins
    ta = tt(a)
    close(T(a).max(axis, keepdim).numpy(), ta.amax(axis, keepdim=keepdim))
    close(T(a).min(axis, keepdim).numpy(), ta.amin(axis, keepdim=keepdim))
    close(T(a).argmax(axis, keepdim).numpy(), ta.argmax(axis, keepdim=keepdim))
    close(T(a).argmin(axis, keepdim).numpy(), ta.argmin(axis, keepdim=keepdim))


def test_full_reductions() -> None:
    a = arr(4, 6)
    close(T(a).max().numpy(), tt(a).max())
    close(T(a).min().numpy(), tt(a).min())
    close(T(a).argmax().numpy(), tt(a).argmax())
    close(T(a).sum().numpy(), tt(a).sum(), atol=1e-5)


def test_integer_and_bool_reductions() -> None:
    i = arr(3, 4, dtype="int32", low=-5, high=5)
    b = arr(3, 4, dtype="bool")
    close(T(i).sum(1).numpy(), tt(i).sum(1))  # int64 like torch
    close(T(b).sum(0).numpy(), tt(b).sum(0))
    close(T(i).max(0).numpy(), tt(i).amax(0))
    close(T(i).min(1).numpy(), tt(i).amin(1))
    close(T(b).max(1).numpy(), tt(b).amax(1))
    close(T(b).min(1).numpy(), tt(b).amin(1))
    close(T(i).argmax(1).numpy(), tt(i).argmax(1))
    close(T(i).mean(1).numpy(), tt(i).float().mean(1))


def test_size_zero_and_size_one() -> None:
    z = np.zeros((0, 3), np.float32)
    close(T(z).sum(0).numpy(), tt(z).sum(0))
    close(T(z).sum(1).numpy(), tt(z).sum(1))
    one = arr(1, 5)
    close(T(one).sum(0).numpy(), tt(one).sum(0))
    close(T(one).max(0, keepdim=True).numpy(), tt(one).amax(0, keepdim=True))
    close(T(one).softmax(0).numpy(), tt(one).softmax(0))


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_log_softmax_logsumexp(axis: int) -> None:
    a = arr(3, 7, low=-20, high=20)
    close(T(a).softmax(axis).numpy(), tt(a).softmax(axis), atol=1e-6)
    close(T(a).log_softmax(axis).numpy(), tt(a).log_softmax(axis), atol=1e-5)
    close(T(a).logsumexp(axis).numpy(), tt(a).logsumexp(axis), atol=1e-5)


def test_softmax_with_masked_minus_large() -> None:
    a = arr(2, 5)
    a[:, 3:] = np.finfo(np.float32).min
    close(T(a).softmax(-1).numpy(), tt(a).softmax(-1), atol=1e-7)


MATMUL = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((1, 3), (3, 1)),
    ((0, 3), (3, 2)),
    ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("sa,sb", MATMUL)
def test_matmul(sa: tuple, sb: tuple) -> None:
    a, b = arr(*sa), arr(*sb)
    close((T(a) @ T(b)).numpy(), tt(a) @ tt(b), atol=1e-5)


def test_matmul_int_and_mixed_and_views() -> None:
    a, b = arr(3, 4, dtype="int64"), arr(4, 2, dtype="int64")
    close((T(a) @ T(b)).numpy(), tt(a) @ tt(b))
    f = arr(4, 3)
    close((T(f).T @ T(f)).numpy(), tt(f).T @ tt(f), atol=1e-5)  # transposed operand: a view
    close((T(f)[::2] @ T(f)[:3].T).numpy(), tt(f)[::2] @ tt(f)[:3].T, atol=1e-5)
