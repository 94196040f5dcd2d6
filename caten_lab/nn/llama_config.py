"""``LlamaConfig``: HF's LlamaConfig field names, built from a config.json dict or GGUF ``llama.*`` metadata.

Every key that would change the computation and is not implemented is refused naming the key
(WeightsError, rule CONFIG): biases, other activations, partial or dynamic RoPE, sliding windows,
experts. Keys that do not change the math of a forward pass (dropout, dtype, init ranges, ...) are
accepted; a key neither list knows is refused too, so a new variant never loads silently wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from caten_lab.formats.rules import WeightsError
from caten_lab.nn.rope import LAYOUTS, SCALING_KEYS, scaling_type
from caten_lab.type_words import a_type


@dataclass
class LlamaConfig:
    """The fields of HF's LlamaConfig that shape the model (same names and defaults), plus
    ``rope_layout`` ("neox": HF weights; "normal": GGUF weights, Q/K rows permuted), ``n_ctx`` and
    ``rope_freq_factors``."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int | None = None
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    hidden_act: str = "silu"
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    rope_layout: str = "neox"
    n_ctx: int | None = None  # KV cache length (defaults to max_position_embeddings)
    # GGUF ``rope_freqs.weight`` (llama.cpp's form of llama3 scaling): each inverse frequency is divided
    # by its factor; head_dim / 2 values
    rope_freq_factors: list[float] | None = None

    def __post_init__(self) -> None:
        if self.num_key_value_heads is None:
            self.num_key_value_heads = self.num_attention_heads
        if self.head_dim is None and self.num_attention_heads:
            self.head_dim = self.hidden_size // self.num_attention_heads
        check(self, "LlamaConfig")

    @property
    def cache_len(self) -> int:
        return self.n_ctx or self.max_position_embeddings

    @property
    def kv_heads(self) -> int:
        return int(self.num_key_value_heads or self.num_attention_heads)

    @property
    def dim(self) -> int:
        return int(self.head_dim or self.hidden_size // self.num_attention_heads)

    # ---- from files -------------------------------------------------------------------------
    @staticmethod
    def from_hf(cfg: Any) -> LlamaConfig:
        """From a ``transformers.LlamaConfig`` (its ``to_dict()``)."""
        return LlamaConfig.from_hf_dict(cfg.to_dict(), "transformers.LlamaConfig")

    @staticmethod
    def from_hf_dict(d: Mapping[str, Any], where: str = "config.json") -> LlamaConfig:
        """A config.json dict (old ``rope_theta`` + ``rope_scaling`` or transformers 5 ``rope_parameters``)."""
        if not isinstance(d, Mapping):
            raise _error(where, f"config is {a_type(d)}, not a JSON object")
        if d.get("model_type", "llama") != "llama":
            raise _error(where, f"model_type is {d.get('model_type')!r}, expected 'llama'")
        for key in d:
            if key not in _HF_FIELDS and key not in _HF_INERT and key not in _HF_FIXED_UNREAD \
                    and key not in ("rope_parameters", "rope_scaling"):
                raise _error(where, f"key {key!r} is not implemented (value {d[key]!r})",
                             hint="caten_lab's Llama does not know what it changes; refusing rather than guessing")
        for key, want in {**_HF_FIXED, **_HF_FIXED_UNREAD}.items():
            if d.get(key) not in (None, want):
                raise _error(where, f"{key}={d[key]!r} is not implemented (caten_lab's Llama has {want!r})")
        kw = {k: d[k] for k in _HF_FIELDS if d.get(k) is not None}
        rope = dict(d.get("rope_parameters") or {})
        if d.get("rope_scaling"):
            rope.update(d["rope_scaling"])
        if "rope_theta" in rope:
            kw["rope_theta"] = rope.pop("rope_theta")
        kw["rope_scaling"] = _scaling(rope, where)
        return _build(kw, where)

    @staticmethod
    def from_gguf(fields_: Mapping[str, Any], where: str = "GGUF", *, vocab_size: int | None = None,
                  tied: bool = True, freq_factors: list[float] | None = None) -> LlamaConfig:
        """GGUF metadata (key -> decoded value) of an arch-``llama`` file; ``vocab_size`` from the
        token embedding's shape, ``tied`` (no ``output.weight``) and ``freq_factors`` (the
        ``rope_freqs.weight`` tensor) come from the tensors."""
        arch = fields_.get("general.architecture")
        if arch != "llama":
            raise _error(where, f"general.architecture is {arch!r}, expected 'llama'")
        for key in fields_:
            if key.startswith("llama.") and key not in _GGUF_KEYS:
                raise _error(where, f"GGUF key {key!r} is not implemented (value {fields_[key]!r})",
                             hint="caten_lab's Llama does not know what it changes; refusing rather than guessing")
        for key in _GGUF_REQUIRED:
            if fields_.get(key) is None:
                raise _error(where, f"GGUF key {key!r} is missing", hint="is this a llama GGUF file?")
        g = {k[len("llama."):]: v for k, v in fields_.items() if k.startswith("llama.")}
        heads = g["attention.head_count"]
        kw: dict[str, Any] = {
            "hidden_size": g["embedding_length"],
            "num_hidden_layers": g["block_count"],
            "intermediate_size": g["feed_forward_length"],
            "num_attention_heads": heads,
            "num_key_value_heads": g.get("attention.head_count_kv", heads),
            "max_position_embeddings": g["context_length"],
            "rms_norm_eps": g.get("attention.layer_norm_rms_epsilon", 1e-5),
            "rope_theta": g.get("rope.freq_base", 10000.0),
            "vocab_size": vocab_size if vocab_size is not None else g.get("vocab_size"),
            "tie_word_embeddings": tied,
            "rope_layout": "normal",
            "rope_freq_factors": freq_factors,
        }
        dim = g.get("attention.key_length")
        if dim is not None:
            kw["head_dim"] = dim
        for key in ("attention.value_length", "rope.dimension_count"):
            want = dim if dim is not None else (kw["hidden_size"] // heads if heads else None)
            if key in g and g[key] != want:
                raise _error(where, f"GGUF key 'llama.{key}' = {g[key]!r} differs from the head size {want} "
                             "(partial RoPE or other value heads are not implemented)")
        kind = g.get("rope.scaling.type", "none")
        factor = g.get("rope.scaling.factor", g.get("rope.scale_linear"))
        if kind == "linear" or (kind == "none" and factor not in (None, 1.0)):
            kw["rope_scaling"] = {"rope_type": "linear", "factor": float(factor or 1.0)}
        elif kind != "none":
            raise _error(where, f"GGUF key 'llama.rope.scaling.type' = {kind!r} is not implemented",
                         hint="implemented for GGUF: none, linear")
        for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
            if fields_.get(key) is not None:
                kw[key.split(".")[-1]] = int(fields_[key])
        return _build(kw, where)


_HF_FIELDS = tuple(f.name for f in fields(LlamaConfig)
                   if f.name not in ("rope_layout", "n_ctx", "rope_scaling", "rope_freq_factors"))
# present in real config.json files; none of them changes a forward pass in float32
_HF_INERT = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache",
    "initializer_range", "attention_dropout", "pad_token_id", "pretraining_tp", "_name_or_path",
    "output_attentions", "output_hidden_states", "return_dict", "is_decoder", "id2label", "label2id",
    "problem_type", "tokenizer_class", "chunk_size_feed_forward", "tf_legacy_loss", "use_bfloat16",
    "vocab_file", "bad_words_ids", "task_specific_params", "keys_to_ignore_at_inference",
    "is_encoder_decoder", "tie_encoder_decoder", "add_cross_attention", "cross_attention_hidden_size",
    "prefix", "sep_token_id", "decoder_start_token_id", "torchscript", "pruned_heads",
    "is_llama_config", "transformers.js_config",  # in SmolLM2's config.json (nanotron / transformers.js)
})
_HF_FIXED = {"attention_bias": False, "mlp_bias": False, "hidden_act": "silu"}
# keys transformers' Llama does not read whose other values mean another computation elsewhere
_HF_FIXED_UNREAD = {"rope_interleaved": False}
_GGUF_REQUIRED = ("llama.embedding_length", "llama.block_count", "llama.feed_forward_length",
                  "llama.attention.head_count", "llama.context_length")
