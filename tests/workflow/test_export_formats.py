"""Exported libraries with fp16 / int8 weights: converted in C while loading, bitwise as the Python runner.

The reference is the Python API: ``GPT2Runner.from_pretrained(MODEL, weight_format=fmt)``, which
converts with numpy (models/quantize.py). The library converts the same HF file in C; the tokens of
its CLI, its weight buffers and its logits must be identical to the runner's.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
from export_helpers import run_cli, sampled_cli_ids

from caten_lab.errors import CatenError
from caten_lab.models.sampling import SamplingOptions

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.fixture(scope="module", params=["fp16", "int8"])
def lowbit(request, tmp_path_factory):
    """(format, Exported, reference runner); int8 goes through export()'s weight_format override."""
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.workflow.export import export, generation_workflow

    fmt = request.param
    d = tmp_path_factory.mktemp(f"export_{fmt}")
    if fmt == "fp16":
        out = export(generation_workflow(MODEL, weight_format="fp16"), d)
    else:
        out = export(generation_workflow(MODEL), d, weight_format="int8")
    return fmt, out, GPT2Runner.from_pretrained(MODEL, weight_format=fmt)


@pytest.fixture(scope="module")
def tok():
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    return GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt")


CASES = [
    ("The king said", {}),
    ("The king said", {"temperature": 0.8, "top_k": 40, "seed": 3}),
    ("O Romeo, Romeo!", {"temperature": 1.0, "top_p": 0.9, "seed": 7, "repetition_penalty": 1.3}),
]


@pytest.mark.parametrize(("prompt", "kw"), CASES)
def test_cli_tokens_match_python_runner(lowbit, tok, prompt: str, kw: dict) -> None:
    fmt, out, runner = lowbit
    assert runner.weight_format == fmt
    want = list(
        runner.stream(tok.encode(prompt), 30, SamplingOptions(**kw), stop_tokens=[runner.config.eos_token_id])
    )
    args = ["--weights", str(MODEL), "--prompt", prompt, "--tokens", "30", "--ids"]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    r = run_cli(out.cli, *args)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want


HARNESS = r"""
#include "@NAME@_workflow.c"
static ct_model M;
static char MSG[1024];
API int t_load(const char *path) { ct_model_free(&M); return ct_model_load(&M, path, MSG); }
API const char *t_msg(void) { return MSG; }
API int t_nweights(void) { return CT_NWEIGHTS; }
API const char *t_name(int w) { return ct_weight_name(w); }
API int t_fmt(int w) { return (int)ct_weights[w].fmt; }
API void *t_buf(int w) { return M.bufs[ct_weights[w].buf]; }
API void *t_scale(int w) { return ct_weights[w].scale >= 0 ? M.bufs[ct_weights[w].scale] : NULL; }
API int t_forward(const int32_t *ids, int64_t n, float *logits) {
  int64_t *tokens = (int64_t *)M.bufs[CT_TOKENS_BUF];
  for (int64_t i = 0; i < n; i++) tokens[i] = ids[i];
  int64_t sym[CT_NSYM > 0 ? CT_NSYM : 1];
  ct_set_symbols(sym, n, 0);
  int rc = ct_model_run(&M, sym, MSG);
  if (!rc) memcpy(logits, M.bufs[CT_OUT_BUF], sizeof(float) * CT_VOCAB);
  return rc;
}
API void t_half(const float *x, uint16_t *h, int64_t n) { for (int64_t i = 0; i < n; i++) h[i] = ct_float_to_half(x[i]); }
API void t_int8(const float *w, int64_t rows, int64_t cols, int8_t *q, float *s) {
  ct_store_weight(w, rows, cols, CT_FMT_INT8, q, s);
}
API void t_free(void) { ct_model_free(&M); }
"""


@pytest.fixture(scope="module")
def harness(lowbit) -> tuple[str, ctypes.CDLL, object]:
    """The library's own glue (static functions included) compiled with the library's flags, for ctypes."""
    from caten_lab.runtime.objects import current_toolchain, object_flags

    fmt, out, runner = lowbit
    src = out.directory / "src"
    c = src / "harness.c"
    c.write_text(HARNESS.replace("@NAME@", "gpt2"))
    so = src / "harness.so"
    objs = [str(p.with_suffix(".o")) for p in out.sources if p.parent == src and p.stem != "gpt2_workflow"]
    tc = current_toolchain()
    cc, flags = list(tc.cc), object_flags(tc)
    subprocess.run(
        [*cc, *flags, "-shared", f"-I{out.directory}", f"-I{src}", "-o", str(so), str(c), *objs, "-lm"],
        check=True,
        capture_output=True,
    )
    lib = ctypes.CDLL(str(so))
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    lib.t_load.argtypes = [ctypes.c_char_p]
    lib.t_msg.restype = lib.t_name.restype = ctypes.c_char_p
    lib.t_buf.restype = lib.t_scale.restype = vp
    lib.t_forward.argtypes = [vp, i64, vp]
    lib.t_half.argtypes = [vp, vp, i64]
    lib.t_int8.argtypes = [vp, i64, i64, vp, vp]
    return fmt, lib, runner


