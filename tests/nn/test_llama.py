"""Llama against transformers' LlamaForCausalLM (fp32, random weights copied): prefill and decode
through the KV cache, GQA ratios 1/3/4 with odd head counts, both RoPE layouts, tied and untied
heads, rope scaling linear/llama3/yarn; the RoPE tables against HF's rotary embedding; config refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

from caten_lab.formats.rules import WeightsError
from caten_lab.frontend import StateDictError
from caten_lab.nn import Llama, LlamaConfig
from caten_lab.nn.rope import rope_tables

BASE = dict(vocab_size=131, intermediate_size=88, num_hidden_layers=2, max_position_embeddings=64,
            bos_token_id=0, eos_token_id=1, rms_norm_eps=1e-5)
ROPES = {
    "default": {"rope_type": "default", "rope_theta": 500.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.5},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
}
# (heads, kv heads, head_dim, hidden): GQA ratios 1, 3 and 4; odd head counts; head_dim != hidden / heads
HEADS = {"mha5": (5, 5, 12, 60), "gqa3x3": (9, 3, 8, 72), "gqa4": (8, 2, 6, 64), "mqa3": (3, 1, 20, 60)}


def hf_model(heads: str = "gqa3x3", rope: str = "default", tied: bool = False, seed: int = 0, **kw: object):
    h, kv, d, hidden = HEADS[heads]
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(**{**BASE, **kw}, hidden_size=hidden, num_attention_heads=h,
                                   num_key_value_heads=kv, head_dim=d,
                                   rope_parameters=dict(ROPES[rope]), tie_word_embeddings=tied)
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # RMSNorm weights start at 1: make them matter
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def hf_logits(hf, ids: list[int]) -> np.ndarray:
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits.numpy()


def permute_for_gguf(w: np.ndarray, n_head: int) -> np.ndarray:
    """What convert_hf_to_gguf does to q/k rows: per head, rows (i, i + d/2) become (2i, 2i + 1)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def ours(hf, layout: str = "neox") -> Llama:
    cfg = LlamaConfig.from_hf(hf.config)
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    if layout == "normal":
        cfg = LlamaConfig(**{**vars(cfg), "rope_layout": "normal"})
        for k in list(sd):
            if k.endswith("q_proj.weight"):
                sd[k] = permute_for_gguf(sd[k], cfg.num_attention_heads)
            elif k.endswith("k_proj.weight"):
                sd[k] = permute_for_gguf(sd[k], cfg.kv_heads)
    return Llama(cfg).load_hf_state_dict(sd)


def check_prefill_and_decode(hf, model: Llama, n_prompt: int = 6, n_new: int = 4, atol: float = 2e-5) -> None:
    rng = np.random.default_rng(1)
    ids = rng.integers(0, hf.config.vocab_size, n_prompt + n_new).tolist()
    want = hf_logits(hf, ids)
    got = model.step(ids[:n_prompt], 0)
    np.testing.assert_allclose(got, want[:, :n_prompt], atol=atol, rtol=0)
    graph = model._decoder.graph
    for i in range(n_prompt, n_prompt + n_new):
        got = model.step([ids[i]], i)
        np.testing.assert_allclose(got[0, 0], want[0, i], atol=atol, rtol=0)
    assert model._decoder.graph is graph  # one graph for prefill and every decode position


@pytest.mark.parametrize("heads", sorted(HEADS))
@pytest.mark.parametrize("layout", ["neox", "normal"])
def test_gqa_and_layouts_match_transformers(heads: str, layout: str) -> None:
    hf = hf_model(heads)
    check_prefill_and_decode(hf, ours(hf, layout))


@pytest.mark.parametrize("rope", ["linear", "llama3", "yarn"])
@pytest.mark.parametrize("layout", ["neox", "normal"])
def test_rope_scaling_matches_transformers(rope: str, layout: str) -> None:
    hf = hf_model("gqa4", rope)
    # positions past original_max_position_embeddings, where the scaled frequencies matter
    check_prefill_and_decode(hf, ours(hf, layout), n_prompt=30, n_new=3)


@pytest.mark.parametrize("rope", sorted(ROPES))
def test_rope_tables_match_hf_rotary_embedding(rope: str) -> None:
    hf = hf_model("gqa3x3", rope)
    rot = LlamaRotaryEmbedding(hf.config)
    pos = torch.arange(64)[None]
    cos_hf, sin_hf = (t[0].numpy() for t in rot(torch.zeros(1, dtype=torch.float32), pos))
    cfg = LlamaConfig.from_hf(hf.config)
    cos, sin = rope_tables(cfg.rope_theta, cfg.dim, cfg.rope_scaling, cfg.max_position_embeddings, 64)
    half = cfg.dim // 2
    np.testing.assert_array_equal(cos_hf[:, :half], cos_hf[:, half:])
    np.testing.assert_allclose(cos, cos_hf[:, :half], atol=2e-7, rtol=0)
    np.testing.assert_allclose(sin, sin_hf[:, :half], atol=2e-7, rtol=0)
    if rope == "yarn":  # the attention factor scales the tables
        assert not np.allclose(np.abs(cos[0]), 1.0)


@pytest.mark.parametrize("tied", [True, False])
def test_tied_and_untied_heads(tied: bool) -> None:
    hf = hf_model("mqa3", tied=tied, seed=2)
    model = ours(hf)
    assert (model.lm_head is None) == tied
    assert ("lm_head.weight" in model.state_dict()) == (not tied)
    check_prefill_and_decode(hf, model)


