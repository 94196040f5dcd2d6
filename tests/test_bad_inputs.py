"""A catalogue of every bad input caten_lab rejects, with the error it must give.

Each case is (id, a zero-argument callable that must raise, the error type, words the message must
contain). The cases of each area live in ``tests/bad_inputs/<area>.py`` and are collected here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from caten_lab.air import Graph, Sym, dtypes, interpret
from caten_lab.errors import AirError, CatenError, CompileError, ShapeError, SymbolError

Case = tuple[str, Callable[[], object], type[BaseException], tuple[str, ...]]


def _g() -> Graph:
    return Graph()


def _x(g: Graph, shape: tuple = (2, 3), dtype=dtypes.float32, name: str = "x") -> str:  # noqa: ANN001
    return g.insert("allocate", [], shape=shape, dtype=dtype, name=name)


# ---- AIR --------------------------------------------------------------------------------------


def air_unknown_op() -> None:
    _g().insert("fancy", [])


def air_unknown_attr() -> None:
    g = _g()
    g.insert("reduce", [_x(g)], op="add", axes=(0,), keepdim=True)


def air_missing_attr() -> None:
    g = _g()
    g.insert("reduce", [_x(g)], op="add")


def air_wrong_attr_type() -> None:
    g = _g()
    g.insert("reduce", [_x(g)], op="mean", axes=(0,))


def air_wrong_operand_count() -> None:
    g = _g()
    g.insert("add", [_x(g)])


def air_shape_mismatch() -> None:
    g = _g()
    g.insert("add", [_x(g), _x(g, (3, 2), name="y")])


def air_dtype_mismatch() -> None:
    g = _g()
    g.insert("mul", [_x(g), _x(g, dtype=dtypes.int32, name="y")])


def air_reduce_axis_out_of_range() -> None:
    g = _g()
    g.insert("reduce", [_x(g)], op="add", axes=(5,))


def air_where_cond_not_bool() -> None:
    g = _g()
    x = _x(g)
    g.insert("where", [x, x, x])


def air_float_idiv() -> None:
    g = _g()
    x = _x(g)
    g.insert("idiv", [x, x])


def air_undefined_read() -> None:
    _g().insert("neg", ["v999999"])


def air_store_shape_mismatch() -> None:
    g = _g()
    g.insert("store", [_x(g, (8,)), _x(g, (3,), name="y")], shape=(4,), strides=(1,))


def air_interpret_unbound_input() -> None:
    g = _g()
    g.mark_output(g.insert("neg", [_x(g)]))
    interpret(g, {})


def air_interpret_unbound_symbol() -> None:
    g = _g()
    g.mark_output(g.insert("neg", [_x(g, (Sym("n"),))]))
    interpret(g, {"x": np.zeros(3, np.float32)})


def air_bad_symbol_name() -> None:
    Sym("not a name")


# ---- compiler ------------------------------------------------------------------------------


def _softmaxish() -> Graph:
    g = _g()
    x = _x(g, (Sym("n"), 4))
    g.mark_output(g.insert("exp2", [x]))
    return g


def compile_unknown_backend() -> None:
    from caten_lab.compiler import compile

    compile(_softmaxish(), backend="cuda")


def compile_bad_safety() -> None:
    from caten_lab.compiler import compile

    compile(_softmaxish(), safety=7)


def compile_not_a_graph() -> None:
    from caten_lab.compiler import compile

    compile("x + 1")  # type: ignore[arg-type]


def compile_no_outputs() -> None:
    from caten_lab.compiler import compile

    g = _g()
    _x(g)
    compile(g)


def run_missing_input() -> None:
    from caten_lab.compiler import compile

    compile(_softmaxish())({})


def run_wrong_shape() -> None:
    from caten_lab.compiler import compile

    compile(_softmaxish())({"x": np.zeros((3, 5), np.float32)})


def run_unknown_input() -> None:
    from caten_lab.compiler import compile

    compile(_softmaxish())({"x": np.zeros((3, 4), np.float32), "z": np.zeros(1)})


def run_negative_symbol() -> None:
    from caten_lab.compiler import compile

    compile(_softmaxish())({"x": np.zeros((3, 4), np.float32)}, {"n": -2})


def run_unbound_symbol() -> None:
    from caten_lab.compiler import compile

    g = _g()
    g.mark_output(g.insert("view", [_x(g, (8,))], shape=(Sym("k"),), strides=(1,)))
    compile(g)({"x": np.zeros(8, np.float32)})


def run_state_not_writable() -> None:
    from caten_lab.compiler import compile

    g = _g()
    c = _x(g, (4,), name="c")
    g.mark_output(g.insert("store", [c, _x(g, (2,), name="y")], shape=(2,), strides=(1,)))
    cache = np.zeros(4, np.float32)
    cache.flags.writeable = False
    compile(g)({"c": cache, "y": np.ones(2, np.float32)})


def run_state_wrong_dtype() -> None:
    from caten_lab.compiler import compile

    g = _g()
    c = _x(g, (4,), name="c")
    g.mark_output(g.insert("store", [c, _x(g, (2,), name="y")], shape=(2,), strides=(1,)))
    compile(g)({"c": np.zeros(4, np.float64), "y": np.ones(2, np.float32)})


def run_out_of_bounds_safety2() -> None:
    from caten_lab.compiler import compile

    g = _g()
    v = g.insert("view", [_x(g, (8,))], shape=(4,), strides=(1,), offset=Sym("pos"))
    g.mark_output(g.insert("neg", [v]))
    compile(g, safety=2)({"x": np.zeros(8, np.float32)}, {"pos": 9})


def compile_missing_c_compiler() -> None:
    from caten_lab.compiler import compile
    from caten_lab.config import settings

    with settings(cc="/nonexistent/cc-for-test"):
        compile(_softmaxish(), backend="c")


def settings_unknown_key() -> None:
    from caten_lab.config import settings

    with settings(optimise=True):
        pass


def settings_bad_backend() -> None:
    from caten_lab.config import settings

    with settings(backend="tpu"):
        pass


def env_safety_not_int() -> None:
    from caten_lab.config import config

    old = os.environ.get("CATEN_SAFETY")
    os.environ["CATEN_SAFETY"] = "high"
    try:
        config()
    finally:
        if old is None:
            del os.environ["CATEN_SAFETY"]
        else:
            os.environ["CATEN_SAFETY"] = old


def pipeline_not_a_pass() -> None:
    from caten_lab.compiler import default_pipeline

    default_pipeline().insert(0, lambda g, ctx: g)  # type: ignore[arg-type]


def pipeline_lowering_without_schedule() -> None:
    from caten_lab.codegen.passes import LowerKernels, RenderC
    from caten_lab.compiler import compile
    from caten_lab.passes.manager import PassManager

    compile(_softmaxish(), pipeline=PassManager([LowerKernels(), RenderC()]))


CASES: list[Case] = [
    ("air: unknown op", air_unknown_op, AirError, ("unknown AIR op", "fancy")),
    ("air: unknown attribute", air_unknown_attr, AirError, ("no attribute", "keepdim")),
    ("air: missing attribute", air_missing_attr, AirError, ("missing attribute", "axes")),
    ("air: wrong attribute value", air_wrong_attr_type, AirError, ("'op'", "wrong type")),
    ("air: wrong operand count", air_wrong_operand_count, AirError, ("takes 2 operand",)),
    ("air: elementwise shape mismatch", air_shape_mismatch, AirError, ("shapes differ", "broadcast")),
    ("air: elementwise dtype mismatch", air_dtype_mismatch, AirError, ("dtypes differ",)),
    ("air: reduce axis out of range", air_reduce_axis_out_of_range, AirError, ("axis 5", "out of range")),
    ("air: where condition not bool", air_where_cond_not_bool, AirError, ("condition must be bool",)),
    ("air: float idiv", air_float_idiv, AirError, ("integer-only",)),
    ("air: undefined value", air_undefined_read, AirError, ("not defined",)),
    ("air: store window shape", air_store_shape_mismatch, AirError, ("does not match the window",)),
    ("air: interpret unbound input", air_interpret_unbound_input, AirError, ("'x'", "not bound")),
    ("air: interpret unbound symbol", air_interpret_unbound_symbol, SymbolError, ("'n'", "not bound")),
    ("air: bad symbol name", air_bad_symbol_name, SymbolError, ("identifier",)),
    ("compile: unknown backend", compile_unknown_backend, CatenError, ("unknown backend", "cuda")),
    ("compile: bad safety level", compile_bad_safety, CatenError, ("safety", "0, 1 or 2")),
    ("compile: not a graph", compile_not_a_graph, CatenError, ("needs an AIR Graph", "str")),
    ("compile: no outputs", compile_no_outputs, CatenError, ("no outputs", "mark_output")),
    ("run: missing input", run_missing_input, CatenError, ("'x'", "not bound")),
    ("run: wrong input shape", run_wrong_shape, ShapeError, ("'x'", "expected shape")),
    ("run: unknown input", run_unknown_input, CatenError, ("unknown input", "'z'")),
    ("run: negative symbol", run_negative_symbol, SymbolError, ("'n'", "non-negative")),
    ("run: unbound symbol", run_unbound_symbol, SymbolError, ("'k'", "not bound")),
    ("run: read-only state", run_state_not_writable, CatenError, ("'c'", "in place", "writable")),
    ("run: state dtype", run_state_wrong_dtype, CatenError, ("'c'", "float32")),
    ("run: out of bounds at safety 2", run_out_of_bounds_safety2, SymbolError, ("'x'", "out of range", "pos <= 4")),
    ("compile: C compiler missing", compile_missing_c_compiler, CompileError, ("could not be run", "numpy")),
    ("config: unknown setting", settings_unknown_key, CatenError, ("unknown setting", "optimise")),
    ("config: unknown backend", settings_bad_backend, CatenError, ("unknown backend", "tpu")),
    ("config: non-integer env var", env_safety_not_int, CatenError, ("CATEN_SAFETY", "not an integer")),
    ("passes: not a pass", pipeline_not_a_pass, CompileError, ("not a pass",)),
    ("passes: lowering before scheduling", pipeline_lowering_without_schedule, CompileError, ("schedule",)),
]


from bad_inputs import caches, chat, codegen, frontend, loaders, quant, runtime, trace, workflow  # noqa: E402

CASES = (CASES + runtime.CASES + caches.CASES + loaders.CASES + workflow.CASES + frontend.CASES + trace.CASES
         + codegen.CASES + quant.CASES + chat.CASES)


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path_factory.getbasetemp() / "bad_inputs_cache"
    monkeypatch.setenv("CATEN_CACHE_DIR", str(path))
    return path


@pytest.mark.parametrize(("case", "fn", "error", "words"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_rejected(case: str, fn: Callable[[], object], error: type[BaseException],
                               words: tuple[str, ...]) -> None:
    with pytest.raises(error) as ei:
        fn()
    msg = str(ei.value)
    for w in words:
        assert w in msg, f"{case}: {w!r} not in error message:\n{msg}"
    assert isinstance(ei.value, CatenError), f"{case}: {type(ei.value).__name__} is not a CatenError"
