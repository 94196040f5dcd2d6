"""Compiled actions (C via the runtime toolchain) agree with interpreted mode on many inputs."""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

import os

import numpy as np
import pytest
import wf_examples as ex
from kir_queries import calls, declared, of_type

from caten_lab.codegen import kir as K
from caten_lab.config import settings
from caten_lab.errors import CatenError, RuntimeCheckError
from caten_lab.workflow import Array, Local, action, f32, f64, i32, i64, u8

N_CASES = 40 * max(1, int(os.environ.get("CATEN_SLOW_SCALE", "1") or 1))


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    with settings(cache_dir=tmp_path_factory.mktemp("caten_cache")):
        yield


def rng(seed=0):
    return np.random.default_rng(seed)


def test_scalar_actions_match_on_many_inputs():
    r = rng(1)
    int_ops, collatz, count_range = ex.int_ops.compile(), ex.collatz.compile(), ex.count_range.compile()
    float_ops, div_promotes = ex.float_ops.compile(), ex.div_promotes.compile()
    for _ in range(N_CASES):
        x, y = (int(v) for v in r.integers(-(10**5), 10**5, 2))
        y = y or 3
        assert int_ops(x, y) == ex.int_ops(x, y), (x, y)
        fx, fy = float(r.normal() * 10), float(r.normal() * 10) or 1.0
        assert float_ops(fx, fy) == pytest.approx(ex.float_ops(fx, fy), rel=1e-12, abs=1e-9)
        assert div_promotes(x, y) == ex.div_promotes(x, y)
        n = int(r.integers(1, 10**6))
        assert collatz(n) == ex.collatz(n)
        start, stop = (int(v) for v in r.integers(-50, 50, 2))
        step = int(r.choice([-7, -3, -1, 1, 2, 5]))
        assert count_range(start, stop, step) == ex.count_range(start, stop, step)


def test_control_flow_actions_match():
    skip_odd, countdown, fib, logic = (
        ex.skip_odd.compile(),
        ex.countdown.compile(),
        ex.fib.compile(),
        ex.logic.compile(),
    )
    annotated, later = ex.annotated.compile(), ex.later_caller.compile()
    for n in range(0, 60):
        assert skip_odd(n) == ex.skip_odd(n)
        assert countdown(n) == ex.countdown(n)
        assert fib(n % 90) == ex.fib(n % 90)
        assert annotated(n - 30) == pytest.approx(ex.annotated(n - 30))
        assert later(n) == ex.later_caller(n)
        for flag in (False, True):
            assert logic(n - 10, 30 - n, flag) == ex.logic(n - 10, 30 - n, flag)


