"""Token samplers as actions: argmax, repetition penalty, temperature, top-k, top-p and a seeded
counter-based RNG, written in the action subset so they run as Python and compile to C.

They reproduce ``caten_lab.models.sampling`` step for step (same processing order, float64 math,
the same SplitMix64 ``uniform(seed, step)``), so the exported C library draws the same tokens as
the Python API for the same seed. The action language has no unsigned 64-bit type, so SplitMix64
works on (hi, lo) 32-bit halves held in i64 with 16-bit partial products: nothing overflows and the
interpreted (Python int) and compiled (C int64) results are identical. ``exp`` is an action too
(range reduction + polynomial), and sums use NumPy's pairwise order so they match ``np.sum``.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.action import action
from caten_lab.workflow.types import Array, f32, f64, i32, i64, u8

M32 = 4294967295
M16 = 65535


@action
def mul_lo32(a: i64, b: i64) -> i64:
    """Low 32 bits of ``a * b`` for ``0 <= a, b < 2**32`` (16-bit partial products: no overflow)."""
    a0 = a & M16
    a1 = a >> 16
    b0 = b & M16
    b1 = b >> 16
    return (a0 * b0 + (((a1 * b0 + a0 * b1) & M16) << 16)) & M32


@action
def mul64(ahi: i64, alo: i64, bhi: i64, blo: i64, st: Array[i64, (2,)]) -> i32:
    """(a * b) mod 2**64 on 32-bit halves; writes ``st[0] = hi``, ``st[1] = lo``."""
    a0 = alo & M16
    a1 = alo >> 16
    b0 = blo & M16
    b1 = blo >> 16
    mid = a1 * b0 + a0 * b1
    low = a0 * b0 + ((mid & M16) << 16)
    carry = low >> 32
    hi = a1 * b1 + (mid >> 16) + carry
    hi = (hi + mul_lo32(alo, bhi) + mul_lo32(ahi, blo)) & M32
    st[0] = hi
    st[1] = low & M32
    return 0


@action
def xorshift64(hi: i64, lo: i64, s: i64, st: Array[i64, (2,)]) -> i32:
    """z ^ (z >> s) for 0 < s < 32 on halves; writes ``st``."""
    st[0] = hi ^ (hi >> s)
    st[1] = lo ^ (((lo >> s) | (hi << (32 - s))) & M32)
    return 0


@action
def uniform01(seed_hi: i64, seed_lo: i64, step: i64, st: Array[i64, (2,)]) -> f64:
    """``models.sampling.uniform(seed, step)``: SplitMix64 of seed * K + step, top 53 bits in [0, 1)."""
    mul64(seed_hi, seed_lo, 625341585, 1332534557, st)  # K = 0x2545F4914F6CDD1D
    lo = st[1] + (step & M32)
    hi = (st[0] + (step >> 32) + (lo >> 32)) & M32
    lo = lo & M32
    lo = lo + 2135587861  # + 0x9E3779B97F4A7C15
    hi = (hi + 2654435769 + (lo >> 32)) & M32
    lo = lo & M32
    xorshift64(hi, lo, 30, st)
    mul64(st[0], st[1], 3210233709, 484763065, st)  # 0xBF58476D1CE4E5B9
    xorshift64(st[0], st[1], 27, st)
    mul64(st[0], st[1], 2496678331, 321982955, st)  # 0x94D049BB133111EB
    xorshift64(st[0], st[1], 31, st)
    top = st[0] * 2097152 + (st[1] >> 11)
    return f64(top) * (1.0 / 9007199254740992.0)


@action
def exp_f64(y: f64) -> f64:
    """e**y in float64 (within an ulp or two): y = k ln2 + r, |r| <= ln2/2, Taylor to r**14."""
    if y != y:
        return y
    if y < -746.0:
        return 0.0
    if y > 709.5:
        return 1e309
    k = i64(y * 1.4426950408889634 + 0.5)
    if y * 1.4426950408889634 + 0.5 < 0.0 and f64(k) != y * 1.4426950408889634 + 0.5:
        k = k - 1  # floor for negative values
    r = (y - f64(k) * 0.6931471803691238) - f64(k) * 1.9082149292705877e-10
    p = 1.0 / 87178291200.0
    p = p * r + 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    # scale by 2**k with exact power-of-two factors (binary exponentiation)
    base = 2.0
    if k < 0:
        base = 0.5
        k = -k
    scale = 1.0
    while k > 0:
        if (k & 1) == 1:
            scale = scale * base
        base = base * base
        k = k >> 1
    if scale == 0.0:
        # 2**k alone underflows (k < -1074) but p * 2**k may not: split it
        return 0.0
    return p * scale


@action
def pairwise_sum(a: Array[f64, ("n",)], start: i64, n: i64) -> f64:
    """Sum of ``a[start:start+n]`` in NumPy's pairwise order (so it equals ``np.sum`` bit for bit)."""
    if n < 8:
        res = 0.0
        for i in range(n):
            res = res + a[start + i]
        return res
    if n <= 128:
        r0 = a[start]
        r1 = a[start + 1]
        r2 = a[start + 2]
        r3 = a[start + 3]
        r4 = a[start + 4]
        r5 = a[start + 5]
        r6 = a[start + 6]
        r7 = a[start + 7]
        i = 8
        while i < n - n % 8:
            r0 = r0 + a[start + i]
            r1 = r1 + a[start + i + 1]
            r2 = r2 + a[start + i + 2]
            r3 = r3 + a[start + i + 3]
            r4 = r4 + a[start + i + 4]
            r5 = r5 + a[start + i + 5]
            r6 = r6 + a[start + i + 6]
            r7 = r7 + a[start + i + 7]
            i = i + 8
        res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
        while i < n:
            res = res + a[start + i]
            i = i + 1
        return res
    n2 = n // 2
    n2 = n2 - n2 % 8
    return pairwise_sum(a, start, n2) + pairwise_sum(a, start + n2, n - n2)


