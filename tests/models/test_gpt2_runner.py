"""The compiled GPT-2 against transformers: logits, greedy sequences, GGUF, weight formats, limits."""

import os

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.models.gpt2_weights import load_hf_dir, save_gguf
from caten_lab.models.sampling import SamplingOptions

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

SLOW_SCALE = float(os.environ.get("CATEN_SLOW_SCALE", "0.2"))


def _hf_model(tmp_path, **cfg):
    torch.manual_seed(cfg.pop("seed", 0))
    std = cfg.pop("init_std", 0.02)
    config = transformers.GPT2Config(bos_token_id=0, eos_token_id=0, initializer_range=std, **cfg)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(tmp_path)
    return model


def _hf_logits_stepwise(model, prompt, steps_tokens):
    """Prompt logits, then one logits row per decode token, through HF's own KV cache."""
    with torch.no_grad():
        out = model(torch.tensor([prompt]), use_cache=True)
        rows = [out.logits[0].numpy()]
        past = out.past_key_values
        for tok in steps_tokens:
            out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            rows.append(out.logits[0].numpy())
    return rows


CONFIGS = [
    dict(n_layer=2, n_embd=64, n_head=4, vocab_size=320, n_positions=64),
    dict(n_layer=3, n_embd=96, n_head=6, vocab_size=500, n_positions=128, n_inner=200, init_std=0.1),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=["2x64", "3x96"])
def test_logits_match_transformers_prompt_and_20_steps(tmp_path, cfg):
    model = _hf_model(tmp_path, **dict(cfg))
    runner = GPT2Runner.from_pretrained(tmp_path, all_logits=True)
    prompt = [5, 17, 33, 2, 100, 7]
    rng = np.random.default_rng(1)
    decode = [int(t) for t in rng.integers(0, cfg["vocab_size"], 20)]
    ref = _hf_logits_stepwise(model, prompt, decode)
    got = [runner.forward(prompt, 0)[0]]
    for i, tok in enumerate(decode):
        got.append(runner.forward([tok], len(prompt) + i)[0])
    for g, r in zip(got, ref):
        assert g.shape == r.shape
        assert np.abs(g - r).max() < 1e-4


def test_greedy_50_tokens_identical_hf_dir_and_gguf(tmp_path):
    model = _hf_model(
        tmp_path / "hf", n_layer=2, n_embd=64, n_head=4, vocab_size=320, n_positions=128, init_std=0.2
    )
    prompt = [11, 22, 33]
    with torch.no_grad():
        ref = model.generate(
            torch.tensor([prompt]), max_new_tokens=50, do_sample=False, min_new_tokens=50
        ).tolist()[0]
    runner = GPT2Runner.from_pretrained(tmp_path / "hf")
    assert runner.generate(prompt, 50) == ref
    gguf_path = tmp_path / "m.gguf"
    save_gguf(load_hf_dir(tmp_path / "hf"), gguf_path, "f32")
    assert GPT2Runner.from_pretrained(gguf_path).generate(prompt, 50) == ref


def test_weight_formats_stay_close_to_fp32(tmp_path):
    _hf_model(tmp_path, n_layer=2, n_embd=64, n_head=4, vocab_size=320, n_positions=64, init_std=0.1)
    prompt = [3, 1, 4, 1, 5, 9, 2, 6]
    base = GPT2Runner.from_pretrained(tmp_path, all_logits=True).forward(prompt, 0)
    for fmt, tol in (("fp16", 2e-3), ("int8", 5e-2)):
        got = GPT2Runner.from_pretrained(tmp_path, weight_format=fmt, all_logits=True).forward(prompt, 0)
        rel = np.abs(got - base).max() / np.abs(base).max()
        assert rel < tol, (fmt, rel)
        assert (got.argmax(-1) == base.argmax(-1)).mean() >= 0.75


def test_streaming_sampling_and_stop_tokens(tmp_path):
    _hf_model(tmp_path, n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=64, init_std=0.5)
    runner = GPT2Runner.from_pretrained(tmp_path)
    opts = SamplingOptions(temperature=1.0, top_k=10, top_p=0.9, seed=3)
    a = list(runner.stream([1, 2], 20, opts))
    b = list(runner.stream([1, 2], 20, opts))
    assert a == b and len(a) == 20 and runner.stats.stop_reason == "max_new_tokens"
    stop = a[4]
    c = list(runner.stream([1, 2], 20, opts, stop_tokens=[stop]))
    assert c[-1] == stop and len(c) == a.index(stop) + 1 and runner.stats.stop_reason == "stop_token"


def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_context_limit_stops_cleanly_with_flat_memory(tmp_path):
    _hf_model(tmp_path, n_layer=2, n_embd=64, n_head=4, vocab_size=320, n_positions=256, init_std=0.2)
    runner = GPT2Runner.from_pretrained(tmp_path, n_ctx=200)
    list(runner.stream([1, 2, 3], 20))  # warm up: compile, allocate
    rss = []
    for _ in runner.stream([1, 2, 3], 1000):
        rss.append(_rss_mb())
    assert runner.stats.stop_reason == "context_limit"
    assert runner.stats.prompt_tokens + runner.stats.new_tokens == 201  # the last token needs no forward
    assert max(rss[20:]) - min(rss[20:]) < 8.0
    with pytest.raises(CatenError, match="context limit"):
        runner.generate(list(range(201)), 1)
    with pytest.raises(CatenError, match="empty"):
        runner.generate([], 1)
    with pytest.raises(CatenError, match="token ids"):
        runner.forward([999], 0)


@pytest.mark.slow
def test_gpt2_small_dims_match_transformers(tmp_path):
    n_layer = max(1, round(12 * min(SLOW_SCALE, 1.0)))
    model = _hf_model(tmp_path, n_layer=n_layer, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    runner = GPT2Runner.from_pretrained(tmp_path, all_logits=True)
    prompt = [464, 2068, 7586, 21831]
    ref = _hf_logits_stepwise(model, prompt, [318, 257])
    got = [runner.forward(prompt, 0)[0], runner.forward([318], 4)[0], runner.forward([257], 5)[0]]
    for g, r in zip(got, ref):
        assert np.abs(g - r).max() < 1e-4
