"""Actions lower to the kernel IR (codegen/kir.py) and render through the one C renderer: one dtype
system, an origin (the user's file:line) on every node, host calls linked in the IR, and C semantics
that keep Python's (narrow-integer wrap-around, arrays passed twice)."""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

import numpy as np
import pytest
import wf_examples as ex
from kir_queries import calls, nodes, of_type
from wf_examples import dot

from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir as K
from caten_lab.codegen.kir_check import validate
from caten_lab.config import settings
from caten_lab.workflow import Array, action, boolean, f32, f64, i32, i64, u8
from caten_lab.workflow.cgen import entry_cdef, render_c
from caten_lab.workflow.to_kir import lower_actions

EXAMPLES = (ex.dot, ex.collatz, ex.matvec, ex.squares_until, ex.int_ops, ex.float_ops, ex.div_promotes,
            ex.count_range, ex.skip_odd, ex.for_else, ex.swap_sort, ex.bytes_hist, ex.logic, ex.fib,
            ex.clamp_all, ex.gcd_sum, ex.tricky_flow)


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    with settings(cache_dir=tmp_path_factory.mktemp("caten_cache")):
        yield


def test_action_types_are_the_projects_dtypes():
    want = {i32: DType.int32, i64: DType.int64, u8: DType.uint8, f32: DType.float32, f64: DType.float64,
            boolean: DType.bool}
    for t, dt in want.items():
        assert t.dtype is dt and t.c_name == dt.c_name and np.dtype(t.np_dtype) == dt.np


@pytest.mark.parametrize("act", EXAMPLES, ids=lambda a: a.ir.name)
def test_every_node_has_the_users_file_and_line(act):
    program = act.kernel_ir()
    validate(program)  # scopes, int64 indices, operand types
    for f in program.functions:
        assert f.origin.file == ex.__file__ and f.origin.line > 0
    for x in nodes(program):
        assert x.origin.file == ex.__file__ and x.origin.line > 0, (act.ir.name, x)
        if isinstance(x, K.Expr):
            assert isinstance(x.dtype, DType)


def test_tokenizer_actions_lower_to_valid_kernel_ir():
    from caten_lab.workflow.tokenizers import bpe_actions, spm_actions  # noqa: F401 - registers the actions
    from caten_lab.workflow.tokenizers._action import ACTIONS
    from caten_lab.workflow.tokenizers.compiled import ENTRY_POINTS

    for name in ENTRY_POINTS:
        low = lower_actions(ACTIONS[name])
        validate(low.program)
        assert low.program.function(low.entry).linkage == "export"
        assert all(f.linkage == "static" for f in low.program.functions if f.name != low.entry)


def test_origins_point_at_the_statement_lines():
    program = ex.collatz.kernel_ir()
    first = ex.collatz.ir.firstline  # the `def` line
    lines = {type(s).__name__: s.origin.line - first for s in of_type(program, K.Stmt)
             if not isinstance(s, K.Decl | K.If)}
    # def collatz / steps = 0 / while n != 1 / if ... / n = n // 2 / else / n = 3n+1 / steps += 1 / return
    assert lines["While"] == 2 and lines["Return"] == 8
    fdiv = calls(program, "cl_act_fdiv_int64")
    assert [c.origin.line - first for c in fdiv] == [4]
    assert [c.args[2].value for c in fdiv] == [first + 4]  # the line an error reports


def test_line_directives_come_from_the_origins():
    r = render_c(ex.collatz)
    directives = [line for line in r.source.split("\n") if line.startswith("#line ")]
    lines = {s.origin.line for s in of_type(r.program, K.Stmt)}
    assert {int(d.split()[1]) for d in directives} == lines
    assert all(d.endswith(f'"{ex.__file__}"') for d in directives)
    assert len(r.line_origins) == len(r.source.split("\n")) - 1


@pytest.mark.parametrize("act", (ex.dot, ex.matvec, ex.swap_sort, ex.logic, ex.bytes_hist), ids=lambda a: a.ir.name)
def test_entry_prototype_without_rendering(act):
    r = render_c(act)
    assert entry_cdef(act) == (r.entry, r.cdef)


def test_lowering_is_deterministic():
    assert ex.tricky_flow.kernel_ir() == ex.tricky_flow.kernel_ir()
    assert ex.tricky_flow.kernel_ir(safety=0) != ex.tricky_flow.kernel_ir()


