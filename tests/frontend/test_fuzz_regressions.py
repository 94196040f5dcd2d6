"""Frontend bugs found by differential fuzzing (issue 13), each checked on both backends against
NumPy / PyTorch: slice assignment into a derived tensor, min/argmin at the integer extremes,
argmax/argmin over NaN, triu/tril/gather dtypes, clamp/minimum with NaN, reductions of empty axes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caten_lab.config import settings
from caten_lab.errors import ShapeError
from caten_lab.frontend import Tensor

from .helpers import close, tt

INT_DTYPES = ["int8", "uint8", "int32", "uint32", "int64"]
ALL_DTYPES = ["bool", *INT_DTYPES, "float16", "float32", "float64"]


@pytest.fixture(params=["numpy", "c"])
def backend(request):  # noqa: ANN001, ANN201
    with settings(backend=request.param):
        yield request.param


def T(a: np.ndarray) -> Tensor:  # noqa: N802
    return Tensor.from_numpy(a, dtype=a.dtype)  # float64 stays float64


def extremes(dtype: str, shape: tuple = (3, 5), seed: int = 0) -> np.ndarray:
    """Random values of ``dtype`` with its minimum and maximum (and 0, -1) planted in every row."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
    specials = np.array([info.min, info.max, 0, info.max - 1, info.min + 1], dtype=dtype)
    for r in range(shape[0]):
        a[r, rng.permutation(shape[1])[: len(specials)]] = specials[: shape[1]]
    return a


# ---- a. slice assignment into a derived tensor ------------------------------------------------

DERIVED = {  # name: (the derived tensor, the same on a NumPy array)
    "x * 1": (lambda x: x * 1, lambda a: a * 1),
    "x + 0": (lambda x: x + 0, lambda a: a + 0),
    "1 * x": (lambda x: 1 * x, lambda a: 1 * a),
    "x - 0": (lambda x: x - 0, lambda a: a - 0),
    "maximum(x, x)": (lambda x: x.maximum(x), lambda a: np.maximum(a, a)),
    "where(true, x, 0)": (lambda x: Tensor.full(x.shape, True).where(x, 0.0), lambda a: a.copy()),
    "x * 2": (lambda x: x * 2, lambda a: a * 2),
}


@pytest.mark.parametrize("make", list(DERIVED))
def test_setitem_into_derived_tensor_leaves_the_input_alone(backend: str, make: str) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    keep = a.copy()
    x = Tensor.from_numpy(a)
    y = DERIVED[make][0](x)
    y[0] = 42.0
    y[1:, 1::2] = Tensor.from_numpy(np.full((2, 2), -7.0, np.float32))
    expect = DERIVED[make][1](keep.copy()).astype(np.float32)
    expect[0] = 42.0
    expect[1:, 1::2] = -7.0
    np.testing.assert_array_equal(y.numpy(), expect)
    np.testing.assert_array_equal(a, keep)  # the user's array behind x never changes
    np.testing.assert_array_equal(x.numpy(), keep)
    np.testing.assert_array_equal((x + y).numpy(), keep + expect)


def test_setitem_into_the_bound_tensor_itself_is_in_place(backend: str) -> None:
    """The documented contract: from_numpy keeps the array by reference, stores into x write back."""
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    x = Tensor.from_numpy(a)
    y = x * 1
    x[0, 1] = -9
    y[1] = 5
    want_x = np.array([[0, -9, 2], [3, 4, 5]], np.int32)
    np.testing.assert_array_equal(x.numpy(), want_x)
    np.testing.assert_array_equal(a, want_x)
    np.testing.assert_array_equal(y.numpy(), np.array([[0, 1, 2], [5, 5, 5]], np.int32))


