"""Token ids checked before anything runs: every entry point that takes token ids (the GPT-2 runner, the
nn model, the generation workflow, the samplers, the tokenizers' ``decode``) reads them through
:func:`check_token_ids`, so a float is never truncated, a bool never taken for 0/1, and an id outside
the vocabulary never reaches a kernel."""

from __future__ import annotations

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.type_words import a_type

__all__ = ["check_token_ids"]


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
            f"{what}: expected a sequence of integer token ids, got {a_type(ids)}",
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
