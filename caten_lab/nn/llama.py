"""Llama (HF LlamaForCausalLM layout and parameter names) with an in-place KV cache, traced once.

RMSNorm, rotary embeddings (nn/rope.py: "neox" or "normal" pairs, default/linear/llama3/YaRN
frequencies), grouped-query attention whose cache holds the ``num_key_value_heads`` K/V heads (each
serves ``num_attention_heads / num_key_value_heads`` query heads by broadcasting, never by a
repeated copy), a SwiGLU MLP and a tied or separate ``lm_head``. ``decoder_graph()`` (nn/decoder.py)
gives ONE graph with symbols ``seq`` and ``pos`` for prefill and decode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from caten_lab.air.symbolic import Dim
from caten_lab.frontend.errors import StateDictError
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor
from caten_lab.nn import functional as F
from caten_lab.nn.decoder import CachedDecoder, check_tokens
from caten_lab.nn.layers import Embedding, Linear, RMSNorm
from caten_lab.nn.llama_config import LlamaConfig
from caten_lab.nn.module import Module, ModuleList, state
from caten_lab.nn.rope import apply_rope, rope_tables

__all__ = ["Llama", "LlamaAttention", "LlamaConfig", "LlamaDecoderLayer", "LlamaMLP", "LlamaModel"]


class LlamaAttention(Module):
    def __init__(self, cfg: LlamaConfig, batch: int = 1) -> None:
        h, kv, d = cfg.num_attention_heads, cfg.kv_heads, cfg.dim
        self.n_head, self.n_kv, self.head_dim, self.layout = h, kv, d, cfg.rope_layout
        self.q_proj = Linear(cfg.hidden_size, h * d, bias=False)
        self.k_proj = Linear(cfg.hidden_size, kv * d, bias=False)
        self.v_proj = Linear(cfg.hidden_size, kv * d, bias=False)
        self.o_proj = Linear(h * d, cfg.hidden_size, bias=False)
        self.cache_k = state((batch, kv, cfg.cache_len, d))
        self.cache_v = state((batch, kv, cfg.cache_len, d))

    def forward(self, x: Tensor, pos: Dim, cos: Tensor, sin: Tensor) -> Tensor:
        b, t, _ = x.shape
        h, kv, d = self.n_head, self.n_kv, self.head_dim
        q = self.q_proj(x).reshape(b, t, h, d).transpose(1, 2)  # (b, h, t, d)
        k = self.k_proj(x).reshape(b, t, kv, d).transpose(1, 2)  # (b, kv, t, d)
        v = self.v_proj(x).reshape(b, t, kv, d).transpose(1, 2)
        q, k = apply_rope(q, cos, sin, self.layout), apply_rope(k, cos, sin, self.layout)
        self.cache_k[:, :, pos : pos + t] = k
        self.cache_v[:, :, pos : pos + t] = v
        keys = self.cache_k[:, :, : pos + t].unsqueeze(2)  # (b, kv, 1, L, d): shared by its query group
        values = self.cache_v[:, :, : pos + t].unsqueeze(2)
        q = q.reshape(b, kv, h // kv, t, d)  # query head j belongs to group j // (h / kv), as in HF
        y = F.attention(q, keys, values, start=pos, causal=True)  # (b, kv, h / kv, t, d)
        return self.o_proj(y.reshape(b, h, t, d).transpose(1, 2).reshape(b, t, h * d))


class LlamaMLP(Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, cfg: LlamaConfig) -> None:
        self.gate_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(self.gate_proj(x).silu() * self.up_proj(x))


class LlamaDecoderLayer(Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = LlamaAttention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = LlamaMLP(cfg)

    def forward(self, x: Tensor, pos: Dim, cos: Tensor, sin: Tensor) -> Tensor:
        x = x + self.self_attn(self.input_layernorm(x), pos, cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        self.embed_tokens = Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Llama(CachedDecoder):
    """Llama language model: ``model(tokens, pos)`` -> logits (1, seq, vocab)."""

    def __init__(self, config: LlamaConfig | Any | None = None, **overrides: Any) -> None:
        cfg = (
            config
            if isinstance(config, LlamaConfig)
            else LlamaConfig.from_hf(config)
            if config is not None
            else LlamaConfig()
        )
        if overrides:
            cfg = LlamaConfig(**{**vars(cfg), **overrides})
        self.config = cfg
        self.model = LlamaModel(cfg)
        self.lm_head = None if cfg.tie_word_embeddings else Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        cos, sin = rope_tables(cfg.rope_theta, cfg.dim, cfg.rope_scaling, cfg.max_position_embeddings, cfg.cache_len,
                               cfg.rope_freq_factors)
        # fixed inputs of the graph (not parameters: never in the state dict)
        self.rope_cos = Tensor.from_numpy(cos, name="rope.cos")
        self.rope_sin = Tensor.from_numpy(sin, name="rope.sin")
        self._decoder = None
        self.assign_names()

    def forward(self, tokens: Tensor, pos: Dim = 0, last_only: bool = False) -> Tensor:
        check_tokens(tokens, "Llama")
        t = tokens.shape[1]
        m = self.model
        cos, sin = self.rope_cos[pos : pos + t], self.rope_sin[pos : pos + t]
        x = m.embed_tokens(tokens)
        for layer in m.layers:
            x = layer(x, pos, cos, sin)
        if last_only:  # generation only needs the last position's logits
            x = x[:, t - 1 :]
        x = m.norm(x)
        head = m.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return x @ head.T

    def load_hf_state_dict(self, sd: dict[str, Any]) -> Llama:
        """A HF LlamaForCausalLM state dict (torch or NumPy); a tied ``lm_head.weight`` is dropped."""
        sd = dict(sd)
        if self.lm_head is None and "lm_head.weight" in sd:  # tied: must be the embedding itself
            head, emb = (_numpy(sd.pop(k)) for k in ("lm_head.weight", "model.embed_tokens.weight"))
            if not np.array_equal(head, emb):
                raise StateDictError("Llama.load_hf_state_dict: lm_head.weight differs from "
                                     "model.embed_tokens.weight but the config ties them", where=user_source(),
                                     hint="build the model with tie_word_embeddings=False")
            sd["model.embed_tokens.weight"] = emb
        sd = {k: v for k, v in sd.items() if not k.endswith("rotary_emb.inv_freq")}
        self.load_state_dict(sd)
        self._decoder = None
        return self


def _numpy(v: Any) -> np.ndarray:
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
