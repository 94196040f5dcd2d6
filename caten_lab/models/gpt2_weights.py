"""Load GPT-2 weights from local files: a Hugging Face directory (config.json + model.safetensors) or GGUF.

Both loaders return a :class:`GPT2Weights`: the config and a state dict keyed by Hugging Face's
``GPT2LMHeadModel`` names with HF's Conv1D layout (``[in, out]``) as float32/float16 NumPy arrays.
Everything is validated (missing or unexpected tensors, wrong shapes, a config that does not fit,
truncated files) before anything is returned, so a failed load leaves nothing half-loaded.
No network access: only local paths.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

from caten_lab.formats.model_check import check_model_tensors
from caten_lab.formats.rules import WeightsError
from caten_lab.formats.safetensors_header import TensorEntry
from caten_lab.formats.strict_json import loads_strict
from caten_lab.models.weight_files import GGUFFile, import_gguf, open_checked, read_safetensors, tensor_array
from caten_lab.nn.gpt2 import GPT2Config
from caten_lab.type_words import a_type

__all__ = ["GPT2Weights", "WeightsError", "config_from_dict", "expected_shapes", "gguf_tensor_name", "load_gguf", "load_hf_dir",
           "open_checked", "read_safetensors", "hf_config", "save_gguf", "save_hf_dir", "validate_state_dict"]


@dataclass
class GPT2Weights:
    config: GPT2Config
    state_dict: dict[str, np.ndarray]
    source: str
    # GGUF read with dequantize=False: the 2-D weights as the file stores them, under the model's names and
    # in its (out, in) layout (the file's), name -> (ggml type name, the mapped data)
    raw: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)


_CONFIG_INTS = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")


# config keys whose other values change the computation in ways caten_lab's GPT-2 does not implement
_CONFIG_FIXED = {
    "scale_attn_by_inverse_layer_idx": False,
    "scale_attn_weights": True,
    "reorder_and_upcast_attn": False,
    "add_cross_attention": False,
    "tie_word_embeddings": True,
}
_ACTIVATIONS = ("gelu_new", "gelu", "gelu_pytorch_tanh")
# bounds far above any GPT-2 (XL: 48 layers, 1600 wide, 50257 tokens, 1024 positions)
_CONFIG_MAX = {"vocab_size": 1 << 24, "n_positions": 1 << 20, "n_embd": 1 << 16, "n_layer": 4096, "n_head": 4096}


def _config_error(where: str, message: str, hint: str | None = None) -> WeightsError:
    return WeightsError(f"{where}: {message}", rule="CONFIG", hint=hint)


def config_from_dict(d: dict, where: str = "config") -> GPT2Config:
    """Validate a config.json dict (as Hugging Face writes it) and build a GPT2Config (rule CONFIG).

    Keys that select behaviour caten_lab does not implement are refused with their value, never
    ignored: ``scale_attn_by_inverse_layer_idx``, ``scale_attn_weights=False``,
    ``reorder_and_upcast_attn``, ``add_cross_attention``, untied embeddings, other activations."""
    if not isinstance(d, dict):
        raise _config_error(where, f"config is {a_type(d)}, not a JSON object")
    missing = [k for k in _CONFIG_INTS if k not in d]
    if missing:
        raise _config_error(where, f"missing GPT-2 config keys {missing}", hint="is this a GPT-2 config.json?")
    for k in _CONFIG_INTS:
        if type(d[k]) is not int or d[k] <= 0:
            raise _config_error(where, f"{k} must be a positive int, got {d[k]!r}")
        if d[k] > _CONFIG_MAX[k]:  # before anything sized by it is built (the expected-tensor table)
            raise _config_error(where, f"{k}={d[k]} exceeds {_CONFIG_MAX[k]}",
                                hint="far beyond any GPT-2; the file is corrupt")
    if d["n_embd"] % d["n_head"]:
        raise _config_error(where, f"n_embd={d['n_embd']} is not divisible by n_head={d['n_head']}")
    if d.get("model_type", "gpt2") != "gpt2":
        raise _config_error(where, f"model_type is {d.get('model_type')!r}, expected 'gpt2'")
    act = d.get("activation_function", "gelu_new")
    if act not in _ACTIVATIONS:
        raise _config_error(where, f"unsupported activation_function {act!r}", hint=f"supported: {list(_ACTIVATIONS)}")
    for key, value in _CONFIG_FIXED.items():
        if key in d and d[key] is not None and d[key] is not value:
            raise _config_error(where, f"{key}={d[key]!r} is not implemented (caten_lab's GPT-2 has {value})",
                                hint="this checkpoint computes differently from the GPT-2 caten_lab compiles")
    inner = d.get("n_inner")
    if inner is not None and (type(inner) is not int or not 0 < inner <= 1 << 20):
        raise _config_error(where, f"n_inner must be null or a positive int up to 2^20, got {inner!r}")
    eps = d.get("layer_norm_epsilon", 1e-5)
    if type(eps) not in (int, float) or not eps > 0:
        raise _config_error(where, f"layer_norm_epsilon must be a positive number, got {eps!r}")
    for k in ("bos_token_id", "eos_token_id"):
        v = d.get(k)
        if v is not None and (type(v) is not int or not 0 <= v < d["vocab_size"]):
            raise _config_error(where, f"{k}={v!r} is not a token id below vocab_size={d['vocab_size']}")
    known = {f.name for f in fields(GPT2Config)} - {"n_ctx"}
    return GPT2Config(**{k: d[k] for k in known if k in d and d[k] is not None})


def expected_shapes(cfg: GPT2Config) -> dict[str, tuple[int, ...]]:
    """HF GPT2LMHeadModel tensor names and shapes (Conv1D weights are [in, out]); lm_head is tied."""
    e, v, p = cfg.n_embd, cfg.vocab_size, cfg.n_positions
    inner = cfg.n_inner or 4 * e
    shapes: dict[str, tuple[int, ...]] = {
        "transformer.wte.weight": (v, e),
        "transformer.wpe.weight": (p, e),
        "transformer.ln_f.weight": (e,),
        "transformer.ln_f.bias": (e,),
    }
    for i in range(cfg.n_layer):
        h = f"transformer.h.{i}."
        shapes.update(
            {
                h + "ln_1.weight": (e,),
                h + "ln_1.bias": (e,),
                h + "attn.c_attn.weight": (e, 3 * e),
                h + "attn.c_attn.bias": (3 * e,),
                h + "attn.c_proj.weight": (e, e),
                h + "attn.c_proj.bias": (e,),
                h + "ln_2.weight": (e,),
                h + "ln_2.bias": (e,),
                h + "mlp.c_fc.weight": (e, inner),
                h + "mlp.c_fc.bias": (inner,),
                h + "mlp.c_proj.weight": (inner, e),
                h + "mlp.c_proj.bias": (e,),
            }
        )
    return shapes


def validate_state_dict(cfg: GPT2Config, sd: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """Check an in-memory state dict (a GGUF file's, dequantized) against the config: names, shapes and
    a tied ``lm_head.weight`` (rules NAMES, SHAPE, TIED); returns the float32/float16 arrays."""
    expected = expected_shapes(cfg)
    entries = [TensorEntry(k, "F32", tuple(v.shape), 0, 0) for k, v in sd.items()]
    check_model_tensors(where, entries, expected)
    lm = sd.get("lm_head.weight")
    if lm is not None and not np.array_equal(lm, sd["transformer.wte.weight"]):
        raise WeightsError(f"{where}: lm_head.weight differs from transformer.wte.weight", rule="TIED",
                           hint="caten_lab's GPT-2 ties lm_head to the token embedding, as GPT-2 does")
    out = {}
    for name in expected:
        arr = sd[name]
        if arr.dtype not in (np.float32, np.float16):
            arr = arr.astype(np.float32)
        out[name] = arr
    return out


def hf_config(cfg: GPT2Config, where: str = "config") -> dict:
    """``cfg`` as the ``config.json`` dict Hugging Face writes, checked by :func:`config_from_dict` (so a
    checkpoint is never written that the loaders would refuse)."""
    hf: dict[str, Any] = {f.name: getattr(cfg, f.name) for f in fields(GPT2Config) if f.name != "n_ctx"}
    hf.update(model_type="gpt2", architectures=["GPT2LMHeadModel"], tie_word_embeddings=True,
              resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    config_from_dict(hf, where)
    return hf


def save_hf_dir(model: Any, path: str | os.PathLike) -> Path:
    """Write a GPT-2 model as a Hugging Face directory (``config.json`` + ``model.safetensors``, Conv1D
    weights back in ``[in, out]``, lm_head tied): what ``load_hf_dir``, ``GPT2Runner.from_pretrained`` and
    ``transformers.GPT2LMHeadModel.from_pretrained`` read. Atomic per file (written, then renamed)."""
    d = Path(path)
    hf = hf_config(model.config, f"save_hf_dir({d})")
    d.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, arr in model.state_dict().items():
        a = np.asarray(arr, np.float32)
        tensors[name] = np.ascontiguousarray(a.T if name.endswith(TRANSPOSED_WEIGHTS) else a)
    tmp = d / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(d / "model.safetensors")
    tmp = d / "config.json.tmp"
    tmp.write_text(json.dumps(hf, indent=2) + "\n")
    tmp.replace(d / "config.json")
    return d


def load_hf_dir(path: str | os.PathLike, *, mapped: bool = False) -> GPT2Weights:
    """Load ``config.json`` + ``model.safetensors`` from a local Hugging Face-style directory.

    The config and the whole safetensors header are validated (formats/: names, dtypes, shapes,
    offsets, a tied lm_head) before a tensor is copied. ``mapped=True`` returns views of the file
    instead of copies (see :func:`read_safetensors`)."""
    d = Path(path)
    if not d.is_dir():
        raise WeightsError(
            f"{d}: not a directory", hint="pass the folder that holds config.json and model.safetensors"
        )
    cfg_file = d / "config.json"
    st_file = d / "model.safetensors"
    for f in (cfg_file, st_file):
        if not f.is_file():
            raise WeightsError(
                f"{f}: file not found", hint="a GPT-2 directory needs config.json and model.safetensors"
            )
    cfg = config_from_dict(loads_strict(cfg_file.read_bytes(), str(cfg_file), WeightsError, "config"), str(cfg_file))
    expected = expected_shapes(cfg)
    header, mm, by_name = open_checked(st_file, expected)
    sd = {name: tensor_array(mm, header, by_name[name], mapped) for name in expected}
    return GPT2Weights(cfg, sd, str(d))


# ---- GGUF --------------------------------------------------------------------------------

_GGUF_GLOBAL = {
    "token_embd.weight": "transformer.wte.weight",
    "position_embd.weight": "transformer.wpe.weight",
    "output_norm.weight": "transformer.ln_f.weight",
    "output_norm.bias": "transformer.ln_f.bias",
}
_GGUF_BLOCK = {
    "attn_norm.weight": "ln_1.weight",
    "attn_norm.bias": "ln_1.bias",
    "attn_qkv.weight": "attn.c_attn.weight",
    "attn_qkv.bias": "attn.c_attn.bias",
    "attn_output.weight": "attn.c_proj.weight",
    "attn_output.bias": "attn.c_proj.bias",
    "ffn_norm.weight": "ln_2.weight",
    "ffn_norm.bias": "ln_2.bias",
    "ffn_up.weight": "mlp.c_fc.weight",
    "ffn_up.bias": "mlp.c_fc.bias",
    "ffn_down.weight": "mlp.c_proj.weight",
    "ffn_down.bias": "mlp.c_proj.bias",
}
# HF GPT-2 stores these as Conv1D (in, out); the model (and the exported library) use (out, in).
TRANSPOSED_WEIGHTS = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


_GGUF_KEYS = frozenset({"gpt2.context_length", "gpt2.embedding_length", "gpt2.block_count", "gpt2.vocab_size",
                        "gpt2.attention.head_count", "gpt2.attention.layer_norm_epsilon",
                        "gpt2.feed_forward_length"})


def _hf_name(gguf_name: str) -> str | None:
    if gguf_name in _GGUF_GLOBAL:
        return _GGUF_GLOBAL[gguf_name]
    if gguf_name == "output.weight":
        return "lm_head.weight"
    if gguf_name.startswith("blk."):
        _, idx, rest = gguf_name.split(".", 2)
        if rest in _GGUF_BLOCK:
            return f"transformer.h.{idx}.{_GGUF_BLOCK[rest]}"
    return None


def gguf_tensor_name(hf_name: str) -> str | None:
    """The llama.cpp GGUF name of an HF GPT-2 tensor (``transformer.h.0.attn.c_attn.weight`` ->
    ``blk.0.attn_qkv.weight``), None for a name GGUF files do not hold."""
    name = hf_name if hf_name.startswith(("transformer.", "lm_head.")) else "transformer." + hf_name
    if name == "lm_head.weight":
        return "output.weight"
    for g, hf in _GGUF_GLOBAL.items():
        if hf == name:
            return g
    if name.startswith("transformer.h."):
        idx, rest = name[len("transformer.h."):].split(".", 1)
        for g, hf in _GGUF_BLOCK.items():
            if hf == rest:
                return f"blk.{idx}.{g}"
    return None


def load_gguf(path: str | os.PathLike, *, dequantize: bool = True) -> GPT2Weights:
    """Load a GPT-2 GGUF file (tensors f32, f16, bf16 or a quantized type; dequantized to float32). With
    ``dequantize=False`` the 2-D weights stay the file's mapped bytes (``raw``), whatever their type.

    The layout (formats/gguf_layout.py: alignment, bounds, overlap, sizes), the config, the tensor
    names and shapes are validated before a tensor is dequantized."""
    f = GGUFFile(path)
    p, reader, field = f.path, f.reader, f.field
    arch = field("general.architecture")
    if arch != "gpt2":
        raise WeightsError(f"{p}: general.architecture is {arch!r}, expected 'gpt2'", rule="CONFIG")
    for key in reader.fields:  # a key caten_lab does not read may change the math: refuse, never drop
        if key.startswith("gpt2.") and key not in _GGUF_KEYS:
            raise WeightsError(f"{p}: GGUF key {key!r} is not implemented (value {field(key)!r})", rule="CONFIG",
                               hint="caten_lab's GPT-2 does not know what it changes; refusing rather than guessing")
    names: dict[str, object] = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        if name is None:
            raise WeightsError(f"{p}: unexpected tensor {t.name!r}", rule="NAMES",
                               hint="GPT-2 GGUF tensors are token_embd, position_embd, output_norm, output, blk.N.*")
        names[name] = t
    cfg_dict = {
        "n_positions": field("gpt2.context_length"),
        "n_embd": field("gpt2.embedding_length"),
        "n_layer": field("gpt2.block_count"),
        "n_head": field("gpt2.attention.head_count"),
        "layer_norm_epsilon": field("gpt2.attention.layer_norm_epsilon", 1e-5),
        "n_inner": field("gpt2.feed_forward_length"),
    }
    wte = names.get("transformer.wte.weight")
    cfg_dict["vocab_size"] = int(wte.shape[-1]) if wte is not None else field("gpt2.vocab_size")  # type: ignore[attr-defined]
    tok = field("tokenizer.ggml.eos_token_id")
    if tok is not None:
        cfg_dict["eos_token_id"] = cfg_dict["bos_token_id"] = tok
    cfg = config_from_dict(cfg_dict, str(p))
    expected = expected_shapes(cfg)
    shapes = {}
    for name, t in names.items():
        shape = f.shape(t)
        shapes[name] = tuple(reversed(shape)) if name.endswith(TRANSPOSED_WEIGHTS) else shape
    entries = [TensorEntry(n, "F32", s, 0, 0) for n, s in shapes.items()]
    check_model_tensors(str(p), entries, expected)
    sd: dict[str, np.ndarray] = {}
    raw: dict[str, tuple[str, np.ndarray]] = {}
    for name, t in names.items():
        if not dequantize and len(t.shape) == 2:  # type: ignore[attr-defined]
            # the mapped bytes, F32 included (no copy): rows (out) of K (in), the model's layout
            raw[name] = (t.tensor_type.name, t.data)  # type: ignore[attr-defined]
            continue
        arr = f.dequantized(t)
        if name.endswith(TRANSPOSED_WEIGHTS):
            arr = np.ascontiguousarray(arr.T)
        sd[name] = arr
    if raw:
        return GPT2Weights(cfg, sd, str(p), raw)
    return GPT2Weights(cfg, validate_state_dict(cfg, sd, str(p)), str(p))


def save_gguf(weights: GPT2Weights, path: str | os.PathLike, dtype: str = "f32") -> None:
    """Write GPT-2 weights as GGUF (llama.cpp tensor names/layout); ``dtype`` in f32, f16, q8_0."""
    gguf = import_gguf()

    qtype = {
        "f32": gguf.GGMLQuantizationType.F32,
        "f16": gguf.GGMLQuantizationType.F16,
        "q8_0": gguf.GGMLQuantizationType.Q8_0,
    }
    if dtype not in qtype:
        raise WeightsError(f"save_gguf: dtype must be one of {list(qtype)}, got {dtype!r}")
    cfg = weights.config
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_context_length(cfg.n_positions)
    w.add_embedding_length(cfg.n_embd)
    w.add_block_count(cfg.n_layer)
    w.add_head_count(cfg.n_head)
    w.add_layer_norm_eps(cfg.layer_norm_epsilon)
    w.add_eos_token_id(cfg.eos_token_id)
    inverse = {v: k for k, v in _GGUF_GLOBAL.items()}
    inverse.update(
        {
            f"transformer.h.{i}.{hf}": f"blk.{i}.{g}"
            for i in range(cfg.n_layer)
            for g, hf in _GGUF_BLOCK.items()
        }
    )
    for name, arr in weights.state_dict.items():
        a = np.ascontiguousarray(arr.T if name.endswith(TRANSPOSED_WEIGHTS) else arr, dtype=np.float32)
        t = qtype[dtype] if a.ndim == 2 else gguf.GGMLQuantizationType.F32
        if t == gguf.GGMLQuantizationType.Q8_0 and a.shape[-1] % 32:
            t = gguf.GGMLQuantizationType.F16
        data = gguf.quantize(a, t) if t != gguf.GGMLQuantizationType.F32 else a
        w.add_tensor(inverse[name], data, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
