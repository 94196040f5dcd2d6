"""The GGUF files bench/llm.py runs, written once into ``<cache dir>/bench_llm``.

- GPT-2 small (12 layers, 768 wide) with random weights (NumPy, seed 0) in f32, f16 and q8_0:
  ``caten_lab.models.gpt2_weights.save_gguf`` writes the tensors under llama.cpp's GPT-2 names, then the
  file is copied with what llama.cpp needs to load it: ``gpt2.feed_forward_length`` and the real GPT-2
  tokenizer (``tokenizer.ggml.model = "gpt2"``, ``pre = "gpt-2"``, its 50,257 tokens and 50,000 merges
  from tests/workflow/gguf_tokenizer_files.py).
- SmolLM2-135M-Instruct re-quantized from its Q4_1 file (caten_lab's own K-quant quantizers,
  ``caten_lab.formats.gguf_quant``): every 2-D tensor whose rows are a multiple of 256 values (the
  30 ``ffn_down``, K = 1536) becomes Q4_K or Q6_K; the others (K = 576, not a K-quant length) fall back
  as llama.cpp's quantizer does: Q6_K -> Q8_0, Q4_K keeps the file's Q4_1 (llama.cpp would pick Q5_0,
  which caten_lab does not read). Keyed by the source file's identity (path, size, mtime).

    path = smollm2_requantized(src, "Q6_K")     # the cached file, written on first use
    path = gpt2_small_gguf("q8_0")
    describe(path)                              # "Q6_K×30 Q8_0×181 F32×61"
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "workflow"))

from gguf_tokenizer_files import gpt2_vocab  # noqa: E402
from gpt2 import CONFIGS  # noqa: E402 - bench/gpt2.py
from refs.llamacpp import file_identity  # noqa: E402

from caten_lab.config import config  # noqa: E402
from caten_lab.formats import gguf_quant  # noqa: E402
from caten_lab.models.gpt2_weights import GPT2Weights, config_from_dict, expected_shapes, save_gguf  # noqa: E402

FILES_FORMAT = 1  # part of every file's key: bump it when the files written here change
GPT2_SMALL = {**CONFIGS["small"], "bos_token_id": 50256, "eos_token_id": 50256}  # bench/gpt2.py's
GPT2_DTYPES = ("f32", "f16", "q8_0")
REQUANT = {"Q4_K": None, "Q6_K": "Q8_0"}  # target -> the type of tensors it cannot hold (None: keep)


def files_dir() -> Path:
    d = config().cache_dir / "bench_llm"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps([FILES_FORMAT, *parts]).encode()).hexdigest()[:12]


def _rewrite(src: Path, dst: Path, add: Callable | None = None, tensor: Callable | None = None) -> Path:
    """Copy the GGUF ``src`` to ``dst`` (atomically): every key (``add(writer)`` writes more), every
    tensor as ``tensor(t)`` returns it (``(data, ggml_type)``, or None: unchanged)."""
    reader = gguf.GGUFReader(str(src))
    arch = reader.get_field("general.architecture").contents()
    tmp = dst.with_name(f"{dst.name}.{os.getpid()}.tmp")
    writer = gguf.GGUFWriter(str(tmp), arch)
    for field in reader.fields.values():
        if (
            field.name == "general.architecture"
            or field.name.startswith("GGUF.")
            or field.name == "general.file_type"
        ):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), vtype, sub_type=sub)
    if add is not None:
        add(writer)
    for t in reader.tensors:
        data, qtype = (tensor(t) if tensor else None) or (t.data, t.tensor_type)
        writer.add_tensor(t.name, np.ascontiguousarray(data), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)
    return dst


def _random_gpt2() -> GPT2Weights:
    cfg = config_from_dict(dict(GPT2_SMALL), "bench gpt2-small")
    rng = np.random.default_rng(0)
    sd = {}
    for name, shape in expected_shapes(cfg).items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            sd[name] = np.ones(shape, np.float32)
        elif len(shape) == 1:
            sd[name] = np.zeros(shape, np.float32)
        else:
            sd[name] = (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float32)
    return GPT2Weights(cfg, sd, "random (seed 0)")


def gpt2_small_gguf(dtype: str) -> Path:
    """GPT-2 small, random weights, tensors in ``dtype`` (f32, f16, q8_0), with the GPT-2 tokenizer."""
    dst = files_dir() / f"gpt2-small-random.{dtype}.{_key('gpt2', GPT2_SMALL, dtype)}.gguf"
    if dst.is_file():
        return dst
    bare = dst.with_name(dst.name + ".bare")
    save_gguf(_random_gpt2(), bare, dtype)
    tokens, types, merges = gpt2_vocab()

    def add(w: gguf.GGUFWriter) -> None:
        w.add_feed_forward_length(4 * GPT2_SMALL["n_embd"])
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("gpt-2")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(GPT2_SMALL["bos_token_id"])
        w.add_add_bos_token(False)

    try:
        return _rewrite(bare, dst, add)
    finally:
        bare.unlink(missing_ok=True)


def smollm2_requantized(src: Path, target: str) -> Path:
    """``src`` (a Llama GGUF) with its 2-D tensors re-quantized to ``target`` (Q4_K or Q6_K) where the
    row length allows, the fallback of :data:`REQUANT` elsewhere."""
    fallback = REQUANT[target]
    stem = src.name.removesuffix(".gguf").rsplit(".", 1)[0]
    dst = files_dir() / f"{stem}.{target}.{_key(file_identity(src), target)}.gguf"
    if dst.is_file():
        return dst

    def tensor(t: gguf.ReaderTensor) -> tuple[np.ndarray, object] | None:
        if len(t.shape) != 2:
            return None
        k, rows = int(t.shape[0]), int(t.shape[1])
        new = target if k % 256 == 0 else fallback
        if new is None or new == t.tensor_type.name:
            return None
        w = gguf_quant.dequantize(
            np.ascontiguousarray(t.data).view(np.uint8).reshape(-1), t.tensor_type, (rows, k)
        )
        return gguf_quant.quantize(w, new), gguf.GGMLQuantizationType[new]

    return _rewrite(src, dst, tensor=tensor)


def describe(path: Path) -> str:
    """The tensor types of a GGUF file with their counts, most common first (``Q4_1×210 F32×61 ...``)."""
    c = collections.Counter(t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors)
    return " ".join(f"{k}×{v}" for k, v in c.most_common())
