"""The tokenizer a GGUF file describes, running on the tokenizer actions (interpreted or compiled).

``tokenizer_from_gguf(path or gguf.GGUFReader, compiled=False)`` reads ``tokenizer.*`` (see
``gguf_meta.py``) and builds:

- ``tokenizer.ggml.model = "gpt2"``: byte-level BPE with llama.cpp's merge order (the merges list)
  and the pre-tokenizer ``tokenizer.ggml.pre`` names (``gpt-2``, ``smollm``, ``llama3`` /
  ``llama-bpe``, ``qwen2``), on the GPT-2 tables of ``bpe.py``;
- ``"llama"``: SentencePiece-style BPE by score with byte fallback, on the SentencePiece actions.

Encoding follows llama.cpp's ``llama_tokenize``: with ``parse_special`` control tokens in the text
(``<|im_start|>``) become their ids; user-defined tokens always do; ``add_special`` (default: what
the file says, ``tokenizer.ggml.add_bos_token``/``add_eos_token``) adds BOS/EOS. Decoding
concatenates token pieces like llama.cpp's ``token_to_piece``; by default (``special=False``)
control tokens decode to ``''`` — pass ``special=True`` to see them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.token_ids import check_token_ids
from caten_lab.workflow.tokenizers import gguf_actions as A
from caten_lab.workflow.tokenizers._action import entry_args
from caten_lab.workflow.tokenizers.bpe import build_bpe_tables, text_to_utf8
from caten_lab.workflow.tokenizers.gguf_meta import (
    BYTE,
    CONTROL,
    NORMAL,
    UNKNOWN,
    UNUSED,
    USER_DEFINED,
    VocabMeta,
    read_vocab_meta,
)
from caten_lab.workflow.tokenizers.tables import build_bytes_table, build_pair_table, class_table

SPACE = "\u2581"


@dataclass(frozen=True)
class GGUFTables:
    """The entry actions' table parameters (by name) and what the Python wrapper needs to size buffers."""

    entry: str  # "gguf_bpe_encode" or "gguf_spm_encode"
    args: dict[str, Any]
    special_first_bytes: np.ndarray  # bool[256]: first bytes of the special tokens


