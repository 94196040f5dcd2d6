"""Writes the loader test corpus: small valid and corrupt weight, vocabulary and config files.

Run from the repository root: ``python tests/corpus/make_corpus.py`` (the files are committed; the
test ``tests/workflow/test_loader_agreement.py`` checks they are what this script writes). A file
named ``<RULE>-<what>.<ext>`` must be rejected under that rule of ``caten_lab/formats/rules.h`` by the
Python loader and, for safetensors and vocabularies, by the exported C loader; ``valid-<what>`` files
must load. The fuzzers (tests/workflow/test_fuzz_loaders.py) start from these files.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

import numpy as np
from gguf_cases import gguf_header_cases, gguf_rebuild

HERE = Path(__file__).resolve().parent
# the model the safetensors corpus is written for (tiny, so every file is a few KB)
CONFIG = {"vocab_size": 16, "n_positions": 8, "n_embd": 4, "n_layer": 1, "n_head": 2, "model_type": "gpt2",
          "bos_token_id": 0, "eos_token_id": 0}
N_VOCAB = 257  # the vocabulary corpus: 256 byte tokens + <|endoftext|>


def expected() -> dict[str, tuple[int, ...]]:
    from caten_lab.models.gpt2_weights import config_from_dict, expected_shapes

    return expected_shapes(config_from_dict(dict(CONFIG)))


def _tensors(dtype: str = "F32") -> list[tuple[str, str, list[int], bytes]]:
    rng = np.random.default_rng(0)
    out = []
    for name, shape in expected().items():
        v = rng.standard_normal(shape).astype(np.float32)
        data = v.astype(np.float16).tobytes() if dtype == "F16" else \
            (v.view(np.uint32) >> 16).astype(np.uint16).tobytes() if dtype == "BF16" else v.tobytes()
        out.append((name, dtype, list(shape), data))
    return out


def _entry(dtype: str, shape: object, begin: object, end: object) -> str:
    return f'{{"dtype": {json.dumps(dtype)}, "shape": {json.dumps(shape)}, "data_offsets": [{begin}, {end}]}}'


def st_file(tensors: list[tuple[str, str, list[int], bytes]], *, edit=None, raw_header: str | None = None,
            metadata: str | None = None, cut: int = 0, length: int | None = None) -> bytes:
    """A safetensors file; ``edit(i, name, entry_text) -> (name, entry_text)`` rewrites entries as text."""
    parts, off = [], 0
    if metadata is not None:
        parts.append(f'"__metadata__": {metadata}')
    for i, (name, dtype, shape, data) in enumerate(tensors):
        key, text = json.dumps(name), _entry(dtype, shape, off, off + len(data))
        if edit is not None:
            key, text = edit(i, key, text)
        if key is not None:
            parts.append(f"{key}: {text}")
        off += len(data)
    header = (raw_header if raw_header is not None else "{" + ", ".join(parts) + "}").encode()
    header += b" " * (-len(header) % 8)
    body = b"".join(t[3] for t in tensors)
    out = struct.pack("<Q", len(header) if length is None else length) + header + body
    return out[: len(out) - cut] if cut else out


def _header_text(file: bytes) -> str:
    n = int.from_bytes(file[:8], "little")
    return file[8 : 8 + n].decode().rstrip()


def _at(index: int, fn):  # noqa: ANN001, ANN202 - an edit of entry ``index`` only
    return lambda i, k, t: fn(k, t) if i == index else (k, t)


def safetensors_cases() -> dict[str, bytes]:
    T = _tensors()
    names = [t[0] for t in T]
    last = len(T) - 1
    wte = T[0]
    tied = [*T, ("lm_head.weight", "F32", wte[2], wte[3])]
    c: dict[str, bytes] = {
        "valid-f32": st_file(T),
        "valid-f16": st_file(_tensors("F16")),
        "valid-bf16": st_file(_tensors("BF16")),
        "valid-tied-lm-head": st_file(tied),
        "valid-masks-and-metadata": st_file([*T, ("transformer.h.0.attn.bias", "BOOL", [1, 1, 2, 2], bytes(4))],
                                            metadata='{"format": "pt"}'),
        "valid-no-transformer-prefix": st_file([(n.removeprefix("transformer."), d, s, b) for n, d, s, b in T]),
        "valid-escaped-name": st_file(T, edit=_at(1, lambda k, t: (k.replace("wpe", "\\u0077pe"), t))),
        "HEADER-too-short": b"\x05\x00\x00",
        "HEADER-zero-length": st_file(T, length=0),
        "HEADER-length-past-end": st_file(T, length=1 << 20),
        "HEADER-length-over-cap": st_file(T, length=(100 << 20) + 8),
        "JSON-garbage": st_file(T, raw_header="{not json at all}"),
        "JSON-trailing-data": st_file(T, raw_header=_header_text(st_file(T)) + " x"),
        "JSON-top-level-array": st_file(T, raw_header="[1, 2]"),
        "JSON-nan": st_file(T, edit=_at(0, lambda k, t: (k, t.replace("[0, ", "[NaN, ")))),
        "JSON-leading-zero": st_file(T, edit=_at(1, lambda k, t: (k, t.replace("[", "[0", 2)))),
        "JSON-trailing-comma": st_file(T, edit=_at(last, lambda k, t: (k, t[:-1] + ", }"))),
        "JSON-too-deep": st_file(T, metadata="[" * 70 + "]" * 70),
        "DUPLICATE_KEY-tensor-name": st_file(T, edit=_at(1, lambda k, t: (json.dumps(names[0]), t))),
        "DUPLICATE_KEY-escaped-name": st_file(T, edit=_at(1, lambda k, t: (json.dumps(names[0]).replace("w", "\\u0077"), t))),
        "DUPLICATE_KEY-dtype-field": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('{"dtype": "F32"', '{"dtype": "I32", "dtype": "F32"')))),
        "DUPLICATE_KEY-metadata": st_file(T, metadata='{"a": "1", "a": "2"}'),
        "ENTRY-missing-offsets": st_file(T, edit=_at(3, lambda k, t: (k, t.split(', "data_offsets"')[0] + "}"))),
        "ENTRY-extra-field": st_file(T, edit=_at(3, lambda k, t: (k, t[:-1] + ', "note": 1}'))),
        "ENTRY-dtype-not-string": st_file(T, edit=_at(3, lambda k, t: (k, t.replace('"F32"', "32")))),
        "ENTRY-shape-not-list": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"shape": [4]', '"shape": 4')))),
        "ENTRY-nine-dims": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"shape": [4]', '"shape": [1, 1, 1, 1, 1, 1, 1, 1, 4]')))),
        "ENTRY-three-offsets": st_file(T, edit=_at(2, lambda k, t: (k, t.replace("]}", ", 0]}")))),
        "ENTRY-not-an-object": st_file(T, edit=_at(2, lambda k, t: (k, "[1]"))),
        "ENTRY-metadata-not-strings": st_file(T, metadata='{"a": 1}'),
        "DTYPE-unknown": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"F32"', '"F8"')))),
        "DTYPE-lowercase": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"F32"', '"f32"')))),
        "DTYPE-f32-relabelled-i32": st_file(T, edit=_at(0, lambda k, t: (k, t.replace('"F32"', '"I32"')))),
        "INTEGER-float-offsets": st_file(T, edit=_at(1, lambda k, t: (k, t.split('"data_offsets"')[0] + '"data_offsets": [256.0, 384.5]}'))),
        "INTEGER-bool-dim": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"shape": [4]', '"shape": [true]')))),
        "INTEGER-negative-offset": st_file(T, edit=_at(0, lambda k, t: (k, t.replace("[0, ", "[-0, ").replace("[-0, ", "[-8, ")))),
        "INTEGER-string-dim": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"shape": [4]', '"shape": ["4"]')))),
        "INTEGER-huge-offset": st_file(T, edit=_at(last, lambda k, t: (k, t.split('"data_offsets"')[0] + f'"data_offsets": [{(1 << 62) + 1}, {(1 << 62) + 17}]}}'))),
        "INTEGER-offset-wrapping-to-zero": st_file(T, edit=_at(0, lambda k, t: (k, t.replace("[0, ", f"[{1 << 64}, ")))),
        "INTEGER-exponent": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"shape": [4]', '"shape": [4e0]')))),
        "NBYTES-f32-relabelled-f16": st_file(T, edit=_at(0, lambda k, t: (k, t.replace('"F32"', '"F16"')))),
        "NBYTES-overflowing-dims": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"shape": [4]', f'"shape": [{1 << 40}, {1 << 40}]')))),
        "BOUNDS-truncated-data": st_file(T, cut=40),
        "BOUNDS-end-before-begin": st_file(T, edit=_at(1, lambda k, t: (k, t.split('"data_offsets"')[0] + '"data_offsets": [200, 72]}'))),
        "OVERLAP-aliased-tensors": st_file(T, edit=_at(3, lambda k, t: (k, t.split('"data_offsets"')[0] + '"data_offsets": [288, 304]}'))),
        "NAMES-missing-tensor": st_file(T, edit=_at(4, lambda k, t: (None, t))),
        "NAMES-unexpected-tensor": st_file([*T, ("transformer.extra", "F32", [1], bytes(4))]),
        "NAMES-named-twice": st_file([*T, ("wte.weight", "F32", wte[2], wte[3])]),
        "NAMES-model-prefix": st_file([("model." + n, d, s, b) for n, d, s, b in T]),
        "NAMES-mask-of-missing-layer": st_file([*T, ("transformer.h.5.attn.bias", "BOOL", [1], bytes(1))]),
        "SHAPE-ln-f-reshaped": st_file(T, edit=_at(2, lambda k, t: (k, t.replace('"shape": [4]', '"shape": [2, 2]')))),
        "SHAPE-wte-transposed": st_file(T, edit=_at(0, lambda k, t: (k, t.replace('"shape": [16, 4]', '"shape": [4, 16]')))),
        "TIED-lm-head-wrong-shape": st_file([*T, ("lm_head.weight", "F32", [4, 16], wte[3])]),
        "TIED-lm-head-other-values": st_file([*T, ("lm_head.weight", "F32", wte[2], wte[3][4:] + wte[3][:4])]),
        "TIED-lm-head-other-dtype": st_file([*T, ("lm_head.weight", "F16", wte[2], wte[3][: len(wte[3]) // 2])]),
    }
    return c


def _byte_vocab() -> dict[str, int]:
    from caten_lab.formats.vocab_check import byte_alphabet

    chars = byte_alphabet()
    return {**{chars[b]: b for b in range(256)}, "<|endoftext|>": 256}


def _vocab_text(items: list[tuple[str, str]]) -> bytes:
    return ("{" + ", ".join(f"{k}: {v}" for k, v in items) + "}").encode("utf-8")


def vocab_cases() -> dict[str, bytes]:
    base = [(json.dumps(k, ensure_ascii=False), str(v)) for k, v in _byte_vocab().items()]

    def edit(i: int, key: str | None = None, value: str | None = None) -> bytes:
        items = list(base)
        items[i] = (key if key is not None else items[i][0], value if value is not None else items[i][1])
        return _vocab_text(items)

    return {
        "valid-byte-vocab": _vocab_text(base),
        "valid-ascii-escapes": json.dumps(_byte_vocab()).encode(),
        "JSON-garbage": b"{ not json",
        "JSON-invalid-utf8": _vocab_text(base).replace(b'"a"', b'"\xff"'),
        "JSON-trailing-data": _vocab_text(base) + b" 1",
        "JSON-nan-id": edit(5, value="NaN"),
        "DUPLICATE_KEY-token-twice": _vocab_text([*base[:-1], (base[65][0], "256")]),
        "DUPLICATE_KEY-escaped-token": _vocab_text([*base[:-1], ('"\\u0061"', "256")]),
        "VOCAB_ID-negative": edit(256, value="-1"),
        "VOCAB_ID-duplicate-id": edit(256, value="65"),
        "VOCAB_ID-out-of-range": edit(256, value="300"),
        "VOCAB_ID-float": edit(3, value="3.0"),
        "VOCAB_ID-wrapping-to-256": edit(256, value=str((1 << 64) + 256)),
        "VOCAB_ID-bool": edit(1, value="true"),
        "VOCAB_ID-string": edit(3, value='"3"'),
        "VOCAB_ID-too-few-tokens": _vocab_text(base[:-1]),
        "VOCAB_TOKEN-outside-alphabet": edit(256, key='"a b"'),
        "VOCAB_TOKEN-missing-byte": edit(97, key='"aa"'),
    }


def merges_cases() -> dict[str, bytes]:
    return {
        "valid-merges": b"#version: 0.2\n",
        "MERGES-three-parts": b"#version: 0.2\na b c\n",
        "MERGES-unknown-token": b"#version: 0.2\na b\n",
        "MERGES-invalid-utf8": b"#version: 0.2\n\xff \xfe\n",
    }


def config_cases() -> dict[str, bytes]:
    def cfg(**kw: object) -> bytes:
        return json.dumps({**CONFIG, **kw}).encode()

    return {
        "valid-config": cfg(),
        "CONFIG-inverse-layer-idx": cfg(scale_attn_by_inverse_layer_idx=True),
        "CONFIG-no-attn-scaling": cfg(scale_attn_weights=False),
        "CONFIG-reorder-and-upcast": cfg(reorder_and_upcast_attn=True),
        "CONFIG-relu": cfg(activation_function="relu"),
        "CONFIG-untied": cfg(tie_word_embeddings=False),
        "CONFIG-cross-attention": cfg(add_cross_attention=True),
        "CONFIG-bool-size": cfg(n_layer=True),
        "CONFIG-heads-do-not-divide": cfg(n_head=3),
        "CONFIG-huge-n-layer": cfg(n_layer=1 << 31),
        "CONFIG-eos-out-of-range": cfg(eos_token_id=16),
        "DUPLICATE_KEY-config": cfg()[:-1] + b', "n_embd": 8}',
    }


def _gguf(path: Path, tensors: dict[str, np.ndarray]) -> None:
    import gguf

    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_context_length(CONFIG["n_positions"])
    w.add_embedding_length(CONFIG["n_embd"])
    w.add_block_count(CONFIG["n_layer"])
    w.add_head_count(CONFIG["n_head"])
    w.add_layer_norm_eps(1e-5)
    for name, a in tensors.items():
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def gguf_cases(tmp: Path) -> dict[str, bytes]:
    import gguf

    from caten_lab.models.gpt2_weights import GPT2Weights, config_from_dict, read_safetensors, save_gguf

    st = tmp / "m.safetensors"
    st.write_bytes(st_file(_tensors()))
    weights = GPT2Weights(config_from_dict(dict(CONFIG)), read_safetensors(st), str(st))
    out: dict[str, bytes] = {}
    save_gguf(weights, tmp / "valid.gguf", "f32")
    out["valid-f32"] = (tmp / "valid.gguf").read_bytes()

    def patched(name: str, fn, tensors: dict[str, np.ndarray] | None = None) -> bytes:  # noqa: ANN001
        p = tmp / f"{name}.gguf"
        if tensors is None:
            p.write_bytes(out["valid-f32"])
        else:
            _gguf(p, tensors)
        r = gguf.GGUFReader(str(p), "r+")
        fn(r)
        del r
        return p.read_bytes()

    def shift(r) -> None:  # noqa: ANN001
        r.tensors[1].field.parts[-1][0] += 4

    def relabel(r) -> None:  # noqa: ANN001
        r.tensors[0].field.parts[4][0] = int(gguf.GGMLQuantizationType.Q4_0)

    def overlap(r) -> None:  # noqa: ANN001
        r.tensors[1].field.parts[-1][0] = r.tensors[0].field.parts[-1][0]

    two = {"token_embd.weight": np.ones((2, 32), np.float32), "output_norm.weight": np.ones(32, np.float32)}
    out["ALIGNMENT-misaligned-offset"] = patched("misaligned", shift)
    out["NBYTES-f32-relabelled-q4_0"] = patched("relabel", relabel, two)
    out["OVERLAP-shared-offset"] = patched("overlap", overlap)
    out["DTYPE-q4_0-row-not-blocks"] = patched("rowblocks", relabel)
    out["BOUNDS-truncated"] = out["valid-f32"][:-24]
    valid = out["valid-f32"]
    at = valid.index(b"gpt2", valid.index(b"general.architecture") + 20)
    out["HEADER-architecture-not-utf8"] = valid[:at] + b"\xc0" + valid[at + 1 :]  # found by atheris
    at = valid.index(b"gpt2.block_count") + len(b"gpt2.block_count") + 4  # the uint32 after its type
    out["CONFIG-huge-block-count"] = valid[:at] + struct.pack("<I", 1 << 31) + valid[at + 4 :]  # found by atheris
    assert gguf_rebuild(valid) == valid  # the raw encoder writes what the gguf package writes
    out.update(gguf_header_cases(valid))
    return out


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        out.append((v & 0x7F) | (0x80 if v > 0x7F else 0))
        v >>= 7
        if not v:
            return bytes(out)


def _fields(buf: bytes) -> list[tuple[int, bytes, bytes]]:
    """(field number, raw bytes of the field, payload of a length-delimited field) of a protobuf message."""
    from caten_lab.workflow.tokenizers.spm_model import _varint as read_varint  # the loader's own decoder

    out, pos = [], 0
    while pos < len(buf):
        start = pos
        key, pos = read_varint(buf, pos)
        wire, payload = key & 7, b""
        if wire == 0:
            _, pos = read_varint(buf, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            size, pos = read_varint(buf, pos)
            payload, pos = buf[pos : pos + size], pos + size
        out.append((key >> 3, buf[start:pos], payload))
    return out


def _with_piece(model: bytes, index: int, piece: bytes) -> bytes:
    """The ModelProto with the string of piece ``index`` replaced."""
    out, k = [], 0
    for num, raw, payload in _fields(model):
        if num == 1:  # a SentencePiece message: field 1 is its string
            if k == index:
                msg = b"".join(b"\x0a" + _varint(len(piece)) + piece if n == 1 else r for n, r, _ in _fields(payload))
                raw = b"\x0a" + _varint(len(msg)) + msg
            k += 1
        out.append(raw)
    return b"".join(out)


def spm_cases() -> dict[str, bytes]:
    """From valid-bpe.model (a 40-piece BPE model sentencepiece trained once, identity normalization)."""
    model = (HERE / "spm" / "valid-bpe.model").read_bytes()
    ninth = [p for n, _, p in _fields(model) if n == 1][9]
    piece9 = next(p for n, _, p in _fields(ninth) if n == 1)
    return {
        "valid-bpe": model,
        "DUPLICATE_KEY-piece-twice": _with_piece(model, 10, piece9),
        "VOCAB_TOKEN-empty-piece": _with_piece(model, 10, b""),
    }


def all_cases(tmp: Path) -> dict[str, dict[str, bytes]]:
    return {"safetensors": safetensors_cases(), "vocab": vocab_cases(), "merges": merges_cases(),
            "config": config_cases(), "gguf": gguf_cases(tmp), "spm": spm_cases()}


EXT = {"safetensors": ".safetensors", "vocab": ".json", "merges": ".txt", "config": ".json", "gguf": ".gguf",
       "spm": ".model"}


def main() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for kind, cases in all_cases(Path(tmp)).items():
            d = HERE / kind
            d.mkdir(exist_ok=True)
            for old in d.iterdir():
                old.unlink()
            for name, data in cases.items():
                (d / (name + EXT[kind])).write_bytes(data)
            print(f"{kind}: {len(cases)} files", file=sys.stderr)


if __name__ == "__main__":
    main()
