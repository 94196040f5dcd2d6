"""Rules NAMES, DTYPE, SHAPE and TIED: a file's tensors against the architecture's expected table.

Order (``ct_st_check_model`` in the C loader follows it):
  1. NAMES: every file tensor, in file order, under its canonical name (``transformer.`` prepended
     unless it has it or is ``lm_head.weight``: GPT2Model checkpoints, like the original HF ``gpt2``,
     name tensors ``h.0.attn...`` / ``wte.weight``) is not named twice, and is expected, or
     ``lm_head.weight``, or a causal-mask buffer ``<P>.attn.bias`` / ``<P>.attn.masked_bias`` of a
     layer ``<P>`` the model has (HF keeps them in some files); then every expected tensor is present.
  2. DTYPE: every expected tensor is F32, F16 or BF16 (an F32 relabelled I32 is refused, not cast).
  3. SHAPE: every expected tensor has its expected shape.
  4. TIED: ``lm_head.weight``, if present, has the dtype, shape and bytes of the token embedding.
Checked on header entries only (plus, for TIED, the two tensors' bytes): before any copy.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from caten_lab.formats.rules import FormatError, WeightsError
from caten_lab.formats.safetensors_header import TensorEntry

MODEL_DTYPES = ("F32", "F16", "BF16")
TIED_NAME = "lm_head.weight"
EMBEDDING_NAME = "transformer.wte.weight"
PREFIX = "transformer."


def canonical_name(name: str, prefix: str | None = PREFIX) -> str:
    """The GPT2LMHeadModel name of a tensor (GPT2Model files lack the ``transformer.`` prefix);
    ``prefix=None``: names are used as they stand (Llama)."""
    if prefix is None:
        return name
    return name if name.startswith(prefix) or name == TIED_NAME else prefix + name
_MASKS = (".attn.bias", ".attn.masked_bias")
_MASK_OWNER = ".attn.c_attn.bias"


def is_mask_buffer(name: str, expected: Mapping[str, object]) -> bool:
    """HF's causal-mask buffer of a layer the model has (ignored on load)."""
    return any(name.endswith(suffix) and name[:-len(suffix)] + _MASK_OWNER in expected for suffix in _MASKS)


def _list(names: Sequence[str]) -> str:
    more = f" (and {len(names) - 5} more)" if len(names) > 5 else ""
    return f"{[n[:200] for n in names[:5]]}{more}"


def check_model_tensors(path: str, entries: Sequence[TensorEntry], expected: Mapping[str, tuple[int, ...]],
                        data: Callable[[TensorEntry], np.ndarray] | None = None,
                        error: type[FormatError] = WeightsError, *, prefix: str | None = PREFIX,
                        embedding: str = EMBEDDING_NAME) -> dict[str, TensorEntry]:
    """The entries by name, checked against ``expected`` (name -> shape). ``data(entry)`` gives a
    tensor's bytes (a uint8 view), for the TIED check (None: skip it, e.g. when values are compared elsewhere).
    ``prefix``: what canonical names start with (None: no renaming); ``embedding``: the tensor a
    ``lm_head.weight`` that is not itself expected must equal (a tied head)."""
    by_name: dict[str, TensorEntry] = {}
    for e in entries:
        key = canonical_name(e.name, prefix)
        if key in by_name:
            raise error(f"{path}: tensors {by_name[key].name[:200]!r} and {e.name[:200]!r} are both {key[:200]!r}",
                        rule="NAMES", hint="a file names each tensor once, with or without the 'transformer.' prefix")
        by_name[key] = e
    unexpected = [e.name for e in entries if (k := canonical_name(e.name, prefix)) not in expected and k != TIED_NAME
                  and not is_mask_buffer(k, expected)]
    if unexpected:
        raise error(f"{path}: unexpected tensors {_list(unexpected)}", rule="NAMES",
                    hint="the file does not match config.json (HF GPT-2 names: transformer.wte.weight or wte.weight, ...)")
    missing = [n for n in expected if n not in by_name]
    if missing:
        raise error(f"{path}: missing tensors {_list(missing)}", rule="NAMES",
                    hint="the file does not match config.json")
    for name in expected:
        if by_name[name].dtype not in MODEL_DTYPES:
            raise error(f"{path}: tensor {name!r} has dtype {by_name[name].dtype}; supported: F32, F16, BF16",
                        rule="DTYPE", hint="GPT-2 weights are floats; an integer dtype would be cast to garbage")
    for name, shape in expected.items():
        if by_name[name].shape != tuple(shape):
            raise error(f"{path}: tensor {name!r} has shape {by_name[name].shape}, config implies {tuple(shape)}",
                        rule="SHAPE")
    lm = by_name.get(TIED_NAME)
    if lm is not None and TIED_NAME not in expected and embedding in by_name:
        wte = by_name[embedding]
        same = lm.dtype == wte.dtype and lm.shape == wte.shape
        if same and data is not None:
            same = bool(np.array_equal(data(lm), data(wte)))
        if not same:
            raise error(f"{path}: lm_head.weight differs from {embedding}", rule="TIED",
                        hint="the config ties lm_head to the token embedding (tie_word_embeddings)")
    return by_name