_GGUF_KEYS = frozenset(_GGUF_REQUIRED) | {
    "llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base",
    "llama.vocab_size", "llama.rope.dimension_count", "llama.attention.key_length",
    "llama.attention.value_length", "llama.rope.scaling.type", "llama.rope.scaling.factor",
    "llama.rope.scale_linear", "llama.rope.scaling.original_context_length",
}
_MAX = 1 << 24


def _error(where: str, message: str, hint: str | None = None) -> WeightsError:
    return WeightsError(f"{where}: {message}", rule="CONFIG", hint=hint)


def _scaling(rope: dict, where: str) -> dict | None:
    if "partial_rotary_factor" in rope and rope.pop("partial_rotary_factor") not in (1, 1.0):
        raise _error(where, "partial_rotary_factor is not implemented (RoPE over the whole head only)")
    kind = scaling_type(rope)
    if kind not in SCALING_KEYS:
        raise _error(where, f"rope_scaling rope_type {kind!r} is not implemented",
                     hint=f"implemented: {', '.join(SCALING_KEYS)}")
    extra = set(rope) - SCALING_KEYS[kind] - {"rope_type", "type"}
    if extra:
        raise _error(where, f"rope_scaling key(s) {sorted(extra)} are not implemented for rope_type {kind!r}")
    if kind == "default":
        return None
    need = {"linear": ("factor",), "llama3": ("factor", "low_freq_factor", "high_freq_factor"), "yarn": ()}[kind]
    for k in need:
        if not isinstance(rope.get(k), int | float) or isinstance(rope.get(k), bool):
            raise _error(where, f"rope_scaling {kind}: {k} must be a number, got {rope.get(k)!r}")
    return {"rope_type": kind, **{k: v for k, v in rope.items() if k not in ("rope_type", "type")}}


