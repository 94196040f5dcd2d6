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


def check_token_ids(ids: object, vocab_size: int, what: str = "token ids") -> list[int]:
    """``ids`` as a list of Python ints, each in ``0..vocab_size - 1``.

    Accepts a sequence (list, tuple, range) of ints / NumPy integers, or a NumPy integer array (any
    shape, read flat). Anything else -- a float (even 2.0), a bool, a negative id, an id past the
    vocabulary -- is a CatenError naming the first bad item and its index: a token id is never
    truncated, wrapped or cast. O(len(ids)); the common cases (a list of ints, an int array) run
    vectorized or in one builtin pass.
    """
    if isinstance(ids, np.ndarray):
        flat = ids.reshape(-1)
        if flat.dtype.kind not in "iu":
            first = f" (item 0 is {flat[0].item()!r})" if flat.size else ""
            raise CatenError(
                f"{what}: token ids must be integers, got an array of {flat.dtype}{first}",
                hint="token ids are ints; a float or a bool is never rounded to one",
            )
        if flat.size:
            out_of_range = np.flatnonzero((flat < 0) | (flat >= vocab_size))
            if out_of_range.size:
                i = int(out_of_range[0])
                raise _out_of_range(what, i, int(flat[i]), vocab_size)
        return [int(v) for v in flat.tolist()]
    if isinstance(ids, str | bytes) or not hasattr(ids, "__iter__"):
        raise CatenError(
            f"{what}: expected a sequence of integer token ids, got {type(ids).__name__}",
            hint="tokenize text first (e.g. GPT2Tokenizer.encode(text))",
        )
    seq = ids if isinstance(ids, list | tuple | range) else list(ids)  # type: ignore[call-overload]
    if not all(type(v) is int for v in seq):
        for i, v in enumerate(seq):
            if not _is_int(v):
                shown = v.item() if isinstance(v, np.generic) else v
                raise CatenError(
                    f"{what}: item {i} is {shown!r} ({type(v).__name__}), not an integer token id",
                    hint="token ids are ints; a float or a bool is never rounded to one",
                )
        seq = [int(v) for v in seq]
    if seq:
        lo, hi = min(seq), max(seq)
        if lo < 0 or hi >= vocab_size:
            i = next(k for k, v in enumerate(seq) if v < 0 or v >= vocab_size)
            raise _out_of_range(what, i, seq[i], vocab_size)
    return list(seq)


def _is_int(v: object) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool | np.bool_)


def _out_of_range(what: str, index: int, value: int, vocab_size: int) -> CatenError:
    return CatenError(
        f"{what}: item {index} = {value} is outside the vocabulary 0..{vocab_size - 1}",
        hint="token ids come from this model's tokenizer",
    )
