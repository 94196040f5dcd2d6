"""An exported library that reads its weights from a GGUF file (workflow/weight_source.py and
c/gguf_weights.c), on the bundled GPT-2 written as GGUF in F32, F16 and Q8_0.

The reference is the Python API on the same file: ``GPT2Runner.from_pretrained(file.gguf,
weight_format=...)`` (the gguf package reads and dequantizes it). The CLI's tokens (greedy and
sampled) must equal the runner's; every weight buffer the library fills must be bitwise the
runner's, F32 tensors stored as fp32 being views of the mapped file; a wrong or corrupt file is
refused with the reason.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from export_helpers import run_cli

from caten_lab.models.sampling import SamplingOptions

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

# (the file's tensor type, the library's weight format)
CASES = [("f32", "fp32"), ("f16", "fp32"), ("q8_0", "int8")]


@pytest.fixture(scope="module")
def gguf_files(tmp_path_factory) -> dict[str, Path]:
    from caten_lab.models.gpt2_weights import load_hf_dir, save_gguf

    d = tmp_path_factory.mktemp("gguf_models")
    weights = load_hf_dir(MODEL)
    out = {}
    for dtype in ("f32", "f16", "q8_0"):
        out[dtype] = d / f"tiny-{dtype}.gguf"
        save_gguf(weights, out[dtype], dtype)
    return out


@pytest.fixture(scope="module", params=CASES, ids=lambda c: f"{c[0]}-as-{c[1]}")
def exported(request, gguf_files, tmp_path_factory):
    """(file, Exported, the reference runner on the same file)."""
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.workflow.export import export, generation_workflow

    dtype, fmt = request.param
    path = gguf_files[dtype]
    out = export(generation_workflow(MODEL, weights=path, weight_format=fmt), tmp_path_factory.mktemp(f"x_{dtype}"))
    return path, out, GPT2Runner.from_pretrained(path, weight_format=fmt, dequantize=True)  # floats, as exported


@pytest.fixture(scope="module")
def tok():
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    return GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt")


@pytest.fixture(scope="module")
def safetensors_runner():
    from caten_lab.models.gpt2 import GPT2Runner

    return GPT2Runner.from_pretrained(MODEL)


RUNS = [
    ("The king said", {}),
    ("O Romeo, Romeo!", {"temperature": 0.9, "top_k": 20, "seed": 9}),
]


@pytest.mark.parametrize(("prompt", "kw"), RUNS)
def test_cli_reads_the_gguf_file_as_the_runner(exported, tok, safetensors_runner, prompt: str, kw: dict) -> None:
    path, out, runner = exported
    want = list(runner.stream(tok.encode(prompt), 25, SamplingOptions(**kw), stop_tokens=[runner.config.eos_token_id]))
    args = ["--model", str(path), "--prompt", prompt, "--tokens", "25", "--ids"]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    r = run_cli(out.cli, *args)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want
    if path.name.endswith("-f32.gguf"):  # the same weights as the safetensors file: the same tokens
        assert want == list(safetensors_runner.stream(tok.encode(prompt), 25, SamplingOptions(**kw),
                                                      stop_tokens=[runner.config.eos_token_id]))


HARNESS = r"""
#include "gpt2_workflow.c"
static ct_model M;
static char MSG[1024];
API int t_load(const char *path) { ct_model_free(&M); return ct_model_load(&M, path, MSG); }
API const char *t_msg(void) { return MSG; }
API int t_nbinds(void) { return CT_NBINDS; }
API const char *t_tensor(int i) { return ct_bind_tensor(i); }
API int t_buf(int i) { return (int)ct_binds[i].buf; }
API int t_scale(int i) { return (int)ct_binds[i].scale; }
API int t_fmt(int i) { return (int)ct_binds[i].fmt; }
API void *t_ptr(int b) { return M.bufs[b]; }
API int t_view(int b) { return M.view[b]; }
API const void *t_map(void) { return M.gguf.map; }
API void t_free(void) { ct_model_free(&M); }
"""


@pytest.fixture(scope="module")
def harness(exported):
    from caten_lab.runtime.objects import current_toolchain, object_flags

    path, out, runner = exported
    src = out.directory / "src"
    c = src / "harness.c"
    c.write_text(HARNESS)
    so = src / "harness.so"
    objs = [str(p.with_suffix(".o")) for p in out.sources if p.parent == src and p.stem != "gpt2_workflow"]
    tc = current_toolchain()
    subprocess.run([*tc.cc, *object_flags(tc), "-shared", f"-I{out.directory}", f"-I{src}", "-o", str(so), str(c), *objs,
                    "-lm"], check=True, capture_output=True)
    lib = ctypes.CDLL(str(so))
    lib.t_load.argtypes = [ctypes.c_char_p]
    lib.t_msg.restype = lib.t_tensor.restype = ctypes.c_char_p
    lib.t_ptr.restype = lib.t_map.restype = ctypes.c_void_p
    yield path, lib, runner
    lib.t_free()


def test_weight_buffers_are_the_runners_and_f32_is_mapped(harness) -> None:
    """Each buffer bitwise equals the runner's array of that input; fp32 from F32: a view of the file
    (in the int8 library, the F32 biases and norms)."""
    from caten_lab.formats.gguf_header import read_gguf_header

    path, lib, runner = harness
    assert lib.t_load(str(path).encode()) == 0, lib.t_msg()
    arrays = runner.weight_arrays()
    names = list(runner.program.schedule.buffers)
    header = read_gguf_header(path)
    size = path.stat().st_size
    n_views = 0
    for i in range(lib.t_nbinds()):
        for b in (lib.t_buf(i), lib.t_scale(i)):
            if b < 0:
                continue
            want = np.asarray(arrays[names[b]])
            got = np.frombuffer((ctypes.c_char * want.nbytes).from_address(lib.t_ptr(b)), dtype=want.dtype)
            assert got.tobytes() == want.tobytes(), names[b]
        t = header.tensor(lib.t_tensor(i).decode())
        mapped = lib.t_view(lib.t_buf(i)) == 1
        assert mapped == (t.type_id == 0 and lib.t_fmt(i) == 0), t.name  # F32 stored as fp32
        if mapped:
            assert lib.t_ptr(lib.t_buf(i)) - lib.t_map() == header.data_start + t.offset < size
            n_views += 1
    assert n_views == sum(1 for t in header.tensors if t.type_id == 0 and (len(t.dims) == 1 or runner.weight_format == "fp32"))


def test_wrong_files_are_refused(exported, tmp_path) -> None:
    path, out, runner = exported
    data = path.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[:-100])
    r = run_cli(out.cli, "--model", str(cut), "--tokens", "3")
    assert r.returncode == 2 and "error (format)" in r.stderr and "[rule BOUNDS]" in r.stderr, r.stderr
    r = run_cli(out.cli, "--model", str(MODEL / "model.safetensors"), "--tokens", "3")
    assert r.returncode == 2 and "error (format)" in r.stderr and "[rule HEADER]" in r.stderr, r.stderr
    # another GPT-2 (the corpus's: width 4, 16 tokens): every tensor has other dims
    r = run_cli(out.cli, "--model", str(REPO / "tests" / "corpus" / "gguf" / "valid-f32.gguf"), "--tokens", "3")
    assert r.returncode == 2 and "error (mismatch)" in r.stderr and "the exported model expects" in r.stderr, r.stderr
    # a library exported without a chat template
    r = run_cli(out.cli, "--model", str(path), "--chat", "--prompt", "hi", "--tokens", "3")
    assert r.returncode == 2 and "without a chat template (tokenizer.chat_template)" in r.stderr, r.stderr
    # another architecture
    arch = tmp_path / "gpt3.gguf"
    at = data.index(b"gpt2", data.index(b"general.architecture"))
    arch.write_bytes(data[:at] + b"gpt3" + data[at + 4:])
    r = run_cli(out.cli, "--model", str(arch), "--tokens", "3")
    assert r.returncode == 2 and "error (mismatch)" in r.stderr and "general.architecture" in r.stderr, r.stderr


def _info(shape: tuple[int, ...], dtype: type) -> object:
    """A program buffer's info as the sources read it (shape, dtype.np)."""
    return type("Info", (), {"shape": shape, "dtype": type("DType", (), {"np": dtype})})


