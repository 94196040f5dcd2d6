"""GGUF files the gguf package's writer cannot make: a raw GGUF v3 encoder and the header defects of
the corpus (rules HEADER, DUPLICATE_KEY, DTYPE of caten_lab/formats/gguf_header.py); used by
make_corpus.py (run from the repository root with ``PYTHONPATH=.``) and by tests that need a GGUF
file with extra metadata.
"""

from __future__ import annotations

import struct

_SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q", 11: "q", 12: "d"}


def _gs(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _gval(vtype: int, value: object) -> bytes:
    if vtype == 8:
        return _gs(value)  # type: ignore[arg-type]
    if vtype == 9:
        itype, items = value  # type: ignore[misc]
        return struct.pack("<IQ", itype, len(items)) + b"".join(_gval(itype, v) for v in items)
    return struct.pack("<" + _SCALAR[vtype], value)


def gguf_kv(key: str | bytes, vtype: int, value: object = None, raw: bytes | None = None) -> bytes:
    return _gs(key) + struct.pack("<I", vtype) + (raw if raw is not None else _gval(vtype, value))


def _ginfo(name: str | bytes, dims: tuple[int, ...], type_id: int, offset: int) -> bytes:
    return _gs(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, type_id, offset)


def gguf_rebuild(valid: bytes, *, extra: list[bytes] = (), first: list[bytes] = (), infos=None, version: int = 3,  # noqa: ANN001
                 counts: tuple[int, int] | None = None, magic: bytes = b"GGUF") -> bytes:
    """``valid`` re-encoded: its key/values (``first`` before them, ``extra`` after), its tensor
    infos (or ``infos(list of (name, dims, type, offset)) -> list of bytes``), the data section after
    32-byte padding."""
    from caten_lab.formats.gguf_header import read_gguf_header

    h = read_gguf_header("valid.gguf", valid)
    kvs = [*first, *(gguf_kv(k, t, v) for k, (t, v) in h.metadata.items()), *extra]
    rows = [(t.name, t.dims, t.type_id, t.offset) for t in h.tensors]
    tens = infos(rows) if infos is not None else [_ginfo(*r) for r in rows]
    n_t, n_kv = counts if counts is not None else (len(tens), len(kvs))
    head = magic + struct.pack("<IQQ", version, n_t, n_kv) + b"".join(kvs) + b"".join(tens)
    return head + bytes(-len(head) % 32) + valid[h.data_start:]


def gguf_header_cases(valid: bytes) -> dict[str, bytes]:
    """Header defects (rules HEADER, DUPLICATE_KEY, DTYPE of formats/gguf_header.py), each in an
    otherwise valid GPT-2 file, and a valid file with metadata of every value type."""
    tokens = ["<|endoftext|>", "\u0120the", "caf\u00e9", "\U0001f600", ""]
    arrays = [
        gguf_kv("tokenizer.ggml.tokens", 9, (8, tokens)),
        gguf_kv("tokenizer.ggml.token_type", 9, (5, [3, 1, 1, 1, -1])),
        gguf_kv("tokenizer.ggml.scores", 9, (6, [0.0, -1.5, -2.25, 1e30, -0.0])),
        gguf_kv("tokenizer.ggml.merges", 9, (8, ["\u0120 t", "h e"])),
        gguf_kv("tokenizer.ggml.add_bos_token", 7, True),
        gguf_kv("test.u64", 10, (1 << 63) + 5), gguf_kv("test.i64", 11, -(1 << 40)), gguf_kv("test.f64", 12, 0.1),
        gguf_kv("test.u16", 2, 65535), gguf_kv("test.i16", 3, -2), gguf_kv("test.i8", 1, -128), gguf_kv("test.u8", 0, 255),
        gguf_kv("test.i32", 5, -7), gguf_kv("test.empty", 9, (4, [])), gguf_kv("test.bools", 9, (7, [0, 1, 1])),
        gguf_kv("test.i8s", 9, (1, [-1, 2])), gguf_kv("test.u64s", 9, (10, [1 << 40, 3])),
        gguf_kv("test.f64s", 9, (12, [2.5, -1.0])), gguf_kv("", 8, "an empty key"),
    ]
    kv_only = b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + gguf_kv("general.architecture", 8, "gpt2") + gguf_kv("gpt2.block_count", 4, 1)
    info_only = b"GGUF" + struct.pack("<IQQ", 3, 1, 0) + _ginfo("token_embd.weight", (4, 16, 1, 1), 0, 0)

    def swap_first_two(rows):  # noqa: ANN001, ANN202
        return [_ginfo(*r) for r in rows[1:2]] + [_ginfo(*r) for r in rows[:1]] + [_ginfo(*r) for r in rows[2:]]

    def renamed(name: bytes, dims=None, type_id=None, offset=None):  # noqa: ANN001, ANN202 - tensor 1 changed
        def fn(rows):  # noqa: ANN001, ANN202
            out = []
            for i, (n, d, t, o) in enumerate(rows):
                if i == 1:
                    n, d = name if name else n, dims if dims is not None else d
                    t, o = type_id if type_id is not None else t, offset if offset is not None else o
                out.append(_ginfo(n, d, t, o))
            return out
        return fn

    return {
        "valid-every-value-type": gguf_rebuild(valid, extra=arrays),
        "valid-tensor-infos-out-of-order": gguf_rebuild(valid, infos=swap_first_two),
        "HEADER-bad-magic": gguf_rebuild(valid, magic=b"GGUG"),
        "HEADER-version-2": gguf_rebuild(valid, version=2),
        "HEADER-big-endian": gguf_rebuild(valid, version=3 << 24),
        "HEADER-too-short": valid[:20],
        "HEADER-huge-key-count": gguf_rebuild(valid, counts=(9, 1 << 40)),
        "HEADER-truncated-metadata": kv_only[: len(kv_only) - 2],  # cut in the last value
        "HEADER-string-length-past-end": gguf_rebuild(valid, extra=[gguf_kv("test.s", 8, raw=struct.pack("<Q", 1 << 40) + b"abc")]),
        "HEADER-key-length-past-end": gguf_rebuild(valid, first=[struct.pack("<Q", (1 << 64) - 1) + b"k"]),
        "HEADER-unknown-value-type": gguf_rebuild(valid, extra=[gguf_kv("test.x", 13, raw=b"\0" * 8)]),
        "HEADER-huge-array-count": gguf_rebuild(valid, extra=[gguf_kv("test.a", 9, raw=struct.pack("<IQ", 0, 1 << 60))]),
        "HEADER-huge-string-array-count": gguf_rebuild(valid, extra=[gguf_kv("test.a", 9, raw=struct.pack("<IQ", 8, 1 << 40))]),
        "HEADER-nested-array": gguf_rebuild(valid, extra=[gguf_kv("test.a", 9, raw=struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 1) + b"\1")]),
        "HEADER-unknown-item-type": gguf_rebuild(valid, extra=[gguf_kv("test.a", 9, raw=struct.pack("<IQ", 99, 1) + b"\1")]),
        "HEADER-bool-of-value-2": gguf_rebuild(valid, extra=[gguf_kv("test.b", 7, raw=b"\2")]),
        "HEADER-bool-item-of-value-7": gguf_rebuild(valid, extra=[gguf_kv("test.b", 9, (7, [1, 7]))]),
        "HEADER-string-item-not-utf8": gguf_rebuild(valid, extra=[gguf_kv("tokenizer.ggml.tokens", 9, (8, [b"ok", b"\xed\xa0\x80"]))]),
        "HEADER-key-not-utf8": gguf_rebuild(valid, extra=[gguf_kv(b"test.\xff", 4, 1)]),
        "HEADER-tensor-name-not-utf8": gguf_rebuild(valid, infos=renamed(b"\xc3(")),
        "HEADER-five-dims": gguf_rebuild(valid, infos=renamed(b"", dims=(4, 8, 1, 1, 1))),
        "HEADER-zero-dims": gguf_rebuild(valid, infos=renamed(b"", dims=())),
        "HEADER-huge-element-count": gguf_rebuild(valid, infos=renamed(b"", dims=(1 << 31, 1 << 31))),
        "HEADER-alignment-not-power-of-two": gguf_rebuild(valid, extra=[gguf_kv("general.alignment", 4, 48)]),
        "HEADER-alignment-not-uint32": gguf_rebuild(valid, extra=[gguf_kv("general.alignment", 10, 32)]),
        "HEADER-truncated-tensor-info": info_only[:64],  # cut in the dims
        "DUPLICATE_KEY-metadata-key": gguf_rebuild(valid, extra=[gguf_kv("gpt2.block_count", 4, 1)]),
        "DUPLICATE_KEY-tensor-name": gguf_rebuild(valid, infos=renamed(b"token_embd.weight")),
        "DTYPE-unknown-tensor-type": gguf_rebuild(valid, infos=renamed(b"", type_id=4)),
        "BOUNDS-offset-past-end": gguf_rebuild(valid, infos=renamed(b"", offset=1 << 62)),
        "NBYTES-trailing-bytes": valid + bytes(64),
    }