def test_symbolic_setitem_into_derived_placeholder(backend: str) -> None:
    from caten_lab.air.symbolic import Sym
    from caten_lab.frontend import build_graph, execute, placeholder

    n, pos = Sym("n"), Sym("pos")
    x = placeholder((2, n), name="x")
    y = x * 1
    y[:, pos : pos + 1] = 5.0
    g, arrays = build_graph([y])
    for p in (0, 2, 3):
        a = np.arange(8, dtype=np.float32).reshape(2, 4)
        keep = a.copy()
        want = keep.copy()
        want[:, p : p + 1] = 5.0
        np.testing.assert_array_equal(execute(g, {**arrays, "x": a}, {"pos": p})[0], want)
        np.testing.assert_array_equal(a, keep)


@pytest.mark.parametrize("first", ["x", "y"])
def test_results_do_not_depend_on_the_order_of_realization(backend: str, first: str) -> None:
    """y built from x before x[1:] = x[:-1] keeps x's old values, whichever is realized first."""
    a = np.arange(5, dtype=np.float32)
    x = Tensor.from_numpy(a)
    y = x * 10
    x[1:] = x[:-1]
    z = x + 0  # built after the assignment: sees it
    want = {"x": np.array([0, 0, 1, 2, 3], np.float32), "y": np.arange(5, dtype=np.float32) * 10}
    want["z"] = want["x"]
    order = [first, "y" if first == "x" else "x", "z", "x", "y", "z"]
    for name in order:
        np.testing.assert_array_equal({"x": x, "y": y, "z": z}[name].numpy(), want[name])
    np.testing.assert_array_equal(a, want["x"])  # stored once, however often it is realized


@pytest.mark.parametrize("dtype", ["bool", "int8", "uint32", "int64", "float16"])
def test_setitem_into_derived_tensor_every_dtype(backend: str, dtype: str) -> None:
    a = (np.arange(8) % 3 == 0).astype(dtype).reshape(2, 4)
    keep = a.copy()
    x = T(a)
    y = x & True if dtype == "bool" else x * 1
    y[:, 1] = True if dtype == "bool" else 3
    expect = keep.copy()
    expect[:, 1] = 3 if dtype != "bool" else True
    got = y.numpy()
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, expect)
    np.testing.assert_array_equal(a, keep)


# ---- b. min / argmin at the integer extremes --------------------------------------------------


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_min_max_argmin_argmax_at_integer_extremes(backend: str, dtype: str) -> None:
    a = extremes(dtype)
    x = T(a)
    for axis in (None, 0, 1):
        for op in ("min", "max", "argmin", "argmax"):
            got = getattr(x, op)(axis).numpy()
            want = np.asarray(getattr(np, op)(a, axis=axis))
            if op.startswith("arg"):
                want = want.astype(np.int64)
            close(got, want)
    info = np.iinfo(dtype)
    lone = np.array([info.max, info.min], dtype=dtype)
    assert T(lone).min().numpy() == info.min and T(lone).argmin().numpy() == 1


def test_min_of_bool_and_float(backend: str) -> None:
    b = np.array([[True, False, True], [True, True, True]])
    close(T(b).min(1).numpy(), tt(b).amin(1))
    close(T(b).argmin(1).numpy(), tt(b).int().argmin(1))
    f = np.array([[1.0, -np.inf, 3.0], [np.inf, 2.0, -0.0]], np.float32)
    close(T(f).min(1).numpy(), tt(f).amin(1))
    close(T(f).argmin(1).numpy(), tt(f).argmin(1))


# ---- c. argmax / argmin over NaN --------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_argmax_argmin_pick_the_first_nan(backend: str, dtype: str) -> None:
    nan, inf = np.nan, np.inf
    a = np.array(
        [
            [1.0, nan, 3.0, nan],
            [nan, nan, nan, nan],
            [-inf, inf, 0.0, -0.0],
            [2.0, 2.0, -1.0, nan],
            [nan, inf, -inf, 1.0],
        ],
        dtype=dtype,
    )
    x, t = T(a), tt(a)
    for axis in (0, 1):
        close(x.argmax(axis).numpy(), t.argmax(axis))
        close(x.argmin(axis).numpy(), t.argmin(axis))
        close(x.argmax(axis).numpy(), np.argmax(a, axis))
        close(x.argmin(axis).numpy(), np.argmin(a, axis))
        close(x.max(axis).numpy(), t.amax(axis))
        close(x.min(axis).numpy(), t.amin(axis))
    close(x.argmax().numpy(), t.argmax())
    close(x.argmin().numpy(), t.argmin())