def test_greedy_generation_matches_transformers() -> None:
    hf = hf_model("gqa3x3", seed=3)
    prompt = [5, 17, 99]
    with torch.no_grad():
        want = hf.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, pad_token_id=0)[0].tolist()
    assert ours(hf).generate(prompt, 8) == want


def test_decoder_graph_contract() -> None:
    model = ours(hf_model("gqa3x3"))
    d = model.decoder_graph()
    assert d.tokens == "tokens" and d.graph.outputs[0] == d.logits
    assert d.states == [f"model.layers.{i}.self_attn.cache_{kv}" for i in range(2) for kv in "kv"]
    assert d.arrays["model.layers.0.self_attn.cache_k"].shape == (1, 3, 64, 8)  # kv heads, not repeated
    assert {"rope.cos", "rope.sin"} <= set(d.arrays) and "rope.cos" not in model.state_dict()
    tok = [n for n in d.graph.inputs() if n.attrs.name == "tokens"][0]
    assert str(tok.attrs.shape[1]) == "seq"
    d.graph.verify()


def test_tied_state_dict_with_a_different_head_is_refused() -> None:
    hf = hf_model("mqa3", tied=False)
    cfg = LlamaConfig(**{**vars(LlamaConfig.from_hf(hf.config)), "tie_word_embeddings": True})
    with pytest.raises(StateDictError, match="lm_head.weight differs"):
        Llama(cfg).load_hf_state_dict(hf.state_dict())


GOOD = dict(BASE, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, model_type="llama")


@pytest.mark.parametrize("change, message", [
    ({"attention_bias": True}, "attention_bias=True is not implemented"),
    ({"mlp_bias": True}, "mlp_bias=True is not implemented"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu' is not implemented"),
    ({"sliding_window": 16}, "key 'sliding_window' is not implemented"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic' is not implemented"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 3}}, r"\['beta_fast'\] are not implemented"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor"),
    ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads=3"),
    ({"model_type": "mistral"}, "model_type is 'mistral'"),
    ({"head_dim": 5}, "head_dim=5 is odd"),
])
def test_hf_config_refusals_name_the_key(change: dict, message: str) -> None:
    with pytest.raises(WeightsError, match=message):
        LlamaConfig.from_hf_dict({**GOOD, **change}, "cfg.json")


GGUF = {"general.architecture": "llama", "llama.embedding_length": 64, "llama.block_count": 2,
        "llama.feed_forward_length": 96, "llama.attention.head_count": 4, "llama.attention.head_count_kv": 2,
        "llama.context_length": 128, "llama.rope.freq_base": 1e4, "llama.attention.layer_norm_rms_epsilon": 1e-5}


def test_gguf_config() -> None:
    cfg = LlamaConfig.from_gguf({**GGUF, "tokenizer.ggml.eos_token_id": 7}, "f.gguf", vocab_size=50, tied=False)
    assert (cfg.hidden_size, cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size) == (64, 2, 16, 50)
    assert cfg.rope_layout == "normal" and not cfg.tie_word_embeddings and cfg.eos_token_id == 7
    lin = LlamaConfig.from_gguf({**GGUF, "llama.rope.scaling.type": "linear", "llama.rope.scaling.factor": 4.0},
                                "f.gguf", vocab_size=50)
    assert lin.rope_scaling == {"rope_type": "linear", "factor": 4.0}


@pytest.mark.parametrize("change, message", [
    ({"llama.expert_count": 8}, "'llama.expert_count' is not implemented"),
    ({"llama.rope.scaling.type": "yarn"}, "'yarn' is not implemented"),
    ({"llama.rope.dimension_count": 8}, "partial RoPE"),
    ({"general.architecture": "qwen2"}, "expected 'llama'"),
    ({"llama.attention.head_count": None}, "'llama.attention.head_count' is missing"),
])
def test_gguf_config_refusals_name_the_key(change: dict, message: str) -> None:
    with pytest.raises(WeightsError, match=message):
        LlamaConfig.from_gguf({**GGUF, **change}, "f.gguf", vocab_size=50)


SMOLLM2_JSON = {  # the keys of HuggingFaceTB/SmolLM2-135M-Instruct's config.json
    "architectures": ["LlamaForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 576, "initializer_range": 0.041,
    "intermediate_size": 1536, "is_llama_config": True, "max_position_embeddings": 8192, "mlp_bias": False,
    "model_type": "llama", "num_attention_heads": 9, "num_hidden_layers": 30, "num_key_value_heads": 3,
    "pad_token_id": 2, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_interleaved": False,
    "rope_scaling": None, "rope_theta": 100000, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
    "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}},
    "transformers_version": "4.42.3", "use_cache": True, "vocab_size": 49152,
}


def test_a_real_config_json() -> None:
    cfg = LlamaConfig.from_hf_dict(SMOLLM2_JSON, "config.json")
    assert (cfg.head_dim, cfg.kv_heads, cfg.rope_theta, cfg.rope_scaling, cfg.rope_layout) == (64, 3, 100000, None,
                                                                                                "neox")
    with pytest.raises(WeightsError, match="rope_interleaved=True is not implemented"):
        LlamaConfig.from_hf_dict({**SMOLLM2_JSON, "rope_interleaved": True}, "config.json")