def test_host_actions_call_host_functions_in_the_ir():
    from caten_lab.workflow.generation import emit_token, generate_loop, model_forward

    low = lower_actions(generate_loop)
    externs = {f.name: f for f in low.externs}
    assert set(externs) == {"host_model_forward", "host_emit_token"}
    for host in (model_forward, emit_token):
        fn = low.program.function(low.functions[host.ir.name])
        extern = externs[f"host_{host.ir.name}"]
        assert extern.params == fn.params and extern.returns == fn.returns == DType.int32
        (ret,) = fn.body
        assert isinstance(ret, K.Return) and ret.value.fn == extern.name
        assert [a.name if isinstance(a, K.Var) else a.buf for a in ret.value.args] == [p.name for p in fn.params]
    assert render_c(generate_loop).externs == ("host_model_forward", "host_emit_token") or \
        set(render_c(generate_loop).externs) == set(externs)


@action
def shift_right(src: Array[i32, ("n",)], dst: Array[i32, ("n",)]) -> None:
    for i in range(1, len(src)):
        dst[i] = src[i - 1] + 1


def test_one_array_passed_twice_agrees_with_python():
    native = shift_right.compile()
    assert all(not p.restrict for p in native.program.function("caten_action_shift_right").params if p.pointer)
    for n in (1, 5, 64, 1000):
        a = np.zeros(n, dtype=np.int32)
        b = a.copy()
        native(a, a)  # sequential: a[i] = a[i - 1] + 1 reads the element just written
        shift_right(b, b)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, np.arange(n, dtype=np.int32))


@action
def narrow(x: u8, y: u8, k: i32) -> i64:
    s = x + y  # wraps in u8
    t = x * y
    u = (x << 4) >> 4  # the high bits are gone after the shift in u8
    v = -x
    w = ~x
    big = i64(s) * 1000000 + i64(t) * 10000 + i64(u) * 100 + i64(v) + i64(w) * 7
    if s < 300 and (x + y) > 250:  # compares in i64, on the wrapped sum
        big += 1
    return big + i64(~k)


def _narrow_numpy(x: int, y: int, k: int) -> int:
    """``narrow`` in NumPy uint8 arithmetic (the interpreted mode turns u8 scalar arguments into Python
    ints, which do not wrap)."""
    a, b = np.uint8(x), np.uint8(y)
    s, t, u, v, w = a + b, a * b, (a << np.uint8(4)) >> np.uint8(4), -a, ~a
    big = int(s) * 1000000 + int(t) * 10000 + int(u) * 100 + int(v) + int(w) * 7
    if int(s) < 300 and int(a + b) > 250:
        big += 1
    return big + ~k


def test_narrow_integers_wrap_as_in_numpy():
    native = narrow.compile()
    with np.errstate(over="ignore"):
        for x, y, k in ((200, 100, 3), (255, 255, -1), (0, 0, 0), (17, 250, 2**31 - 1), (128, 128, -(2**31)),
                        (100, 151, 5)):
            assert native(x, y, k) == _narrow_numpy(x, y, k), (x, y, k)


@action
def dot_then_sum(a: Array[f32, ("n",)]) -> f32:
    s = dot(a, a)
    for i in range(len(a)):
        s += a[i]
    return s


def test_fallback_after_a_partial_structured_attempt_keeps_the_callees():
    """A structure note that fails midway (after a call was lowered) falls back to gotos; the callee
    named in the first attempt is still compiled (it was dropped: an undefined C function)."""
    import copy

    clone = copy.copy(dot_then_sum)
    clone.ir = copy.copy(dot_then_sum.ir)
    clone.ir.structure = [0]  # block 0 (the call) lowers, then its jump into the loop has no structured form
    r = render_c(clone, check=True)
    assert of_type(r.program, K.Goto)
    assert {f.name for f in r.program.functions} == {"caten_action_dot_then_sum", "act_dot_1"}
    from caten_lab.config import config
    from caten_lab.runtime.toolchain import build_library, toolchain
    from caten_lab.workflow.native import NativeAction

    cfg = config()
    built = build_library(r.source, toolchain(cfg.cc, cfg.cache_dir), cfg.cache_dir)
    native = NativeAction(clone, r, built.path, 1, built.cc_s)
    a = np.arange(5, dtype=np.float32)
    assert native(a) == dot_then_sum(a) == float(a @ a + a.sum())