# ---- d. triu / tril / gather keep every dtype -------------------------------------------------


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_triu_tril_gather_keep_the_dtype(backend: str, dtype: str) -> None:
    rng = np.random.default_rng(1)
    if dtype == "bool":
        a = rng.random((2, 3, 4)) < 0.5
    elif dtype.startswith(("int", "uint")):
        a = extremes(dtype, (6, 4)).reshape(2, 3, 4)
    else:
        a = rng.uniform(-3, 3, (2, 3, 4)).astype(dtype)
        a[0, 0, :3] = [np.nan, np.inf, -np.inf]
    x = T(a)
    for k in (-1, 0, 2):
        close(x.triu(k).numpy(), np.triu(a, k))
        close(x.tril(k).numpy(), np.tril(a, k))
    idx = rng.integers(0, 4, size=(2, 3, 5)).astype(np.int64)
    close(x.gather(2, Tensor.from_numpy(idx)).numpy(), np.take_along_axis(a, idx, 2))
    idx0 = rng.integers(0, 2, size=(2, 2, 4)).astype(np.int32)
    close(x.gather(0, Tensor.from_numpy(idx0)).numpy(), np.take_along_axis(a[:, :2], idx0.astype(np.int64), 0))
    if dtype in ("bool", "int64", "float32"):  # and torch agrees
        close(x.triu(1).numpy(), torch.triu(tt(a), 1))
        close(x.gather(2, Tensor.from_numpy(idx)).numpy(), torch.gather(tt(a), 2, tt(idx)))


# ---- e. clamp / minimum with NaN --------------------------------------------------------------


def test_clamp_keeps_nan_and_min_above_max_gives_max(backend: str) -> None:
    a = np.array([1.0, np.nan, -3.0, 5.0, -np.inf, np.inf, -0.0], np.float32)
    x, t = T(a), tt(a)
    close(x.clamp(-1, 2).numpy(), torch.clamp(t, -1, 2))
    close(x.clamp(2, -1).numpy(), torch.clamp(t, 2, -1))
    close(x.clamp(min=0.5).numpy(), torch.clamp(t, min=0.5))
    close(x.clamp(max=0.5).numpy(), torch.clamp(t, max=0.5))
    close(x.clip(-1.0, 1.0).numpy(), np.clip(a, -1.0, 1.0))
    lo = np.array([0.0, 0.0, np.nan, 9.0, 0.0, 0.0, 0.0], np.float32)
    close(x.clamp(min=T(lo)).numpy(), torch.clamp(t, min=tt(lo)))
    close(x.clamp(max=T(lo)).numpy(), torch.clamp(t, max=tt(lo)))
    close(x.minimum(T(lo)).numpy(), torch.minimum(t, tt(lo)))
    close(x.maximum(T(lo)).numpy(), torch.maximum(t, tt(lo)))
    close(x.clamp(min=float("nan")).numpy(), torch.clamp(t, min=float("nan")))
    i = np.array([1, -3, 5, 127, -128], np.int8)
    close(T(i).clamp(2, -1).numpy(), torch.clamp(tt(i), 2, -1))
    close(T(i).clamp(-100, 100).numpy(), torch.clamp(tt(i), -100, 100))
    h = a.astype(np.float16)
    close(T(h).clamp(-1, 2).numpy(), torch.clamp(tt(h), -1, 2))


# ---- empty axes ---------------------------------------------------------------------------------


