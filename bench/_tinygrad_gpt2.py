"""A compact GPT-2 on tinygrad's public Tensor API: the tinygrad peer in bench/gpt2.py.

Why it exists: the benchmark compares caten_lab with tinygrad on the *same* HF safetensors weights, so
this module rebuilds GPT-2 from those files (Conv1D weights are [in, out], lm_head is tied to wte).
Decoding keeps a per-layer KV cache written at a symbolic position (a bound tinygrad Variable), so one
compiled kernel set serves every step and TinyJit can replay it. The prompt (prefill) runs un-jitted.
Only the last position's logits are computed, like caten_lab's runner.

Import this module only after choosing the tinygrad device/cache env vars (DEV, CACHEDB).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
from tinygrad import Tensor, TinyJit, Variable

_SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2"}  # what GPT-2 checkpoints use


def load_hf_gpt2(model_dir: Path) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """Read config.json and model.safetensors into realized fp32 tinygrad tensors, one tensor at a time.

    The safetensors layout (u64 header size, JSON header, raw little-endian data) is read with plain
    file reads rather than a mmap, so peak RSS stays near one copy of the weights. Keys lose the
    'transformer.' prefix; Conv1D weights keep their [in, out] layout.
    """
    config = json.loads((model_dir / "config.json").read_text())
    weights: dict[str, Tensor] = {}
    with open(model_dir / "model.safetensors", "rb") as f:
        header_size = int(np.frombuffer(f.read(8), dtype="<u8")[0])
        header = json.loads(f.read(header_size))
        base = 8 + header_size
        for key, meta in header.items():
            name = key.removeprefix("transformer.")
            if key == "__metadata__" or name.endswith((".attn.bias", ".attn.masked_bias")):
                continue  # metadata and the causal-mask buffers of older checkpoints
            dtype = _SAFETENSORS_DTYPES.get(meta["dtype"])
            if dtype is None:
                raise ValueError(f"{model_dir}: tensor {key} has dtype {meta['dtype']}; expected F32 or F16")
            start, end = meta["data_offsets"]
            f.seek(base + start)
            array = np.frombuffer(f.read(end - start), dtype=dtype).reshape(meta["shape"]).astype(np.float32)
            weights[name] = Tensor(array).realize()
    return config, weights


class _LayerNorm:
    def __init__(self, weight: Tensor, bias: Tensor, eps: float) -> None:
        self.weight, self.bias, self.eps = weight, bias, eps

    def __call__(self, x: Tensor) -> Tensor:
        return x.layernorm(eps=self.eps) * self.weight + self.bias


class _Block:
    """One transformer layer: pre-LN causal self-attention with a KV cache, then a gelu MLP."""

    def __init__(self, w: dict[str, Tensor], prefix: str, n_head: int, max_context: int, eps: float) -> None:
        self.n_head = n_head
        self.ln_1 = _LayerNorm(w[f"{prefix}.ln_1.weight"], w[f"{prefix}.ln_1.bias"], eps)
        self.ln_2 = _LayerNorm(w[f"{prefix}.ln_2.weight"], w[f"{prefix}.ln_2.bias"], eps)
        self.c_attn = (w[f"{prefix}.attn.c_attn.weight"], w[f"{prefix}.attn.c_attn.bias"])
        self.attn_proj = (w[f"{prefix}.attn.c_proj.weight"], w[f"{prefix}.attn.c_proj.bias"])
        self.c_fc = (w[f"{prefix}.mlp.c_fc.weight"], w[f"{prefix}.mlp.c_fc.bias"])
        self.mlp_proj = (w[f"{prefix}.mlp.c_proj.weight"], w[f"{prefix}.mlp.c_proj.bias"])
        n_embd = self.c_attn[0].shape[0]
        self.head_dim = n_embd // n_head
        shape = (1, max_context, n_head, self.head_dim)
        self.k_cache = Tensor.zeros(*shape).contiguous().realize()
        self.v_cache = Tensor.zeros(*shape).contiguous().realize()

    def attention(self, x: Tensor, start_pos: Any, mask: Tensor | None) -> Tensor:
        bsz, seqlen, n_embd = x.shape
        # realize qkv with the cache writes: otherwise the lazy q path would recompute it (and all before it)
        qkv = x.linear(*self.c_attn).reshape(bsz, seqlen, 3, self.n_head, self.head_dim)
        window = (None, (start_pos, start_pos + seqlen), None, None)
        k_write = self.k_cache.shrink(window).assign(qkv[:, :, 1])
        v_write = self.v_cache.shrink(window).assign(qkv[:, :, 2])
        Tensor.realize(qkv, k_write, v_write)
        q = qkv[:, :, 0]  # (B, T, H, D)
        seen = (None, (0, start_pos + seqlen), None, None)
        keys = self.k_cache.shrink(seen).transpose(1, 2)  # (B, H, S, D)
        values = self.v_cache.shrink(seen).transpose(1, 2)
        scores = q.transpose(1, 2).matmul(keys.transpose(2, 3)) * (1.0 / math.sqrt(self.head_dim))
        if mask is not None:
            scores = scores + mask
        out = scores.softmax(-1).matmul(values)  # (B, H, T, D)
        return out.transpose(1, 2).reshape(bsz, seqlen, n_embd).linear(*self.attn_proj)

    def __call__(self, x: Tensor, start_pos: Any, mask: Tensor | None) -> Tensor:
        x = x.realize()  # the residual input is read twice: compute it once
        h = x + self.attention(self.ln_1(x), start_pos, mask)
        return h + self.ln_2(h).linear(*self.c_fc).gelu().linear(*self.mlp_proj)


class TinygradGPT2:
    """GPT-2 LM with greedy decoding: ``prefill(ids)`` then ``decode(tok, pos)`` (JIT-replayed)."""

    def __init__(self, config: dict[str, Any], w: dict[str, Tensor], max_context: int | None = None) -> None:
        self.n_layer, self.n_head = int(config["n_layer"]), int(config["n_head"])
        self.vocab_size = int(config["vocab_size"])
        self.max_context = int(max_context or config["n_positions"])
        eps = float(config.get("layer_norm_epsilon", 1e-5))
        self.wte, self.wpe = w["wte.weight"], w["wpe.weight"]
        self.blocks = [_Block(w, f"h.{i}", self.n_head, self.max_context, eps) for i in range(self.n_layer)]
        self.ln_f = _LayerNorm(w["ln_f.weight"], w["ln_f.bias"], eps)
        self._decode_jit = TinyJit(self._decode_step)

    def _logits_last(self, x: Tensor, start_pos: Any, mask: Tensor | None) -> Tensor:
        for block in self.blocks:
            x = block(x, start_pos, mask)
        last = self.ln_f(x[:, -1:, :])
        return last.linear(self.wte.transpose())  # tied lm_head: (B, 1, vocab)

    def _embed_prompt(self, ids: list[int]) -> Tensor:
        """Token embeddings for the prompt as a one-hot gather over wte (the tinygrad Tensor idiom)."""
        idx = Tensor([ids]).unsqueeze(-1)  # (1, T, 1)
        onehot = Tensor.arange(self.vocab_size).reshape(1, 1, self.vocab_size) == idx
        return onehot.unsqueeze(-1).where(self.wte, 0.0).sum(-2)  # (1, T, C)

    def prefill_logits(self, ids: list[int]) -> np.ndarray:
        """Run the prompt from position 0 (filling the KV cache); returns the last position's logits."""
        seqlen = len(ids)
        x = self._embed_prompt(ids) + self.wpe.shrink(((0, seqlen), None)).unsqueeze(0)
        mask = Tensor.full((1, 1, seqlen, seqlen), float("-inf")).triu(1) if seqlen > 1 else None
        return self._logits_last(x, 0, mask).reshape(self.vocab_size).numpy()

    def prefill(self, ids: list[int]) -> int:
        """Greedy next token after the prompt (see prefill_logits)."""
        return int(np.argmax(self.prefill_logits(ids)))

    def _decode_step(self, tok: Any, start_pos: Any) -> Tensor:
        x = self.wte.shrink(((tok, tok + 1), None)) + self.wpe.shrink(((start_pos, start_pos + 1), None))
        return self._logits_last(x.unsqueeze(0), start_pos, None).argmax(-1).realize()

    def decode(self, tok: int, pos: int) -> int:
        """One greedy step for ``tok`` at position ``pos`` (>= 1); symbolic, so TinyJit replays one kernel set."""
        tok_var = Variable("tok", 0, self.vocab_size - 1).bind(tok)
        pos_var = Variable("start_pos", 1, self.max_context - 1).bind(pos)
        return int(self._decode_jit(tok_var, pos_var).item())

    def generate(self, prompt: list[int], n_tokens: int) -> list[int]:
        """Greedy continuation of ``prompt``: ``n_tokens`` new tokens."""
        out = [self.prefill(prompt)]
        pos = len(prompt)
        while len(out) < n_tokens:
            out.append(self.decode(out[-1], pos))
            pos += 1
        return out