@action
def argmax_f64(x: Array[f64, ("v",)], n: i64) -> i32:
    """Index of the first maximum (``np.argmax``)."""
    best = 0
    for i in range(1, n):
        if x[i] > x[best]:
            best = i
    return i32(best)


@action
def ranks_before(x: Array[f64, ("v",)], a: i32, b: i32) -> i32:
    """1 when ``a`` sorts before ``b`` in a stable descending sort of ``x`` (ties: lower index first)."""
    if x[a] > x[b]:
        return 1
    if x[a] == x[b] and a < b:
        return 1
    return 0


@action
def sift_down(x: Array[f64, ("v",)], order: Array[i32, ("v",)], root: i64, size: i64) -> i32:
    """Heap sift for :func:`sort_desc` (a min-heap under the descending order)."""
    i = root
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and ranks_before(x, order[child + 1], order[child]) == 0:
            child = child + 1
        if ranks_before(x, order[i], order[child]) == 0:
            break
        t = order[i]
        order[i] = order[child]
        order[child] = t
        i = child
    return 0


@action
def sort_indices(x: Array[f64, ("v",)], order: Array[i32, ("v",)], n: i64) -> i32:
    """Heap sort of the indices ``order[:n]`` into stable descending order of ``x`` (O(n log n))."""
    for k in range(n // 2 - 1, -1, -1):
        sift_down(x, order, k, n)
    for end in range(n - 1, 0, -1):
        t = order[0]
        order[0] = order[end]
        order[end] = t
        sift_down(x, order, 0, end)
    return 0


@action
def sort_desc(x: Array[f64, ("v",)], order: Array[i32, ("v",)], n: i64) -> i32:
    """``order = argsort(-x, kind="stable")``."""
    for i in range(n):
        order[i] = i32(i)
    sort_indices(x, order, n)
    return 0


@action
def kth_largest(x: Array[f64, ("v",)], n: i64, k: i64, heap: Array[f64, ("v",)]) -> f64:
    """The k-th largest value of ``x[:n]`` counting repeats (``np.partition``'s pick), with a min-heap
    of the k largest values so far: O(n log k)."""
    size = 0
    for i in range(n):
        v = x[i]
        if size < k:
            j = size
            size = size + 1
            while j > 0:
                parent = (j - 1) >> 1
                if heap[parent] <= v:
                    break
                heap[j] = heap[parent]
                j = parent
            heap[j] = v
        elif v > heap[0]:
            j = 0
            while True:
                c = 2 * j + 1
                if c >= size:
                    break
                if c + 1 < size and heap[c + 1] < heap[c]:
                    c = c + 1
                if v <= heap[c]:
                    break
                heap[j] = heap[c]
                j = c
            heap[j] = v
    return heap[0]


@action
def sample_token(
    logits: Array[f32, ("v",)],
    history: Array[i32, ("h",)],
    n_hist: i64,
    temperature: f64,
    top_k: i64,
    top_p: f64,
    repetition_penalty: f64,
    seed_hi: i64,
    seed_lo: i64,
    step: i64,
    x: Array[f64, ("v",)],
    p: Array[f64, ("v",)],
    order: Array[i32, ("v",)],
    seen: Array[u8, ("v",)],
    st: Array[i64, (2,)],
) -> i32:
    """The next token for one row of logits: ``models.sampling.sample`` as an action.

    ``x``, ``p``, ``order``, ``seen`` (zeroed) and ``st`` are scratch arrays of the vocabulary size.
    Order: repetition penalty, temperature (0 = greedy argmax), top-k, top-p, then an inverse-CDF
    draw with ``uniform(seed, step)``.
    """
    n = len(logits)
    for i in range(n):
        x[i] = f64(logits[i])
    if repetition_penalty != 1.0:
        for j in range(n_hist):
            t = history[j]
            if seen[t] == 0:
                seen[t] = 1
                v = x[t]
                if v > 0.0:
                    x[t] = v / repetition_penalty
                else:
                    x[t] = v * repetition_penalty
        for j in range(n_hist):
            seen[history[j]] = 0
    if temperature == 0.0:
        return argmax_f64(x, n)
    for i in range(n):
        x[i] = x[i] / temperature
    # after top-k only the m kept entries matter: they are gathered and sorted alone (the masked rest
    # would sort after them, by index, with probability exactly 0)
    m = n
    sorted_ok = 0
    if top_k > 0 and top_k < n:
        kth = kth_largest(x, n, top_k, p)
        m = 0
        for i in range(n):
            if x[i] < kth:
                x[i] = -1e309
            else:
                order[m] = i32(i)
                m = m + 1
        if top_p < 1.0:
            sort_indices(x, order, m)
            sorted_ok = 1
    if top_p < 1.0:
        if sorted_ok == 0:
            sort_desc(x, order, n)
        top = x[order[0]]
        for i in range(n):
            p[i] = 0.0
            if i < m:
                p[i] = exp_f64(x[order[i]] - top)
        total = pairwise_sum(p, 0, n)  # NumPy sums all n entries (zeros included) in this order
        cum = 0.0
        cut = n
        for i in range(n):
            cum = cum + p[i] / total
            if cum >= top_p:
                cut = i + 1
                break
        for i in range(cut, m):
            x[order[i]] = -1e309
    best = x[argmax_f64(x, n)]
    cdf = 0.0
    for i in range(n):
        cdf = cdf + exp_f64(x[i] - best)
        p[i] = cdf
    u = uniform01(seed_hi, seed_lo, step, st) * cdf
    for i in range(n):
        if p[i] > u:
            return i32(i)
    return i32(n - 1)