def _special_order(meta: VocabMeta, lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Special tokens (control, user-defined, unknown) longest first; user-defined always split."""
    ids = [i for i, t in enumerate(meta.types) if t in (CONTROL, USER_DEFINED, UNKNOWN) and lengths[i] > 0]
    ids.sort(key=lambda i: (-lengths[i], i))
    always = [1 if meta.types[i] == USER_DEFINED else 0 for i in ids]
    return np.array(ids or [0], dtype=np.int32), np.array(always or [0], dtype=np.uint8)


def _hidden(meta: VocabMeta) -> np.ndarray:
    """1: shown only with ``special`` (control, unknown); 2: never shown (unused)."""
    table = {CONTROL: 1, UNKNOWN: 1, UNUSED: 2}
    return np.array([table.get(t, 0) for t in meta.types], dtype=np.uint8)


def _bpe_tables(meta: VocabMeta) -> GGUFTables:
    special = {tok: i for i, (tok, t) in enumerate(zip(meta.tokens, meta.types)) if t != NORMAL}
    vocab = {tok: i for i, tok in enumerate(meta.tokens)}
    bpe = build_bpe_tables(vocab, meta.merges, semantics="merges", special=special,
                           missing_bytes="drop")
    pre = meta.pre_tokenizer
    lengths = np.diff(bpe.vocab.offsets).tolist()
    sids, salways = _special_order(meta, lengths)
    t = bpe.static_args()
    args = {k: t[k] for k in ("stage1", "stage2", "byte_ids", "vslots", "vmask", "voffsets", "vdata", "pleft",
                              "pright", "prank", "presult", "pmask", "offsets", "data", "n_vocab")}
    nspecial = int(len(sids)) if any(meta.types[i] != NORMAL for i in sids.tolist()) else 0
    llama_cpp = class_table("15.1")  # llama.cpp's Unicode data: the Unicode 16 additions are unassigned
    args.update(stage1=llama_cpp.stage1, stage2=llama_cpp.stage2, whole_lookup=int(pre.ignore_merges), pre_kind=pre.kind, split_digits=int(pre.split_digits),
                max_digits=pre.max_digits, sids=sids, salways=salways, nspecial=nspecial,
                hidden=_hidden(meta), lstrip_first=0)
    return GGUFTables("gguf_bpe_encode", args, _first_bytes(bpe.vocab.data, bpe.vocab.offsets, sids, nspecial))


def _first_bytes(data: np.ndarray, offsets: np.ndarray, sids: np.ndarray, nspecial: int) -> np.ndarray:
    first = np.zeros(256, dtype=bool)
    for tid in sids[:nspecial].tolist():
        first[data[offsets[tid]]] = True
    return first


def _spm_tables(meta: VocabMeta) -> GGUFTables:
    items = [t.encode("utf-8") for t in meta.tokens]
    # llama.cpp merges into any token of the vocabulary (its text_to_token), whatever its type
    pieces = build_bytes_table(items, [True] * len(items))
    scores = np.array(meta.scores, dtype=np.float32)
    distinct = np.unique(scores)[::-1]
    score_rank = np.searchsorted(-distinct, -scores).astype(np.int32)
    byte_ids = np.full(256, -1, dtype=np.int32)
    surfaces: list[bytes] = []
    for i, (tok, t) in enumerate(zip(meta.tokens, meta.types)):
        if t == BYTE:
            if not (len(tok) == 6 and tok.startswith("<0x") and tok.endswith(">")):
                raise CatenError(f"{meta.where}: byte token {i} is {tok!r}, not <0xXX>",
                                 hint="tokenizer.ggml.token_type marks it BYTE (6)")
            surfaces.append(bytes([int(tok[3:5], 16)]))
        elif t == NORMAL:
            surfaces.append(tok.replace(SPACE, " ").encode("utf-8"))
        else:
            surfaces.append(tok.encode("utf-8"))
    for b in range(256):  # llama.cpp's byte_to_token: the token spelled <0xXX>, else the byte itself
        byte_ids[b] = pieces.find(f"<0x{b:02X}>".encode())
        if byte_ids[b] < 0:
            byte_ids[b] = pieces.find(bytes([b]))
    if (byte_ids < 0).any():
        missing = np.flatnonzero(byte_ids < 0).tolist()[:5]
        raise CatenError(f"{meta.where}: tokenizer.ggml.tokens has no <0xXX> byte tokens for bytes {missing}",
                         hint="SentencePiece-style vocabularies need byte fallback tokens for every byte")
    surface = build_bytes_table(surfaces, [False] * len(surfaces))
    lengths = np.diff(pieces.offsets).tolist()
    sids, salways = _special_order(meta, lengths)
    nspecial = int(len(sids)) if any(meta.types[i] != NORMAL for i in sids.tolist()) else 0
    empty = np.zeros(0, dtype=np.int64)
    user = build_pair_table(empty, empty, empty, empty)  # no frozen symbols: user tokens are split first
    ws_split = int(all(SPACE not in tok[1:] for tok in meta.tokens))
    args = {"add_space_prefix": int(meta.add_space_prefix), "vslots": pieces.slots, "vmask": pieces.mask,
            "voffsets": pieces.offsets, "vdata": pieces.data, "score_rank": score_rank, "unk_id": -1,
            "byte_ids": byte_ids, "ws_split": ws_split, "uleft": user.left, "uright": user.right,
            "uchild": user.result, "umask": user.mask, "unode_piece": np.full(1, -1, dtype=np.int32),
            "sids": sids, "salways": salways, "nspecial": nspecial, "offsets": surface.offsets,
            "data": surface.data, "hidden": _hidden(meta), "n_vocab": len(items),
            "lstrip_first": int(meta.add_space_prefix)}
    return GGUFTables("gguf_spm_encode", args, _first_bytes(pieces.data, pieces.offsets, sids, nspecial))


class GGUFTokenizer:
    """A tokenizer built from GGUF metadata whose encode/decode are actions (interpreted or compiled)."""

    def __init__(self, meta: VocabMeta, *, compiled: bool = False) -> None:
        self.meta = meta
        self.tables = _bpe_tables(meta) if meta.model == "gpt2" else _spm_tables(meta)
        self.compiled = compiled
        self._runner = None
        if compiled:
            from caten_lab.workflow.tokenizers.compiled import compiled_runner

            self._runner = compiled_runner()

    # ------------------------------------------------------------------ facts
    @property
    def kind(self) -> str:
        """``"gpt2"`` (byte-level BPE) or ``"llama"`` (SentencePiece-style), as the file says."""
        return self.meta.model

    @property
    def n_vocab(self) -> int:
        return len(self.meta.tokens)

    @property
    def bos_id(self) -> int | None:
        return self.meta.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.meta.eos_id

    @property
    def eot_id(self) -> int | None:
        """End of turn: ``tokenizer.ggml.eot_token_id``, else the first of llama.cpp's names found."""
        return self.meta.eot_id

    @property
    def eog_ids(self) -> frozenset[int]:
        """Every id that ends generation in llama.cpp (EOS, EOT, and the tokens it finds by name)."""
        return self.meta.eog_ids

    @property
    def special_ids(self) -> dict[str, int]:
        """Control, user-defined and unknown tokens by their text."""
        keep = (CONTROL, USER_DEFINED, UNKNOWN)
        return {tok: i for i, (tok, t) in enumerate(zip(self.meta.tokens, self.meta.types)) if t in keep}

    @property
    def add_bos(self) -> bool:
        return self.meta.add_bos

    def token_text(self, tid: int) -> str:
        """The token's string as the file stores it."""
        return self.meta.tokens[int(check_token_ids([tid], self.n_vocab, "token_text")[0])]

    def static_args(self) -> dict[str, object]:
        """The tables as the entry actions' parameters (by name): what a library embeds as static data."""
        return dict(self.tables.args)

    @property
    def encode_entry(self) -> str:
        return self.tables.entry

    # ------------------------------------------------------------------ encode / decode
    def encode(self, text: str, *, add_special: bool | None = None, parse_special: bool = True) -> list[int]:
        """Token ids of ``text``; ``add_special=None`` adds BOS/EOS as the file's add_*_token say."""
        return self.encode_bytes(text_to_utf8(text), add_special=add_special, parse_special=parse_special)

    def encode_bytes(self, data: bytes, *, add_special: bool | None = None, parse_special: bool = True) -> list[int]:
        """Token ids of UTF-8 bytes (invalid UTF-8 is refused: llama.cpp would substitute U+FFFD per byte)."""
        try:
            bytes(data).decode("utf-8")
        except UnicodeDecodeError as err:
            raise CatenError(f"encode_bytes: invalid UTF-8 at byte {err.start}: {err.reason}",
                             hint="decode the text first (errors='replace') or pass a str to encode()") from None
        ids = self.encode_array(np.frombuffer(data, dtype=np.uint8), parse_special=parse_special).tolist()
        if add_special is None or add_special:
            if self.meta.add_bos:
                ids.insert(0, self.meta.bos_id)
            if self.meta.add_eos:
                ids.append(self.meta.eos_id)
        return ids

    def encode_array(self, text: np.ndarray, *, parse_special: bool = True) -> np.ndarray:
        """Token ids (int32) of a uint8 array, without BOS/EOS."""
        n = int(text.shape[0])
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        text = np.ascontiguousarray(text, dtype=np.uint8)
        buffers = self._buffers(text, n)
        name = self.tables.entry
        args = entry_args(name, {**self.tables.args, "text": text, "n": n, "parse_special": int(parse_special),
                                 **buffers})
        count = self._runner(name, args) if self._runner else getattr(A, name)(*args)
        return buffers["out"][: int(count)].copy()

    def _buffers(self, text: np.ndarray, n: int) -> dict[str, np.ndarray]:
        mark = np.zeros(n + 1, dtype=np.int32)
        if self.tables.entry == "gguf_bpe_encode":
            return {"mark": mark, "char_start": np.zeros(n + 1, dtype=np.int32),
                    "char_cls": np.zeros(n + 1, dtype=np.uint8), "sym": np.zeros(n + 1, dtype=np.int32),
                    "rank": np.zeros(n + 1, dtype=np.int32), "res": np.zeros(n + 1, dtype=np.int32),
                    "heap": np.zeros(3 * n + 3, dtype=np.int64), "out": np.zeros(n, dtype=np.int32)}
        spaces = np.flatnonzero(text == 32)
        n_first = int(np.count_nonzero(self.tables.special_first_bytes[text]))
        w = n + 2 * int(spaces.size) + 3 * (n_first + 1) + 4  # U+2581 is 3 bytes; a prefix per span
        segment = w
        if self.tables.args["ws_split"]:
            segment = int(np.diff(np.concatenate(([-1], spaces, [n]))).max()) + 8
        work = {k: np.zeros(w, dtype=np.int32) for k in ("sym_start", "sym_len", "nxt", "prv", "ids", "piece_out",
                                                         "out")}
        return {"mark": mark, "norm": np.zeros(w, dtype=np.uint8), "frozen": np.zeros(w, dtype=np.uint8),
                "heap": np.zeros(6 * segment, dtype=np.int64), **work}

    def decode_bytes(self, ids: list[int] | np.ndarray, *, special: bool = False, strip: bool = True) -> bytes:
        """The bytes of the tokens' pieces; control tokens give b'' unless ``special``. A SentencePiece
        vocabulary with a space prefix loses the first piece's leading space unless ``strip=False``
        (streaming one token at a time, as llama.cpp's ``token_to_piece`` does)."""
        ids32 = np.asarray(check_token_ids(ids, self.n_vocab, "decode"), dtype=np.int32)
        offsets = self.tables.args["offsets"]
        total = int((offsets[ids32 + 1] - offsets[ids32]).sum()) if ids32.size else 0
        out = np.zeros(max(total, 1), dtype=np.uint8)
        buffers = {"ids": ids32, "count": int(ids32.size), "out": out, "special": int(special)}
        if not strip:
            buffers["lstrip_first"] = 0
        args = entry_args("gguf_decode", {**self.tables.args, **buffers})
        count = self._runner("gguf_decode", args) if self._runner else A.gguf_decode(*args)
        return out[: int(count)].tobytes()

    def decode(self, ids: list[int] | np.ndarray, *, special: bool = False) -> str:
        """Text of the tokens (invalid UTF-8 becomes U+FFFD); control tokens give '' unless ``special``."""
        return self.decode_bytes(ids, special=special).decode("utf-8", errors="replace")


def tokenizer_from_gguf(source: Any, *, compiled: bool = False) -> GGUFTokenizer:
    """The tokenizer of a GGUF file (a path or a ``gguf.GGUFReader``)."""
    return GGUFTokenizer(read_vocab_meta(source), compiled=compiled)
