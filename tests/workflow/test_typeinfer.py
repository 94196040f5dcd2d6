"""Block-level type inference: entry states, joins at merges, loop fixed points, and every error kind."""
# ruff: noqa: F821, UP037, F841, B007  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

import inspect

import pytest

from caten_lab.errors import CatenError
from caten_lab.workflow import ActionTypeError, Array, Local, action, boolean, f32, f64, i32, i64, ir, u8
from caten_lab.workflow.infer import MAYBE_UNDEF, infer, join_numeric, join_var


def entry_with(act, name):
    """Entry states (of reachable blocks) that mention ``name``."""
    return [s[name] for s in act.types.entry if s is not None and name in s]


def return_block_entry(act):
    ret = [b for b in act.ir.blocks if isinstance(b.term, ir.Return) and act.types.entry[b.id] is not None]
    return act.types.entry[ret[-1].id]


def test_numeric_join_rules():
    assert join_numeric(i32, i64) is i64
    assert join_numeric(u8, i32) is i32
    assert join_numeric(boolean, u8) is u8
    assert join_numeric(i64, f32) is f32
    assert join_numeric(f32, f64) is f64
    assert join_var(i32, f64) is f64
    assert join_var(i32, MAYBE_UNDEF) is MAYBE_UNDEF


def test_types_at_block_entries():
    @action
    def f(n: i64, a: Array[f32, ("n",)]) -> i32:
        steps = 0
        while n > 1:
            n = n // 2
            steps += 1
        return steps

    entry = f.types.entry
    assert entry[0] == {"n": i64, "a": f.ir.params[1][1]}
    header = f.ir.blocks[1]
    assert isinstance(header.term, ir.Branch)
    assert entry[1] == {"n": i64, "a": f.ir.params[1][1], "steps": i32}
    assert f.types.returns is i32


def test_join_promotes_at_if_merge():
    @action
    def f(c: boolean, x: i32, y: i64) -> f64:
        if c:
            z = x
            w = x
        else:
            z = y
            w = 1.5
        return z + w

    state = return_block_entry(f)
    assert state["z"] is i64
    assert state["w"] is f64


def test_loop_converges_with_widening():
    @action
    def f(n: i32) -> f64:
        acc = 0
        for i in range(n):
            acc = acc + 0.5
        return acc

    info = f.types
    assert "acc" not in info.entry[0]  # assigned (as i32) inside block 0: recovered by the scan, not stored
    assert set(entry_with(f, "acc")) == {f64}  # the loop header joins i32 (entry) with f64 (back edge)
    header = next(b for b in f.ir.blocks if isinstance(b.term, ir.Branch))
    assert info.entry[header.id]["acc"] is f64
    assert info.iterations < 3 * len(f.ir.blocks)  # converges in a few sweeps
    assert f(4) == 2.0


def test_nested_loops_converge():
    @action
    def f(n: i32) -> i64:
        total = 0
        for i in range(n):
            j = 0
            while j < i:
                total = total + i64(j)
                j += 1
        return total

    header = next(b for b in f.ir.blocks if isinstance(b.term, ir.Branch))
    assert f.types.entry[header.id]["total"] is i64
    assert f(5) == sum(j for i in range(5) for j in range(i))


def test_literals_are_weak():
    @action
    def f(x: f32, b: u8) -> f32:
        y = x * 2 + 0.5
        c = b + 1
        return y + f32(c)

    state = return_block_entry(f)
    assert state == {"x": f32, "b": u8}  # straight-line: one block, types recovered by scanning
    assert f.types.returns is f32


def test_inferred_return_type():
    @action
    def f(x: i32, y: i64):
        if x > 0:
            return x
        return y

    assert f.types.returns is i64


def test_local_array_types():
    @action
    def f(x: i32) -> i32:
        buf = Local(u8, (2, 3))
        buf[1, 2] = 7
        return i32(buf[1, 2]) + x

    assert f(1) == 8


def test_unreachable_code_is_not_checked_for_types_but_must_parse():
    @action
    def f(x: i32) -> i32:
        return x
        y = x + 1  # unreachable  # noqa: F841

    assert f(3) == 3


# ------------------------------------------------------------------------------- error kinds


def expect_type_error(fn, kind: str, match: str) -> ActionTypeError:
    lines, start = inspect.getsourcelines(fn)
    bad = next(start + k for k, text in enumerate(lines) if "# BAD" in text)
    with pytest.raises(ActionTypeError, match=match) as info:
        infer(action(fn).ir)
    assert info.value.kind == kind
    assert f"{__file__}:{bad}" in str(info.value), str(info.value)
    return info.value