def test_array_actions_match():
    r = rng(2)
    dot, matvec, clamp = ex.dot.compile(), ex.matvec.compile(), ex.clamp_all.compile()
    sort, hist, found, gcds = (
        ex.swap_sort.compile(),
        ex.bytes_hist.compile(),
        ex.for_else.compile(),
        ex.gcd_sum.compile(),
    )
    squares = ex.squares_until.compile()
    for case in range(N_CASES):
        n = int(r.integers(0, 50))
        a = r.standard_normal(n).astype(np.float32)
        b = r.standard_normal(n).astype(np.float32)
        assert dot(a, b) == pytest.approx(ex.dot(a, b), rel=1e-5, abs=1e-5)
        assert squares(a, case) == pytest.approx(ex.squares_until(a, case), rel=1e-5, abs=1e-5)
        m, v = r.random((n % 7 + 1, n % 5 + 1)), r.random(n % 5 + 1)
        o1, o2 = np.zeros(m.shape[0]), np.zeros(m.shape[0])
        matvec(m, v, o1)
        ex.matvec(m, v, o2)
        np.testing.assert_allclose(o1, o2, rtol=1e-12)
        g = r.standard_normal((n % 6 + 1, n % 4 + 1)).astype(np.float32)
        g1, g2 = g.copy(), g.copy()
        assert clamp(g1, -0.5, 0.5) == ex.clamp_all(g2, -0.5, 0.5)
        np.testing.assert_array_equal(g1, g2)
        ints = r.integers(-1000, 1000, n).astype(np.int32)
        s1, s2 = ints.copy(), ints.copy()
        sort(s1)
        ex.swap_sort(s2)
        np.testing.assert_array_equal(s1, s2)
        target = int(ints[n // 2]) if n else 5
        assert found(ints, target) == ex.for_else(ints, target)
        data = r.integers(0, 256, n).astype(np.uint8)
        h1, h2 = np.zeros(256, np.int32), np.zeros(256, np.int32)
        assert hist(data, h1) == ex.bytes_hist(data, h2)
        np.testing.assert_array_equal(h1, h2)
        vals = r.integers(1, 10**6, n % 8 + 1).astype(np.int64) * int(r.integers(1, 50))
        assert gcds(vals) == ex.gcd_sum(vals)


def test_type_split_variables_and_u8_wraparound():
    @action
    def mixed(n: i32, data: Array[u8, ("k",)]) -> f64:
        acc = 0  # i32 here, f64 after the loop header (converted on the edge)
        for _ in range(n):
            acc = acc + 0.25
        total = u8(0)
        for j in range(len(data)):
            total = total + data[j]  # u8 arithmetic wraps as in NumPy
        return acc + f64(total)

    data = np.array([200, 100, 7], dtype=np.uint8)
    native = mixed.compile()
    with np.errstate(over="ignore"):
        interpreted = mixed(10, data)
    assert native(10, data) == interpreted == 2.5 + float((200 + 100 + 7) % 256)
    assert {"v_acc_i32", "v_acc_f64"} <= declared(native.program, "caten_action_mixed")


def test_recursion_with_annotation():
    @action
    def fact(n: i64) -> i64:
        if n <= 1:
            return 1
        return n * fact(n - 1)

    fact.fn.__globals__["fact"] = fact  # a local def: make the recursive name resolvable
    assert fact.compile()(20) == fact(20) == 2432902008176640000


def test_division_by_zero_is_a_checked_error():
    native = ex.int_ops.compile()
    with pytest.raises(RuntimeCheckError, match="division by zero") as info:
        native(5, 0)
    assert "wf_examples.py:" in str(info.value)
    with pytest.raises(ZeroDivisionError):
        ex.int_ops(5, 0)


def test_out_of_bounds_index_at_safety_2():
    @action
    def overrun(a: Array[f32, ("n",)]) -> f32:
        s = f32(0)
        for i in range(len(a) + 1):
            s += a[i]
        return s

    native = overrun.compile(safety=2)
    with pytest.raises(RuntimeCheckError, match="index 3 out of bounds .* size 3") as info:
        native(np.ones(3, np.float32))
    assert f"{__file__}:" in str(info.value) and "s += a[i]" in str(info.value)
    with pytest.raises(IndexError):
        overrun(np.ones(3, np.float32))


def test_compiled_argument_checks():
    native = ex.dot.compile()
    a = np.ones(4, np.float32)
    with pytest.raises(CatenError, match="dtype float32"):
        native(np.ones(4), a)
    with pytest.raises(CatenError, match="C-contiguous"):
        native(np.ones(8, np.float32)[::2], a)


def test_local_arrays_are_zeroed_each_time():
    @action
    def local_sum(k: i32) -> i64:
        total = i64(0)
        for rep in range(3):
            buf = Local(i64, (4, 4))
            for i in range(4):
                buf[i, (i + k) % 4] += i64(rep + i)
            for i in range(4):
                for j in range(4):
                    total += buf[i, j] * (i * 4 + j)
        return total

    for k in range(5):
        assert local_sum.compile()(k) == local_sum(k)


def test_large_local_array_does_not_use_the_stack():
    @action
    def big(n: i32) -> i64:
        buf = Local(u8, 4_000_000)
        for i in range(n):
            buf[i * 3999 % 4_000_000] += 1
        total = i64(0)
        for i in range(4_000_000):
            total += i64(buf[i])  # interpreted: a Python int is "weak" next to a NumPy u8, so cast
        return total

    native = big.compile()
    allocs = calls(native.program, "cl_act_alloc_local")  # on the heap, one buffer per call, freed on return
    assert [(a.args[0].value, a.args[1].value) for a in allocs] == [(4_000_000, 1)]
    assert "l_buf" in {p.name for p in native.program.function("caten_action_big__body").params}
    assert calls(native.program, "cl_act_free", "caten_action_big__body")
    assert "l_buf" not in declared(native.program)
    # 3999 is prime to 4e6, so the first n < 4e6 increments hit n distinct bytes: the total is n. (Not the
    # interpreter as the reference: 4M interpreted iterations take ~20 s.)
    assert [native(n) for n in (0, 1000, 250_000)] == [0, 1000, 250_000]


def test_c_is_structured_without_gotos():
    for act in (ex.collatz, ex.for_else, ex.skip_odd, ex.swap_sort, ex.count_range, ex.gcd_sum):
        prog = act.compile().program
        assert not of_type(prog, K.Goto) and not of_type(prog, K.Label), act
        assert of_type(prog, K.While), act


def test_goto_renderer_fallback_agrees():
    """CFGs without structure notes (e.g. built by hand) render with labels and gotos, and agree."""
    import copy

    from caten_lab.config import config
    from caten_lab.runtime.toolchain import build_library, toolchain
    from caten_lab.workflow.cgen import render_c
    from caten_lab.workflow.native import NativeAction

    r = rng(11)
    for act in (ex.collatz, ex.for_else, ex.skip_odd, ex.tricky_flow):
        clone = copy.copy(act)
        clone.ir = copy.copy(act.ir)
        clone.ir.structure = None
        rendered = render_c(clone)
        assert of_type(rendered.program, K.Goto) and of_type(rendered.program, K.Label)
        cfg = config()
        built = build_library(rendered.source, toolchain(cfg.cc, cfg.cache_dir), cfg.cache_dir)
        native = NativeAction(clone, rendered, built.path, 1, built.cc_s)
        for n in range(1, 40):
            if act is ex.for_else:
                a = r.integers(0, 10, n % 7).astype(np.int32)
                assert native(a, n % 10) == act(a, n % 10)
            elif act is ex.tricky_flow:
                a = r.integers(0, 40, n % 9).astype(np.int32)
                assert native(n, a) == act(n, a)
            else:
                assert native(n) == act(n)


def test_tricky_control_flow_matches():
    native = ex.tricky_flow.compile()
    assert not of_type(native.program, K.Goto)
    r = rng(7)
    for n in list(range(0, 30)) + [200, 500]:
        a = r.integers(0, 40, int(r.integers(0, 12))).astype(np.int32)
        assert native(n, a) == ex.tricky_flow(n, a), (n, a)


def test_u8_compared_with_wide_literal():
    @action
    def count_below(data: Array[u8, ("n",)]) -> i32:
        c = 0
        for i in range(len(data)):
            if data[i] < 300 and data[i] != 256 + 7:
                c += 1
        return c

    data = np.arange(256, dtype=np.uint8)
    assert count_below.compile()(data) == count_below(data) == 256