@pytest.mark.parametrize("op", ["max", "min", "argmax", "argmin"])
def test_max_min_over_an_empty_axis_raise_like_torch(backend: str, op: str) -> None:
    a = np.zeros((0, 3), np.float32)
    with pytest.raises(IndexError):
        getattr(torch.from_numpy(a), op)(0)
    with pytest.raises(ShapeError, match="empty"):
        getattr(T(a), op)(0)
    with pytest.raises(ShapeError, match="empty"):
        getattr(T(a), op)()
    got = getattr(T(a), op)(1).numpy()  # the reduced axis is not empty: an empty result
    want = getattr(torch.from_numpy(a), op)(1)
    close(got, want if op.startswith("arg") else want.values if hasattr(want, "values") else want)


def test_empty_axis_sum_mean_softmax(backend: str) -> None:
    a = np.zeros((3, 0), np.float32)
    t = torch.from_numpy(a)
    close(T(a).sum(1).numpy(), t.sum(1))
    close(T(a).mean(1).numpy(), t.mean(1))
    close(T(a).softmax(-1).numpy(), t.softmax(-1))
    close(T(a).logsumexp(1).numpy(), torch.logsumexp(t, 1))
    close(T(a).sum(0).numpy(), t.sum(0))


def test_numpy_returns_an_ndarray_for_0d_results(backend: str) -> None:
    got = T(np.array([3, 1, 2], np.int8)).max().numpy()
    assert type(got) is np.ndarray and got.shape == () and got.dtype == np.int8


# ---- f. found by the differential fuzz -----------------------------------------------------------


def test_float_floordiv_and_mod_with_infinite_and_nan_operands(backend: str) -> None:
    """NumPy and torch: inf // b is NaN, -5 // inf is -1, 5 % inf is 5, -5 % inf is inf."""
    inf, nan = np.inf, np.nan
    a = np.array([5.0, -5.0, inf, 5.0, -0.0, 5.0, 0.0, -1.0, nan, inf, -inf, 1.0, 7.5], np.float32)
    b = np.array([inf, inf, 2.0, -inf, 3.0, 0.0, inf, -inf, inf, 0.0, -2.0, nan, -2.0], np.float32)
    x, y = T(a), T(b)
    with np.errstate(all="ignore"):
        close((x // y).numpy(), np.floor_divide(a, b))
        close((x % y).numpy(), np.remainder(a, b))
        close((x // float("inf")).numpy(), np.floor_divide(a, np.float32(inf)))
        close((x % float("-inf")).numpy(), np.remainder(a, np.float32(-inf)))
    close((x // y).numpy(), torch.floor_divide(tt(a), tt(b)))
    close((x % y).numpy(), torch.remainder(tt(a), tt(b)))


@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
def test_unsigned_arithmetic_with_negative_literals(backend: str, dtype: str) -> None:
    """x - 1, x // 2 and x % 7 on unsigned tensors wrap like NumPy (the interpreter used to overflow)."""
    info = np.iinfo(dtype)
    a = np.array([0, 1, 7, info.max - 1, info.max], dtype=dtype)
    x = T(a)
    close((x - 1).numpy(), a - np.array(1, dtype))
    close((x * -1).numpy(), (a.astype(np.int64) * -1).astype(dtype))
    close((x // 2).numpy(), a // 2)
    close((x % 7).numpy(), a % 7)
    close((x // T(np.array([3, 2, 2, 5, 1], dtype))).numpy(), a // np.array([3, 2, 2, 5, 1], dtype))


def test_logsumexp_with_infinities(backend: str) -> None:
    inf = np.inf
    a = np.array([[1.0, inf], [-inf, -inf], [2.0, -inf], [np.nan, 1.0], [inf, inf]], np.float32)
    close(T(a).logsumexp(1).numpy(), torch.logsumexp(tt(a), 1))
    close(T(a.astype(np.float16)).logsumexp(1).numpy(), torch.logsumexp(tt(a).half(), 1), atol=1e-3)
