"""Load-time tables for the tokenizer actions: flat NumPy arrays only.

Everything an action needs (character classes, vocabularies, merge ranks, tries) is prepared here in
ordinary Python and handed to the actions as arrays, so that generated C can embed them as static
data. The hash functions are written twice on purpose: vectorised/plain here, and in the action
subset in ``hashing.py``; ``tests/workflow/test_tokenizer_tables.py`` checks that they agree.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.formats.vocab_check import byte_alphabet

OTHER, LETTER, NUMBER, SPACE = 0, 1, 2, 3

# Code points that tiktoken's and `tokenizers`' regex engines (Unicode 16) class as \p{L} / \p{N} but
# Python 3.11's unicodedata (Unicode 14) leaves unassigned. Measured once against both libraries;
# test_tokenizer_tables checks every code point against them again.
_EXTRA_LETTERS = (
    (0x1C89, 0x1C8A), (0xA7CB, 0xA7CD), (0xA7DA, 0xA7DC), (0x105C0, 0x105F3), (0x10D4A, 0x10D65),
    (0x10D6F, 0x10D85), (0x10EC2, 0x10EC4), (0x1123F, 0x11240), (0x11380, 0x11389), (0x1138B, 0x1138B),
    (0x1138E, 0x1138E), (0x11390, 0x113B5), (0x113B7, 0x113B7), (0x113D1, 0x113D1), (0x113D3, 0x113D3),
    (0x11BC0, 0x11BE0), (0x11F02, 0x11F02), (0x11F04, 0x11F10), (0x11F12, 0x11F33), (0x1342F, 0x1342F),
    (0x13441, 0x13446), (0x13460, 0x143FA), (0x16100, 0x1611D), (0x16D40, 0x16D6C), (0x18CFF, 0x18CFF),
    (0x1B132, 0x1B132), (0x1B155, 0x1B155), (0x1DF25, 0x1DF2A), (0x1E030, 0x1E06D), (0x1E4D0, 0x1E4EB),
    (0x1E5D0, 0x1E5ED), (0x1E5F0, 0x1E5F0), (0x2B739, 0x2B739), (0x2EBF0, 0x2EE5D), (0x31350, 0x323AF),
)
_EXTRA_NUMBERS = (
    (0x10D40, 0x10D49), (0x116D0, 0x116E3), (0x11BF0, 0x11BF9), (0x11F50, 0x11F59), (0x16130, 0x16139),
    (0x16D70, 0x16D79), (0x1CCF0, 0x1CCF9), (0x1D2C0, 0x1D2D3), (0x1E4F0, 0x1E4F9), (0x1E5F1, 0x1E5FA),
)
# The Unicode 16.0 additions among those: llama.cpp's tables (unicode-data.cpp) are Unicode 15.1 and
# leave these unassigned (class OTHER). Measured against llama.cpp through xllamacpp
# (tests/workflow/test_gguf_tokenizer.py checks every code point against it).
UNICODE_16_ONLY = (
    (0x1C89, 0x1C8A), (0xA7CB, 0xA7CD), (0xA7DA, 0xA7DC), (0x105C0, 0x105F3), (0x10D40, 0x10D49),
    (0x10D4A, 0x10D65), (0x10D6F, 0x10D85), (0x10EC2, 0x10EC4), (0x11380, 0x11389), (0x1138B, 0x1138B),
    (0x1138E, 0x1138E), (0x11390, 0x113B5), (0x113B7, 0x113B7), (0x113D1, 0x113D1), (0x113D3, 0x113D3),
    (0x116D0, 0x116E3), (0x11BC0, 0x11BE0), (0x11BF0, 0x11BF9), (0x13460, 0x143FA), (0x16100, 0x1611D),
    (0x16130, 0x16139), (0x16D40, 0x16D6C), (0x16D70, 0x16D79), (0x18CFF, 0x18CFF), (0x1CCF0, 0x1CCF9),
    (0x1E5D0, 0x1E5ED), (0x1E5F0, 0x1E5FA),
)
UNICODE_VERSIONS = ("16.0", "15.1")
# \s in the Rust `regex` crate and in Oniguruma: the Unicode White_Space property (25 code points).
WHITE_SPACE = (
    0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, *range(0x2000, 0x200B),
    0x2028, 0x2029, 0x202F, 0x205F, 0x3000,
)

N_CODEPOINTS = 0x110000
BLOCK = 256


@lru_cache(maxsize=1)
def _letters_and_numbers() -> np.ndarray:
    """LETTER/NUMBER/OTHER of every code point by Python's Unicode database (~0.3 s: computed once and
    shared by the Unicode versions, which differ only by the ranges codepoint_classes patches)."""
    cls = np.zeros(N_CODEPOINTS, dtype=np.uint8)
    for cp in range(N_CODEPOINTS):
        cat = unicodedata.category(chr(cp))
        if cat[0] == "L":
            cls[cp] = LETTER
        elif cat[0] == "N":
            cls[cp] = NUMBER
    for lo, hi in _EXTRA_LETTERS:
        cls[lo : hi + 1] = LETTER
    for lo, hi in _EXTRA_NUMBERS:
        cls[lo : hi + 1] = NUMBER
    cls.setflags(write=False)
    return cls


def codepoint_classes(unicode: str = "16.0") -> np.ndarray:
    """Class of every code point (OTHER/LETTER/NUMBER/SPACE) as the GPT-2 regex sees it.

    ``unicode="16.0"``: tiktoken and `tokenizers`; ``"15.1"``: llama.cpp (Unicode 16 additions unassigned).
    """
    if unicode not in UNICODE_VERSIONS:
        raise CatenError(f"unicode version {unicode!r} is not one of {UNICODE_VERSIONS}")
    cls = _letters_and_numbers().copy()
    if unicode == "15.1":
        for lo, hi in UNICODE_16_ONLY:
            cls[lo : hi + 1] = OTHER
    cls[list(WHITE_SPACE)] = SPACE
    return cls


@dataclass(frozen=True)
class ClassTable:
    """Two-stage lookup: ``cls(cp) = stage2[stage1[cp >> 8] + (cp & 255)]`` (a few tens of KB)."""

    stage1: np.ndarray  # int32[4352]: offset of the block in stage2
    stage2: np.ndarray  # uint8[n_unique_blocks * 256]

    def lookup(self, cp: int) -> int:
        return int(self.stage2[self.stage1[cp >> 8] + (cp & 255)])


_CLASS_TABLES: dict[str, ClassTable] = {}


def class_table(unicode: str = "16.0") -> ClassTable:
    """The (cached) two-stage character class table of a Unicode version (see ``codepoint_classes``)."""
    if unicode not in _CLASS_TABLES:
        blocks = codepoint_classes(unicode).reshape(-1, BLOCK)
        index: dict[bytes, int] = {}
        stage1 = np.zeros(len(blocks), dtype=np.int32)
        unique: list[np.ndarray] = []
        for i, row in enumerate(blocks):
            key = row.tobytes()
            if key not in index:
                index[key] = len(unique) * BLOCK
                unique.append(row)
            stage1[i] = index[key]
        _CLASS_TABLES[unicode] = ClassTable(stage1, np.concatenate(unique).astype(np.uint8))
    return _CLASS_TABLES[unicode]


# ------------------------------------------------------------------------------------ hash tables

FNV_OFFSET = 2166136261
FNV_PRIME = 16777619
MASK32 = 0xFFFFFFFF
PAIR_K1 = 1000003
PAIR_K2 = 19349663


def bytes_hash(data: bytes) -> int:
    """FNV-1a (32 bit) folded once; the action ``bytes_slot`` computes the same value."""
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK32
    return h ^ (h >> 15)


def pair_hash(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray | int:
    """Hash of an (int, int) key, exact in int64 for ids below 2**21 (no overflow anywhere)."""
    h = a * PAIR_K1 + b * PAIR_K2
    return h ^ (h >> 15)


def table_size(n: int) -> int:
    """Power of two with load factor <= 1/2."""
    size = 16
    while size < 2 * n:
        size *= 2
    return size


@dataclass(frozen=True)
class BytesTable:
    """Byte strings by id: concatenated bytes + offsets, and an open-addressing hash to find ids."""

    data: np.ndarray  # uint8[total]
    offsets: np.ndarray  # int32[n + 1]
    slots: np.ndarray  # int32[size], -1 = empty, else the id
    mask: int

    @property
    def n(self) -> int:
        return len(self.offsets) - 1

    def get(self, i: int) -> bytes:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def find(self, key: bytes) -> int:
        slot = bytes_hash(key) & self.mask
        while self.slots[slot] >= 0:
            if self.get(int(self.slots[slot])) == key:
                return int(self.slots[slot])
            slot = (slot + 1) & self.mask
        return -1


def build_bytes_table(items: list[bytes], hashed: list[bool] | None = None) -> BytesTable:
    """Table of ``items`` (id = position); only items with ``hashed[i]`` true are findable by bytes.

    When two items have equal bytes the first one wins, as in the reference vocabularies.
    """
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(x) for x in items])
    data = np.frombuffer(b"".join(items), dtype=np.uint8).copy()
    size = table_size(len(items))
    slots = np.full(size, -1, dtype=np.int32)
    mask = size - 1
    seen: set[bytes] = set()
    for i, item in enumerate(items):
        if (hashed is not None and not hashed[i]) or item in seen:
            continue
        seen.add(item)
        slot = bytes_hash(item) & mask
        while slots[slot] >= 0:
            slot = (slot + 1) & mask
        slots[slot] = i
    return BytesTable(data, offsets.astype(np.int32), slots, mask)


@dataclass(frozen=True)
class PairTable:
    """Open-addressing map (left, right) -> (rank, result); ``left = -1`` marks an empty slot."""

    left: np.ndarray  # int32[size]
    right: np.ndarray  # int32[size]
    rank: np.ndarray  # int32[size]
    result: np.ndarray  # int32[size]
    mask: int

    def find(self, a: int, b: int) -> int:
        slot = int(pair_hash(a, b)) & self.mask
        while self.left[slot] >= 0:
            if self.left[slot] == a and self.right[slot] == b:
                return slot
            slot = (slot + 1) & self.mask
        return -1


def build_pair_table(left: np.ndarray, right: np.ndarray, rank: np.ndarray, result: np.ndarray) -> PairTable:
    """Insert the entries in order; a repeated key keeps its first (lowest-rank when sorted) entry."""
    size = table_size(len(left))
    mask = size - 1
    tl = np.full(size, -1, dtype=np.int32)
    tr = np.zeros(size, dtype=np.int32)
    tk = np.zeros(size, dtype=np.int32)
    tv = np.zeros(size, dtype=np.int32)
    start = pair_hash(left.astype(np.int64), right.astype(np.int64)) & mask
    for a, b, rk, res, slot in zip(left.tolist(), right.tolist(), rank.tolist(), result.tolist(),
                                   start.tolist()):
        while tl[slot] >= 0 and not (tl[slot] == a and tr[slot] == b):
            slot = (slot + 1) & mask
        if tl[slot] >= 0:
            continue
        tl[slot], tr[slot], tk[slot], tv[slot] = a, b, rk, res
    return PairTable(tl, tr, tk, tv, mask)


# ------------------------------------------------------------------------------ GPT-2 byte mapping


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used in encoder.json / vocab.bpe."""
    return dict(byte_alphabet())