def _view(ptr: int, like: np.ndarray) -> np.ndarray:
    raw = (ctypes.c_char * like.nbytes).from_address(ptr)
    return np.frombuffer(raw, dtype=like.dtype).reshape(like.shape).copy()


def test_loaded_weights_are_bitwise_the_runners(harness) -> None:
    """Every buffer the library fills (transposed, fp16-rounded or int8 + scales) equals the runner's."""
    fmt, lib, runner = harness
    assert lib.t_load(str(MODEL / "model.safetensors").encode()) == 0, lib.t_msg()
    arrays = runner.weight_arrays()
    seen = set()
    for w in range(lib.t_nweights()):
        name = lib.t_name(w).decode()
        stored = name + {0: "", 1: ".fp16", 2: ".int8"}[lib.t_fmt(w)]
        ref = arrays[stored]
        assert _view(lib.t_buf(w), ref).tobytes() == ref.tobytes(), stored
        seen.add(stored)
        if lib.t_fmt(w) == 2:
            sc = arrays[name + ".scale"]
            assert _view(lib.t_scale(w), sc).tobytes() == sc.tobytes(), name
            seen.add(name + ".scale")
    assert seen == set(arrays)
    assert any(k.endswith("." + fmt) for k in seen)


def test_logits_are_bitwise_the_runners(harness, tok) -> None:
    _, lib, runner = harness
    assert lib.t_load(str(MODEL).encode() + b"/model.safetensors") == 0, lib.t_msg()
    ids = np.array(tok.encode("First Citizen: before we proceed"), np.int32)
    got = np.empty(runner.config.vocab_size, np.float32)
    assert lib.t_forward(ids.ctypes.data, len(ids), got.ctypes.data) == 0, lib.t_msg()
    runner.reset()
    want = np.asarray(runner.forward(ids, 0), np.float32).reshape(-1, runner.config.vocab_size)[-1]
    runner.reset()
    assert np.array_equal(got, want)


def test_half_rounding_is_numpys(harness) -> None:
    """Round to nearest even, subnormals, overflow to inf, NaN payloads: bit for bit astype(float16).
    (Checked for all 2**32 float32 bit patterns once; here every half, its neighbours and midpoints,
    and random patterns.)"""
    _, lib, _ = harness
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)
    hb = halves.view(np.uint32)
    rng = np.random.default_rng(0)
    bits = np.concatenate(
        [
            hb,
            hb + 1,
            hb - 1,
            hb + 0x1000,
            hb + 0x0FFF,
            hb + 0x1001,
            rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint32),
        ]
    ).astype(np.uint32)
    x = bits.view(np.float32)
    out = np.empty(len(x), np.uint16)
    lib.t_half(x.ctypes.data, out.ctypes.data, len(x))
    with np.errstate(all="ignore"):
        ref = x.astype(np.float16).view(np.uint16)
    assert np.array_equal(out, ref), np.flatnonzero(out != ref)[:5]


def test_int8_rows_are_quantize_pys(harness) -> None:
    """Per-row scale (max |w| / 127, 1 for an all-zero row), half-to-even ties, clipping, negative
    extremes, subnormals, inf and NaN rows: exactly models/quantize.py's int8."""
    from caten_lab.models.quantize import quantize_int8

    _, lib, _ = harness
    rng = np.random.default_rng(1)
    cols = 37
    rows = [
        np.zeros(cols),
        np.full(cols, -0.0),
        np.linspace(-127, 127, cols),
        np.arange(cols) - 18.5,  # amax 18.5: many exact .5 ties after the division
        np.r_[np.arange(cols - 1) + 0.5, 127.0],  # scale exactly 1: ties k + 0.5 round to even
        -np.abs(rng.standard_normal(cols)) * 3,  # the extreme is negative
        rng.standard_normal(cols) * 1e-40,  # subnormal floats
        rng.uniform(-3.4e38, 3.4e38, cols),  # near the float32 maximum
        np.r_[rng.standard_normal(cols - 1), np.inf],
        np.r_[rng.standard_normal(cols - 1), np.nan],
        np.full(cols, np.nan),
        *(rng.standard_normal(cols) * s for s in (1e-3, 0.02, 1, 50)),
    ]
    w = np.stack(rows).astype(np.float32)
    with np.errstate(all="ignore"):
        q_ref, s_ref = quantize_int8(w)
    q = np.empty_like(q_ref)
    s = np.empty_like(s_ref)
    lib.t_int8(w.ctypes.data, w.shape[0], cols, q.ctypes.data, s.ctypes.data)
    assert s.tobytes() == s_ref.tobytes()
    assert np.array_equal(q, q_ref), np.argwhere(q != q_ref)[:5]


