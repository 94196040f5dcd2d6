"""Differential testing: the C backend equals the NumPy interpreter on random tensor programs.

Each hypothesis example packs several independent programs into one graph, so one C compile
checks them all (see compiler_progs.py for what the programs cover).
"""

from __future__ import annotations

import numpy as np
import pytest
from compiler_progs import assert_same, graph_float_floor, program_batch, slow_scale, tolerance
from frontend_progs import Batch, frontend_batch
from hypothesis import HealthCheck, given, settings

from caten_lab.air import interpret
from caten_lab.air.graph import state_outputs
from caten_lab.compiler import compile
from caten_lab.config import settings as caten_settings
from caten_lab.frontend.build import realize

PROGRAMS_PER_BATCH = 6
_settings = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
             "derandomize": True}


def check(g, inputs, symbols, safety=1):  # noqa: ANN001, ANN201
    expected = interpret(g, inputs, {**symbols})
    prog = compile(g, backend="c", safety=safety)
    got = prog(inputs, symbols)
    assert_same(expected, got, context=g.dump() + "\n" + (prog.c_source or "")[-6000:], floor=graph_float_floor(g))
    return prog


@settings(max_examples=25, **_settings)
@given(program_batch(n_programs=PROGRAMS_PER_BATCH))
def test_c_backend_equals_interpreter(batch) -> None:  # noqa: ANN001
    g, inputs, symbols = batch
    check(g, inputs, symbols)


@settings(max_examples=6, **_settings)
@given(program_batch(n_programs=PROGRAMS_PER_BATCH))
def test_c_backend_equals_interpreter_safety2(batch) -> None:  # noqa: ANN001
    """Same programs with every index checked: valid programs never trip a check."""
    g, inputs, symbols = batch
    check(g, inputs, symbols, safety=2)


@pytest.mark.slow
def test_c_backend_equals_interpreter_many() -> None:
    """About 1900 programs at CATEN_SLOW_SCALE=10; about 190 at the default scale 1 (CI)."""
    n = max(2, int(8 * slow_scale()))

    @settings(max_examples=n, **{**_settings, "derandomize": False})
    @given(program_batch(n_programs=24, max_steps=8))
    def inner(batch) -> None:  # noqa: ANN001
        g, inputs, symbols = batch
        check(g, inputs, symbols)

    inner()


# ---- the frontend on hostile values: C vs interpreter vs NumPy ---------------------------------


def _assert_case(label: str, got: np.ndarray, want: np.ndarray, who: str) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{label} on {who}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{label} on {who}: dtype {got.dtype} != {want.dtype}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), equal_nan=True,
                                   err_msg=f"{label} on {who}", **tolerance(want.dtype))
    else:
        np.testing.assert_array_equal(got, want, err_msg=f"{label} on {who}")


def check_frontend_batch(batch: Batch) -> None:
    tensors = [c.tensor for c in batch.cases]
    if tensors:
        with caten_settings(backend="numpy"):
            on_numpy = realize(tensors, {})
        with caten_settings(backend="c"):
            on_c = realize(tensors, {})
        for case, r_np, r_c in zip(batch.cases, on_numpy, on_c):
            _assert_case(case.label, r_np, case.want, "the interpreter")
            _assert_case(case.label, r_c, case.want, "C")
            _assert_case(case.label, r_c, r_np, "C vs the interpreter")
    for arr, before in batch.inputs:  # no case stores into a bound tensor: every input is unchanged
        np.testing.assert_array_equal(arr, before, err_msg="an input array was written")


@settings(max_examples=30, **_settings)
@given(frontend_batch(n_cases=12))
def test_frontend_hostile_values_c_interpreter_numpy(batch: Batch) -> None:
    """NaN/inf/-0.0, integer extremes, size-0 axes and stores into derived tensors, on both backends."""
    check_frontend_batch(batch)


@pytest.mark.slow
def test_frontend_hostile_values_many() -> None:
    """About 600 batches at CATEN_SLOW_SCALE=10; about 60 at the default scale 1."""
    n = max(2, int(6 * slow_scale()))

    @settings(max_examples=n, **{**_settings, "derandomize": False})
    @given(frontend_batch(n_cases=24))
    def inner(batch: Batch) -> None:
        check_frontend_batch(batch)

    inner()


# ---- hostile values, empty axes and stores into derived values, in AIR ---------------------------


