"""Samplers against Hugging Face's logits processors, and the seeded RNG's reproducibility."""

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.models.sampling import SamplingOptions, process_logits, sample, uniform

torch = pytest.importorskip("torch")
gen_utils = pytest.importorskip("transformers.generation.logits_process")


@pytest.mark.parametrize(
    "opts",
    [
        SamplingOptions(temperature=0.7),
        SamplingOptions(temperature=1.0, top_k=5),
        SamplingOptions(temperature=0.9, top_p=0.8),
        SamplingOptions(temperature=1.3, top_k=20, top_p=0.5, repetition_penalty=1.3),
    ],
)
def test_process_logits_matches_transformers(opts):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=100).astype(np.float32) * 3
    prev = [3, 7, 7, 42, 99]
    procs = []
    if opts.repetition_penalty != 1.0:
        procs.append(gen_utils.RepetitionPenaltyLogitsProcessor(opts.repetition_penalty))
    procs.append(gen_utils.TemperatureLogitsWarper(opts.temperature))
    if opts.top_k:
        procs.append(gen_utils.TopKLogitsWarper(opts.top_k))
    if opts.top_p < 1:
        procs.append(gen_utils.TopPLogitsWarper(opts.top_p))
    ids = torch.tensor([prev])
    scores = torch.tensor(logits, dtype=torch.float64)[None]
    for p in procs:
        scores = p(ids, scores)
    ref = scores[0].numpy()
    ours = process_logits(logits, prev, opts)
    assert np.array_equal(np.isinf(ours), np.isinf(ref))
    finite = ~np.isinf(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-6)


def test_greedy_is_argmax_and_sampling_is_seeded():
    logits = np.array([0.1, 2.0, -1.0, 1.9], np.float32)
    assert sample(logits, [], SamplingOptions(), 0) == 1
    opts = SamplingOptions(temperature=1.0, seed=123)
    a = [sample(logits, [], opts, t) for t in range(50)]
    b = [sample(logits, [], opts, t) for t in range(50)]
    assert a == b and len(set(a)) > 1
    c = [sample(logits, [], SamplingOptions(temperature=1.0, seed=124), t) for t in range(50)]
    assert a != c


def test_sampling_distribution_follows_softmax():
    logits = np.log(np.array([0.5, 0.3, 0.2]))
    opts = SamplingOptions(temperature=1.0, seed=7)
    counts = np.bincount([sample(logits, [], opts, t) for t in range(6000)], minlength=3) / 6000
    np.testing.assert_allclose(counts, [0.5, 0.3, 0.2], atol=0.03)
    assert 0.0 <= uniform(1, 2) < 1.0


@pytest.mark.parametrize(
    "kw", [{"temperature": -1}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}, {"repetition_penalty": 0}]
)
def test_bad_options(kw):
    with pytest.raises(CatenError):
        SamplingOptions(**kw)