def _corrupt(case: str) -> bytes:
    src = (MODEL / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", src[:8])[0]
    hdr = json.loads(src[8 : 8 + n])
    name = "transformer.h.0.mlp.c_fc.weight"  # a weight the library quantizes (and transposes)
    if case == "truncated":
        return src[: len(src) - 1000]
    if case == "shape":
        hdr[name]["shape"] = hdr[name]["shape"][::-1]
    elif case == "missing":
        del hdr[name]
    elif case == "dtype":
        hdr[name]["dtype"] = "I8"
    elif case == "bytes":
        hdr[name]["data_offsets"][1] -= 4
    b = json.dumps(hdr).encode()
    return struct.pack("<Q", len(b)) + b + src[8 + n :]


@pytest.mark.parametrize(
    ("case", "msg"),
    [
        ("truncated", "the file is truncated [rule BOUNDS]"),
        ("shape", "has shape [512, 128], the exported model expects [128, 512]"),
        ("missing", "'transformer.h.0.mlp.c_fc.weight' is missing"),
        ("dtype", "spans 262144 bytes, but its shape of I8 needs 65536 [rule NBYTES]"),
        ("bytes", "spans"),
    ],
)
def test_corrupt_weights_are_errors(lowbit, tmp_path, case: str, msg: str) -> None:
    _, out, _ = lowbit
    p = tmp_path / "model.safetensors"
    p.write_bytes(_corrupt(case))
    r = run_cli(out.cli, "--weights", str(p), "--tokens", "2")
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("error (") and msg in r.stderr, r.stderr


def test_f16_file_into_fp16_library_is_exact(lowbit, tmp_path, tok) -> None:
    """An F16 safetensors file (half -> float -> half is exact) gives the runner's tokens on that file."""
    from safetensors.numpy import load_file, save_file

    from caten_lab.models.gpt2 import GPT2Runner

    fmt, out, _ = lowbit
    d = tmp_path / "half"
    d.mkdir()
    for f in ("config.json", "vocab.json", "merges.txt"):
        shutil.copy(MODEL / f, d / f)
    save_file(
        {k: v.astype(np.float16) for k, v in load_file(str(MODEL / "model.safetensors")).items()},
        str(d / "model.safetensors"),
    )
    runner = GPT2Runner.from_pretrained(d, weight_format=fmt)
    opts = SamplingOptions(temperature=0.9, top_k=20, seed=9)
    want = list(
        runner.stream(tok.encode("The king said"), 15, opts, stop_tokens=[runner.config.eos_token_id])
    )
    assert sampled_cli_ids(out.cli, d) == want


def test_header_and_usage_name_the_format(lowbit) -> None:
    fmt, out, _ = lowbit
    header = out.header.read_text()
    assert f'#define GPT2_WEIGHT_FORMAT "{fmt}"' in header and "gpt2_weight_format(void)" in header
    r = run_cli(out.cli, "--help")
    assert f"stored as {fmt}" in r.stderr


def test_bad_weight_format_is_a_clear_error(tmp_path) -> None:
    from caten_lab.cli import main
    from caten_lab.workflow.export import export, generation_workflow
    from caten_lab.workflow.perplexity import perplexity_workflow

    for call in (
        lambda: generation_workflow(MODEL, weight_format="q4"),
        lambda: perplexity_workflow(MODEL, weight_format="bf16"),
        lambda: export(generation_workflow(MODEL, n_ctx=16), tmp_path, weight_format="int4"),
    ):
        with pytest.raises(CatenError, match="is not one of fp32, fp16, int8"):
            call()
    with pytest.raises(SystemExit):
        main(["export", str(tmp_path), "--weight-format", "int4"])
