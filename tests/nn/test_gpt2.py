"""GPT-2 loaded from randomly initialized HF models: logits within 1e-4 of PyTorch, prompt and decode."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import transformers

from caten_lab.frontend import StateDictError, Tensor
from caten_lab.nn import GPT2, GPT2Config

CONFIGS = {
    "2x64": dict(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=64),
    "3x96": dict(
        n_layer=3,
        n_embd=96,
        n_head=6,
        vocab_size=1000,
        n_positions=128,
        n_inner=200,
        layer_norm_epsilon=1e-6,
        activation_function="gelu_new",
    ),
}


def hf_model(seed: int = 0, **kw: object) -> transformers.GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(bos_token_id=0, eos_token_id=0, **kw)
    return transformers.GPT2LMHeadModel(cfg).eval()


def hf_logits(hf: transformers.GPT2LMHeadModel, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits.numpy()


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_prompt_then_decode_with_symbolic_kv_cache(name: str) -> None:
    hf = hf_model(**CONFIGS[name])
    model = GPT2(hf.config).load_hf_state_dict(hf.state_dict())
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, hf.config.vocab_size, 7).tolist()
    new = rng.integers(0, hf.config.vocab_size, 5).tolist()
    want = hf_logits(hf, prompt + new)

    got = model.step(prompt, 0)
    assert got.shape == (1, 7, hf.config.vocab_size)
    np.testing.assert_allclose(got, want[:, :7], atol=1e-4, rtol=0)
    graph = model._decoder.graph
    for i, tok in enumerate(new):
        got = model.step([tok], 7 + i)
        np.testing.assert_allclose(got[0, 0], want[0, 7 + i], atol=1e-4, rtol=0)
    assert model._decoder.graph is graph  # one graph served prefill and every decode position


def test_decoder_graph_contract() -> None:
    hf = hf_model(**CONFIGS["2x64"])
    model = GPT2(hf.config).load_hf_state_dict(hf.state_dict())
    d = model.decoder_graph()
    assert d.tokens == "tokens" and d.graph.outputs[0] == d.logits
    assert d.states == [f"transformer.h.{i}.attn.cache_{kv}" for i in range(2) for kv in "kv"]
    assert set(d.states) <= set(d.arrays) and "transformer.wte.weight" in d.arrays
    assert len(d.graph.outputs) == 1 + len(d.states)
    tok = [n for n in d.graph.inputs() if n.attrs.name == "tokens"][0]
    assert str(tok.attrs.shape[1]) == "seq"
    d.graph.verify()


def test_eager_call_and_prompt_in_chunks() -> None:
    hf = hf_model(**CONFIGS["2x64"])
    model = GPT2(hf.config).load_hf_state_dict(hf.state_dict())
    ids = [3, 1, 4, 1, 5, 9, 2, 6]
    want = hf_logits(hf, ids)
    got = model(Tensor.from_numpy(np.array([ids[:5]]))).numpy()  # concrete pos = 0
    np.testing.assert_allclose(got, want[:, :5], atol=1e-4, rtol=0)
    got2 = model(Tensor.from_numpy(np.array([ids[5:]])), 5).numpy()  # reads the cache written above
    np.testing.assert_allclose(got2, want[:, 5:], atol=1e-4, rtol=0)


def test_greedy_generation_matches_hf() -> None:
    hf = hf_model(seed=3, **CONFIGS["2x64"])
    model = GPT2(hf.config).load_hf_state_dict(hf.state_dict())
    prompt = [10, 20, 30]
    seq = list(prompt)
    for _ in range(6):
        seq.append(int(hf_logits(hf, seq)[0, -1].argmax()))
    assert model.generate(prompt, 6) == seq


def test_hf_state_dict_errors() -> None:
    hf = hf_model(**CONFIGS["2x64"])
    model = GPT2(GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300, n_positions=64))
    with pytest.raises(
        StateDictError, match=r"wte.weight' has shape \(256, 64\).*expects \(300, 64\)|lm_head"
    ):
        model.load_hf_state_dict(hf.state_dict())
    model3 = GPT2(GPT2Config(n_layer=3, n_embd=64, n_head=4, vocab_size=256, n_positions=64))
    with pytest.raises(StateDictError, match="missing keys: transformer.h.2"):
        model3.load_hf_state_dict(hf.state_dict())


def test_graph_size_is_linear_in_layers() -> None:
    sizes = {}
    for n in (1, 2, 4):
        m = GPT2(GPT2Config(n_layer=n, n_embd=32, n_head=2, vocab_size=50, n_positions=16))
        sizes[n] = len(m.decoder_graph(bind=False).graph)
    assert sizes[4] - sizes[2] == 2 * (sizes[2] - sizes[1])


@pytest.mark.slow
def test_larger_config_scaled() -> None:
    scale = float(os.environ.get("CATEN_SLOW_SCALE", "0.25"))
    n_embd = max(32, int(256 * scale) // 16 * 16)
    hf = hf_model(n_layer=max(2, int(6 * scale)), n_embd=n_embd, n_head=4, vocab_size=512, n_positions=64)
    model = GPT2(hf.config).load_hf_state_dict(hf.state_dict())
    ids = list(range(1, 12))
    want = hf_logits(hf, ids)
    np.testing.assert_allclose(model.step(ids[:8], 0), want[:, :8], atol=1e-4, rtol=0)
    for p in range(8, 11):
        np.testing.assert_allclose(model.step([ids[p]], p)[0, 0], want[0, p], atol=1e-4, rtol=0)


def test_last_only_graph_returns_the_last_position() -> None:
    hf = hf_model(**CONFIGS["2x64"])
    model = GPT2(hf.config).load_hf_state_dict(hf.state_dict())
    ids = [7, 3, 9, 1]
    want = hf_logits(hf, ids)
    d = model.decoder_graph(last_only=True)
    from caten_lab.frontend import execute

    out = execute(d.graph, {**d.arrays, d.tokens: np.array([ids])}, {"pos": 0})[0]
    assert out.shape == (1, 1, hf.config.vocab_size)
    np.testing.assert_allclose(out[0, 0], want[0, -1], atol=1e-4, rtol=0)
    out = execute(d.graph, {**d.arrays, d.tokens: np.array([[5]])}, {"pos": 4})[0]
    np.testing.assert_allclose(out[0, 0], hf_logits(hf, ids + [5])[0, -1], atol=1e-4, rtol=0)
