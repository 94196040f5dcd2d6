"""Compiled actions never crash the process: indices are checked at the default safety level (or
proven in range), Local arrays are bounded and large ones live on the heap (one buffer per call)."""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from kir_queries import calls, of_type

from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir as K
from caten_lab.config import settings
from caten_lab.errors import CatenError, RuntimeCheckError
from caten_lab.workflow import Array, Local, action, f32, i32, i64

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True, scope="module")
def _cache(tmp_path_factory):
    with settings(cache_dir=tmp_path_factory.mktemp("caten_cache")):
        yield


I64, I32 = DType.int64, DType.int32


@action
def pick(a: Array[i32, ("n",)], i: i64) -> i32:
    return a[i]


@action
def put(a: Array[f32, ("m", "n")], i: i32, j: i32, v: f32) -> None:
    a[i, j] = v


def test_index_out_of_bounds_raises_at_the_default_safety_level():
    native = pick.compile()  # the default level, 1 (was: no check, a segfault)
    a = np.arange(4, dtype=np.int32)
    assert native(a, 3) == 3
    for bad in (4, 10**9, -1, -(10**12)):
        with pytest.raises(RuntimeCheckError, match=f"index {bad} out of bounds for a dimension of size 4") as info:
            native(a, bad)
        assert f"{__file__}:" in str(info.value) and "return a[i]" in str(info.value)


def test_store_out_of_bounds_raises_and_writes_nothing():
    native = put.compile()
    a = np.zeros((2, 3), np.float32)
    native(a, 1, 2, 5.0)
    assert a[1, 2] == 5.0
    with pytest.raises(RuntimeCheckError, match="index 3 out of bounds for a dimension of size 3"):
        native(a, 0, 3, 7.0)
    with pytest.raises(RuntimeCheckError, match="index 2 out of bounds for a dimension of size 2"):
        native(a, 2, 0, 7.0)
    np.testing.assert_array_equal(a, np.array([[0, 0, 0], [0, 0, 5]], np.float32))


def test_safety_0_skips_the_checks_when_asked():
    assert not calls(pick.compile(safety=0).program, "cl_act_ck", "caten_action_pick")
    assert calls(pick.compile().program, "cl_act_ck", "caten_action_pick")


@action
def sums(a: Array[f32, ("n",)], b: Array[f32, ("m", 4)]) -> f32:
    t = f32(0)
    for i in range(len(a)):  # proven: 0 <= i < len(a)
        t += a[i]
    for k in range(1, len(a) - 1):  # a[k + 1] is not a plain loop variable: checked
        t += a[k + 1]
    for r in range(b.shape[0]):
        for c in range(4):  # proven against b's static axis 1
            t += b[r, c]
    return t


def test_range_loops_over_an_arrays_length_need_no_check():
    native = sums.compile()
    prog, fn = native.program, "caten_action_sums"
    assert len(calls(prog, "cl_act_ck", fn)) == 1  # only a[k + 1]
    loads = {(x.buf, x.index) for x in of_type(prog, K.Load, fn)}
    assert ("a_a", K.Cast(K.Var("v_i_i32", I32), I64)) in loads  # unchecked
    row = K.Alu("mul", (K.Cast(K.Var("v_r_i32", I32), I64), K.Const(4, I64)), I64)
    assert ("a_b", K.Alu("add", (row, K.Cast(K.Var("v_c_i32", I32), I64)), I64)) in loads
    assert len(calls(prog, "cl_act_fits_i32", fn)) == 2  # i32 counters against len(a) and b.shape[0]
    r = np.random.default_rng(3)
    for n in (0, 1, 2, 7):
        a = r.normal(size=n).astype(np.float32)
        b = r.normal(size=(n, 4)).astype(np.float32)
        want = float(a.sum(dtype=np.float32)) + float(a[2:].sum(dtype=np.float32)) + float(b.sum(dtype=np.float32))
        assert native(a, b) == pytest.approx(want, rel=1e-5, abs=1e-5)
        assert native(a, b) == pytest.approx(sums(a, b), rel=1e-6, abs=1e-6)