def _build(kw: dict, where: str) -> LlamaConfig:
    try:
        return LlamaConfig(**kw)
    except TypeError as exc:
        raise _error(where, f"config values do not fit ({exc})") from None
    except WeightsError as exc:  # raised by check() under the name "LlamaConfig": say which file
        raise _error(where, exc.reason.removeprefix("LlamaConfig: "), exc.hint) from None


def check(cfg: LlamaConfig, where: str) -> None:
    """Types and consistency of every field (rule CONFIG)."""
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings"):
        v = getattr(cfg, k)
        if type(v) is not int or not 0 < v <= _MAX:
            raise _error(where, f"{k} must be a positive int up to 2^24, got {v!r}")
    if cfg.num_attention_heads % cfg.num_key_value_heads:
        raise _error(where, f"num_attention_heads={cfg.num_attention_heads} is not a multiple of "
                     f"num_key_value_heads={cfg.num_key_value_heads}")
    if cfg.head_dim % 2:
        raise _error(where, f"head_dim={cfg.head_dim} is odd: RoPE rotates pairs")
    for k in ("rms_norm_eps", "rope_theta"):
        v = getattr(cfg, k)
        if type(v) not in (int, float) or not v > 0:
            raise _error(where, f"{k} must be a positive number, got {v!r}")
    for k, want in _HF_FIXED.items():
        if getattr(cfg, k) != want:
            raise _error(where, f"{k}={getattr(cfg, k)!r} is not implemented (caten_lab's Llama has {want!r})")
    if cfg.rope_layout not in LAYOUTS:
        raise _error(where, f"rope_layout must be one of {LAYOUTS}, got {cfg.rope_layout!r}")
    if cfg.rope_scaling is not None:
        _scaling(dict(cfg.rope_scaling), where)
    if cfg.n_ctx is not None and (type(cfg.n_ctx) is not int or not 0 < cfg.n_ctx <= _MAX):
        raise _error(where, f"n_ctx must be a positive int, got {cfg.n_ctx!r}")
    ff = cfg.rope_freq_factors
    if ff is not None and (not isinstance(ff, list | tuple) or len(ff) != cfg.head_dim // 2
                           or not all(type(v) in (int, float) and v > 0 for v in ff)):
        raise _error(where, f"rope_freq_factors must be {cfg.head_dim // 2} positive numbers (head_dim / 2), "
                     f"got {ff if not isinstance(ff, list | tuple) else f'{len(ff)} values'}")
    if type(cfg.tie_word_embeddings) is not bool:
        raise _error(where, f"tie_word_embeddings must be a bool, got {cfg.tie_word_embeddings!r}")
