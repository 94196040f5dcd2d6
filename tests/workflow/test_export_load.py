"""The exported library's streamed weight loading (export_c.py ``ct_st_load``), bitwise against numpy.

``ct_st_load`` reads each tensor in blocks of ``CT_LOAD_BLOCK_BYTES`` straight from the file into the
program's buffer: converted to float32 (F32 / F16 / BF16 files), transposed if asked, and stored as
fp32, fp16 (numpy's ``astype(float16)``) or int8 with per-row scales (models/quantize.py; a
transposed int8 tensor is read twice: per-row max first). The harnesses here are the library's
own C compiled with a lowered block size, so blocks end mid-tensor, hold fewer rows than the
tensor's row count divides into, or less than one row.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import numpy as np
import pytest

from caten_lab.errors import CatenError

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"
FMT = {"fp32": 0, "fp16": 1, "int8": 2}

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

HARNESS = r"""
#include <unistd.h>
#include "gpt2_workflow.c"
static ct_model M;
static char MSG[1024];
API const char *t_msg(void) { return MSG; }
API long t_block(void) { return (long)CT_LOAD_BLOCK_BYTES; }
/* one tensor of a safetensors file through ct_st_load; truncate_to >= 0 cuts the file to that size
   after its header was checked (a file that shrinks while it is read) */
API int t_st_load(const char *path, const char *name, int ndim, const int64_t *shape, int transpose, int fmt,
                  void *dst, float *scale, long truncate_to) {
  ct_st st;
  int rc = ct_st_open(&st, path, MSG);
  if (!rc) {
    if (truncate_to >= 0 && truncate(path, truncate_to) != 0) rc = -1;
    else rc = ct_st_load(&st, path, name, ndim, shape, transpose, fmt, dst, scale, MSG);
  }
  ct_st_close(&st);
  return rc;
}
API int t_load(const char *path) { ct_model_free(&M); return ct_model_load(&M, path, MSG); }
API int t_nweights(void) { return CT_NWEIGHTS; }
API const char *t_name(int w) { return ct_weight_name(w); }
API int t_fmt(int w) { return (int)ct_weights[w].fmt; }
API void *t_buf(int w) { return M.bufs[ct_weights[w].buf]; }
API void *t_scale(int w) { return ct_weights[w].scale >= 0 ? M.bufs[ct_weights[w].scale] : NULL; }
API void t_free(void) { ct_model_free(&M); }
API long t_nbuf(void) { return CT_NBUF; }
API long t_elems(int b, long seq, long pos) {
  int64_t sym[CT_SYM_SIZE];
  ct_set_symbols(sym, seq, pos);
  return (long)ct_elems(b, sym);
}
"""

# 472 bytes: 5 rows of 23 float32 or 3 of 37 (37 and 23 rows are no multiples), 118 single values;
# 4: less than one row (one row, or one value, per block); None: the library's default
BLOCKS = [4, 472, None]
# the tiny model (n_embd 128): 3 rows of c_fc's 512 columns, 12 rows of 128, 1561 values per block
MODEL_BLOCK = 3 * 2048 + 100


def _build(out, tag: str, block: int | None) -> ctypes.CDLL:
    """The library's glue (static functions included) with the library's flags and ``block``, for ctypes."""
    from caten_lab.runtime.objects import current_toolchain, object_flags

    src = out.directory / "src"
    c = src / f"load_harness_{tag}.c"
    c.write_text(HARNESS)
    so = src / f"load_harness_{tag}.so"
    objs = [str(p.with_suffix(".o")) for p in out.sources if p.parent == src and p.stem != "gpt2_workflow"]
    tc = current_toolchain()
    cc, flags = list(tc.cc), object_flags(tc)
    define = [f"-DCT_LOAD_BLOCK_BYTES={block}"] if block is not None else []
    r = subprocess.run(
        [
            *cc,
            *flags,
            *define,
            "-shared",
            f"-I{out.directory}",
            f"-I{src}",
            "-o",
            str(so),
            str(c),
            *objs,
            "-lm",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lib = ctypes.CDLL(str(so))
    vp = ctypes.c_void_p
    lib.t_msg.restype = lib.t_name.restype = ctypes.c_char_p
    lib.t_block.restype = ctypes.c_long
    lib.t_st_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, vp, ctypes.c_int, ctypes.c_int]
    lib.t_st_load.argtypes += [vp, vp, ctypes.c_long]
    lib.t_load.argtypes = [ctypes.c_char_p]
    lib.t_buf.restype = lib.t_scale.restype = vp
    lib.t_elems.restype = lib.t_nbuf.restype = ctypes.c_long
    lib.t_elems.argtypes = [ctypes.c_int, ctypes.c_long, ctypes.c_long]
    return lib


@pytest.fixture(scope="module")
def fp32_export(tmp_path_factory):
    from caten_lab.workflow.export import export, generation_workflow

    return export(generation_workflow(MODEL, n_ctx=32), tmp_path_factory.mktemp("load_fp32"))


@pytest.fixture(scope="module")
def model_lib(tmp_path_factory, fp32_export):
    """format -> the harness of that format's export, built with MODEL_BLOCK (built once each)."""
    from caten_lab.workflow.export import export, generation_workflow

    built: dict[str, ctypes.CDLL] = {}

    def get(fmt: str) -> ctypes.CDLL:
        if fmt not in built:
            out = fp32_export
            if fmt != "fp32":
                wf = generation_workflow(MODEL, n_ctx=32, weight_format=fmt)
                out = export(wf, tmp_path_factory.mktemp(f"load_{fmt}"))
            built[fmt] = _build(out, f"model{MODEL_BLOCK}", MODEL_BLOCK)
        return built[fmt]

    return get


