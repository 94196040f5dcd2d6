"""Llama loaders and the compiled LlamaRunner (C backend) against transformers: HF safetensors
directories (fp32, bf16), GGUF files written from a random HF model (F32 and Q8_0, Q/K permuted as
convert_hf_to_gguf does), ``load_model`` dispatch, and refusals."""

from __future__ import annotations

import gguf
import numpy as np
import pytest
import torch
import transformers

from caten_lab.formats.rules import WeightsError
from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.models.llama import LlamaRunner
from caten_lab.models.llama_weights import load_llama, load_llama_gguf
from caten_lab.models.loader import architecture, load_model
from caten_lab.nn.rope import inv_freq

Q = gguf.GGMLQuantizationType


def hf_model(tied: bool = False, seed: int = 0, rope: dict | None = None) -> transformers.LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                   rms_norm_eps=1e-5,
                                   rope_parameters=rope or {"rope_type": "default", "rope_theta": 1e4},
                                   tie_word_embeddings=tied, bos_token_id=0, eos_token_id=1)
    return transformers.LlamaForCausalLM(cfg).eval()


def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


GGUF_BLOCK = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def write_gguf(hf, path, qtype=Q.F32, extra_tensors=()) -> dict[str, np.ndarray]:
    """``hf`` as a llama GGUF; returns the HF state dict as the file holds it (quantized, then dequantized)."""
    c = hf.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(1e4)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(c.head_dim)
    ref = {}
    for name, t in hf.state_dict().items():
        a = t.numpy().astype(np.float32)
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        stored = permute(a, c.num_attention_heads) if "q_proj" in name else permute(a, c.num_key_value_heads) \
            if "k_proj" in name else a
        qt = qtype if a.ndim == 2 else Q.F32
        data = gguf.quantize(stored, qt) if qt != Q.F32 else stored
        ref[name] = gguf.dequantize(gguf.quantize(a, qt), qt).reshape(a.shape) if qt != Q.F32 else a
        if name == "model.embed_tokens.weight":
            g = "token_embd.weight"
        elif name == "model.norm.weight":
            g = "output_norm.weight"
        elif name == "lm_head.weight":
            g = "output.weight"
        else:
            i, rest = name.split(".", 3)[2], name.split(".", 3)[3].removesuffix(".weight")
            g = f"blk.{i}.{GGUF_BLOCK[rest]}.weight"
        w.add_tensor(g, data, raw_dtype=qt)
    for g, arr in extra_tensors:
        w.add_tensor(g, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return ref


def hf_logits(hf, ids, sd=None) -> np.ndarray:
    if sd is not None:
        hf = transformers.LlamaForCausalLM(hf.config).eval()
        hf.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()}, strict=False)
        if hf.config.tie_word_embeddings:
            hf.tie_weights()
    with torch.no_grad():
        return hf(torch.tensor([ids])).logits[0].numpy()


def check_runner(runner, want: np.ndarray, ids: list[int], atol: float = 1e-4) -> None:
    got = [runner.forward(ids[:5], 0)[0]]
    for i in range(5, len(ids)):
        got.append(runner.forward([ids[i]], i)[0])
    np.testing.assert_allclose(np.concatenate(got), want, atol=atol, rtol=0)


IDS = [3, 14, 15, 92, 65, 35, 89, 7, 9]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("tied", [False, True])
def test_hf_directory(tmp_path, dtype: str, tied: bool) -> None:
    hf = hf_model(tied)
    hf.to(getattr(torch, dtype)).save_pretrained(tmp_path)
    hf = hf.float()
    assert architecture(tmp_path) == "llama"
    r = load_model(tmp_path, backend="c", all_logits=True)
    assert isinstance(r, LlamaRunner) and r.config.rope_layout == "neox" and r.n_ctx == 64
    check_runner(r, hf_logits(hf, IDS), IDS)


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_1])
@pytest.mark.parametrize("tied", [False, True])
def test_gguf_file_with_permuted_qk(tmp_path, qtype, tied: bool) -> None:
    hf = hf_model(tied, seed=1)
    ref = write_gguf(hf, tmp_path / "m.gguf", qtype)
    w = load_llama(tmp_path / "m.gguf")
    assert w.config.rope_layout == "normal" and w.config.tie_word_embeddings == tied
    r = LlamaRunner(w, backend="c", all_logits=True)
    check_runner(r, hf_logits(hf, IDS, ref), IDS)
    assert r.generate(IDS[:3], 5) == LlamaRunner(w, backend="numpy").generate(IDS[:3], 5)


