"""The sampler actions against the reference samplers of caten_lab.models.sampling (interpreted and compiled)."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.models import sampling as ref
from caten_lab.workflow import samplers as S


@pytest.fixture(scope="module")
def compiled():
    return {
        "sample_token": S.sample_token.compile(),
        "uniform01": S.uniform01.compile(),
        "sort_desc": S.sort_desc.compile(),
    }


def _draw(fn, logits, history, opts: ref.SamplingOptions, step: int) -> int:
    v = len(logits)
    seed = opts.seed % 2**64
    h = np.asarray(history, dtype=np.int32)
    return int(
        fn(
            logits,
            h,
            len(h),
            float(opts.temperature),
            opts.top_k,
            float(opts.top_p),
            float(opts.repetition_penalty),
            seed >> 32,
            seed & 0xFFFFFFFF,
            step,
            np.zeros(v),
            np.zeros(v),
            np.zeros(v, np.int32),
            np.zeros(v, np.uint8),
            np.zeros(2, np.int64),
        )
    )


SEEDS = [0, 1, 42, 2**32 - 1, 2**32, 2**63 + 5, 2**64 - 1, 0x2545F4914F6CDD1D]
STEPS = [0, 1, 17, 2**31, 2**40 + 3]


@pytest.mark.parametrize("seed", SEEDS)
def test_uniform_matches_reference_bit_for_bit(seed: int, compiled) -> None:
    st = np.zeros(2, dtype=np.int64)
    for step in STEPS:
        want = ref.uniform(seed, step)
        assert S.uniform01(seed >> 32, seed & 0xFFFFFFFF, step, st) == want
        assert compiled["uniform01"](seed >> 32, seed & 0xFFFFFFFF, step, st) == want


def test_exp_is_accurate() -> None:
    ys = np.concatenate([-np.linspace(0, 745, 3000), np.random.default_rng(0).normal(size=300) * 3])
    for y in ys:
        want = float(np.exp(y))
        got = S.exp_f64(float(y))
        assert abs(got - want) <= 4e-16 * max(want, 1e-300), (y, got, want)
    assert S.exp_f64(-1e309) == 0.0
    assert S.exp_f64(0.0) == 1.0


@pytest.mark.parametrize("n", [1, 5, 8, 9, 127, 128, 129, 1000, 4097])
def test_pairwise_sum_equals_numpy(n: int) -> None:
    a = np.exp(np.random.default_rng(n).normal(size=n) * 4)
    assert S.pairwise_sum(a, 0, n) == a.sum()


def test_sort_is_stable_descending(compiled) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(0, 5, size=200).astype(np.float64)  # many ties
    x[::7] = -np.inf
    want = np.argsort(-x, kind="stable")
    for fn in (S.sort_desc, compiled["sort_desc"]):
        order = np.zeros(200, dtype=np.int32)
        fn(x, order, 200)
        assert order.tolist() == want.tolist()


def _random_case(rng: np.random.Generator):
    v = int(rng.integers(2, 300))
    logits = (rng.normal(size=v) * rng.choice([0.5, 3.0, 10.0])).astype(np.float32)
    history = rng.integers(0, v, size=int(rng.integers(0, 12))).tolist()
    opts = ref.SamplingOptions(
        temperature=float(rng.choice([0.0, 0.3, 0.7, 1.0, 1.8])),
        top_k=int(rng.choice([0, 1, 3, 40, 1000])),
        top_p=float(rng.choice([1.0, 0.95, 0.6, 0.2, 0.01])),
        repetition_penalty=float(rng.choice([1.0, 1.3, 0.7])),
        seed=int(rng.integers(0, 2**63)),
    )
    return logits, history, opts, int(rng.integers(0, 10_000))


def test_sample_token_interpreted_matches_reference() -> None:
    rng = np.random.default_rng(0)
    for _ in range(150):
        logits, history, opts, step = _random_case(rng)
        assert _draw(S.sample_token, logits, history, opts, step) == ref.sample(
            logits, history, opts, step
        ), opts


def test_sample_token_compiled_matches_reference(compiled) -> None:
    rng = np.random.default_rng(1)
    for _ in range(400):
        logits, history, opts, step = _random_case(rng)
        want = ref.sample(logits, history, opts, step)
        assert _draw(compiled["sample_token"], logits, history, opts, step) == want, opts


def test_sample_token_full_vocab_sequence(compiled) -> None:
    """A GPT-2-sized vocabulary over many steps: the same token stream as the reference."""
    rng = np.random.default_rng(5)
    v = 4096
    history = [1, 2, 3]
    opts = ref.SamplingOptions(temperature=0.9, top_k=50, top_p=0.9, repetition_penalty=1.2, seed=1234)
    for step in range(40):
        logits = (rng.normal(size=v) * 4).astype(np.float32)
        want = ref.sample(logits, history, opts, step)
        assert _draw(compiled["sample_token"], logits, history, opts, step) == want
        history.append(want)


def test_greedy_ties_pick_first() -> None:
    logits = np.array([1.0, 3.0, 3.0, 2.0], dtype=np.float32)
    assert _draw(S.sample_token, logits, [], ref.SamplingOptions(), 0) == 1


def test_kth_largest_matches_partition() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(1, 200))
        x = rng.integers(-4, 4, size=n).astype(np.float64)  # many repeats
        k = int(rng.integers(1, n + 1))
        want = np.partition(x, n - k)[n - k]
        assert S.kth_largest(x, n, k, np.zeros(n)) == want


def test_sample_token_with_tied_logits(compiled) -> None:
    """Integer logits tie a lot: top-k keeps every tie of the k-th value, top-p sorts ties by index."""
    rng = np.random.default_rng(11)
    for trial in range(200):
        v = int(rng.integers(2, 120))
        logits = rng.integers(-3, 3, size=v).astype(np.float32)
        opts = ref.SamplingOptions(
            temperature=float(rng.choice([0.5, 1.0])),
            top_k=int(rng.choice([0, 1, 2, 5, 30])),
            top_p=float(rng.choice([1.0, 0.9, 0.5, 0.05])),
            seed=trial,
        )
        want = ref.sample(logits, [], opts, trial)
        assert _draw(S.sample_token, logits, [], opts, trial) == want, opts
        assert _draw(compiled["sample_token"], logits, [], opts, trial) == want, opts
