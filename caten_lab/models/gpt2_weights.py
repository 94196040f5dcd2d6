"""Load GPT-2 weights from local files: a Hugging Face directory (config.json + model.safetensors) or GGUF.

Both loaders return a :class:`GPT2Weights`: the config and a state dict keyed by Hugging Face's
``GPT2LMHeadModel`` names with HF's Conv1D layout (``[in, out]``) as float32/float16 NumPy arrays.
Everything is validated (missing or unexpected tensors, wrong shapes, a config that does not fit,
truncated files) before anything is returned, so a failed load leaves nothing half-loaded.
No network access: only local paths.
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.nn.gpt2 import GPT2Config


class WeightsError(CatenError):
    """A weights file or config that cannot be loaded as GPT-2."""


@dataclass
class GPT2Weights:
    config: GPT2Config
    state_dict: dict[str, np.ndarray]
    source: str


_CONFIG_INTS = ("vocab_size", "n_positions", "n_embd", "n_layer", "n_head")


def config_from_dict(d: dict, where: str = "config") -> GPT2Config:
    """Validate a config.json dict (as Hugging Face writes it) and build a GPT2Config."""
    missing = [k for k in _CONFIG_INTS if k not in d]
    if missing:
        raise WeightsError(
            f"{where}: missing GPT-2 config keys {missing}", hint="is this a GPT-2 config.json?"
        )
    for k in _CONFIG_INTS:
        if not isinstance(d[k], int) or d[k] <= 0:
            raise WeightsError(f"{where}: {k} must be a positive int, got {d[k]!r}")
    if d["n_embd"] % d["n_head"]:
        raise WeightsError(f"{where}: n_embd={d['n_embd']} is not divisible by n_head={d['n_head']}")
    if d.get("model_type", "gpt2") != "gpt2":
        raise WeightsError(f"{where}: model_type is {d.get('model_type')!r}, expected 'gpt2'")
    act = d.get("activation_function", "gelu_new")
    if act not in ("gelu_new", "gelu", "gelu_pytorch_tanh"):
        raise WeightsError(f"{where}: unsupported activation_function {act!r}")
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


_IGNORED_SUFFIXES = (".attn.bias", ".attn.masked_bias")  # HF's causal-mask buffers, not weights


def validate_state_dict(cfg: GPT2Config, sd: dict[str, np.ndarray], where: str) -> dict[str, np.ndarray]:
    """Check names and shapes against the config; returns the cleaned dict (float32/float16 arrays)."""
    sd = {k.removeprefix("model."): v for k, v in sd.items()}
    if "lm_head.weight" in sd:
        lm = sd.pop("lm_head.weight")
        wte = sd.get("transformer.wte.weight")
        if wte is not None and (lm.shape != wte.shape or not np.array_equal(lm, wte)):
            raise WeightsError(
                f"{where}: lm_head.weight differs from transformer.wte.weight",
                hint="caten_lab's GPT-2 ties lm_head to the token embedding, as GPT-2 does",
            )
    sd = {k: v for k, v in sd.items() if not k.endswith(_IGNORED_SUFFIXES)}
    expected = expected_shapes(cfg)
    missing = sorted(set(expected) - set(sd))
    unexpected = sorted(set(sd) - set(expected))
    if missing:
        more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
        raise WeightsError(
            f"{where}: missing tensors {missing[:5]}{more}", hint="the file does not match config.json"
        )
    if unexpected:
        more = f" (and {len(unexpected) - 5} more)" if len(unexpected) > 5 else ""
        raise WeightsError(
            f"{where}: unexpected tensors {unexpected[:5]}{more}", hint="the file does not match config.json"
        )
    out = {}
    for name, shape in expected.items():
        arr = sd[name]
        if tuple(arr.shape) != shape:
            raise WeightsError(
                f"{where}: tensor {name!r} has shape {tuple(arr.shape)}, config implies {shape}"
            )
        if arr.dtype not in (np.float32, np.float16):
            arr = arr.astype(np.float32)
        out[name] = arr
    return out


def load_hf_dir(path: str | os.PathLike, *, mapped: bool = False) -> GPT2Weights:
    """Load ``config.json`` + ``model.safetensors`` from a local Hugging Face-style directory.

    ``mapped=True`` returns views of the file instead of copies (see :func:`read_safetensors`)."""
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
    try:
        cfg_dict = json.loads(cfg_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WeightsError(f"{cfg_file}: not valid JSON ({exc})") from None
    cfg = config_from_dict(cfg_dict, str(cfg_file))
    sd = read_safetensors(st_file, mapped=mapped)
    return GPT2Weights(cfg, validate_state_dict(cfg, sd, str(st_file)), str(d))


_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def read_safetensors(path: str | os.PathLike, *, mapped: bool = False) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as NumPy arrays (bfloat16 is widened to float32).

    ``mapped=True``: views of a private (copy-on-write) memory map instead of copies, for a caller
    that converts every weight right away (the GPT-2 runner): reading ~0.5 GB into fresh memory
    first would be one more pass over the data for nothing. Writing to a view never changes the
    file, but the views must not outlive an in-place overwrite of it (that truncates the mapping).
    """
    p = Path(path)
    size = os.path.getsize(p)
    header, n = _check_safetensors_header(p, size)
    with open(p, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dt = np.dtype(_ST_DTYPES[info["dtype"]])
            shape = tuple(int(x) for x in info["shape"])
            start, end = (int(x) for x in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise WeightsError(
                f"{p}: tensor {name!r} has an unsupported or malformed entry {info!r}",
                hint="the file may be corrupt, or use a dtype caten_lab cannot read",
            ) from None
        count = int(np.prod(shape, dtype=np.int64))
        if end - start != count * dt.itemsize or start < 0:
            raise WeightsError(
                f"{p}: tensor {name!r} spans bytes {start}..{end}, its shape {shape} needs {count * dt.itemsize}",
                hint="the file may be truncated or corrupt",
            )
        arr = np.frombuffer(mm, dt, count, 8 + n + start).reshape(shape) if count else np.zeros(shape, dt)
        if info["dtype"] == "BF16":
            arr = (arr.astype(np.uint32) << 16).view(np.float32)
        elif not mapped:
            arr = arr.copy()
        out[name] = arr
    return out


def _check_safetensors_header(path: Path, size: int) -> tuple[dict, int]:
    """The header and its length; names the tensor that a truncated file cuts off."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise WeightsError(f"{path}: file is {size} bytes, too short for a safetensors header")
        n = int.from_bytes(head, "little")
        if n <= 0 or 8 + n > size:
            raise WeightsError(
                f"{path}: header length {n} does not fit the file ({size} bytes)",
                hint="the file is truncated or not safetensors",
            )
        try:
            header = json.loads(f.read(n))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise WeightsError(f"{path}: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise WeightsError(f"{path}: the safetensors header is not a JSON object")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        end = info.get("data_offsets", [0, 0])[-1:] if isinstance(info, dict) else None
        end = end[0] if isinstance(end, list) and end and isinstance(end[0], int) else 0  # else: malformed, below
        if 8 + n + end > size:
            raise WeightsError(
                f"{path}: tensor {name!r} ends at byte {8 + n + end} but the file has {size} bytes",
                hint="the file is truncated; re-copy or re-export it",
            )
    return header, n


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
_TRANSPOSED = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def _import_gguf():  # noqa: ANN202 - the gguf module
    try:
        import gguf
    except ImportError:
        raise WeightsError("reading GGUF needs the gguf package", hint="pip install 'caten_lab[gguf]'") from None
    return gguf


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


def load_gguf(path: str | os.PathLike) -> GPT2Weights:
    """Load a GPT-2 GGUF file (tensors f32, f16 or q8_0; q8_0 is dequantized to float32)."""
    gguf = _import_gguf()

    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"{p}: file not found")
    try:
        reader = gguf.GGUFReader(str(p))
    except Exception as exc:  # the gguf package raises ValueError/IndexError/struct errors
        raise WeightsError(
            f"{p}: cannot read GGUF ({type(exc).__name__}: {exc})", hint="truncated or not a GGUF file"
        ) from None

    def field(key: str, default: object = None) -> object:
        f = reader.fields.get(key)
        if f is None:
            return default
        v = f.contents()
        return v

    arch = field("general.architecture")
    if arch != "gpt2":
        raise WeightsError(f"{p}: general.architecture is {arch!r}, expected 'gpt2'")
    cfg_dict = {
        "n_positions": field("gpt2.context_length"),
        "n_embd": field("gpt2.embedding_length"),
        "n_layer": field("gpt2.block_count"),
        "n_head": field("gpt2.attention.head_count"),
        "layer_norm_epsilon": float(field("gpt2.attention.layer_norm_epsilon", 1e-5)),  # type: ignore[arg-type]
    }
    sd: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        if name is None:
            raise WeightsError(f"{p}: unexpected tensor {t.name!r}")
        try:
            arr = gguf.dequantize(t.data, t.tensor_type)
        except Exception as exc:
            raise WeightsError(
                f"{p}: tensor {t.name!r} of type {t.tensor_type.name} cannot be read ({exc})"
            ) from None
        shape = tuple(int(x) for x in reversed(t.shape))  # GGUF stores dims fastest-first
        arr = np.asarray(arr).reshape(shape)
        if t.tensor_type == gguf.GGMLQuantizationType.F16:
            arr = arr.astype(np.float16)
        elif arr.dtype != np.float32:
            arr = arr.astype(np.float32)
        if name.endswith(_TRANSPOSED):
            arr = np.ascontiguousarray(arr.T)
        sd[name] = arr
    wte = sd.get("transformer.wte.weight")
    cfg_dict["vocab_size"] = int(wte.shape[0]) if wte is not None else field("gpt2.vocab_size")
    tok = field("tokenizer.ggml.eos_token_id")
    if tok is not None:
        cfg_dict["eos_token_id"] = cfg_dict["bos_token_id"] = int(tok)  # type: ignore[arg-type]
    cfg = config_from_dict(
        {k: (int(v) if isinstance(v, (np.integer,)) else v) for k, v in cfg_dict.items()}, str(p)
    )
    return GPT2Weights(cfg, validate_state_dict(cfg, sd, str(p)), str(p))


def save_gguf(weights: GPT2Weights, path: str | os.PathLike, dtype: str = "f32") -> None:
    """Write GPT-2 weights as GGUF (llama.cpp tensor names/layout); ``dtype`` in f32, f16, q8_0."""
    gguf = _import_gguf()

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
        a = np.ascontiguousarray(arr.T if name.endswith(_TRANSPOSED) else arr, dtype=np.float32)
        t = qtype[dtype] if a.ndim == 2 else gguf.GGMLQuantizationType.F32
        if t == gguf.GGMLQuantizationType.Q8_0 and a.shape[-1] % 32:
            t = gguf.GGMLQuantizationType.F16
        data = gguf.quantize(a, t) if t != gguf.GGMLQuantizationType.F32 else a
        w.add_tensor(inverse[name], data, raw_dtype=t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