def test_undefined_variable():
    def f(x: i32) -> i32:
        y = z + x  # BAD  # noqa: F841, F821
        z = 1
        return x

    expect_type_error(f, "undefined", "'z' is used before it is assigned")


def test_possibly_undefined_after_if():
    def f(x: i32) -> i32:
        if x > 0:
            y = 1
        return y  # BAD

    expect_type_error(f, "possibly-undefined", "'y' is possibly undefined")


def test_possibly_undefined_after_loop():
    def f(n: i32) -> i32:
        for i in range(n):
            last = i
        return last  # BAD

    expect_type_error(f, "possibly-undefined", "'last' is possibly undefined")


def test_possibly_undefined_inside_loop():
    def f(n: i32) -> i32:
        t = 0
        while t < n:
            if t > 2:
                t = t + prev  # BAD
            prev = t
            t += 1
        return t

    expect_type_error(f, "possibly-undefined", "'prev' is possibly undefined")


def test_mismatch_array_vs_scalar_arithmetic():
    def f(a: Array[f32, ("n",)]) -> f32:
        return a + 1.0  # BAD

    expect_type_error(f, "mismatch", "expected a number")


def test_mismatch_join_array_vs_local():
    def f(c: boolean) -> i32:
        if c:
            buf = Local(i32, 4)
        else:
            buf = Local(f32, 4)
        buf[0] = 1  # BAD
        return 0

    expect_type_error(f, "mismatch", "'buf' has type Local.* on one path and Local.* on another")


def test_mismatch_store_and_index():
    def f(a: Array[i32, ("n",)], x: f64) -> i32:
        a[0] = x  # BAD
        return 0

    expect_type_error(f, "mismatch", "cannot store f64 into 'a' of i32")

    def g(a: Array[i32, ("n",)], x: f64) -> i32:
        return a[x]  # BAD

    expect_type_error(g, "mismatch", "index must be an integer")

    def h(a: Array[i32, ("n", "m")]) -> i32:
        return a[0]  # BAD

    expect_type_error(h, "mismatch", "has 2 dimension")


def test_mismatch_logic_and_bits():
    def f(x: i32, y: i32) -> boolean:
        return x and y  # BAD

    expect_type_error(f, "mismatch", "needs boolean operands")

    def g(x: f32) -> f32:
        return x & 1  # BAD

    expect_type_error(g, "mismatch", "needs two integers")


def test_mismatch_calls():
    @action
    def callee(a: Array[f32, ("n",)], k: i32) -> f32:
        return a[k]

    def f(a: Array[f64, ("n",)]) -> f32:
        return callee(a, 0)  # BAD

    expect_type_error(f, "mismatch", "argument 'a' of callee must be")

    def g(a: Array[f32, ("n",)]) -> f32:
        return callee(a, 1.5)  # BAD

    expect_type_error(g, "mismatch", "argument 'k' of callee is i32")

    def h(a: Array[f32, ("n",)]) -> f32:
        return callee(a)  # BAD

    expect_type_error(h, "mismatch", "takes 2 argument")


def test_mismatch_void_call_used_as_value():
    @action
    def nothing(x: i32) -> None:
        return

    def f(x: i32) -> i32:
        y = nothing(x)  # BAD
        return x

    expect_type_error(f, "mismatch", "returns None")


def test_rebinding_array_to_scalar():
    def f(a: Array[f32, ("n",)]) -> i32:
        a = 3  # BAD
        return 0

    expect_type_error(f, "mismatch", "cannot be re-bound")


def test_return_type_mismatch():
    def f(x: f32) -> i32:
        return x  # BAD

    expect_type_error(f, "return", "returns i32, but this returns f32")


def test_return_missing_on_some_path():
    def f(x: i32) -> i32:
        if x > 0:
            return 1
        x = 2  # BAD

    expect_type_error(f, "return", "may reach its end without returning")


def test_return_value_from_none_action():
    def f(x: i32) -> None:
        return x  # BAD

    expect_type_error(f, "return", "annotated -> None")


def test_inferred_return_mixing_value_and_nothing():
    def f(x: i32):
        if x > 0:
            return x
        return  # BAD

    expect_type_error(f, "return", "returns a value on some paths")


def test_undefined_global_name_fails_at_definition():
    def f(x: i32) -> i32:
        return y  # BAD  # noqa: F821

    lines, start = inspect.getsourcelines(f)
    with pytest.raises(CatenError, match="undefined name 'y'") as info:
        action(f)
    assert f"{__file__}:{start + 1}" in str(info.value)


def test_range_arguments_must_be_integers():
    def f(x: f64) -> i32:
        for i in range(x):  # BAD
            pass
        return 0

    expect_type_error(f, "mismatch", "range\\(\\) arguments must be integers")
