"""The three ways an exported library fills a program input from a GGUF file (c/gguf_weights.c, the
records of workflow/weight_source.py), on a synthetic program: the library's loader files compiled
with a model table packed exactly as export packs one, and a stub program.

Raw views (quantized blocks kept: the buffer is the mapped file), float conversions (F32 mapped,
F16 / BF16 / Q8_0 converted as the gguf package dequantizes) and constant tables from the blob,
each bitwise against numpy and the gguf package; then a file with another quantization or a missing
tensor is refused naming the tensor, before any buffer is filled.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import gguf
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

Q = gguf.GGMLQuantizationType
RNG = np.random.default_rng(15)
F32 = RNG.standard_normal((4, 32)).astype(np.float32)
F16 = RNG.standard_normal((2, 32)).astype(np.float16)
BF16_BITS = (RNG.standard_normal((3, 32)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
Q8 = RNG.standard_normal((2, 64)).astype(np.float32)
Q4K = RNG.integers(0, 256, (2, 144), dtype=np.uint8)  # two Q4_K blocks of 256 values: raw bytes
COS = np.cos(np.arange(32, dtype=np.float32)).reshape(8, 4)


def write_file(path: Path, *, q4k_type: Q = Q.Q4_K, drop: str = "") -> Path:
    w = gguf.GGUFWriter(str(path), "llama")
    k = Q4K if q4k_type == Q.Q4_K else gguf.quantize(np.zeros((2, 256), np.float32), Q.Q8_0)
    tensors = {
        "a": (F32, None),
        "b": (F16, None),
        "c": (BF16_BITS, Q.BF16),
        "q": (gguf.quantize(Q8, Q.Q8_0), Q.Q8_0),
        "k": (k, q4k_type),
    }
    for name, (data, qtype) in tensors.items():
        if name != drop:
            w.add_tensor(name, data, raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# the synthetic program's inputs: (name, shape, dtype)
INPUTS = [
    ("a", (4, 32), np.float32),
    ("b", (2, 32), np.float32),
    ("c", (3, 32), np.float32),
    ("q", (2, 64), np.float32),
    ("k#u8", (288,), np.uint8),
    ("k#f16", (144,), np.float16),
    ("rope.cos", (8, 4), np.float32),
]


class _Info:
    def __init__(self, shape: tuple[int, ...], dtype: type) -> None:
        self.shape, self.dtype, self.kind = shape, type("DType", (), {"np": dtype}), "input"


HARNESS = r"""
#include "export_head.c"
#include "model_data.h"
#include "model_tables.c"
#include "rules_table.c"
#include "json_reader.c"
#include "st_loader.c"
#include "weight_read.c"
#include "gguf_reader.h"
#include "gguf_reader.c"
#include "gguf_meta.c"
#include "model_buffers.c"
#include "gguf_weights.c"
void caten_run(void **b, const int64_t *sym, int64_t *err) { (void)b; (void)sym; (void)err; }
static ct_model M;
static char MSG[1024];
API int h_load(const char *path) { ct_model_free(&M); return ct_model_load(&M, path, MSG); }
API const char *h_msg(void) { return MSG; }
API void *h_ptr(int b) { return M.bufs[b]; }
API int h_view(int b) { return M.view[b]; }
API const void *h_map(void) { return M.gguf.map; }
API void h_free(void) { ct_model_free(&M); }
"""


def build_harness(d: Path, source, inputs: list[tuple[str, tuple[int, ...], type]]) -> ctypes.CDLL:  # noqa: ANN001
    """The loader files + a model table of ``inputs`` bound by ``source`` (a GGUFSource), as export packs it."""
    from caten_lab.formats.rules import rules_header
    from caten_lab.workflow.c_library import c_file, fill, header_text, template_values
    from caten_lab.workflow.export import GENERATE_C
    from caten_lab.workflow.tokenizers.static_data import incbin_c, pack_static

    infos = [(b, name, _Info(shape, dt)) for b, (name, shape, dt) in enumerate(inputs)]
    tables = {
        "kind": np.zeros(len(inputs), np.int64),
        "slot": np.full(len(inputs), -1, np.int64),
        "itemsize": np.asarray([np.dtype(dt).itemsize for _, _, dt in inputs], np.int64),
        "size_at": np.arange(0, 2 * len(inputs) + 1, 2, dtype=np.int64),
        "size_code": np.asarray([v for _, s, _ in inputs for v in (int(np.prod(s)), 0)], np.int64),
        "sym_role": np.zeros(1, np.int64),
        "vocab_hash": np.zeros(1, np.int64),
        "nbuf": len(inputs),
        "nsym": 0,
        "nslot": 0,
        "n_ctx": 8,
        "vocab": 4,
        "eos": 0,
        "tokens_buf": 0,
        "out_buf": 0,
        **source.tables(infos, "fp32"),
    }
    blob = pack_static(tables)
    src = d / "src"
    src.mkdir()
    (src / "model_tables.bin").write_bytes(blob.data)
    (src / "model_data.h").write_text(incbin_c(blob, src / "model_tables.bin", "ct_m"))
    values = template_values("t", "fp32")
    for f in (
        "export_head.c",
        "model_tables.c",
        "rules_table.c",
        "json_reader.c",
        "st_loader.c",
        "weight_read.c",
        "gguf_reader.h",
        "gguf_reader.c",
        "gguf_meta.c",
        "model_buffers.c",
        "gguf_weights.c",
    ):
        (src / f).write_text(fill(c_file(f), values))
    (src / "rules.h").write_text(rules_header())
    (d / "t.h").write_text(header_text("t", GENERATE_C, "fp32"))
    (src / "harness.c").write_text(HARNESS)
    so = d / "harness.so"
    r = subprocess.run(
        [
            shutil.which("cc") or "cc",
            "-O1",
            "-shared",
            "-fPIC",
            f"-I{d}",
            f"-I{src}",
            "-o",
            str(so),
            str(src / "harness.c"),
            "-lm",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lib = ctypes.CDLL(str(so))
    lib.h_load.argtypes = [ctypes.c_char_p]
    lib.h_msg.restype = ctypes.c_char_p
    lib.h_ptr.restype = lib.h_map.restype = ctypes.c_void_p
    return lib


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from caten_lab.workflow.weight_source import GGUFSource

    d = tmp_path_factory.mktemp("binds")
    path = write_file(d / "m.gguf")
    lib = build_harness(d, GGUFSource(path, lambda n: n, "llama", constants={"rope.cos": COS}), INPUTS)
    yield d, path, lib
    lib.h_free()


def _buf(lib: ctypes.CDLL, b: int) -> np.ndarray:
    _, shape, dt = INPUTS[b]
    n = int(np.prod(shape)) * np.dtype(dt).itemsize
    return np.frombuffer(ctypes.string_at(lib.h_ptr(b), n), dtype=dt).reshape(shape)


def test_every_mode_fills_its_buffer(built) -> None:
    from caten_lab.formats.gguf_header import read_gguf_header

    d, path, lib = built
    assert lib.h_load(str(path).encode()) == 0, lib.h_msg()
    reader = gguf.GGUFReader(str(path))
    t = {x.name: x for x in reader.tensors}
    want = [
        F32,
        F16.astype(np.float32),
        (BF16_BITS.astype(np.uint32) << 16).view(np.float32),
        gguf.dequantize(t["q"].data, Q.Q8_0).reshape(2, 64),
        Q4K.reshape(-1),
        Q4K.reshape(-1).view(np.float16),
        COS,
    ]
    for b, w in enumerate(want):
        assert _buf(lib, b).tobytes() == np.ascontiguousarray(w, INPUTS[b][2]).tobytes(), INPUTS[b][0]
    header = read_gguf_header(path)
    views = {INPUTS[b][0] for b in range(len(INPUTS)) if lib.h_view(b)}
    assert views == {"a", "k#u8", "k#f16"}  # F32 as fp32 and the raw blocks: the mapped file itself
    for b, (name, _, _) in enumerate(INPUTS):
        if name in views:
            assert lib.h_ptr(b) - lib.h_map() == header.data_start + header.tensor(name.split("#")[0]).offset


def test_other_files_are_refused_naming_the_tensor(built) -> None:
    d, _, lib = built
    other = write_file(d / "q8.gguf", q4k_type=Q.Q8_0)
    assert lib.h_load(str(other).encode()) == 3  # CT_ERR_MISMATCH
    assert b"tensor 'k' is Q8_0, the library was exported for Q4_K" in lib.h_msg()
    missing = write_file(d / "missing.gguf", drop="c")
    assert lib.h_load(str(missing).encode()) == 3 and b"tensor 'c' is missing" in lib.h_msg()
    assert lib.h_load(str(d / "nope.gguf").encode()) == 1 and b"cannot open" in lib.h_msg()


def test_smollm2_blocks_are_the_mapped_file(tmp_path, smollm2_gguf) -> None:
    """Every tensor of the real file (Q4_1, Q8_0, F32) bound as its raw bytes: each buffer is the
    mapped file at the tensor's offset and holds the bytes the gguf package reads."""
    from caten_lab.formats.gguf_header import read_gguf_header
    from caten_lab.workflow.weight_source import GGUFSource

    path = smollm2_gguf
    header = read_gguf_header(path)
    inputs = [(t.name + "#u8", (t.n_bytes,), np.uint8) for t in header.tensors]
    lib = build_harness(tmp_path, GGUFSource(path, lambda n: n, "llama", header=header), inputs)
    assert lib.h_load(str(path).encode()) == 0, lib.h_msg()
    reader = gguf.GGUFReader(str(path))
    for b, t in enumerate(reader.tensors):
        assert lib.h_view(b) == 1
        assert lib.h_ptr(b) - lib.h_map() == t.data_offset, t.name
        assert ctypes.string_at(lib.h_ptr(b), int(t.n_bytes)) == t.data.tobytes(), t.name
    lib.h_free()
