"""SentencePiece (BPE and unigram) from a ``.model`` file, encoding and decoding with actions.

Supported: models with identity normalization (``normalization_rule_name="identity"``, i.e. no
precompiled character map), with or without ``add_dummy_prefix``, ``remove_extra_whitespaces`` and
``byte_fallback``. A model that needs NFKC tables or has unused pieces is rejected with a
CatenError instead of being encoded differently from sentencepiece. User-defined symbols are
supported (longest match, never merged in BPE; the score bonus in unigram).
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.token_ids import check_token_ids
from caten_lab.workflow.tokenizers import spm_actions as A
from caten_lab.workflow.tokenizers._action import entry_args
from caten_lab.workflow.tokenizers.bpe import text_to_utf8
from caten_lab.workflow.tokenizers.spm_model import (
    BPE,
    BYTE,
    CONTROL,
    NORMAL,
    UNIGRAM,
    UNKNOWN,
    UNUSED,
    USER_DEFINED,
    SentencePieceModel,
    load_model,
)
from caten_lab.workflow.tokenizers.tables import BytesTable, PairTable, build_bytes_table, build_pair_table

SPACE = "\u2581"
PER_BYTE = "caten_replace_per_byte"
codecs.register_error(PER_BYTE, lambda err: ("\ufffd" * (err.end - err.start), err.end))


@dataclass(frozen=True)
class SPMTables:
    """Flat arrays for the SentencePiece actions."""

    pieces: BytesTable  # piece bytes by id; hash over NORMAL pieces only
    scores: np.ndarray  # float32[vocab]
    score_rank: np.ndarray  # int32[vocab]: dense rank of the score, 0 = highest (BPE merge order)
    trie: PairTable  # (node, byte) -> child node
    node_piece: np.ndarray  # int32[nodes]: piece ending at the node, or -1
    byte_ids: np.ndarray  # int32[256]: id of <0xXX>, or unk
    surface: BytesTable  # decode bytes by id
    decode_kind: np.ndarray  # uint8[vocab]: 0 normal, 1 normal starting with U+2581, 2 control, 3 unk, 4 byte
    strip_mode: int  # 0 keep leading space, 1 strip the dummy prefix, 2 strip all leading spaces
    is_bpe: int
    unk_id: int
    unk_score: float
    byte_fallback: int
    add_dummy_prefix: int
    remove_extra: int
    is_user: np.ndarray  # uint8[vocab]: 1 for user-defined pieces
    max_score: float  # max(FLT_MIN, best NORMAL score): the user-defined bonus base in unigram
    user_trie: PairTable  # trie of user-defined pieces only (BPE's frozen-symbol prefix match)
    user_node_piece: np.ndarray
    ws_split: int  # 1: no piece has U+2581 after its start, so BPE may merge word by word


def _trie(items: list[bytes], keep: list[bool]) -> tuple[PairTable, np.ndarray]:
    """A byte trie of the kept items: (node, byte) -> child in a pair table, piece id per node."""
    left, right, child = [], [], []
    edges: dict[tuple[int, int], int] = {}
    node_piece = [-1]
    for pid, item in enumerate(items):
        if not keep[pid]:
            continue
        node = 0
        for b in item:
            nxt = edges.get((node, b))
            if nxt is None:
                nxt = len(node_piece)
                node_piece.append(-1)
                edges[(node, b)] = nxt
                left.append(node)
                right.append(b)
                child.append(nxt)
            node = nxt
        if node_piece[node] < 0:
            node_piece[node] = pid
    as64 = [np.array(x, dtype=np.int64) for x in (left, right, child)]
    return build_pair_table(as64[0], as64[1], as64[2], as64[2]), np.array(node_piece, dtype=np.int32)


def build_spm_tables(model: SentencePieceModel) -> SPMTables:
    """Check the model is one we encode exactly, then lay its pieces out as arrays."""
    if model.model_type not in (BPE, UNIGRAM):
        raise CatenError(f"SentencePiece model type {model.model_type} is not supported",
                         hint="train with model_type='bpe' or 'unigram'")
    if model.precompiled_charsmap:
        raise CatenError(f"SentencePiece normalization {model.normalizer_name!r} is not supported",
                         hint="train with normalization_rule_name='identity'")
    if model.treat_whitespace_as_suffix or not model.escape_whitespaces:
        raise CatenError("treat_whitespace_as_suffix / escape_whitespaces=false models are not supported")
    types = [p.type for p in model.pieces]
    if UNUSED in types:
        raise CatenError("SentencePiece models with unused pieces are not supported")
    if UNKNOWN not in types:
        raise CatenError("SentencePiece model has no <unk> piece")
    unk_id = types.index(UNKNOWN)
    items = [p.piece.encode("utf-8") for p in model.pieces]
    normal = [t == NORMAL for t in types]
    user = [t == USER_DEFINED for t in types]
    pieces = build_bytes_table(items, [a or b for a, b in zip(normal, user)])
    scores = np.array([p.score for p in model.pieces], dtype=np.float32)
    distinct = np.unique(scores)[::-1]  # descending
    score_rank = np.searchsorted(-distinct, -scores).astype(np.int32)
    trie, node_piece = _trie(items, [a or b for a, b in zip(normal, user)])
    user_trie, user_node_piece = _trie(items, user)
    byte_ids = np.full(256, unk_id, dtype=np.int32)
    surfaces: list[bytes] = []
    strip = np.zeros(len(items), dtype=np.uint8)
    for pid, p in enumerate(model.pieces):
        if p.type == BYTE:
            value = int(p.piece[3:5], 16)
            byte_ids[value] = pid
            surfaces.append(bytes([value]))
            strip[pid] = 4
        elif p.type == CONTROL:
            surfaces.append(b"")
            strip[pid] = 2
        elif p.type == UNKNOWN:
            surfaces.append(model.unk_surface.encode("utf-8"))
            strip[pid] = 3
        else:
            surfaces.append(p.piece.replace(SPACE, " ").encode("utf-8"))
            strip[pid] = 1 if p.piece.startswith(SPACE) else 0
    if model.byte_fallback and (byte_ids == unk_id).any():
        raise CatenError("byte_fallback model lacks some <0xXX> byte pieces")
    normal_scores = scores[np.array(normal)]
    min_score = np.float32(normal_scores.min()) if normal_scores.size else np.float32(0.0)
    unk_score = float(np.float32(min_score - np.float32(10.0)))
    flt_min = np.finfo(np.float32).tiny  # sentencepiece starts max_score_ at FLT_MIN
    max_score = float(max(flt_min, np.float32(normal_scores.max()) if normal_scores.size else flt_min))
    return SPMTables(pieces, scores, score_rank, trie, node_piece, byte_ids,
                     build_bytes_table(surfaces, [False] * len(surfaces)), strip,
                     2 if model.remove_extra_whitespaces else (1 if model.add_dummy_prefix else 0),
                     1 if model.model_type == BPE else 0, unk_id, unk_score, int(model.byte_fallback),
                     int(model.add_dummy_prefix), int(model.remove_extra_whitespaces),
                     np.array(user, dtype=np.uint8), max_score, user_trie, user_node_piece,
                     int(all(SPACE not in p.piece[1:] for p, n, u in zip(model.pieces, normal, user) if n or u)))


def _static_args(t: SPMTables) -> dict[str, object]:
    return {"add_dummy_prefix": t.add_dummy_prefix, "remove_extra": t.remove_extra, "is_bpe": t.is_bpe,
            "vslots": t.pieces.slots, "vmask": t.pieces.mask, "voffsets": t.pieces.offsets,
            "vdata": t.pieces.data, "score_rank": t.score_rank, "tleft": t.trie.left, "tright": t.trie.right,
            "tchild": t.trie.result, "tmask": t.trie.mask, "node_piece": t.node_piece, "scores": t.scores,
            "unk_score": t.unk_score, "unk_id": t.unk_id, "byte_fallback": t.byte_fallback,
            "byte_ids": t.byte_ids, "offsets": t.surface.offsets, "data": t.surface.data,
            "kind": t.decode_kind, "n_vocab": t.pieces.n, "strip_mode": t.strip_mode,
            "is_user": t.is_user, "max_score": t.max_score, "uleft": t.user_trie.left,
            "uright": t.user_trie.right, "uchild": t.user_trie.result, "umask": t.user_trie.mask,
            "unode_piece": t.user_node_piece, "ws_split": t.ws_split}


class SentencePieceTokenizer:
    """SentencePiece BPE/unigram whose encode/decode are actions (interpreted or compiled)."""

    def __init__(self, tables: SPMTables, model: SentencePieceModel, *, compiled: bool = False) -> None:
        self.tables = tables
        self.model = model
        self.compiled = compiled
        self._runner = None
        if compiled:
            from caten_lab.workflow.tokenizers.compiled import compiled_runner

            self._runner = compiled_runner()

    @classmethod
    def from_model_file(cls, path: str | Path, *, compiled: bool = False) -> SentencePieceTokenizer:
        model = load_model(path)
        return cls(build_spm_tables(model), model, compiled=compiled)

    @property
    def n_vocab(self) -> int:
        return self.tables.pieces.n

    def static_args(self) -> dict[str, object]:
        """The tables as the entry actions' parameters (by name): what a library embeds as static data."""
        return _static_args(self.tables)

    @property
    def model_type(self) -> str:
        return "bpe" if self.tables.is_bpe else "unigram"

    def encode(self, text: str) -> list[int]:
        """Piece ids of ``text`` (no <s>/</s> added, like ``SentencePieceProcessor.encode``)."""
        return self.encode_bytes(text_to_utf8(text))

    def encode_bytes(self, data: bytes) -> list[int]:
        """Ids of raw bytes (malformed UTF-8 becomes U+FFFD per byte, as sentencepiece does)."""
        return self.encode_array(np.frombuffer(data, dtype=np.uint8)).tolist()

    def encode_array(self, text: np.ndarray) -> np.ndarray:
        """Piece ids (int32 array) of a uint8 array; allocates the actions' work buffers."""
        n = int(text.shape[0])
        if n == 0:
            return np.zeros(0, dtype=np.int32)
        text = np.ascontiguousarray(text, dtype=np.uint8)
        # normalized length bound: the dummy prefix, and spaces / invalid bytes growing to 3 bytes
        w = n + 2 * (int(np.count_nonzero(text == 32)) + int(np.count_nonzero(text >= 128))) + 4
        norm = np.zeros(w, dtype=np.uint8)
        work = [np.zeros(w, dtype=np.int32) for _ in range(5)]
        frozen = np.zeros(w, dtype=np.uint8)
        segment = w  # symbols merged together: the whole text, or (ws_split) the longest word
        if not self.tables.is_bpe:
            segment = 1  # unigram does not use the heap
        elif self.tables.ws_split:
            spaces = np.flatnonzero(text == 32)
            segment = int(np.diff(np.concatenate(([-1], spaces, [n]))).max()) + 4
        heap = np.zeros(6 * segment, dtype=np.int64)  # (key, payload) pairs, <= 3 entries per symbol
        best = np.zeros(w, dtype=np.float32)
        out = np.zeros(w, dtype=np.int32)
        sym_start, sym_len, nxt, prv, ids = work
        args = entry_args("spm_encode", {**self.static_args(), "text": text, "n": n, "norm": norm,
                                         "sym_start": sym_start, "sym_len": sym_len, "nxt": nxt, "prv": prv,
                                         "heap": heap, "best_score": best, "ids": ids, "frozen": frozen,
                                         "out": out})
        count = self._runner("spm_encode", args) if self._runner else A.spm_encode(*args)
        return out[: int(count)]

    def decode_bytes(self, ids: list[int] | np.ndarray) -> bytes:
        ids32 = np.asarray(check_token_ids(ids, self.n_vocab, "decode"), dtype=np.int32)
        offsets = self.tables.surface.offsets
        total = int((offsets[ids32 + 1] - offsets[ids32]).sum()) if ids32.size else 0
        out = np.zeros(max(total, 1), dtype=np.uint8)
        buffers = {"ids": ids32, "count": int(ids32.size), "out": out}
        args = entry_args("spm_decode", {**self.static_args(), **buffers})
        count = self._runner("spm_decode", args) if self._runner else A.spm_decode(*args)
        return out[: int(count)].tobytes()

    def decode(self, ids: list[int] | np.ndarray) -> str:
        """Text of the ids; each byte of an invalid UTF-8 sequence becomes U+FFFD (as sentencepiece)."""
        return self.decode_bytes(ids).decode("utf-8", errors=PER_BYTE)

    def id_to_piece(self, pid: int) -> str:
        return self.model.pieces[pid].piece