@pytest.fixture(scope="module", params=BLOCKS, ids=lambda b: f"block{b}")
def lib(request, fp32_export) -> ctypes.CDLL:
    lib = _build(fp32_export, str(request.param), request.param)
    assert lib.t_block() == (request.param or lib.t_block())
    return lib


# ------------------------------------------------------------------ files and references


def _write_st(path: Path, tensors: list[tuple[str, str, tuple[int, ...], bytes]]) -> None:
    """A safetensors file of (name, dtype, shape, little-endian data), in this order."""
    hdr, off = {}, 0
    for name, dtype, shape, data in tensors:
        hdr[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
    b = json.dumps(hdr).encode()
    b += b" " * (-len(b) % 8)
    path.write_bytes(struct.pack("<Q", len(b)) + b + b"".join(t[3] for t in tensors))


def _specials32() -> np.ndarray:
    """float32 values every conversion must get right: NaN payloads, infinities, half overflow and
    subnormals, round-to-even ties (fp16 and int8), signed zeros, float32 subnormals and extremes."""
    bits = np.array(
        [0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FBFFFFF, 0x7F800000, 0xFF800000, 0x00000000, 0x80000000,
         0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0xFF7FFFFF, 0x477FF000, 0x477FEFFF, 0x477FE000, 0x33000000,
         0x33000001, 0x387FE000, 0x38800000, 0x3F801000, 0x3F803000, 0x3F800FFF, 0x3F801001],
        np.uint32,
    )  # fmt: skip
    return bits.view(np.float32)


def _values(dtype: str, shape: tuple[int, ...], seed: int) -> tuple[bytes, np.ndarray]:
    """Random file data of ``dtype`` with special values sprinkled in (a NaN / inf in some rows and
    columns only), and the float32 numpy reads it as."""
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    w = (rng.standard_normal(n) * rng.choice([1e-3, 0.05, 1.0, 300.0], n)).astype(np.float32)
    at = rng.choice(n, size=min(n, 40), replace=False)
    sp = _specials32()
    w[at] = sp[rng.integers(0, len(sp), len(at))]
    if len(shape) == 2 and shape[0] > 3 and shape[1] > 3:
        w.reshape(shape)[2, :] = np.float32(0.5) * np.arange(shape[1], dtype=np.float32)  # a row of ties
        w.reshape(shape)[:, 3] = -np.float32(1.5) * np.arange(shape[0], dtype=np.float32)  # a column of ties
    if dtype == "F32":
        return w.tobytes(), w.reshape(shape)
    if dtype == "F16":
        bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)  # every half: NaN payloads, subnormals, inf
        with np.errstate(over="ignore"):
            bits[: n // 2] = w[: n // 2].astype(np.float16).view(np.uint16)
        return bits.tobytes(), bits.view(np.float16).astype(np.float32).reshape(shape)
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint16)  # BF16: the upper half of a float32
    bits[: n // 2] = (w[: n // 2].view(np.uint32) >> 16).astype(np.uint16)
    return bits.tobytes(), (bits.astype(np.uint32) << 16).view(np.float32).reshape(shape)


def _reference(w32: np.ndarray, transpose: bool, fmt: str) -> tuple[np.ndarray, np.ndarray | None]:
    from caten_lab.models.quantize import quantize_int8

    w = np.ascontiguousarray(w32.T if transpose else w32)
    with np.errstate(all="ignore"):
        if fmt == "fp32":
            return w, None
        if fmt == "fp16":
            return w.astype(np.float16), None
        q, s = quantize_int8(w)
    return q, s


def _load(lib, path: Path, name: str, shape, transpose: bool, fmt: str, like, scale_rows: int, cut: int = -1):
    dst = np.empty_like(like)
    dst.view(np.uint8).fill(0x5A)  # no stale zeros: every byte must be written
    scale = np.full((max(scale_rows, 1), 1), np.float32(-7.0))
    shp = np.array(list(shape) + [0] * (4 - len(shape)), np.int64)
    rc = lib.t_st_load(
        str(path).encode(), name.encode(), len(shape), shp.ctypes.data, int(transpose), FMT[fmt],
        dst.ctypes.data, scale.ctypes.data, cut,
    )  # fmt: skip
    return rc, dst, scale[:scale_rows]


# ------------------------------------------------------------------ one tensor, every path


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("transpose", [False, True], ids=["rows", "transposed"])
@pytest.mark.parametrize("shape", [(37, 23), (23, 37), (1, 5), (64, 1)], ids=lambda s: "x".join(map(str, s)))
def test_tensor_is_numpys_bitwise(lib, tmp_path, dtype: str, fmt: str, transpose: bool, shape) -> None:
    data, w32 = _values(dtype, shape, seed=zlib.crc32(repr((dtype, fmt, transpose, shape)).encode()))
    pad = np.arange(300, dtype=np.float32).tobytes()  # the tensor does not start the data
    p = tmp_path / "t.safetensors"
    _write_st(p, [("pad", "F32", (300,), pad), ("w", dtype, shape, data)])
    ref, sref = _reference(w32, transpose, fmt)
    rc, got, scale = _load(lib, p, "w", shape, transpose, fmt, ref, ref.shape[0] if fmt == "int8" else 0)
    assert rc == 0, lib.t_msg()
    assert got.tobytes() == ref.tobytes(), np.argwhere(got.view(np.uint8) != ref.view(np.uint8))[:5]
    if fmt == "int8":
        assert scale.tobytes() == sref.tobytes(), (scale.ravel()[:8], sref.ravel()[:8])


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("fmt", ["fp32", "fp16"])
def test_flat_tensor_is_numpys_bitwise(lib, tmp_path, dtype: str, fmt: str) -> None:
    """A 1-D tensor (a bias, a LayerNorm weight): converted value by value, blocks of any length."""
    data, w32 = _values(dtype, (1001,), seed=5)
    p = tmp_path / "t.safetensors"
    _write_st(p, [("b", dtype, (1001,), data)])
    with np.errstate(all="ignore"):
        ref = w32 if fmt == "fp32" else w32.astype(np.float16)
    rc, got, _ = _load(lib, p, "b", (1001,), True, fmt, ref, 0)  # transpose is ignored for 1-D
    assert rc == 0, lib.t_msg()
    assert got.tobytes() == ref.tobytes()


def test_empty_int8_rows_have_scale_one(lib, tmp_path) -> None:
    p = tmp_path / "t.safetensors"
    _write_st(p, [("w", "F32", (0, 6), b"")])
    rc, got, scale = _load(lib, p, "w", (0, 6), True, "int8", np.empty((6, 0), np.int8), 6)
    assert rc == 0, lib.t_msg()
    assert np.array_equal(scale, np.ones((6, 1), np.float32))


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("transpose", [False, True], ids=["rows", "transposed"])
@pytest.mark.parametrize("dtype", ["F32", "BF16"])
def test_file_cut_while_reading_is_the_truncated_error(
    lib, tmp_path, fmt: str, transpose: bool, dtype
) -> None:
    """The header was valid when the file was opened, the data ends early (pass 1 or 2 of a
    transposed int8 tensor): the same error text and code as before streaming, no crash."""
    shape = (300, 40)
    data, w32 = _values(dtype, shape, seed=3)
    p = tmp_path / "t.safetensors"
    pad = bytes(70000)  # past the stdio buffer of the header read
    _write_st(p, [("pad", "F32", (len(pad) // 4,), pad), ("w", dtype, shape, data)])
    ref, _ = _reference(w32, transpose, fmt)
    cut = p.stat().st_size - len(data) // 3
    rc, _, _ = _load(lib, p, "w", shape, transpose, fmt, ref, ref.shape[0], cut=cut)
    assert rc == 2, (rc, lib.t_msg())  # GPT2_ERR_FORMAT
    assert lib.t_msg().decode() == f"{p}: cannot read the data of tensor 'w' (truncated file?)"


@pytest.mark.parametrize(
    ("edit", "rc", "msg"),
    [
        (lambda h: h.pop("w"), 3, "tensor 'w' is missing: the file does not match the exported model"),
        (lambda h: h["w"].update(dtype="I32"), 3, "tensor 'w' has dtype I32; supported: F32, F16, BF16"),
        (
            lambda h: h["w"].update(shape=[4, 3]),
            3,
            "tensor 'w' has shape [4, 3], the exported model expects [3, 4]",
        ),
        (lambda h: h["w"].update(dtype="F16"), 2, "tensor 'w': spans 48 bytes, but its shape of F16 needs 24 [rule NBYTES]"),
    ],
    ids=["missing", "dtype", "shape", "bytes"],
)
def test_header_errors_keep_their_text(lib, tmp_path, edit, rc: int, msg: str) -> None:
    p = tmp_path / "t.safetensors"
    hdr = {
        "w": {"dtype": "F32", "shape": [3, 4], "data_offsets": [0, 48]},
        "x": {"dtype": "F32", "shape": [1], "data_offsets": [48, 52]},
    }
    edit(hdr)
    b = json.dumps(hdr).encode()
    p.write_bytes(struct.pack("<Q", len(b)) + b + bytes(52))
    got = _load(lib, p, "w", (3, 4), True, "int8", np.empty((4, 3), np.int8), 4)[0]
    assert got == rc, lib.t_msg()
    assert lib.t_msg().decode() == f"{p}: {msg}"


# ------------------------------------------------------------------ the whole model, small blocks


def _model_copy(d: Path, dtype: str) -> Path:
    """The tiny model with its tensors stored as ``dtype`` (BF16: float32 bits truncated)."""
    from safetensors.numpy import load_file

    d.mkdir()
    for f in ("config.json", "vocab.json", "merges.txt"):
        shutil.copy(MODEL / f, d / f)
    tensors = []
    for k, v in load_file(str(MODEL / "model.safetensors")).items():
        v = np.ascontiguousarray(v, np.float32)
        if dtype == "F16":
            data = v.astype(np.float16).tobytes()
        elif dtype == "BF16":
            data = (v.view(np.uint32) >> 16).astype(np.uint16).tobytes()
        else:
            data = v.tobytes()
        tensors.append((k, dtype, v.shape, data))
    _write_st(d / "model.safetensors", tensors)
    return d


@pytest.mark.parametrize("dtype", ["F32", "F16", "BF16"])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8"])
def test_model_buffers_are_the_runners(model_lib, tmp_path, fmt: str, dtype: str) -> None:
    """ct_model_load with blocks of a few rows: every buffer (transposed or not, fp32 / fp16 / int8 +
    scales) equals what GPT2Runner prepares with numpy from the same F32 / F16 / BF16 file."""
    from caten_lab.models.gpt2 import GPT2Runner

    lib = model_lib(fmt)
    d = _model_copy(tmp_path / "m", dtype)
    assert lib.t_load(str(d / "model.safetensors").encode()) == 0, lib.t_msg()
    arrays = GPT2Runner.from_pretrained(d, weight_format=fmt).weight_arrays()
    seen = set()
    for w in range(lib.t_nweights()):
        name = lib.t_name(w).decode()
        stored = name + {0: "", 1: ".fp16", 2: ".int8"}[lib.t_fmt(w)]
        ref = arrays[stored]
        raw = (ctypes.c_char * ref.nbytes).from_address(lib.t_buf(w))
        assert bytes(raw) == ref.tobytes(), stored
        seen.add(stored)
        if lib.t_fmt(w) == 2:
            sc = arrays[name + ".scale"]
            assert bytes((ctypes.c_char * sc.nbytes).from_address(lib.t_scale(w))) == sc.tobytes(), name
            seen.add(name + ".scale")
    lib.t_free()
    assert seen == set(arrays)


# ------------------------------------------------------------------ the exported loader's strict checks


def _tiny_with(d: Path, edit) -> Path:  # noqa: ANN001 - edit(tensors: dict name -> (dtype, shape, bytes))
    from safetensors.numpy import load_file

    d.mkdir()
    for f in ("config.json", "vocab.json", "merges.txt"):
        shutil.copy(MODEL / f, d / f)
    tensors = {k: ("F32", v.shape, np.ascontiguousarray(v, np.float32).tobytes())
               for k, v in load_file(str(MODEL / "model.safetensors")).items()}
    edit(tensors)
    _write_st(d / "model.safetensors", [(k, *v) for k, v in tensors.items()])
    return d


def test_model_tensors_are_the_python_table(model_lib) -> None:
    """The exported library expects exactly the tensors expected_shapes names (the NAMES rule's set)."""
    from caten_lab.models.gpt2_weights import config_from_dict, expected_shapes

    lib = model_lib("fp32")
    names = {lib.t_name(w).decode() for w in range(lib.t_nweights())}
    assert names == set(expected_shapes(config_from_dict(json.loads((MODEL / "config.json").read_text()))))


def test_buffer_sizes_are_the_symbolic_shapes(model_lib) -> None:
    """The library sizes every buffer from the packed polynomial of its shape (model_tables.size_code,
    evaluated by ct_elems): the element counts the symbolic shapes give for each (seq, pos)."""
    from caten_lab.air.shapes import numel
    from caten_lab.air.symbolic import evaluate
    from caten_lab.workflow.export import generation_workflow

    runner = generation_workflow(MODEL, n_ctx=32).runner
    runner.compile()
    buffers = runner.program.schedule.buffers
    lib = model_lib("fp32")
    assert lib.t_nbuf() == len(buffers)
    sizes = [numel(tuple(info.shape)) for info in buffers.values()]
    assert any(not isinstance(n, int) for n in sizes)  # the intermediates grow with seq (and pos)
    for b, (name, n) in enumerate(zip(buffers, sizes, strict=True)):
        for seq, pos in ((1, 0), (7, 3), (32, 0), (1, 31)):
            assert lib.t_elems(b, seq, pos) == evaluate(n, {"seq": seq, "pos": pos}), (name, seq, pos)


def test_runtime_unit_is_the_packages_fixed_c(fp32_export) -> None:
    """The library's runtime is the package's C files (caten_lab/workflow/c/, the prefix filled in);
    what the export generates is the compiled units and data: the tables' blobs and the prototypes."""
    from caten_lab.workflow.c_library import RUNTIME_FILES, c_file, fill, template_values
    from caten_lab.workflow.export import GENERATE_C

    src = fp32_export.directory / "src"
    values = template_values("gpt2", "fp32")
    for f in (*RUNTIME_FILES, *GENERATE_C.files):
        assert (src / f).read_text() == fill(c_file(f), values), f
    assert (src / "gpt2_workflow.c").read_text() == fill(c_file(GENERATE_C.unit), values)
    gpt2_tok = ("tok_tables.c", "vocab_tables.c", "tok_gpt2.c")  # the GPT-2 tokenizer's (workflow/tokenizer_c.py)
    assert (src / "tokenizer.c").read_text() == "".join(fill(c_file(f), values) for f in gpt2_tok)
    fixed = {*RUNTIME_FILES, *GENERATE_C.files, "gpt2_workflow.c", "rules.h", "tokenizer.c"}
    harness = {p.name for p in src.glob("load_harness_*")}  # the other tests' harnesses (_build)
    generated = {p.name for p in src.iterdir() if p.suffix in (".c", ".h")} - fixed - harness
    assert generated == {"model.c", "tok_encode.c", "tok_decode.c", "generate_loop.c", "prompt_assembly.c", "model_data.h",
                         "tokenizer_data.h", "actions.h"}
    assert {p.name for p in src.glob("*.bin")} == {"model_tables.bin", "tokenizer_tables.bin"}


def _unprefixed(t: dict) -> None:
    for k in list(t):
        t[k.removeprefix("transformer.")] = t.pop(k)


def _named_twice(t: dict) -> None:
    t["wte.weight"] = t["transformer.wte.weight"]


def _lm_head_transposed(t: dict) -> None:
    dt, (v, e), data = t["transformer.wte.weight"]
    t["lm_head.weight"] = (dt, (e, v), np.frombuffer(data, np.float32).reshape(v, e).T.copy().tobytes())


def _lm_head_copy(t: dict) -> None:
    t["lm_head.weight"] = t["transformer.wte.weight"]


@pytest.mark.parametrize(
    ("edit", "rc", "msg"),
    [
        (_unprefixed, 0, ""),
        (_named_twice, 3, "tensor 'wte.weight' is named twice (with and without the 'transformer.' prefix) [rule NAMES]"),
        (_lm_head_transposed, 3, "lm_head.weight differs from transformer.wte.weight (the model ties them) [rule TIED]"),
        (_lm_head_copy, 0, ""),
    ],
    ids=["no-transformer-prefix", "named-twice", "lm-head-wrong-shape", "lm-head-tied-copy"],
)
def test_model_load_names_and_tied_head(model_lib, tmp_path, edit, rc: int, msg: str) -> None:
    """Before: the C loader took 'wte.weight' for 'transformer.wte.weight' (GPT2Model checkpoints)
    and Python refused it, and the C loader ignored lm_head.weight whatever its shape. Now both load
    an unprefixed file to the same buffers, both refuse a tensor named both ways and an untied
    lm_head, and a tied copy loads in both."""
    from caten_lab.models.gpt2_weights import load_hf_dir

    lib = model_lib("fp32")

    def buffers() -> list[bytes]:
        out = []
        for w in range(lib.t_nweights()):
            n = int(np.prod([int(x) for x in _shape_of(lib, w)])) * 4
            out.append(bytes((ctypes.c_char * n).from_address(lib.t_buf(w))))
        return out

    assert lib.t_load(str(MODEL / "model.safetensors").encode()) == 0, lib.t_msg()
    ref = buffers()
    d = _tiny_with(tmp_path / "m", edit)
    assert lib.t_load(str(d / "model.safetensors").encode()) == rc
    assert msg in lib.t_msg().decode()
    if rc:
        lib.t_free()
        with pytest.raises(CatenError, match=r"\[rule (NAMES|TIED)\]"):
            load_hf_dir(d)
        return
    assert buffers() == ref  # the same weights, whatever the names
    lib.t_free()
    got, want = load_hf_dir(d).state_dict, load_hf_dir(MODEL).state_dict
    assert set(got) == set(want)
    for k, v in want.items():
        np.testing.assert_array_equal(got[k], v)


def _shape_of(lib, w: int) -> tuple[int, ...]:
    """The program buffer shape of weight w (its file shape, transposed if the program transposes)."""
    from caten_lab.models.gpt2_weights import config_from_dict, expected_shapes

    shapes = expected_shapes(config_from_dict(json.loads((MODEL / "config.json").read_text())))
    return shapes[lib.t_name(w).decode()]


def _vocab_variant(tmp_path: Path, edit) -> Path:  # noqa: ANN001 - edit(items: list of [token, id])
    items = [list(kv) for kv in json.loads((MODEL / "vocab.json").read_text()).items()]
    edit(items)
    p = tmp_path / "vocab.json"
    p.write_text("{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in items) + "}")
    return p


def _neg(items: list) -> None:
    items[300][1] = -1


def _dup_id(items: list) -> None:
    items[300][1] = items[301][1]


def _gap(items: list) -> None:
    items[300][1] = len(items) + 5


@pytest.mark.parametrize("edit", [_neg, _dup_id, _gap], ids=["negative-id", "duplicate-id", "gap"])
def test_cli_refuses_bad_vocabulary_ids(fp32_export, tmp_path, edit) -> None:
    """Before: a duplicate id let the last token win and a gap left an empty token, silently changing
    tokenization; now the CLI and Python both refuse the file under the VOCAB_ID rule."""
    from export_helpers import run_cli

    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    p = _vocab_variant(tmp_path, edit)
    r = run_cli(fp32_export.cli, "--weights", str(MODEL), "--vocab", str(p), "--tokens", "2")
    assert r.returncode == 2 and "error (tokenizer)" in r.stderr and "[rule VOCAB_ID]" in r.stderr, r.stderr
    with pytest.raises(CatenError, match=r"\[rule VOCAB_ID\]"):
        GPT2Tokenizer.from_files(p, MODEL / "merges.txt")


def test_cli_reserialized_vocabulary_tokenizes_the_same(fp32_export, tmp_path) -> None:
    """A valid vocabulary that is not byte-identical to the exported one is checked and built at init:
    the same ids as the linked tables."""
    from export_helpers import run_cli

    p = _vocab_variant(tmp_path, lambda items: None)
    assert p.read_bytes() != (MODEL / "vocab.json").read_bytes()
    args = ("--weights", str(MODEL), "--ids", "--tokens", "4", "--prompt", "The quick brown fox")
    a, b = run_cli(fp32_export.cli, *args), run_cli(fp32_export.cli, *args, "--vocab", str(p))
    assert a.returncode == b.returncode == 0, (a.stderr, b.stderr)
    assert a.stdout == b.stdout


def test_cli_refuses_merges_naming_unknown_tokens(fp32_export, tmp_path) -> None:
    from export_helpers import run_cli

    p = tmp_path / "merges.txt"
    p.write_text((MODEL / "merges.txt").read_text() + "zq\u0120 xj\n")
    r = run_cli(fp32_export.cli, "--weights", str(MODEL), "--merges", str(p), "--tokens", "2")
    assert r.returncode == 2 and "[rule MERGES]" in r.stderr, r.stderr
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    with pytest.raises(CatenError, match=r"\[rule MERGES\]"):
        GPT2Tokenizer.from_files(MODEL / "vocab.json", p)
