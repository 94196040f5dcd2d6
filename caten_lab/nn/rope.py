"""Rotary position embeddings: the frequency tables (default, linear, llama3, YaRN) and their rotation.

The tables are computed in float32 step by step as transformers computes them (inverse frequencies
``1 / theta ** (2i / dim)``, the scaling rule, then ``cos(pos * inv_freq)`` per position, times the
scaling's attention factor), so a model fed the same weights sees the same angles. They are fixed
inputs of the traced graph, one row per cache position, sliced at ``[pos : pos + seq]``.

Two layouts pair the dimensions of a head differently:
  * ``"neox"``: dimension i rotates with i + dim/2 (transformers' ``rotate_half``);
  * ``"normal"``: dimension 2i rotates with 2i + 1 (interleaved pairs: llama.cpp's arch ``llama``,
    whose GGUF files hold the Q/K rows permuted to match).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.frontend.creation import cat, stack
from caten_lab.frontend.tensor import Tensor

LAYOUTS = ("neox", "normal")

# the keys each scaling rule reads (besides rope_type / type); any other key is refused by the config
SCALING_KEYS: dict[str, frozenset[str]] = {
    "default": frozenset(),
    "linear": frozenset({"factor"}),
    "llama3": frozenset({"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}),
    "yarn": frozenset({"factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                       "original_max_position_embeddings", "truncate"}),
}

F32 = np.float32


def _pow(theta: float, dim: int) -> np.ndarray:
    """``theta ** (2i / dim)`` of the float32 exponents, correctly rounded to float32 (torch's float32
    pow agrees with that on ~99.5% of inputs; NumPy's float32 pow on ~83%)."""
    exponent = np.arange(0, dim, 2, dtype=np.int64).astype(F32) / F32(dim)
    return (float(theta) ** exponent.astype(np.float64)).astype(F32)


def _base_inv_freq(theta: float, dim: int) -> np.ndarray:
    return (F32(1.0) / _pow(theta, dim)).astype(F32)


def _llama3(inv: np.ndarray, s: Mapping[str, Any], max_pos: int) -> np.ndarray:
    factor, low, high = float(s["factor"]), float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old = float(s.get("original_max_position_embeddings") or max_pos)
    wavelen = (F32(2 * math.pi) / inv).astype(F32)
    scaled = np.where(wavelen > F32(old / low), inv / F32(factor), inv).astype(F32)
    smooth = ((F32(old) / wavelen - F32(low)) / F32(high - low)).astype(F32)
    smoothed = ((F32(1) - smooth) * scaled / F32(factor) + smooth * scaled).astype(F32)
    medium = ~(wavelen < F32(old / high)) & ~(wavelen > F32(old / low))
    return np.where(medium, smoothed, scaled).astype(F32)


def _yarn(theta: float, dim: int, s: Mapping[str, Any], max_pos: int) -> tuple[np.ndarray, float]:
    old = int(s.get("original_max_position_embeddings") or max_pos)
    factor = s.get("factor")
    factor = float(factor) if factor is not None else max_pos / old

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attn = s.get("attention_factor")
    if attn is None:
        m, m_all = s.get("mscale"), s.get("mscale_all_dim")
        attn = mscale(factor, m) / mscale(factor, m_all) if m and m_all else mscale(factor)
    fast, slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return dim * math.log(old / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    lo, hi = correction_dim(fast), correction_dim(slow)
    if s.get("truncate", True):
        lo, hi = math.floor(lo), math.ceil(hi)
    lo, hi = max(lo, 0), min(hi, dim - 1)
    if lo == hi:
        hi += 0.001
    ramp = np.clip((np.arange(dim // 2, dtype=F32) - F32(lo)) / F32(hi - lo), 0, 1).astype(F32)
    extrapolate = (F32(1) - ramp).astype(F32)
    pos_freqs = _pow(theta, dim)
    inv_ext = (F32(1.0) / pos_freqs).astype(F32)
    inv_int = (F32(1.0) / (F32(factor) * pos_freqs)).astype(F32)
    inv = (inv_int * (F32(1) - extrapolate) + inv_ext * extrapolate).astype(F32)
    return inv, float(attn)


def scaling_type(scaling: Mapping[str, Any] | None) -> str:
    if not scaling:
        return "default"
    return str(scaling.get("rope_type", scaling.get("type", "default")))


def inv_freq(theta: float, dim: int, scaling: Mapping[str, Any] | None, max_pos: int,
             freq_factors: Sequence[float] | None = None) -> tuple[np.ndarray, float]:
    """The (dim / 2,) float32 inverse frequencies and the attention factor the cos/sin are scaled by;
    ``freq_factors`` (GGUF ``rope_freqs.weight``) divide them, as llama.cpp applies them."""
    inv, attn = _scaled(theta, dim, scaling, max_pos)
    if freq_factors is not None:
        inv = (inv / np.asarray(freq_factors, dtype=F32)).astype(F32)
    return inv, attn


def _scaled(theta: float, dim: int, scaling: Mapping[str, Any] | None, max_pos: int) -> tuple[np.ndarray, float]:
    kind = scaling_type(scaling)
    s = scaling or {}
    if kind == "default":
        return _base_inv_freq(theta, dim), 1.0
    if kind == "linear":
        return (_base_inv_freq(theta, dim) / F32(s["factor"])).astype(F32), 1.0
    if kind == "llama3":
        return _llama3(_base_inv_freq(theta, dim), s, max_pos), 1.0
    if kind == "yarn":
        return _yarn(theta, dim, s, max_pos)
    raise CatenError(f"rope_scaling: rope_type {kind!r} is not implemented",
                     hint=f"implemented: {', '.join(SCALING_KEYS)}")


def rope_tables(theta: float, dim: int, scaling: Mapping[str, Any] | None, max_pos: int,
                n_ctx: int, freq_factors: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin, each (n_ctx, dim / 2) float32: row p holds the angles of position p."""
    inv, attn = inv_freq(theta, dim, scaling, max_pos, freq_factors)
    freqs = np.arange(n_ctx, dtype=np.int64).astype(F32)[:, None] * inv[None, :]
    angles = freqs.astype(np.float64)  # the float32 angles, their cos / sin correctly rounded
    cos, sin = np.cos(angles).astype(F32), np.sin(angles).astype(F32)
    if attn != 1.0:
        cos, sin = (cos * F32(attn)).astype(F32), (sin * F32(attn)).astype(F32)
    return np.ascontiguousarray(cos), np.ascontiguousarray(sin)


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate ``x`` (..., seq, dim) by the angles of ``cos`` / ``sin`` (seq, dim / 2)."""
    d = x.shape[-1]
    if layout == "neox":
        a, b = x[..., : d // 2], x[..., d // 2 :]
        return cat([a * cos - b * sin, b * cos + a * sin], -1)
    if layout == "normal":
        pairs = x.reshape(*x.shape[:-1], d // 2, 2)
        a, b = pairs[..., 0], pairs[..., 1]
        return stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(*x.shape)
    raise CatenError(f"rope layout {layout!r} is not one of {LAYOUTS}")
