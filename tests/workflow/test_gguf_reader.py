"""The exported library's GGUF reader (caten_lab/workflow/c/gguf_reader.c, through the tiny driver
tests/corpus/gguf_driver.c) against Python: the strict walk of caten_lab/formats/gguf_header.py for
the verdict on every file of tests/corpus/gguf/, and the ``gguf`` package's own reader for what a
valid file holds (every tensor's offset, type, shape and bytes; every metadata value), on the corpus
and on the real SmolLM2 file.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest
from loader_verdicts import C_DIR, CORPUS, RULES_DIR, rule_of

from caten_lab.formats.gguf_file import read_gguf
from caten_lab.formats.gguf_header import VALUE_TYPES, mapped, read_gguf_header
from caten_lab.formats.rules import RULE_BY_ID, FormatError

GGUF_FILES = sorted((CORPUS / "gguf").glob("*.gguf"))
MODEL_RULES = {"CONFIG", "NAMES", "SHAPE", "TIED"}  # the GPT-2 loader's rules: not the reader's job


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> ctypes.CDLL:
    so = tmp_path_factory.mktemp("gguf") / "gguf_driver.so"
    cc = shutil.which("cc") or "cc"
    r = subprocess.run(
        [
            cc,
            "-O1",
            "-g",
            "-Wall",
            "-Werror",
            "-Wno-unused-function",
            "-shared",
            "-fPIC",
            f"-I{C_DIR}",
            f"-I{RULES_DIR}",
            "-o",
            str(so),
            str(CORPUS / "gguf_driver.c"),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lib = ctypes.CDLL(str(so))
    lib.drv_msg.restype = ctypes.c_char_p
    lib.drv_ggml_name.restype = ctypes.c_char_p
    for fn in ("drv_n_tensors", "drv_n_kv", "drv_tensor_index", "drv_array_strs"):
        getattr(lib, fn).restype = ctypes.c_int64
    for fn in ("drv_data_start", "drv_alignment"):
        getattr(lib, fn).restype = ctypes.c_uint64
    lib.drv_tensor_index.argtypes = [ctypes.c_char_p]
    lib.drv_array_strs.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int64]
    yield lib
    lib.drv_gguf_close()


def c_verdict(lib: ctypes.CDLL, path: Path) -> str | None:
    v = lib.drv_gguf_open(str(path).encode())
    if v == 0:
        return None
    if v < 0:
        return f"error-code-{-v}: {lib.drv_msg().decode(errors='replace')}"
    return RULE_BY_ID[v].name


def py_verdict(path: Path) -> str | None:
    try:
        read_gguf_header(path)
    except FormatError as e:
        return e.rule
    return None


def test_type_table_is_the_packages(lib) -> None:
    block, nbytes = ctypes.c_int64(), ctypes.c_int64()
    for type_id in range(64):
        known = lib.drv_ggml_block(type_id, ctypes.byref(block), ctypes.byref(nbytes))
        try:
            t = gguf.GGMLQuantizationType(type_id)
        except ValueError:
            assert not known, type_id
            continue
        assert known and (block.value, nbytes.value) == gguf.GGML_QUANT_SIZES[t], t.name
        assert lib.drv_ggml_name(type_id).decode() == t.name
    assert {k: v[0] for k, v in VALUE_TYPES.items()} == {int(t): t.name for t in gguf.GGUFValueType}


@pytest.mark.parametrize("path", GGUF_FILES, ids=lambda p: p.stem)
def test_same_verdict(lib, path: Path) -> None:
    want = rule_of(path)
    want = None if want in MODEL_RULES else want
    assert (py_verdict(path), c_verdict(lib, path)) == (want, want)


def test_corpus_covers_the_header_rules() -> None:
    """Every check of the walk has a file breaking it (the huge counts: the package loops for ever)."""
    stems = {p.stem for p in GGUF_FILES}
    for need in (
        "HEADER-truncated-metadata",
        "HEADER-string-length-past-end",
        "HEADER-unknown-value-type",
        "HEADER-huge-array-count",
        "DUPLICATE_KEY-metadata-key",
        "DUPLICATE_KEY-tensor-name",
        "DTYPE-unknown-tensor-type",
        "HEADER-nested-array",
        "HEADER-huge-element-count",
    ):
        assert need in stems


def _c_str(lib: ctypes.CDLL, key: str) -> str:
    buf, n = ctypes.create_string_buffer(1 << 16), ctypes.c_uint64()
    assert lib.drv_str(key.encode(), buf, len(buf), ctypes.byref(n)) == 0, lib.drv_msg()
    return buf.raw[: n.value].decode()


def _c_value(lib: ctypes.CDLL, key: str, field) -> object:  # noqa: ANN001 - a gguf ReaderField
    vt = field.types[0]
    k = key.encode()
    if vt == gguf.GGUFValueType.STRING:
        return _c_str(lib, key)
    if vt == gguf.GGUFValueType.BOOL:
        b = ctypes.c_int()
        assert lib.drv_bool(k, ctypes.byref(b)) == 0, lib.drv_msg()
        return bool(b.value)
    if vt in (gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.FLOAT64):
        f, d = ctypes.c_float(), ctypes.c_double()
        assert lib.drv_f32(k, ctypes.byref(f)) == 0 and lib.drv_f64(k, ctypes.byref(d)) == 0, lib.drv_msg()
        assert f.value == np.float32(d.value)
        return d.value
    if vt == gguf.GGUFValueType.ARRAY:
        it, count = ctypes.c_uint32(), ctypes.c_uint64()
        assert lib.drv_array(k, -1, ctypes.byref(it), ctypes.byref(count)) == 0, lib.drv_msg()
        assert it.value == int(field.types[-1]) or count.value == 0
        if it.value == gguf.GGUFValueType.STRING:
            need = lib.drv_array_strs(k, None, 0)
            buf = ctypes.create_string_buffer(max(int(need), 1))
            assert lib.drv_array_strs(k, buf, need) == need
            return [s.decode() for s in buf.raw[:need].split(b"\0")[:-1]]
        ints, floats = np.zeros(count.value, np.int64), np.zeros(count.value, np.float64)
        assert (
            lib.drv_array_nums(
                k, ints.ctypes.data_as(ctypes.c_void_p), floats.ctypes.data_as(ctypes.c_void_p)
            )
            == 0
        )
        if it.value in (6, 12):
            return floats.tolist()
        if it.value == 10:
            return [int(v) & ((1 << 64) - 1) for v in ints]
        return [bool(v) for v in ints] if it.value == 7 else ints.tolist()
    v = ctypes.c_int64()
    rc = lib.drv_i64(k, ctypes.byref(v))
    if vt == gguf.GGUFValueType.UINT64 and field.contents() >= 1 << 63:
        assert rc != 0  # the integer getter refuses what does not fit an int64
        return field.contents()
    assert rc == 0, lib.drv_msg()
    u = ctypes.c_uint32()
    assert (lib.drv_u32(k, ctypes.byref(u)) == 0) == (0 <= v.value < 1 << 32)
    return v.value


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return float(a) == float(b) or (math.isnan(float(a)) and math.isnan(float(b)))
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def check_against_package(lib: ctypes.CDLL, path: Path, keys: list[str] | None = None) -> int:
    """The C reader's view of a valid file equals the gguf package's; returns the tensors compared."""
    header, reader = read_gguf_header(path, mapped(path)), gguf.GGUFReader(str(path))
    assert c_verdict(lib, path) is None, lib.drv_msg()
    assert lib.drv_n_tensors() == len(reader.tensors) == len(header.tensors)
    assert lib.drv_data_start() == reader.data_offset and lib.drv_alignment() == reader.alignment
    name = ctypes.create_string_buffer(256)
    typ, dims, off, nb, at = (
        ctypes.c_uint32(),
        np.zeros(4, np.int64),
        ctypes.c_uint64(),
        ctypes.c_uint64(),
        ctypes.c_uint64(),
    )
    for i, t in enumerate(reader.tensors):
        nd = lib.drv_tensor(
            i,
            name,
            256,
            ctypes.byref(typ),
            dims.ctypes.data_as(ctypes.c_void_p),
            ctypes.byref(off),
            ctypes.byref(nb),
            ctypes.byref(at),
        )
        assert name.value.decode() == t.name
        assert (typ.value, tuple(dims[:nd]), off.value, nb.value, at.value) == (
            int(t.tensor_type),
            tuple(int(d) for d in t.shape),
            int(t.field.parts[-1][0]),
            int(t.n_bytes),
            int(t.data_offset),
        )
        assert lib.drv_tensor_index(t.name.encode()) == i
    assert lib.drv_tensor_index(b"no.such.tensor") == -1
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert lib.drv_n_kv() == len(fields) == len(header.metadata)
    for key in keys if keys is not None else list(fields):
        got, want = _c_value(lib, key, fields[key]), fields[key].contents()
        assert _same(got, want), key
    missing = ctypes.c_uint32()
    assert lib.drv_u32(b"no.such.key", ctypes.byref(missing)) != 0 and b"missing" in lib.drv_msg()
    return len(reader.tensors)


@pytest.mark.parametrize(
    "path", [p for p in GGUF_FILES if rule_of(p) in (None, *MODEL_RULES)], ids=lambda p: p.stem
)
def test_valid_file_as_the_package_reads_it(lib, path: Path) -> None:
    assert check_against_package(lib, path) > 0


def test_wrong_types_are_refused_with_the_key(lib) -> None:
    assert c_verdict(lib, CORPUS / "gguf" / "valid-every-value-type.gguf") is None
    f, u, s = ctypes.c_float(), ctypes.c_uint32(), ctypes.create_string_buffer(64)
    n = ctypes.c_uint64()
    assert lib.drv_f32(b"gpt2.block_count", ctypes.byref(f)) == 3 and b"gpt2.block_count" in lib.drv_msg()
    assert lib.drv_u32(b"test.i8", ctypes.byref(u)) == 3 and b"-128" in lib.drv_msg()
    assert lib.drv_str(b"tokenizer.ggml.tokens", s, 64, ctypes.byref(n)) == 3 and b"array" in lib.drv_msg()
    it = ctypes.c_uint32()
    assert lib.drv_array(b"tokenizer.ggml.tokens", 5, ctypes.byref(it), ctypes.byref(n)) == 3
    assert lib.drv_array(b"tokenizer.ggml.tokens", 8, ctypes.byref(it), ctypes.byref(n)) == 0 and n.value == 5


def test_smollm2_as_the_package_reads_it(lib, smollm2_gguf: Path) -> None:
    """The real file: 272 tensors (Q4_1, Q8_0, F32), the llama metadata and the whole tokenizer."""
    keys = [
        "general.architecture",
        "llama.block_count",
        "llama.embedding_length",
        "llama.attention.head_count",
        "llama.attention.head_count_kv",
        "llama.rope.freq_base",
        "llama.attention.layer_norm_rms_epsilon",
        "tokenizer.ggml.model",
        "tokenizer.ggml.pre",
        "tokenizer.ggml.tokens",
        "tokenizer.ggml.token_type",
        "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.add_bos_token",
        "tokenizer.chat_template",
        "general.languages",
    ]
    assert check_against_package(lib, smollm2_gguf, keys) == 272
    assert _c_str(lib, "general.architecture") == "llama"
    types = {int(lib_type) for lib_type in _tensor_types(lib)}
    assert types == {
        int(gguf.GGMLQuantizationType.Q4_1),
        int(gguf.GGMLQuantizationType.Q8_0),
        int(gguf.GGMLQuantizationType.F32),
    }


def _tensor_types(lib: ctypes.CDLL) -> list[int]:
    name, typ, dims = ctypes.create_string_buffer(256), ctypes.c_uint32(), np.zeros(4, np.int64)
    x = ctypes.c_uint64()
    out = []
    for i in range(lib.drv_n_tensors()):
        lib.drv_tensor(
            i,
            name,
            256,
            ctypes.byref(typ),
            dims.ctypes.data_as(ctypes.c_void_p),
            ctypes.byref(x),
            ctypes.byref(x),
            ctypes.byref(x),
        )
        out.append(typ.value)
    return out


def test_corrupted_smollm2_header_same_verdict(lib, tmp_path, smollm2_gguf: Path) -> None:
    """The real file's header cut at many points and one byte flipped at many places: both readers
    give the same verdict (the tensor data is left off: the header alone, then the layout rules)."""
    header = read_gguf_header(smollm2_gguf)
    with open(smollm2_gguf, "rb") as f:
        head = f.read(header.data_start + 4096)
    rng = np.random.default_rng(15)
    p = tmp_path / "cut.gguf"
    seen = set()
    for cut in [*rng.integers(0, header.data_start, 40).tolist(), header.data_start, len(head)]:
        p.write_bytes(head[:cut])
        v = py_verdict(p)
        assert c_verdict(lib, p) == v, cut
        seen.add(v)
    for at in rng.integers(0, 2_000_000 if header.data_start > 2_000_000 else header.data_start, 40).tolist():
        b = bytearray(head)
        b[at] ^= 0xFF
        p.write_bytes(bytes(b))
        v = py_verdict(p)
        assert c_verdict(lib, p) == v, at
        seen.add(v)
    assert {"HEADER", "BOUNDS"} <= seen


TOKENIZER_KEYS = [
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.no.such.key",
]


@pytest.mark.parametrize("which", ["valid-every-value-type", "smollm2"])
def test_metadata_hash_is_pythons(lib, which: str, request: pytest.FixtureRequest) -> None:
    """The identity of a file's tokenizer (the raw bytes of its keys' values), in C and in Python;
    a one-byte change in one token changes it."""
    from caten_lab.formats.gguf_header import metadata_hash

    path = (
        request.getfixturevalue("smollm2_gguf") if which == "smollm2" else CORPUS / "gguf" / f"{which}.gguf"
    )
    data = path.read_bytes()
    header = read_gguf_header(path, data)
    keys = (ctypes.c_char_p * len(TOKENIZER_KEYS))(*[k.encode() for k in TOKENIZER_KEYS])
    lib.drv_metadata_hash.restype = ctypes.c_uint64
    assert c_verdict(lib, path) is None
    h = lib.drv_metadata_hash(keys, len(TOKENIZER_KEYS))
    assert h == metadata_hash(header, data, TOKENIZER_KEYS)
    assert h != metadata_hash(header, data, TOKENIZER_KEYS[1:])
    begin, end = header.spans["tokenizer.ggml.tokens"]
    at = data.index(b"the", begin, end) if b"the" in data[begin:end] else begin + 20
    changed = data[:at] + bytes([data[at] ^ 1]) + data[at + 1 :]
    assert metadata_hash(read_gguf_header(path, changed), changed, TOKENIZER_KEYS) != h


def _valid_files() -> list[Path]:
    return [p for p in GGUF_FILES if rule_of(p) is None]


@pytest.mark.parametrize("which", ["smollm2", *(p.stem for p in _valid_files())])
def test_read_gguf_is_the_packages_reader(which: str, request: pytest.FixtureRequest) -> None:
    """caten_lab's own reader (the header walk + views of the mapped file; ~10x faster to open) gives
    every key's value and every tensor's type, shape, offset and data exactly as gguf.GGUFReader does."""
    path = request.getfixturevalue("smollm2_gguf") if which == "smollm2" else CORPUS / "gguf" / f"{which}.gguf"
    ours, ref = read_gguf(path), gguf.GGUFReader(str(path))
    want = {k: f for k, f in ref.fields.items() if not k.startswith("GGUF.")}  # the package's header pseudo-keys
    assert list(ours.fields) == list(want)
    for key, f in want.items():
        assert _same(ours.fields[key].contents(), f.contents()), key
    assert len(ours.tensors) == len(ref.tensors) and ours.alignment == ref.alignment
    for a, b in zip(ours.tensors, ref.tensors):
        assert (a.name, a.tensor_type, a.n_elements, a.n_bytes, a.data_offset) == (
            b.name, b.tensor_type, b.n_elements, b.n_bytes, b.data_offset)
        assert a.shape.tolist() == b.shape.tolist()
        assert a.data.dtype == b.data.dtype and a.data.shape == b.data.shape and not a.data.flags.writeable
        assert np.array_equal(a.data.view(np.uint8), b.data.view(np.uint8))
    assert read_gguf(path) is ours  # once per process


def test_read_gguf_reads_a_rewritten_file_again(tmp_path: Path) -> None:
    src = _valid_files()[0]
    path = tmp_path / "f.gguf"
    path.write_bytes(src.read_bytes())
    first = read_gguf(path)
    path.write_bytes(src.read_bytes()[:40])  # truncated in place: another size and time
    with pytest.raises(FormatError):
        read_gguf(path)
    path.write_bytes(src.read_bytes())
    assert read_gguf(path) is not first and list(read_gguf(path).fields) == list(first.fields)