def test_gguf_rope_freqs_are_llama3_scaling(tmp_path) -> None:
    """llama.cpp's form of llama3 RoPE scaling: ``rope_freqs.weight`` divides each frequency (what
    convert_hf_to_gguf writes for a llama3 checkpoint); the logits are transformers' llama3 model's."""
    rope = {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
    hf = hf_model(seed=5, rope=rope)
    base, _ = inv_freq(1e4, 16, None, 64)
    scaled, _ = inv_freq(1e4, 16, rope, 64)
    assert not np.allclose(base, scaled)
    write_gguf(hf, tmp_path / "f.gguf", extra_tensors=[("rope_freqs.weight", (base / scaled).astype(np.float32))])
    r = LlamaRunner.from_pretrained(tmp_path / "f.gguf", backend="numpy", all_logits=True)
    ids = list(range(3, 40, 2))  # positions past original_max_position_embeddings
    check_runner(r, hf_logits(hf, ids), ids)
    write_gguf(hf, tmp_path / "bad.gguf", extra_tensors=[("rope_freqs.weight", np.ones(5, np.float32))])
    with pytest.raises(WeightsError, match="rope_freq_factors must be 8 positive numbers"):
        load_llama(tmp_path / "bad.gguf")


def test_gguf_refuses_unknown_tensors(tmp_path) -> None:
    hf = hf_model()
    write_gguf(hf, tmp_path / "u.gguf", extra_tensors=[("blk.0.attn_q_norm.weight", np.ones(16, np.float32))])
    with pytest.raises(WeightsError, match="unexpected tensor 'blk.0.attn_q_norm.weight'"):
        load_model(tmp_path / "u.gguf")


def test_load_model_dispatches_gpt2(tiny_hf_dir) -> None:
    d, _ = tiny_hf_dir
    assert architecture(d) == "gpt2"
    assert isinstance(load_model(d, backend="numpy"), GPT2Runner)


def test_load_model_refuses_other_architectures(tmp_path) -> None:
    (tmp_path / "config.json").write_text('{"model_type": "mistral"}')
    with pytest.raises(WeightsError, match="architecture 'mistral' is not supported"):
        load_model(tmp_path)


@pytest.mark.parametrize("fmt", ["fp32", "int8"])
def test_prepared_weights_warm_start_for_a_gguf_llama(tmp_path, monkeypatch, fmt: str) -> None:
    """The prepared-weights cache serves a dequantized (reference-path) Llama too (its config, rope_scaling included, round-trips
    through the entry's JSON): the warm start reads nothing from the GGUF and gives bitwise the logits."""
    from caten_lab.models import llama as llama_mod

    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("CATEN_WEIGHT_CACHE", raising=False)
    hf = hf_model(seed=4)
    path = tmp_path / "m.gguf"
    write_gguf(hf, path, Q.Q8_0)
    cold = LlamaRunner.from_pretrained(path, weight_format=fmt, backend="numpy", dequantize=True)
    assert cold.weights_cache == "miss"
    want = [cold.forward(IDS[:5], 0).copy(), cold.forward([IDS[5]], 5).copy()]

    def fail(*a, **kw):
        raise AssertionError("the GGUF file was read on a warm start")

    monkeypatch.setattr(llama_mod, "load_llama", fail)
    warm = LlamaRunner.from_pretrained(path, weight_format=fmt, backend="numpy", dequantize=True)
    assert warm.weights_cache == "hit" and warm.config == cold.config
    got = [warm.forward(IDS[:5], 0), warm.forward([IDS[5]], 5)]
    assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))