def test_no_proof_when_the_loop_variable_is_reassigned():
    @action
    def shifted(a: Array[i32, ("n",)]) -> i32:
        t = 0
        for i in range(len(a)):
            i = i + 1  # noqa: PLW2901 - the point of the test
            t += a[i]
        return t

    native = shifted.compile()
    assert not calls(native.program, "cl_act_fits_i32", "caten_action_shifted")
    with pytest.raises(RuntimeCheckError, match="index 3 out of bounds for a dimension of size 3"):
        native(np.ones(3, np.int32))


def test_no_proof_for_another_array_or_axis():
    @action
    def cross(a: Array[i32, ("n",)], b: Array[i32, ("m",)], c: Array[i32, ("p", "q")]) -> i32:
        t = 0
        for i in range(len(a)):
            t += b[i]
        for j in range(c.shape[1]):
            t += c[j, 0]
        return t

    native = cross.compile()
    with pytest.raises(RuntimeCheckError, match="index 2 out of bounds for a dimension of size 2"):
        native(np.ones(3, np.int32), np.ones(2, np.int32), np.ones((4, 4), np.int32))
    with pytest.raises(RuntimeCheckError, match="index 3 out of bounds for a dimension of size 3"):
        native(np.ones(1, np.int32), np.ones(2, np.int32), np.ones((3, 5), np.int32))
    assert native(np.ones(2, np.int32), np.ones(2, np.int32), np.ones((3, 3), np.int32)) == 5


def test_an_i64_counter_needs_no_i32_guard():
    @action
    def total(a: Array[i32, ("n",)]) -> i64:
        t = i64(0)
        for i in range(i64(0), len(a)):
            t += a[i]
        return t

    prog = total.compile().program
    assert not calls(prog, "cl_act_fits_i32", "caten_action_total") and not calls(prog, "cl_act_ck", "caten_action_total")
    assert total.compile()(np.arange(10, dtype=np.int32)) == 45


# ------------------------------------------------------------------ Local arrays


def test_absurd_local_size_is_refused_at_the_users_line():
    with pytest.raises(CatenError, match=r"needs 4398046511104 bytes, more than the limit") as info:

        @action
        def huge(n: i32) -> i32:
            buf = Local(i32, 1 << 40)
            buf[n] = 3
            return buf[n]

    assert f"{__file__}:" in str(info.value) and "buf = Local(i32, 1 << 40)" in str(info.value)
    with pytest.raises(CatenError, match="more than the limit of 1073741824 bytes"):

        @action
        def wide(n: i32) -> i32:
            buf = Local(f32, (1 << 15, 1 << 14))  # 2 GiB
            return i32(buf[n, n])


@action
def nested(depth: i32) -> i64:
    buf = Local(i64, 20_000)  # 160 KB: on the heap
    buf[7] = i64(depth)
    below = i64(0)
    if depth > 0:
        below = nested(depth - 1)
    return buf[7] * 1000 + below + buf[8]


def test_large_local_of_a_recursive_action_is_one_buffer_per_call():
    # a shared (static / thread-local) buffer would be re-zeroed and overwritten by the inner calls
    native = nested.compile()
    allocs = calls(native.program, "cl_act_alloc_local")
    assert [(a.args[0].value, a.args[1].value) for a in allocs] == [(20_000, 8)]
    for depth in (0, 1, 5, 30):
        want = sum(d * 1000 for d in range(depth + 1))
        assert nested(depth) == want
        assert native(depth) == want


def test_failed_local_allocation_is_an_error_not_a_crash(tmp_path):
    script = tmp_path / "oom_local.py"
    script.write_text(
        textwrap.dedent(
            """
            import resource
            import numpy as np
            from caten_lab.errors import RuntimeCheckError
            from caten_lab.workflow import Local, action, i32, u8

            @action
            def scratch(n: i32) -> i32:
                buf = Local(u8, 1_000_000_000)
                buf[n] = 1
                return i32(buf[n])

            native = scratch.compile()
            assert native(3) == 1
            size = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
            resource.setrlimit(resource.RLIMIT_AS, (size + 300_000_000, resource.RLIM_INFINITY))
            try:
                native(3)
            except RuntimeCheckError as e:
                print("RAISED", str(e).splitlines()[0])
            """
        )
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    env["CATEN_CACHE_DIR"] = os.environ.get("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "RAISED out of memory: cannot allocate 1000000000 bytes for a Local array" in out.stdout