def test_bind_records_are_checked_at_export(gguf_files) -> None:
    """Raw views must be the tensor's bytes exactly; float inputs its shape; names must exist."""
    from caten_lab.models.gpt2_weights import expected_shapes, gguf_tensor_name, load_hf_dir
    from caten_lab.workflow.model_tables import ExportError
    from caten_lab.workflow.weight_source import GGUFSource

    src = GGUFSource(gguf_files["q8_0"], gguf_tensor_name, "gpt2")
    t = next(x for x in src.header.tensors if x.type_id == 8)  # a Q8_0 matrix
    hf = next(n for n in expected_shapes(load_hf_dir(MODEL).config) if gguf_tensor_name(n) == t.name)
    with pytest.raises(ExportError, match="bytes of tensor"):
        src.bind(0, hf + "#u8", _info((3,), np.uint8), "fp32")
    with pytest.raises(ExportError, match="unknown raw view"):
        src.bind(0, hf + "#u4", _info((t.n_bytes,), np.uint8), "fp32")
    with pytest.raises(ExportError, match="does not match tensor"):
        src.bind(0, hf, _info((16, 16), np.float32), "fp32")
    with pytest.raises(ExportError, match="no tensor"):
        src.bind(0, "transformer.h.9.attn.c_attn.weight", _info((16, 16), np.float32), "fp32")
    raw = src.bind(3, hf + "#u8", _info((t.n_bytes,), np.uint8), "fp32")
    assert (raw.mode, raw.gtype, raw.nbytes, raw.name) == ("raw", 8, t.n_bytes, t.name)
    half = src.bind(4, hf + "#f16", _info((t.n_bytes // 2,), np.float16), "fp32")
    assert (half.mode, half.nbytes) == ("raw", t.n_bytes)
    with pytest.raises(ExportError, match="general.architecture"):
        GGUFSource(gguf_files["q8_0"], gguf_tensor_name, "llama")


def test_the_files_tokenizer_is_checked(gguf_files, tok, tmp_path) -> None:
    """A library whose tokenizer is the GGUF file's (tokenizer_keys) refuses a file whose tokenizer
    metadata differs by one merge, and one without it; the file it was exported from generates."""
    import dataclasses
    import json
    import sys

    from caten_lab.workflow.export import export, generation_workflow

    sys.path.insert(0, str(REPO / "tests" / "corpus"))
    import gguf_cases

    vocab = json.loads((MODEL / "vocab.json").read_text(encoding="utf-8"))
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda kv: kv[1])]
    merges = [ln for ln in (MODEL / "merges.txt").read_text(encoding="utf-8").splitlines()[1:] if ln]

    def with_tokenizer(path: Path, merge_list: list[str]) -> Path:
        extra = [gguf_cases.gguf_kv("tokenizer.ggml.tokens", 9, (8, tokens)),
                 gguf_cases.gguf_kv("tokenizer.ggml.merges", 9, (8, merge_list))]
        path.write_bytes(gguf_cases.gguf_rebuild(gguf_files["f32"].read_bytes(), extra=extra))
        return path

    good = with_tokenizer(tmp_path / "tok.gguf", merges)
    other = with_tokenizer(tmp_path / "other.gguf", [merges[1], merges[0], *merges[2:]])
    wf = dataclasses.replace(generation_workflow(MODEL, weights=good),
                             tokenizer_keys=("tokenizer.ggml.tokens", "tokenizer.ggml.merges"))
    out = export(wf, tmp_path / "x")
    r = run_cli(out.cli, "--model", str(good), "--prompt", "The king said", "--tokens", "8", "--ids")
    assert r.returncode == 0, r.stderr
    want = list(wf.runner.stream(tok.encode("The king said"), 8, SamplingOptions(), stop_tokens=[wf.runner.config.eos_token_id]))
    assert [int(x) for x in r.stdout.split()] == want
    for bad in (other, gguf_files["f32"]):
        r = run_cli(out.cli, "--model", str(bad), "--tokens", "3")
        assert r.returncode == 2 and "error (tokenizer)" in r.stderr and "differs from the one" in r.stderr, r.stderr
