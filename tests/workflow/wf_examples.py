"""Example actions used by the workflow tests (interpreted and compiled modes must agree on them)."""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from __future__ import annotations

from caten_lab.workflow import Array, Local, action, boolean, f32, f64, i32, i64, u8

SCALE = 3  # a module-level constant read by an action


@action
def dot(a: Array[f32, ("n",)], b: Array[f32, ("n",)]) -> f32:
    s = f32(0.0)
    for i in range(len(a)):
        s += a[i] * b[i]
    return s


@action
def collatz(n: i64) -> i32:
    steps = 0
    while n != 1:
        if n % 2 == 0:
            n = n // 2
        else:
            n = 3 * n + 1
        steps += 1
    return steps


@action
def matvec(m: Array[f64, ("r", "c")], v: Array[f64, ("c",)], out: Array[f64, ("r",)]) -> None:
    for i in range(m.shape[0]):
        acc = 0.0
        for j in range(m.shape[1]):
            acc += m[i, j] * v[j]
        out[i] = acc


@action
def squares_until(a: Array[f32, ("n",)], limit: i32) -> f32:
    buf = Local(i32, 8)
    for k in range(8):
        buf[k] = k * k
    t = 0
    for k in range(8):
        if buf[k] > limit:
            break
        t += buf[k]
    return dot(a, a) + f32(t)


@action
def int_ops(x: i32, y: i32) -> i64:
    """Python floor division/modulo, bit ops, shifts, min/max/abs and conditional expressions."""
    q = x // y
    r = x % y
    b = (x & 0xFF) | (y ^ 5)
    s = (abs(x) << 2) >> 1
    m = min(x, y, 7) + max(x, -y)
    c = 1 if x > y else -1
    neg = ~x
    return i64(q) * 1000003 + r * 10007 + b * 101 + s + m * 7 + c + neg


@action
def float_ops(x: f64, y: f64) -> f64:
    q = x // y
    r = x % y
    d = x / y
    n = -x
    return q * 1000.0 + r * 10.0 + d + n + abs(y) + min(x, y) - max(x, 2.5)


@action
def div_promotes(x: i32, y: i32) -> f64:
    return x / y


@action
def count_range(start: i32, stop: i32, step: i32) -> i32:
    n = 0
    total = 0
    for i in range(start, stop, step):
        n += 1
        total += i
    return n * 100000 + total


@action
def skip_odd(n: i32) -> i32:
    total = 0
    i = 0
    while True:
        i += 1
        if i > n:
            break
        if i % 2 == 1:
            continue
        total += i
    return total


@action
def for_else(a: Array[i32, ("n",)], x: i32) -> i32:
    for i in range(len(a)):
        if a[i] == x:
            found = i
            break
    else:
        found = -1
    return found


@action
def swap_sort(a: Array[i32, ("n",)]) -> None:
    """Bubble sort with tuple-swap assignment."""
    n = len(a)
    for i in range(n):
        for j in range(n - 1 - i):
            if a[j] > a[j + 1]:
                a[j], a[j + 1] = a[j + 1], a[j]


@action
def bytes_hist(data: Array[u8, ("n",)], hist: Array[i32, (256,)]) -> i32:
    distinct = 0
    for i in range(len(data)):
        c = i32(data[i])
        if hist[c] == 0:
            distinct += 1
        hist[c] += 1
    return distinct


@action
def logic(x: i32, y: i32, flag: boolean) -> boolean:
    ok = (x > 0 and y > 0) or (flag and not x > y)
    return ok and 0 <= x < 100


@action
def annotated(x: i32) -> f64:
    y: f64 = x
    z = x
    z = z + 0.5  # a variable may change numeric type along a path
    return y + z * SCALE


@action
def countdown(n: i32) -> i32:
    total = 0
    for i in range(n, 0, -2):
        total += i
    return total


@action
def fib(n: i32) -> i64:
    a, b = i64(0), i64(1)
    for _ in range(n):
        a, b = b, a + b
    return a


@action
def clamp_all(a: Array[f32, ("n", "m")], lo: f32, hi: f32) -> i32:
    changed = 0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            v = a[i, j]
            if v < lo:
                a[i, j] = lo
                changed += 1
            elif v > hi:
                a[i, j] = hi
                changed += 1
    return changed


@action
def gcd(a: i64, b: i64) -> i64:
    while b != 0:
        a, b = b, a % b
    return a


@action
def gcd_sum(a: Array[i64, ("n",)]) -> i64:
    g = i64(0)
    for i in range(len(a)):
        g = gcd(g, a[i])
    return g


@action
def later_caller(x: i32) -> i32:
    return defined_later(x) + 1  # resolved on first use


@action
def defined_later(x: i32) -> i32:
    return x * 2


@action
def tricky_flow(n: i32, a: Array[i32, ("k",)]) -> f64:
    """continue/break in nested loops, while-else, a variable widened inside a loop, early return."""
    acc = 0
    for i in range(n):
        if i % 3 == 0:
            acc = acc + 0.5  # acc: i32 before the loop, f64 from the loop header on
            continue
        j = 0
        while j < len(a):
            if a[j] == i:
                break
            j += 1
        else:
            acc = acc + 1
        if acc > 1000:
            return acc
        for m in range(i, 0, -1):
            if m == 2:
                break
            acc += m
    return acc * 2
