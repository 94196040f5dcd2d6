"""Token sampling: greedy, temperature, top-k, top-p and repetition penalty, with a counter-based RNG.

The random number for step ``t`` is a pure function of (seed, t) (SplitMix64), so a generation is
reproducible from its seed alone and the compiled C sampler can draw the very same numbers.
The processing order follows Hugging Face's: repetition penalty, temperature, top-k, top-p.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.token_ids import check_token_ids

_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """One SplitMix64 output for state ``x`` (a well-mixed 64-bit hash)."""
    z = (x + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def uniform(seed: int, step: int) -> float:
    """A uniform float in [0, 1) for (seed, step), using the top 53 bits."""
    return (splitmix64((seed * 0x2545F4914F6CDD1D + step) & _MASK64) >> 11) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class SamplingOptions:
    """How the next token is chosen. ``temperature == 0`` means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise CatenError(
                f"temperature must be >= 0, got {self.temperature}", hint="use 0 for greedy decoding"
            )
        if self.top_k < 0:
            raise CatenError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise CatenError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.repetition_penalty <= 0:
            raise CatenError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")


def process_logits(logits: np.ndarray, previous: Iterable[int], opts: SamplingOptions) -> np.ndarray:
    """Apply repetition penalty, temperature, top-k and top-p; masked entries become -inf."""
    x = np.array(logits, dtype=np.float64, copy=True)
    if opts.repetition_penalty != 1.0:
        seen = np.unique(np.asarray(check_token_ids(previous, x.size, "previous tokens"), dtype=np.int64))
        if seen.size:
            v = x[seen]
            x[seen] = np.where(v > 0, v / opts.repetition_penalty, v * opts.repetition_penalty)
    if opts.temperature > 0:
        x /= opts.temperature
    if opts.top_k > 0 and opts.top_k < x.size:
        kth = np.partition(x, x.size - opts.top_k)[x.size - opts.top_k]
        x[x < kth] = -np.inf
    if opts.top_p < 1.0:
        order = np.argsort(-x, kind="stable")
        p = np.exp(x[order] - x[order[0]])
        p /= p.sum()
        cum = np.cumsum(p)
        cut = (
            int(np.searchsorted(cum, opts.top_p, side="left")) + 1
        )  # keep the smallest prefix reaching top_p
        x[order[cut:]] = -np.inf
    return x


def sample(logits: np.ndarray, previous: Iterable[int], opts: SamplingOptions, step: int) -> int:
    """The next token id for one row of logits."""
    if opts.temperature == 0:
        x = process_logits(logits, previous, SamplingOptions(repetition_penalty=opts.repetition_penalty))
        return int(np.argmax(x))
    x = process_logits(logits, previous, opts)
    p = np.exp(x - np.max(x))
    cdf = np.cumsum(p)
    u = uniform(opts.seed, step) * cdf[-1]
    return int(min(np.searchsorted(cdf, u, side="right"), x.size - 1))
