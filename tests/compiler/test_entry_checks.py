"""Checked entry of a compiled Program (issue 13): symbol windows, negative dimensions, argument buffers,
integer division by zero. Each bad call here killed the process or returned garbage before the checks
(heap corruption, segfault, NaN); now it raises before any kernel runs and the program stays usable."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from caten_lab.air import Graph, Sym, dtypes
from caten_lab.air.entry_checks import entry_checks
from caten_lab.compiler import compile, lower_to_c
from caten_lab.errors import CatenError, RuntimeCheckError, ShapeError, SymbolError
from caten_lab.frontend import Tensor, build_graph, execute, placeholder

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"


def kv_cache_graph() -> tuple[Graph, dict, int]:
    """The README's KV-cache example: store k at pos, then sum the filled window (128-long cache)."""
    seq, pos = Sym("seq"), Sym("pos")
    cache = Tensor.from_numpy(np.zeros((1, 4, 128, 16), np.float32), name="cache")
    k = placeholder((1, 4, seq, 16), name="k")
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    cache[:, :, pos:pos + seq] = k
    scores = cache[:, :, :pos + seq].sum(-1)
    g, arrays = build_graph([scores])
    return g, arrays, line


def kv_reference(pos: int, k: np.ndarray) -> np.ndarray:
    cache = np.zeros((1, 4, 128, 16), np.float32)
    cache[:, :, pos:pos + k.shape[2]] = k
    return cache[:, :, :pos + k.shape[2]].sum(-1)


@pytest.mark.parametrize("backend", ["c", "numpy"])
@pytest.mark.parametrize("safety", [1, 2])
@pytest.mark.parametrize("pos", [126, 5000, 100000])
def test_kv_cache_window_past_the_buffer_raises_at_entry(backend: str, safety: int, pos: int) -> None:
    g, arrays, line = kv_cache_graph()
    prog = compile(g, backend=backend, safety=safety)
    k = np.random.default_rng(0).standard_normal((1, 4, 3, 16)).astype(np.float32)
    before = arrays["cache"].copy()
    with pytest.raises(SymbolError) as ei:
        prog({**arrays, "k": k}, {"pos": pos, "seq": 3})
    msg = str(ei.value)
    assert "pos + seq <= 128" in msg and f"'pos': {pos}" in msg and "'seq': 3" in msg and "'cache'" in msg
    assert ei.value.where == f"{__file__}:{line}"
    assert "pos + seq must not exceed 128" in (ei.value.hint or "")
    np.testing.assert_array_equal(arrays["cache"], before)  # nothing ran: the cache is untouched
    # the program is still fine: the last in-range position gives NumPy's answer
    out = prog({**arrays, "k": k}, {"pos": 125, "seq": 3})
    np.testing.assert_allclose(out[0], kv_reference(125, k), rtol=1e-5)


def test_execute_and_a_compiled_program_give_the_same_error() -> None:
    g, arrays, _ = kv_cache_graph()
    k = np.ones((1, 4, 3, 16), np.float32)
    with pytest.raises(SymbolError) as via_execute:
        execute(g, {**arrays, "k": k}, {"pos": 126})
    with pytest.raises(SymbolError) as via_program:
        compile(g)({**arrays, "k": k}, {"pos": 126, "seq": 3})
    assert str(via_execute.value) == str(via_program.value)


def test_conditions_are_deduplicated_by_expression() -> None:
    g, _, _ = kv_cache_graph()
    checks = entry_checks(g, lower_to_c(g).graph)
    assert [d.split("  (")[0] for d in checks.describe()] == ["pos + seq <= 128"]


def test_profile_checks_the_entry_too() -> None:
    g, arrays, _ = kv_cache_graph()
    prog = compile(g, backend="c")
    with pytest.raises(SymbolError, match="pos \\+ seq <= 128"):
        prog.profile({**arrays, "k": np.ones((1, 4, 3, 16), np.float32)}, {"pos": 126, "seq": 3})


def test_a_symbol_too_large_for_int64_is_a_symbol_error() -> None:
    g, arrays, _ = kv_cache_graph()
    with pytest.raises(SymbolError, match="'pos'.*larger than"):
        compile(g)({**arrays, "k": np.ones((1, 4, 3, 16), np.float32)}, {"pos": 2**70, "seq": 3})


def test_safety_0_still_binds_but_does_not_check_windows() -> None:
    g, arrays, _ = kv_cache_graph()
    prog = compile(g, safety=0)
    k = np.ones((1, 4, 3, 16), np.float32)
    np.testing.assert_allclose(prog({**arrays, "k": k}, {"pos": 7, "seq": 3})[0], kv_reference(7, k))
    with pytest.raises(SymbolError, match="non-negative"):
        prog({**arrays, "k": k}, {"pos": -1, "seq": 3})
    with pytest.raises(CatenError, match="'k' is not bound"):
        prog(arrays, {"pos": 1, "seq": 3})