@settings(max_examples=12, **_settings)
@given(program_batch(n_programs=PROGRAMS_PER_BATCH, hostile=True, empty=True))
def test_c_backend_equals_interpreter_hostile_values(batch) -> None:  # noqa: ANN001
    """NaN/inf/-0.0 and integer extremes as inputs, size-0 axes, stores into computed values."""
    g, inputs, symbols = batch
    before = {k: v.copy() for k, v in inputs.items()}
    check(g, inputs, symbols)
    states = set(state_outputs(g).values())  # x[1:] = x[:-1] on an input is an in-place state update
    for k, v in inputs.items():  # every other input is left alone (stores into computed values copy)
        if k not in states:
            np.testing.assert_array_equal(v, before[k], err_msg=f"input {k} was written\n{g.dump()}")


@pytest.mark.slow
def test_c_backend_equals_interpreter_hostile_values_many() -> None:
    """About 400 batches at CATEN_SLOW_SCALE=10; about 40 at the default scale 1."""
    n = max(2, int(4 * slow_scale()))

    @settings(max_examples=n, **{**_settings, "derandomize": False})
    @given(program_batch(n_programs=12, max_steps=8, hostile=True, empty=True))
    def inner(batch) -> None:  # noqa: ANN001
        test_c_backend_equals_interpreter_hostile_values.hypothesis.inner_test(batch)

    inner()


@pytest.mark.parametrize(("op", "lit", "dtype"), [("mul", 1.0, "float32"), ("add", 0, "int32"),
                                                 ("and", True, "bool")])
def test_store_into_a_value_that_simplifies_to_an_input(op: str, lit: object, dtype: str) -> None:
    """simplify turns store(x * 1, ...) into store(x, ...); the scheduler used to take that for a state
    update, overwrite x's array and fail in collect_outputs with KeyError 'input0'. In-place-ness now
    comes from the graph as given (ctx.options['state_outputs'])."""
    from caten_lab.air import Graph, dtypes

    dt = getattr(dtypes, dtype)
    g = Graph()
    x = g.insert("allocate", [], shape=(2, 3), dtype=dt, name="x")
    y = g.insert(op, [x, lit])
    g.mark_output(g.insert("store", [y, lit], shape=(1, 3), strides=(3, 1), offset=0))
    a = (np.arange(6).reshape(2, 3) % 2 + 1).astype(dt.np)
    keep = a.copy()
    want = interpret(g, {"x": keep.copy()})
    got = compile(g, backend="c")({"x": a})
    np.testing.assert_array_equal(a, keep)  # x is not a state: its array never changes
    assert_same(want, got)


def test_state_update_beside_a_store_that_simplifies_to_the_same_input() -> None:
    """A real state update of x (output 0) next to a plain value that simplifies to a store into x
    (output 1): x is updated with output 0's value only, and output 1 is the plain value."""
    from caten_lab.air import Graph, dtypes

    g = Graph()
    x = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32, name="x")
    g.mark_output(g.insert("store", [x, 5.0], shape=(1, 3), strides=(3, 1), offset=3))
    g.mark_output(g.insert("store", [g.insert("mul", [x, 1.0]), 7.0], shape=(1, 3), strides=(3, 1), offset=0))
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    want_state = a.copy()
    want_state[1] = 5.0
    want_plain = a.copy()
    want_plain[0] = 7.0
    for backend in ("numpy", "c"):
        b = a.copy()
        got = compile(g, backend=backend)({"x": b})
        np.testing.assert_array_equal(got[0], want_state)
        np.testing.assert_array_equal(got[1], want_plain)
        np.testing.assert_array_equal(b, want_state)  # the state output is written into the caller's array


def test_the_scheduler_takes_state_outputs_from_the_graph_as_given() -> None:
    """Every way of running the pipeline (PassManager.run, traced or not, and the notebook's PassDebugger)
    schedules store(x * 1, ...) as a copy: x stays an input, no state write."""
    from caten_lab.air import Graph, dtypes
    from caten_lab.compiler import default_pipeline
    from caten_lab.notebook.debugger import PassDebugger

    g = Graph()
    x = g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32, name="x")
    g.mark_output(g.insert("store", [g.insert("mul", [x, 1.0]), 9.0], shape=(1, 3), strides=(3, 1), offset=0))
    scheds = [default_pipeline().run(g.copy(), trace=t).ctx.artifacts["schedule"] for t in (False, True)]
    scheds.append(PassDebugger(g).run_all().ctx.artifacts["schedule"])
    for s in scheds:
        assert s.state_writes == {} and s.buffers["x"].kind == "input"
