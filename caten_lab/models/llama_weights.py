"""Load Llama weights from local files: a Hugging Face directory (config.json + model.safetensors,
fp32/fp16/bf16) or a GGUF file of architecture ``llama``.

Both return a :class:`LlamaWeights`: the config and a state dict under HF ``LlamaForCausalLM``
names (``model.layers.{i}.self_attn.q_proj.weight``, ...), PyTorch layout ([out, in]). Everything
is validated (config keys, the file's layout, tensor names and shapes) before a tensor is read, so
a failed load leaves nothing half-loaded.

GGUF files hold the Q/K rows of each head permuted for llama.cpp's interleaved RoPE: they are kept
as stored and the config says ``rope_layout = "normal"`` (HF directories: ``"neox"``). A
``rope_freqs.weight`` tensor (llama.cpp's form of llama3 RoPE scaling) becomes the config's
``rope_freq_factors``. Quantized GGUF tensors are dequantized to float32 here (the reference path).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from caten_lab.formats.model_check import check_model_tensors
from caten_lab.formats.rules import WeightsError
from caten_lab.formats.safetensors_header import TensorEntry
from caten_lab.formats.strict_json import loads_strict
from caten_lab.models.weight_files import GGUFFile, open_checked, tensor_array
from caten_lab.nn.llama_config import LlamaConfig

__all__ = ["EMBEDDING", "LlamaWeights", "expected_shapes", "gguf_name_map", "load_llama", "load_llama_gguf",
           "load_llama_hf_dir"]

EMBEDDING = "model.embed_tokens.weight"


@dataclass
class LlamaWeights:
    config: LlamaConfig
    state_dict: dict[str, np.ndarray]
    source: str
    # GGUF read with dequantize=False: the 2-D weights as stored, name -> (ggml type name, the file's
    # data for it: a memory-mapped array); state_dict then holds the rest (the norms, float32)
    raw: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)


def expected_shapes(cfg: LlamaConfig) -> dict[str, tuple[int, ...]]:
    """HF LlamaForCausalLM tensor names and shapes; ``lm_head.weight`` only when untied."""
    e, v, i = cfg.hidden_size, cfg.vocab_size, cfg.intermediate_size
    q, kv = cfg.num_attention_heads * cfg.dim, cfg.kv_heads * cfg.dim
    shapes: dict[str, tuple[int, ...]] = {EMBEDDING: (v, e), "model.norm.weight": (e,)}
    if not cfg.tie_word_embeddings:
        shapes["lm_head.weight"] = (v, e)
    for n in range(cfg.num_hidden_layers):
        p = f"model.layers.{n}."
        shapes.update({
            p + "input_layernorm.weight": (e,),
            p + "post_attention_layernorm.weight": (e,),
            p + "self_attn.q_proj.weight": (q, e),
            p + "self_attn.k_proj.weight": (kv, e),
            p + "self_attn.v_proj.weight": (kv, e),
            p + "self_attn.o_proj.weight": (e, q),
            p + "mlp.gate_proj.weight": (i, e),
            p + "mlp.up_proj.weight": (i, e),
            p + "mlp.down_proj.weight": (e, i),
        })
    return shapes


def load_llama(path: str | os.PathLike, *, mapped: bool = False) -> LlamaWeights:
    """A ``.gguf`` file or a Hugging Face directory (``mapped``: safetensors as views of the file)."""
    p = Path(path)
    if p.is_file() and p.suffix == ".gguf":
        return load_llama_gguf(p)
    return load_llama_hf_dir(p, mapped=mapped)


def load_llama_hf_dir(path: str | os.PathLike, *, mapped: bool = False) -> LlamaWeights:
    """``config.json`` + ``model.safetensors`` (F32, F16 or BF16 tensors; BF16 widened to float32)."""
    d = Path(path)
    if not d.is_dir():
        raise WeightsError(f"{d}: not a directory", hint="pass the folder that holds config.json and model.safetensors")
    cfg_file, st_file, index = d / "config.json", d / "model.safetensors", d / "model.safetensors.index.json"
    for f in (cfg_file, st_file if not index.is_file() else index):
        if not f.is_file():
            raise WeightsError(f"{f}: file not found", hint="a Llama directory needs config.json and model.safetensors")
    raw = loads_strict(cfg_file.read_bytes(), str(cfg_file), WeightsError, "config")
    cfg = LlamaConfig.from_hf_dict(raw, str(cfg_file))
    expected = expected_shapes(cfg)
    shards = {st_file: expected} if st_file.is_file() else _shards(index, expected)
    opened = [(f, open_checked(f, want, prefix=None, embedding=EMBEDDING)) for f, want in shards.items()]
    sd = {}
    for _, (header, mm, by_name) in opened:  # every shard checked above before any tensor is read
        sd.update({name: tensor_array(mm, header, e, mapped) for name, e in by_name.items() if name in expected})
    return LlamaWeights(cfg, sd, str(d))


def _shards(index: Path, expected: dict[str, tuple[int, ...]]) -> dict[Path, dict[str, tuple[int, ...]]]:
    """The expected tensors of each shard named by ``model.safetensors.index.json`` (its weight_map)."""
    doc = loads_strict(index.read_bytes(), str(index), WeightsError, "index")
    wmap = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wmap, dict) or not all(isinstance(v, str) for v in wmap.values()):
        raise WeightsError(f"{index}: weight_map must map tensor names to shard file names", rule="ENTRY")
    missing = [n for n in expected if n not in wmap]
    if missing:
        raise WeightsError(f"{index}: missing tensors {missing[:5]}", rule="NAMES", hint="the index does not match config.json")
    extra = [n for n in wmap if n not in expected and n != "lm_head.weight"]
    if extra:
        raise WeightsError(f"{index}: unexpected tensors {extra[:5]}", rule="NAMES", hint="the index does not match config.json")
    if "lm_head.weight" in wmap and "lm_head.weight" not in expected and wmap["lm_head.weight"] != wmap[EMBEDDING]:
        raise WeightsError(f"{index}: the tied lm_head.weight is not in the embedding's shard", rule="TIED",
                           hint="a tied head must be stored with the embedding (or left out)")
    shards: dict[Path, dict[str, tuple[int, ...]]] = {}
    for name, file in wmap.items():
        shard = index.parent / file
        if shard.parent != index.parent or not shard.is_file():
            raise WeightsError(f"{index}: shard {file!r} is not a file next to the index", rule="ENTRY")
        want = shards.setdefault(shard, {})
        if name in expected:
            want[name] = expected[name]
    return shards


_GGUF_GLOBAL = {"token_embd.weight": EMBEDDING, "output_norm.weight": "model.norm.weight",
                "output.weight": "lm_head.weight"}
_GGUF_BLOCK = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
FREQ_FACTORS = "rope_freqs.weight"  # llama.cpp's llama3 scaling: per-dimension divisors of the frequencies


def gguf_name_map(gguf_name: str) -> str | None:
    """The HF name of a llama GGUF tensor (None: not a tensor of this model)."""
    if gguf_name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[1].isdigit() and parts[2] in _GGUF_BLOCK:
        return f"model.layers.{int(parts[1])}.{_GGUF_BLOCK[parts[2]]}"
    return None


def load_llama_gguf(path: str | os.PathLike, *, dequantize: bool = True) -> LlamaWeights:
    """A llama GGUF file, every tensor dequantized to float32 (F16 kept as float16); with
    ``dequantize=False`` the 2-D weights stay as the file stores them (``LlamaWeights.raw``)."""
    f = GGUFFile(path)
    where = str(f.path)
    tensors, factors = {}, None
    for t in f.reader.tensors:
        if t.name == FREQ_FACTORS:
            factors = t
            continue
        name = gguf_name_map(t.name)
        if name is None:
            raise WeightsError(f"{where}: unexpected tensor {t.name!r}", rule="NAMES",
                               hint="llama GGUF tensors are token_embd, output_norm, output, blk.N.attn_* / ffn_*")
        tensors[name] = t
    emb = tensors.get(EMBEDDING)
    vocab = GGUFFile.shape(emb)[0] if emb is not None else None
    freq = None
    if factors is not None:
        if len(factors.shape) != 1:
            raise WeightsError(f"{where}: tensor {FREQ_FACTORS!r} has shape {GGUFFile.shape(factors)}, expected one "
                               "factor per rotated pair", rule="SHAPE")
        freq = [float(v) for v in f.dequantized(factors, keep_f16=False)]
    cfg = LlamaConfig.from_gguf(f.fields(), where, vocab_size=vocab, tied="lm_head.weight" not in tensors,
                                freq_factors=freq)
    entries = [TensorEntry(n, "F32", GGUFFile.shape(t), 0, 0) for n, t in tensors.items()]
    check_model_tensors(where, entries, expected_shapes(cfg), prefix=None, embedding=EMBEDDING)
    if dequantize:
        return LlamaWeights(cfg, {name: f.dequantized(t) for name, t in tensors.items()}, where)
    raw = {name: (t.tensor_type.name, t.data) for name, t in tensors.items() if len(t.shape) == 2}
    sd = {name: f.dequantized(t, keep_f16=False) for name, t in tensors.items() if name not in raw}
    return LlamaWeights(cfg, sd, where, raw)
