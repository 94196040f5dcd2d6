"""GPT-2 (HF GPT2LMHeadModel layout) with a KV cache, traced once for every length and position.

``decoder_graph()`` (nn/decoder.py) builds ONE AIR graph with two symbols, ``seq`` and ``pos``, that
serves prefill and every decode step; the KV cache is written in place.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from caten_lab.air.symbolic import Dim
from caten_lab.frontend.errors import ShapeError, StateDictError
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor
from caten_lab.nn.attention import CausalSelfAttention
from caten_lab.nn.decoder import CachedDecoder, check_tokens
from caten_lab.nn.layers import MLP, Embedding, LayerNorm
from caten_lab.nn.module import Module, ModuleList, buffer_of, parameter


@dataclass
class GPT2Config:
    """The fields of HF's GPT2Config that shape the model (same names and defaults)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    layer_norm_epsilon: float = 1e-5
    activation_function: str = "gelu_new"
    n_ctx: int | None = None  # KV cache length (defaults to n_positions)
    bos_token_id: int = 50256
    eos_token_id: int = 50256

    @staticmethod
    def from_hf(cfg: Any) -> GPT2Config:
        """From a ``transformers.GPT2Config`` (or anything with the same attributes)."""
        return GPT2Config(
            **{
                f.name: getattr(cfg, f.name)
                for f in fields(GPT2Config)
                if f.name != "n_ctx" and hasattr(cfg, f.name)
            }
        )

    @property
    def cache_len(self) -> int:
        return self.n_ctx or self.n_positions


_ACTIVATIONS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}


class Block(Module):
    def __init__(self, cfg: GPT2Config, use_cache: bool = True) -> None:
        if cfg.activation_function not in _ACTIVATIONS:
            raise ShapeError(
                f"GPT2: unsupported activation_function {cfg.activation_function!r}",
                hint=f"supported: {', '.join(_ACTIVATIONS)}",
            )
        self.ln_1 = LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon)
        self.attn = CausalSelfAttention(cfg.n_embd, cfg.n_head, cfg.cache_len, use_cache=use_cache)
        self.ln_2 = LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon)
        self.mlp = MLP(cfg.n_embd, cfg.n_inner or 4 * cfg.n_embd, _ACTIVATIONS[cfg.activation_function])

    def forward(self, x: Tensor, pos: Dim) -> Tensor:
        x = x + self.attn(self.ln_1(x), pos)
        return x + self.mlp(self.ln_2(x))


class GPT2Model(Module):
    def __init__(self, cfg: GPT2Config, use_cache: bool = True) -> None:
        self.wte = Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = Embedding(cfg.n_positions, cfg.n_embd)
        self.h = ModuleList([Block(cfg, use_cache) for _ in range(cfg.n_layer)])
        self.ln_f = LayerNorm(cfg.n_embd, cfg.layer_norm_epsilon)
        for emb in (self.wte, self.wpe):  # GPT-2 initializes embeddings with std 0.02
            buffer_of(emb.weight).init = _std(emb.weight.shape, 0.02)


def _std(shape: tuple, std: float):  # noqa: ANN202
    p = parameter(shape, lambda rng, s: (rng.standard_normal(s) * std).astype(np.float32))
    return buffer_of(p).init


_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
_HF_BUFFERS = (".attn.bias", ".attn.masked_bias")


def hf_state_views(sd: dict[str, Any], config: GPT2Config) -> dict[str, Any]:
    """A HF state dict under this model's parameter names and layout, without copying anything.

    Conv1D weights ([in, out]) become transposed *views*, HF's mask buffers are dropped and the tied
    ``lm_head.weight`` is checked and dropped: the caller copies (and converts) each array once,
    straight into wherever it is stored (``load_state_dict``, or a runner's prepared buffers).
    """
    where = user_source()
    mine: dict[str, Any] = {}
    for key, v in sd.items():
        name = key if key.startswith("transformer.") or key.startswith("lm_head.") else f"transformer.{key}"
        if name.endswith(_HF_BUFFERS):
            continue
        if name == "lm_head.weight":  # tied to wte: must agree in shape
            want = (config.vocab_size, config.n_embd)
            if tuple(v.shape) != want:
                raise StateDictError(
                    f"load_hf_state_dict: lm_head.weight has shape {tuple(v.shape)}, expected {want} (tied to wte)",
                    where=where,
                )
            continue
        if name.endswith(_CONV1D):
            v = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
            v = v.T
        mine[name] = v
    return mine


class GPT2(CachedDecoder):
    """GPT-2 language model: ``model(tokens, pos)`` -> logits (1, seq, vocab); lm_head tied to wte.
    ``use_cache=False`` drops the KV caches: ``model(tokens)`` on (batch, seq), as training needs."""

    def __init__(
        self, config: GPT2Config | Any | None = None, *, use_cache: bool = True, **overrides: Any
    ) -> None:
        cfg = (
            config
            if isinstance(config, GPT2Config)
            else GPT2Config.from_hf(config)
            if config
            else GPT2Config()
        )
        for k, v in overrides.items():
            setattr(cfg, k, v)
        self.config = cfg
        self.transformer = GPT2Model(cfg, use_cache)
        self._decoder = None
        self.assign_names()

    def forward(self, tokens: Tensor, pos: Dim = 0, last_only: bool = False) -> Tensor:
        cfg = self.config
        check_tokens(tokens, "GPT2")
        t = tokens.shape[1]
        tr = self.transformer
        x = tr.wte(tokens) + tr.wpe.weight[pos : pos + t]
        for block in tr.h:
            x = block(x, pos)
        if last_only:  # generation only needs the last position's logits: skip lm_head for the rest
            x = x[:, t - 1 :]
        x = tr.ln_f(x)
        return x @ tr.wte.weight.T if cfg.vocab_size else x

    # ---- weights ------------------------------------------------------------------------------
    def load_hf_state_dict(self, sd: dict[str, Any]) -> GPT2:
        """Load a HF GPT2LMHeadModel (or GPT2Model) state dict: Conv1D weights are [in, out]."""
        self.load_state_dict(hf_state_views(sd, self.config))
        self._decoder = None
        return self