# ---- negative dimensions ---------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_a_symbolic_slice_that_becomes_negative_is_a_symbol_error(backend: str) -> None:
    n = Sym("n")
    x = placeholder((n,), "float32", name="x")
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    y = x[2:n - 3] * 2
    g, _ = build_graph([y])
    prog = compile(g, backend=backend)
    xs = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(prog({"x": xs})[0], xs[2:5] * 2)
    with pytest.raises(SymbolError) as ei:  # the compiled program raised a raw ValueError here
        prog({"x": np.arange(3, dtype=np.float32)})
    assert "negative dimension n - 5 = -2" in str(ei.value) and "5 <= n" in str(ei.value)
    assert ei.value.where == f"{__file__}:{line}"


# ---- GPT-2 -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_runner():  # noqa: ANN201
    from caten_lab.models.gpt2 import GPT2Runner

    return GPT2Runner.from_pretrained(ASSETS)


@pytest.mark.parametrize("pos", [254, 300, 100000])
def test_gpt2_program_past_the_context_raises_and_leaves_the_cache(tiny_runner, pos: int) -> None:  # noqa: ANN001
    r = tiny_runner
    r.reset()
    ref = r.forward([1, 2, 3], 0)
    arrays = {**r.arrays, r.tokens_name: np.array([[5, 6, 7]], np.int64)}
    caches = {s: r.arrays[s].copy() for s in r.states}
    with pytest.raises(SymbolError) as ei:
        r.program(arrays, {"seq": 3, "pos": pos})
    assert "pos + seq <= 256" in str(ei.value) and f"'pos': {pos}" in str(ei.value)
    for s in r.states:
        np.testing.assert_array_equal(r.arrays[s], caches[s])
    r.reset()
    np.testing.assert_array_equal(r.forward([1, 2, 3], 0), ref)  # still the same program


def test_gpt2_decode_program_has_a_handful_of_conditions(tiny_runner) -> None:  # noqa: ANN001
    conds = [d.split("  (")[0] for d in tiny_runner.program.entry.describe()]
    assert conds == ["pos + seq <= 256", "1 <= seq"]  # 4 layers x (k, v) x (store, read) + wpe: one


def test_gpt2_decode_kernels_have_no_integer_division(tiny_runner) -> None:  # noqa: ANN001
    """The division-by-zero checks of safety 1 cost decode nothing: its kernels divide no integers."""
    src = tiny_runner.program.c_source
    kernels = src.split("__attribute__((noinline)) void", 1)[1]
    assert tiny_runner.program.safety == 1
    assert "cl_idiv" not in kernels and "cl_imod" not in kernels


# ---- argument buffers ------------------------------------------------------------------------


def _state_graph() -> Graph:
    g = Graph()
    c = g.insert("allocate", [], shape=(8,), dtype=dtypes.float32, name="c")
    y = g.insert("allocate", [], shape=(2,), dtype=dtypes.float32, name="y")
    g.mark_output(g.insert("store", [c, y], shape=(2,), strides=(1,), offset=Sym("pos")))
    return g


def test_argument_buffers_are_checked() -> None:
    prog = compile(_state_graph())
    y = np.array([1.0, 2.0], np.float32)
    c = np.zeros(8, np.float32)
    prog({"c": c, "y": y}, {"pos": 6})
    np.testing.assert_array_equal(c, [0, 0, 0, 0, 0, 0, 1, 2])
    with pytest.raises(SymbolError, match="pos <= 6"):
        prog({"c": c, "y": y}, {"pos": 7})
    with pytest.raises(ShapeError, match="'c': expected shape \\(8,\\), got \\(4,\\)"):
        prog({"c": np.zeros(4, np.float32), "y": y}, {"pos": 0})  # too small
    with pytest.raises(CatenError, match="'c'.*C-contiguous"):
        prog({"c": np.zeros(16, np.float32)[::2], "y": y}, {"pos": 0})  # a state must be updated in place
    with pytest.raises(CatenError, match="'c'.*float32"):
        prog({"c": np.zeros(8, np.float64), "y": y}, {"pos": 0})
    # a plain input is converted: a non-contiguous or float64 y is fine (its values survive)
    prog({"c": c, "y": np.array([3.0, 9.0, 4.0, 9.0])[::2]}, {"pos": 0})
    np.testing.assert_array_equal(c[:2], [3, 4])


