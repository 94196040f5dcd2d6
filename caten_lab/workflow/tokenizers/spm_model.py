"""Read a SentencePiece ``.model`` file (a ModelProto) without the protobuf package.

Only the fields the encoder and decoder need are decoded; the wire format is parsed by hand
(varints, fixed32 floats, length-delimited submessages).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

from caten_lab.errors import CatenError
from caten_lab.formats.rules import FormatError, VocabError

NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
UNIGRAM, BPE, WORD, CHAR = 1, 2, 3, 4


@dataclass
class Piece:
    piece: str
    score: float = 0.0
    type: int = NORMAL


@dataclass
class SentencePieceModel:
    """The decoded parts of a ModelProto (defaults are the proto defaults)."""

    pieces: list[Piece] = field(default_factory=list)
    model_type: int = UNIGRAM
    byte_fallback: bool = False
    treat_whitespace_as_suffix: bool = False
    unk_surface: str = " \u2047 "
    normalizer_name: str = ""
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True
    trainer_fields: dict[int, object] = field(default_factory=dict)


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf):
            raise CatenError("truncated varint in SentencePiece model")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) triples of one message."""
    out = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise CatenError(f"unsupported protobuf wire type {wire} (field {num}) in SentencePiece model")
        if pos > len(buf):
            raise CatenError("truncated SentencePiece model file")
        out.append((num, wire, value))
    return out


def parse_model(data: bytes) -> SentencePieceModel:
    """Decode a serialized ModelProto; a malformed one is a CatenError (never another exception)."""
    try:
        return _parse_model(data)
    except (UnicodeDecodeError, struct.error, IndexError, ValueError) as err:
        raise CatenError(f"not a valid SentencePiece model: {err}",
                         hint="expected a SentencePiece .model (ModelProto) file") from None


def _parse_model(data: bytes) -> SentencePieceModel:
    model = SentencePieceModel()
    for num, wire, value in _fields(data):
        if num == 1 and wire == 2:
            piece = Piece("")
            for pn, pw, pv in _fields(value):  # type: ignore[arg-type]
                if pn == 1 and pw == 2:
                    piece.piece = pv.decode("utf-8")  # type: ignore[union-attr]
                elif pn == 2 and pw == 5:
                    piece.score = struct.unpack("<f", pv)[0]  # type: ignore[arg-type]
                elif pn == 3 and pw == 0:
                    piece.type = int(pv)  # type: ignore[arg-type]
            model.pieces.append(piece)
        elif num == 2 and wire == 2:
            for tn, tw, tv in _fields(value):  # type: ignore[arg-type]
                model.trainer_fields[tn] = tv
                if tn == 3 and tw == 0:
                    model.model_type = int(tv)  # type: ignore[arg-type]
                elif tn == 35 and tw == 0:
                    model.byte_fallback = bool(tv)
                elif tn == 24 and tw == 0:
                    model.treat_whitespace_as_suffix = bool(tv)
                elif tn == 44 and tw == 2:
                    model.unk_surface = tv.decode("utf-8")  # type: ignore[union-attr]
        elif num == 3 and wire == 2:
            for nn, nw, nv in _fields(value):  # type: ignore[arg-type]
                if nn == 1 and nw == 2:
                    model.normalizer_name = nv.decode("utf-8")  # type: ignore[union-attr]
                elif nn == 2 and nw == 2:
                    model.precompiled_charsmap = bytes(nv)  # type: ignore[arg-type]
                elif nn == 3 and nw == 0:
                    model.add_dummy_prefix = bool(nv)
                elif nn == 4 and nw == 0:
                    model.remove_extra_whitespaces = bool(nv)
                elif nn == 5 and nw == 0:
                    model.escape_whitespaces = bool(nv)
    if not model.pieces:
        raise CatenError("SentencePiece model has no pieces", hint="is this a .model file?")
    check_pieces(model.pieces, "SentencePiece model")
    return model


def check_pieces(pieces: list[Piece], where: str) -> None:
    """Pieces are non-empty and each listed once, as sentencepiece requires (rules VOCAB_TOKEN,
    DUPLICATE_KEY): a repeated piece would silently tokenize differently from sentencepiece."""
    seen: dict[str, int] = {}
    for i, p in enumerate(pieces):
        if not p.piece:
            raise VocabError(f"{where}: piece {i} is empty", rule="VOCAB_TOKEN",
                             hint="sentencepiece refuses such a model ('piece must not be empty')")
        if p.piece in seen:
            raise VocabError(f"{where}: piece {p.piece[:80]!r} is both id {seen[p.piece]} and id {i}",
                             rule="DUPLICATE_KEY", hint="sentencepiece refuses such a model ('already defined')")
        seen[p.piece] = i


def load_model(path: str | Path) -> SentencePieceModel:
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CatenError(f"cannot read SentencePiece model {path}: {err}") from err
    try:
        return parse_model(data)
    except FormatError as err:
        raise VocabError(f"{path}: {err.reason}", rule=err.rule, hint=err.hint) from err
    except CatenError as err:
        raise CatenError(f"{path}: {err.message}",
                         hint="expected a SentencePiece .model (ModelProto) file") from err
    except (UnicodeDecodeError, struct.error, IndexError) as err:
        raise CatenError(f"{path} is not a valid SentencePiece model: {err}") from err
