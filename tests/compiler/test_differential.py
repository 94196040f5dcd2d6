"""Differential testing: the C backend equals the NumPy interpreter on random tensor programs.

Each hypothesis example packs several independent programs into one graph, so one C compile
checks them all (see compiler_progs.py for what the programs cover).
"""

from __future__ import annotations

import pytest
from compiler_progs import assert_same, graph_float_floor, program_batch, slow_scale
from hypothesis import HealthCheck, given, settings

from caten_lab.air import interpret
from caten_lab.compiler import compile

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