@pytest.mark.parametrize("layout", ["neox", "normal"])
def test_compiled_odd_gqa_and_yarn(layout: str) -> None:
    """The C backend on 9 query heads over 3 KV heads (ratio 3), head_dim 8, YaRN, both layouts."""
    from caten_lab.models.llama_weights import LlamaWeights
    from caten_lab.nn.llama import LlamaConfig

    torch.manual_seed(6)
    hc = transformers.LlamaConfig(vocab_size=80, hidden_size=72, intermediate_size=40, num_hidden_layers=2,
                                  num_attention_heads=9, num_key_value_heads=3, head_dim=8,
                                  max_position_embeddings=64, tie_word_embeddings=False, bos_token_id=0,
                                  eos_token_id=1, rope_parameters={"rope_type": "yarn", "rope_theta": 1e4,
                                                                   "factor": 4.0, "original_max_position_embeddings": 16})
    hf = transformers.LlamaForCausalLM(hc).eval()
    cfg = LlamaConfig.from_hf(hc)
    sd = {k: v.numpy() for k, v in hf.state_dict().items()}
    if layout == "normal":
        cfg = LlamaConfig(**{**vars(cfg), "rope_layout": "normal"})
        for k in sd:
            if "q_proj" in k or "k_proj" in k:
                sd[k] = permute(sd[k], 9 if "q_proj" in k else 3)
    r = LlamaRunner(LlamaWeights(cfg, sd, "memory"), backend="c", all_logits=True, n_ctx=40)
    ids = [int(i) for i in np.random.default_rng(2).integers(0, 80, 30)]
    check_runner(r, hf_logits(hf, ids), ids)
    with torch.no_grad():
        want = hf.generate(torch.tensor([ids[:4]]), max_new_tokens=10, do_sample=False, pad_token_id=0)[0].tolist()
    assert r.generate(ids[:4], 10) == want


def test_sharded_hf_directory(tmp_path) -> None:
    hf = hf_model(seed=7)
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    shards = sorted(tmp_path.glob("model-*.safetensors"))
    assert len(shards) > 1 and (tmp_path / "model.safetensors.index.json").is_file()
    r = load_model(tmp_path, backend="numpy", all_logits=True)
    check_runner(r, hf_logits(hf, IDS), IDS)
    shards[-1].unlink()
    with pytest.raises(WeightsError, match="is not a file next to the index"):
        load_llama(tmp_path)


def test_sharded_directory_identity_covers_every_shard(tmp_path) -> None:
    from caten_lab.models import prepared_weights

    hf_model(seed=8).save_pretrained(tmp_path, max_shard_size="40KB")
    files = prepared_weights.source_files(tmp_path)
    assert set(files) >= set(tmp_path.glob("model-*.safetensors")) and tmp_path / "config.json" in files


def test_gguf_raw_weights_are_the_files_bytes(tmp_path) -> None:
    """``dequantize=False`` keeps each 2-D weight as stored (for the quantized-graph path): the same
    values as the dequantized load once decoded, and views of the file, not copies."""
    hf = hf_model(seed=9)
    write_gguf(hf, tmp_path / "m.gguf", Q.Q4_1)
    full = load_llama(tmp_path / "m.gguf")
    raw = load_llama_gguf(tmp_path / "m.gguf", dequantize=False)
    assert set(raw.raw) | set(raw.state_dict) == set(full.state_dict) and not set(raw.raw) & set(raw.state_dict)
    for name, (kind, data) in raw.raw.items():
        assert kind == "Q4_1" and not data.flags.owndata
        decoded = gguf.dequantize(data, Q[kind]).reshape(full.state_dict[name].shape)
        np.testing.assert_array_equal(decoded, full.state_dict[name])
    for name, arr in raw.state_dict.items():
        assert arr.ndim == 1 and np.array_equal(arr, full.state_dict[name])


def test_hf_to_gguf_name_inverts_gguf_name_map(tmp_path) -> None:
    """The export binds inputs by hf_to_gguf_name: every tensor of a real llama GGUF maps back to itself."""
    from caten_lab.models.llama_weights import gguf_name_map, hf_to_gguf_name

    path = tmp_path / "m.gguf"
    write_gguf(hf_model(tied=False), path)
    names = [t.name for t in gguf.GGUFReader(str(path)).tensors]
    assert len(names) == 3 + 2 * 9
    for g in names:
        assert hf_to_gguf_name(gguf_name_map(g)) == g
    assert hf_to_gguf_name("rope.cos") is None and hf_to_gguf_name("model.layers.x.mlp.up_proj.weight") is None
