"""Vocabulary and merges checks (rules JSON, DUPLICATE_KEY, VOCAB_ID, VOCAB_TOKEN, MERGES).

A vocabulary with a negative or repeated id used to change tokenization without a word (the last of
two equal ids won; a gap became an empty token). Order (the exported C ``ct_vocab_check`` and
``ct_check_merges`` follow it):
  1. JSON, then DUPLICATE_KEY (a token listed twice).
  2. each (token, id) in file order: VOCAB_ID (an integer, 0 <= id < n, not seen before), then
     VOCAB_TOKEN (in GPT-2's byte-level alphabet, unless it is a special token).
  3. VOCAB_ID: n tokens (so the ids are exactly 0..n-1); n is the model's vocabulary size, or the
     number of tokens for a tokenizer on its own.
  4. VOCAB_TOKEN: every byte value has its one-byte token.
Merges: strict UTF-8 (else MERGES); every line but an optional ``#version`` first line and empty
lines is ``left right`` (one space) and left, right and left+right are ordinary tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache

from caten_lab.formats.rules import VocabError
from caten_lab.formats.strict_json import loads_strict

SPECIAL = ("<|endoftext|>",)


@lru_cache(maxsize=1)
def byte_alphabet() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used in encoder.json / vocab.bpe."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


@lru_cache(maxsize=1)
def _alphabet_chars() -> frozenset[str]:
    return frozenset(byte_alphabet().values())


def check_vocab_items(items: Iterable[tuple[str, object]], where: str, n_vocab: int | None = None,
                      special: Iterable[str] = SPECIAL, require_bytes: bool = True) -> dict[str, int]:
    """Steps 2-4 over (token, id) pairs in file order; returns the vocabulary.

    ``require_bytes=False`` accepts a vocabulary without some single-byte tokens (llama.cpp and
    `tokenizers` then drop those bytes; SmolLM2's vocabulary lacks a few control bytes)."""
    pairs = list(items)
    n = len(pairs) if n_vocab is None else n_vocab
    special = set(special)
    alphabet = _alphabet_chars()
    seen: dict[int, str] = {}
    for tok, tid in pairs:
        if type(tid) is not int or not 0 <= tid < n:
            raise VocabError(f"{where}: token {tok[:80]!r} has id {tid!r}, not an integer in 0..{n - 1}",
                             rule="VOCAB_ID", hint="ids are the rows of the embedding: 0..vocab_size-1")
        if tid in seen:
            raise VocabError(f"{where}: id {tid} is used by {seen[tid][:80]!r} and {tok[:80]!r}", rule="VOCAB_ID",
                             hint="two tokens with one id would silently tokenize differently")
        seen[tid] = tok
        if tok not in special and not all(c in alphabet for c in tok):
            raise VocabError(f"{where}: token {tok[:80]!r} (id {tid}) is not in GPT-2's byte-level alphabet",
                             rule="VOCAB_TOKEN", hint="only byte-level BPE vocabularies are supported")
    if len(pairs) != n:
        raise VocabError(f"{where}: the vocabulary has {len(pairs)} tokens, the model {n}", rule="VOCAB_ID")
    vocab = dict(pairs)  # type: ignore[arg-type]
    missing = [b for b, c in byte_alphabet().items() if c not in vocab]
    if missing and require_bytes:
        raise VocabError(f"{where}: the vocabulary lacks the single-byte tokens of bytes {sorted(missing)[:5]}",
                         rule="VOCAB_TOKEN", hint="byte-level BPE needs one token per byte value")
    return vocab  # type: ignore[return-value]


def check_vocab(raw: bytes, where: str, n_vocab: int | None = None, special: Iterable[str] = SPECIAL) -> dict[str, int]:
    """The vocabulary of a vocab.json / encoder.json file's bytes, checked in the order above."""
    vocab = loads_strict(raw, where, VocabError, "vocabulary")  # a dict keeps the file's order
    return check_vocab_items(vocab.items(), where, n_vocab, special)


def check_merges(raw: bytes, where: str, vocab: Mapping[str, int], special: Iterable[str] = SPECIAL) -> list[tuple[str, str]]:
    """The merge rules of a merges.txt / vocab.bpe file's bytes, each naming known ordinary tokens."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise VocabError(f"{where}: the merges file is not UTF-8 ({exc})", rule="MERGES") from None
    special = set(special)
    merges = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line or (lineno == 1 and line.startswith("#version")):
            continue
        parts = line.split(" ")
        if len(parts) != 2:
            raise VocabError(f"malformed merge rule {line[:80]!r}", rule="MERGES", where=f"{where}:{lineno}",
                             hint="each line of merges.txt / vocab.bpe is 'left right'")
        for tok in (parts[0], parts[1], parts[0] + parts[1]):
            if tok not in vocab or tok in special:
                raise VocabError(f"merge rule {line[:80]!r} names {tok[:80]!r}, not a token of the vocabulary",
                                 rule="MERGES", where=f"{where}:{lineno}",
                                 hint="the merges file does not belong to this vocabulary")
        merges.append((parts[0], parts[1]))
    return merges