def _int_graph(dtype=dtypes.int32) -> Graph:  # noqa: ANN001
    g = Graph()
    x = g.insert("allocate", [], shape=(3,), dtype=dtype, name="x")
    g.mark_output(g.insert("add", [x, 1]))
    return g


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_inputs_are_not_converted_when_values_would_change(backend: str) -> None:
    prog = compile(_int_graph(), backend=backend)
    np.testing.assert_array_equal(prog({"x": np.array([1, 2, 3], np.int64)})[0], [2, 3, 4])
    np.testing.assert_array_equal(prog({"x": [4, 5, 6]})[0], [5, 6, 7])
    if backend == "c":
        with pytest.raises(CatenError, match="'x' is float64.*int32.*change its values"):
            prog({"x": np.array([1.9, 2.2, 3.0])})
        with pytest.raises(CatenError, match="'x' holds values 0..4294967296, outside the program's int32"):
            prog({"x": np.array([0, 1, 2**32], np.int64)})


# ---- integer division by zero --------------------------------------------------------------


def _div_graph(op: str, divisor: np.ndarray | int) -> tuple[Graph, dict, int]:
    a = Tensor.from_numpy(np.array([7, -7, 5, 9], np.int32), name="a")
    b = Tensor.from_numpy(divisor, name="b") if isinstance(divisor, np.ndarray) else divisor
    line = inspect.currentframe().f_lineno + 1  # type: ignore[union-attr]
    y = a // b if op == "//" else a % b
    g, arrays = build_graph([y])
    return g, arrays, line


@pytest.mark.parametrize("op", ["//", "%"])
@pytest.mark.parametrize(("backend", "safety"), [("c", 1), ("c", 2), ("numpy", 0), ("numpy", 1)])
def test_integer_division_by_zero_raises(op: str, backend: str, safety: int) -> None:
    g, arrays, line = _div_graph(op, np.array([2, -3, 0, 4], np.int32))
    prog = compile(g, backend=backend, safety=safety)
    with pytest.raises(RuntimeCheckError) as ei:
        prog(arrays)
    msg = str(ei.value)
    assert "integer division by zero" in msg and "AIR node" in msg
    assert ei.value.where == f"{__file__}:{line}"
    if backend == "c":
        assert "in kernel k" in msg
    ok = {**arrays, "b": np.array([2, -3, 1, 4], np.int32)}
    a = arrays["a"]
    want = np.floor_divide(a, ok["b"]) if op == "//" else np.mod(a, ok["b"])
    np.testing.assert_array_equal(prog(ok)[0], want)  # Python semantics, and the program still runs


def test_integer_division_is_unchecked_at_safety_0_and_by_a_nonzero_constant() -> None:
    g, arrays, _ = _div_graph("//", np.array([2, 2, 0, 3], np.int32))
    prog = compile(g, backend="c", safety=0)  # documented: safety 0 gives 0 for a zero divisor
    assert "_ck_" not in prog.c_source.split("__attribute__((noinline)) void", 1)[1]
    np.testing.assert_array_equal(prog(arrays)[0], [3, -4, 0, 3])
    g3, arrays3, _ = _div_graph("//", 3)
    prog3 = compile(g3, backend="c", safety=1)
    assert "_ck_" not in prog3.c_source.split("__attribute__((noinline)) void", 1)[1]
    np.testing.assert_array_equal(prog3(arrays3)[0], np.floor_divide(arrays3["a"], 3))
    g0, arrays0, _ = _div_graph("%", 0)  # a zero constant is checked
    with pytest.raises(RuntimeCheckError, match="integer division by zero"):
        compile(g0, backend="c", safety=1)(arrays0)


@pytest.mark.parametrize("backend", ["c", "numpy"])
def test_symbolic_cat_and_pad_need_no_condition_and_match_numpy(backend: str) -> None:
    n, m = Sym("n"), Sym("m")
    x = placeholder((n, 2), "float32", name="x")
    y = placeholder((m, 2), "float32", name="y")
    g, _ = build_graph([Tensor.cat([x, y], 0).pad((0, 0, 1, 2)) * 2])
    prog = compile(g, backend=backend)
    assert prog.entry.describe() == []  # masks inside their axes: nothing to check per call
    for rows_x, rows_y in ((3, 4), (0, 2), (2, 0)):
        xs = np.arange(rows_x * 2, dtype=np.float32).reshape(rows_x, 2)
        ys = -np.arange(rows_y * 2, dtype=np.float32).reshape(rows_y, 2)
        want = np.pad(np.concatenate([xs, ys]), ((1, 2), (0, 0))) * 2
        np.testing.assert_array_equal(prog({"x": xs, "y": ys})[0], want)
