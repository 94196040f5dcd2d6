"""Every construct outside the action subset is a CatenError naming the user's file:line and line text."""
# ruff: noqa: F821, UP037, F841, B007, SIM105  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

import inspect

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.workflow import Array, Local, action, f32, i32

GLOBAL_TABLE = np.zeros(4, dtype=np.int32)
counter = 0


def helper(x):
    return x


def expect_rejected(fn, match: str) -> CatenError:
    """Decorating (or type-checking) ``fn`` must fail at the line marked ``# BAD``."""
    lines, start = inspect.getsourcelines(fn)
    bad = next(start + k for k, text in enumerate(lines) if "# BAD" in text)
    with pytest.raises(CatenError, match=match) as info:
        action(fn).check()
    text = str(info.value)
    assert f"{__file__}:{bad}" in text, text
    assert "# BAD" in text  # the offending source line is quoted
    return info.value


def test_class():
    def f(x: i32) -> i32:
        class A:  # BAD
            pass

        return x

    expect_rejected(f, "class definitions")


def test_lambda():
    def f(x: i32) -> i32:
        g = lambda y: y  # BAD  # noqa: E731
        return x

    expect_rejected(f, "lambdas")


def test_list_comprehension():
    def f(x: i32) -> i32:
        y = [i for i in range(x)]  # BAD
        return x

    expect_rejected(f, "list comprehensions")


def test_set_and_dict_comprehension():
    def f(x: i32) -> i32:
        y = {i for i in range(x)}  # BAD
        return x

    expect_rejected(f, "set comprehensions")

    def g(x: i32) -> i32:
        y = {i: i for i in range(x)}  # BAD
        return x

    expect_rejected(g, "dict comprehensions")


def test_generator_expression_and_yield():
    def f(x: i32) -> i32:
        y = min(i for i in range(x))  # BAD
        return x

    expect_rejected(f, "generator expressions")

    def g(x: i32) -> i32:
        yield x  # BAD

    expect_rejected(g, "yield")


def test_try():
    def f(x: i32) -> i32:
        try:  # BAD
            x = x + 1
        except ValueError:
            pass
        return x

    expect_rejected(f, "try/except")


def test_with():
    def f(x: i32) -> i32:
        with open("x"):  # BAD
            pass
        return x

    expect_rejected(f, "with statements")


def test_raise_assert_del():
    def f(x: i32) -> i32:
        raise ValueError  # BAD

    expect_rejected(f, "raise")

    def g(x: i32) -> i32:
        assert x > 0  # BAD
        return x

    expect_rejected(g, "assert")

    def h(x: i32) -> i32:
        y = x
        del y  # BAD
        return x

    expect_rejected(h, "del")


def test_global_mutation():
    def f(x: i32) -> i32:
        global counter  # BAD
        counter = x
        return x

    expect_rejected(f, "global statements")

    def g(x: i32) -> i32:
        GLOBAL_TABLE[0] = x  # BAD
        return x

    expect_rejected(g, "may not mutate globals")


def test_global_array_read():
    def f(x: i32) -> i32:
        return GLOBAL_TABLE[x]  # BAD

    expect_rejected(f, "not a parameter or local")


def test_nonlocal_and_import_and_nested_def():
    def f(x: i32) -> i32:
        import math  # BAD  # noqa: F401

        return x

    expect_rejected(f, "imports")

    def g(x: i32) -> i32:
        def inner(y):  # BAD
            return y

        return x

    expect_rejected(g, "nested function")


def test_strings():
    def f(x: i32) -> i32:
        s = "abc"  # BAD
        return x

    expect_rejected(f, "string operations")

    def g(x: i32) -> i32:
        s = f"{x}"  # BAD
        return x

    expect_rejected(g, "f-strings")


def test_containers_and_slices():
    def f(x: i32) -> i32:
        y = [x, x]  # BAD
        return x

    expect_rejected(f, "list displays")

    def g(a: Array[i32, ("n",)]) -> i32:
        b = a[1:3]  # BAD
        return 0

    expect_rejected(g, "slices")

    def h(x: i32) -> i32:
        d = {1: x}  # BAD
        return x

    expect_rejected(h, "dict displays")

    def k(x: i32) -> i32:
        t = (x, x)  # BAD
        return x

    expect_rejected(k, "tuples")


def test_walrus_match_is_in_pow():
    def f(x: i32) -> i32:
        if (y := x) > 0:  # BAD
            return y
        return x

    expect_rejected(f, "walrus")

    def g(x: i32) -> i32:
        if x is None:  # BAD
            return 0
        return x

    expect_rejected(g, "no `is` / `in`")

    def h(x: i32) -> i32:
        return x**2  # BAD

    expect_rejected(h, "Pow")


def test_calls_to_non_actions():
    def f(x: i32) -> i32:
        print(x)  # BAD
        return x

    expect_rejected(f, "only other @action functions")

    def g(x: i32) -> i32:
        return helper(x)  # BAD

    expect_rejected(g, "only other @action functions")

    def h(x: f32) -> f32:
        return np.sqrt(x)  # BAD

    expect_rejected(h, "call to 'np.sqrt'")

    def k(x: f32) -> i32:
        return int(x)  # BAD

    expect_rejected(k, "not a typed cast")

    def m(x: i32) -> i32:
        return max(x, 2, key=abs)  # BAD

    expect_rejected(m, "positional arguments only")


def test_call_to_undefined_name_is_caught_at_check():
    def f(x: i32) -> i32:
        return not_defined_anywhere(x)  # BAD  # noqa: F821

    expect_rejected(f, "undefined name 'not_defined_anywhere'")


def test_method_calls_and_attributes():
    def f(a: Array[f32, ("n",)]) -> f32:
        return a.sum()  # BAD

    expect_rejected(f, "call to 'a.sum'")

    def g(a: Array[f32, ("n",)]) -> i32:
        return a.size  # BAD

    expect_rejected(g, "attribute access")


def test_loops_outside_range():
    def f(a: Array[f32, ("n",)]) -> f32:
        s = f32(0)
        for v in a:  # BAD
            s += v
        return s

    expect_rejected(f, "loop only over range")

    def g(x: i32) -> i32:
        for i in range(0, x, 0):  # BAD
            pass
        return x

    expect_rejected(g, "nonzero integer")


def test_signature_rules():
    def f(x) -> i32:  # BAD
        return x

    expect_rejected(f, "needs a type annotation")

    def g(x: i32, y: i32 = 3) -> i32:  # BAD
        return x

    expect_rejected(g, "no \\*args")

    def h(x: int) -> i32:  # BAD
        return x

    expect_rejected(h, "needs a type annotation")


def test_local_needs_constant_dims():
    def f(n: i32) -> i32:
        buf = Local(i32, n)  # BAD
        return n

    expect_rejected(f, "Local dims")


def test_error_is_raised_at_definition_time():
    with pytest.raises(CatenError, match="list comprehensions"):

        @action
        def f(x: i32) -> i32:
            y = [i for i in range(x)]
            return x


def test_integer_literal_too_large():
    def f(x: i32) -> i32:
        return x + 100000000000000000000000  # BAD

    expect_rejected(f, "does not fit in i64")
