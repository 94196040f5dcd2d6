"""The tokenizer of an exported library: which fixed C, which compiled actions, which tables.

Every exported library's context (c/context.c) calls its tokenizer through four functions
(``ct_tok_open``, ``ct_tok_max_piece``, ``ct_tok_encode``, ``ct_tok_decode1``), defined by the fixed C
of the tokenizer's kind, written as ``src/tokenizer.c``:

- a GPT-2 vocabulary (``GPT2Tokenizer``: vocab.json + merges.txt): c/tok_tables.c, vocab_tables.c and
  tok_gpt2.c over the ``ct_tables`` struct (``VOCAB_TABLES``), the actions ``gpt2_encode`` and
  ``tokens_to_bytes``; another vocab.json may replace the exported one at init;
- a GGUF file's tokenizer (``GGUFTokenizer``: tokenizer.ggml.*): c/tok_gguf.c, the actions
  ``gguf_bpe_encode`` or ``gguf_spm_encode`` and ``gguf_decode``; its tables are the entry actions'
  table parameters (every parameter the C does not pass per call) plus ``GGUF_FACTS``.

``tokenizer_c(tokenizer, model_dir)`` gives the pieces; ``check`` refuses tables the C does not read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.workflow.model_tables import ExportError, check_tokenizer_tables
from caten_lab.workflow.tokenizers import gguf_actions
from caten_lab.workflow.tokenizers.bpe_actions import gpt2_encode, tokens_to_bytes
from caten_lab.workflow.tokenizers.gguf_vocab import GGUFTokenizer
from caten_lab.workflow.tokenizers.static_data import StaticBlob
from caten_lab.workflow.types import ArrayType

__all__ = ["GGUF_FACTS", "TokenizerC", "check_action_tables", "fnv64", "tokenizer_c"]

# what c/tok_gguf.c reads besides the actions' tables: the special tokens GGUFTokenizer.encode adds
GGUF_FACTS = ("add_bos", "bos_id", "add_eos", "eos_id")
# the parameters c/tok_gguf.c passes per call (text, work buffers, flags), by action
PER_CALL = {
    "gguf_bpe_encode": {
        "text",
        "n",
        "parse_special",
        "mark",
        "char_start",
        "char_cls",
        "sym",
        "rank",
        "res",
        "heap",
        "out",
    },
    "gguf_spm_encode": {
        "text",
        "n",
        "parse_special",
        "mark",
        "norm",
        "sym_start",
        "sym_len",
        "nxt",
        "prv",
        "heap",
        "ids",
        "frozen",
        "piece_out",
        "out",
    },
    "gguf_decode": {"ids", "count", "special", "lstrip_first", "out"},
}


def fnv64(data: bytes) -> int:
    """FNV-1a 64 of a file's bytes (the C library checks vocab/merges files with the same hash)."""
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


@dataclass(frozen=True)
class TokenizerC:
    """An exported tokenizer: fixed C files (concatenated as src/tokenizer.c), its encode and decode
    actions (the units tok_encode / tok_decode), the tables to link and the exported vocabulary's hash."""

    files: tuple[str, ...]
    encode: Any
    decode: Any
    tables: dict[str, object]
    vocab_hash: int = 0

    def check(self, blob: StaticBlob) -> None:
        if self.files[-1] == "tok_gpt2.c":
            check_tokenizer_tables(blob)
            return
        for act in (self.encode, self.decode):
            check_action_tables(blob, act, PER_CALL[act.ir.name])
        missing = [k for k in GGUF_FACTS if k not in blob.scalars]
        if missing:
            raise ExportError(f"the GGUF tokenizer's tables lack {missing}", hint="c/tok_gguf.c reads them")


def check_action_tables(blob: StaticBlob, act: Any, per_call: set[str]) -> None:
    """Refuse ``blob`` unless it holds every parameter of ``act`` the C does not pass per call, each as
    the action declares it (an array of its dtype, or a scalar)."""
    for name, t in act.ir.params:
        if name in per_call:
            continue
        if isinstance(t, ArrayType):
            got = blob.arrays.get(name)
            if got is None or np.dtype(got[1]) != np.dtype(t.dtype.np_dtype):
                raise ExportError(
                    f"action {act.ir.name!r} parameter {name!r}: the tokenizer tables have "
                    f"{'no such array' if got is None else got[1]}, the action takes {t.dtype}[]"
                )
        elif name not in blob.scalars:
            raise ExportError(
                f"action {act.ir.name!r} parameter {name!r}: the tokenizer tables have no such scalar"
            )


def tokenizer_c(tokenizer: Any, model_dir: Any = None) -> TokenizerC:
    """The exported pieces of ``tokenizer`` (a GGUFTokenizer, or a GPT-2 one read from ``model_dir``)."""
    if isinstance(tokenizer, GGUFTokenizer):
        facts = {
            "add_bos": int(tokenizer.add_bos),
            "bos_id": _id(tokenizer.bos_id),
            "add_eos": int(tokenizer.meta.add_eos),
            "eos_id": _id(tokenizer.eos_id),
        }
        encode = getattr(gguf_actions, tokenizer.encode_entry)
        return TokenizerC(
            ("tok_gguf.c",), encode, gguf_actions.gguf_decode, {**tokenizer.static_args(), **facts}
        )
    if model_dir is None or not (Path(model_dir) / "vocab.json").is_file():
        raise ExportError(f"{model_dir}: no vocab.json for the GPT-2 tokenizer")
    return TokenizerC(
        ("tok_tables.c", "vocab_tables.c", "tok_gpt2.c"),
        gpt2_encode,
        tokens_to_bytes,
        tokenizer.static_args(),
        fnv64((Path(model_dir) / "vocab.json").read_bytes()),
    )


def _id(v: int | None) -> int:
    return -1 if v is None else int(v)
