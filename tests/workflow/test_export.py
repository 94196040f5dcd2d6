"""The exported GPT-2 library and CLI: same tokens as the Python API, clean errors on bad files.

The CLI runs as a plain subprocess with an empty environment: no Python is involved at run time.
"""

from __future__ import annotations

import copy
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from export_helpers import run_cli, sampled_cli_ids

from caten_lab.models.sampling import SamplingOptions

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from caten_lab.workflow.export import export, generation_workflow

    wf = generation_workflow(MODEL)
    out = export(wf, tmp_path_factory.mktemp("gpt2_export"))
    return wf, out


@pytest.fixture(scope="module")
def python_api(exported):
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    wf, _ = exported
    tok = GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt")
    return wf.runner, tok


CASES = [
    ("The king said", {}),
    ("The king said", {"temperature": 0.8, "top_k": 40, "seed": 3}),
    ("O Romeo, Romeo!", {"temperature": 1.0, "top_p": 0.9, "seed": 7, "repetition_penalty": 1.3}),
    ("Héllo wörld 😀\n\n  123 don't", {"temperature": 1.2, "top_k": 5, "top_p": 0.5, "seed": 2**63 + 11}),
    ("First Citizen:", {"temperature": 0.0, "repetition_penalty": 1.5}),
]


@pytest.mark.parametrize(("prompt", "kw"), CASES)
def test_cli_tokens_match_python_api(exported, python_api, prompt: str, kw: dict) -> None:
    _, out = exported
    runner, tok = python_api
    opts = SamplingOptions(**kw)
    want = list(runner.stream(tok.encode(prompt), 30, opts, stop_tokens=[runner.config.eos_token_id]))
    args = ["--weights", str(MODEL), "--prompt", prompt, "--tokens", "30", "--ids"]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    r = run_cli(out.cli, *args)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want


def test_cli_prints_text(exported, python_api) -> None:
    _, out = exported
    runner, tok = python_api
    want = list(runner.stream(tok.encode("The king said"), 20, SamplingOptions(), stop_tokens=[0]))
    r = run_cli(
        out.cli, "--weights", str(MODEL / "model.safetensors"), "--prompt", "The king said", "--tokens", "20"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "The king said" + tok.decode(want) + "\n"


def test_context_limit_stops_cleanly(exported, python_api) -> None:
    _, out = exported
    runner, tok = python_api
    prompt = "a " * 100
    want = list(runner.stream(tok.encode(prompt), 400, SamplingOptions()))
    r = run_cli(
        out.cli, "--weights", str(MODEL), "--prompt", prompt, "--tokens", "400", "--ids", "--no-eos-stop"
    )
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want
    assert len(want) == runner.n_ctx - len(tok.encode(prompt)) + 1


def _variants() -> dict[str, bytes]:
    src = (MODEL / "model.safetensors").read_bytes()
    n = struct.unpack("<Q", src[:8])[0]
    hdr = json.loads(src[8 : 8 + n])
    data = src[8 + n :]

    def make(h: dict) -> bytes:
        b = json.dumps(h).encode()
        return struct.pack("<Q", len(b)) + b + data

    def edit(name: str, key: str, value: object) -> bytes:
        h = copy.deepcopy(hdr)
        h[name][key] = value
        return make(h)

    missing = copy.deepcopy(hdr)
    del missing["transformer.h.0.ln_1.bias"]
    extra = copy.deepcopy(hdr)
    extra["extra.weight"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    return {
        "truncated": src[: len(src) // 2],
        "empty": b"",
        "short": src[:5],
        "garbage": bytes(range(256)) * 20,
        "huge_header": struct.pack("<Q", 2**62) + src[8:],
        "bad_json": struct.pack("<Q", n) + b"{" * n + data,
        "shape": edit("transformer.h.0.ln_1.bias", "shape", [127]),
        "missing": make(missing),
        "unexpected": make(extra),
        "dtype": edit("transformer.h.0.ln_1.bias", "dtype", "I64"),
        "offsets": edit("transformer.h.0.ln_1.bias", "data_offsets", [0, 10**12]),
        "negative": edit("transformer.h.0.ln_1.bias", "data_offsets", [-5, 10]),
        "bytes": edit("transformer.h.0.ln_1.bias", "data_offsets", [0, 100]),
    }


EXPECT = {  # the rule of caten_lab/formats/rules.h each breaks first (the order Python checks them in too)
    "truncated": "truncated [rule BOUNDS]",
    "empty": "too short for a safetensors header [rule HEADER]",
    "short": "too short for a safetensors header [rule HEADER]",
    "garbage": "header length",
    "huge_header": "header length",
    "bad_json": "not valid JSON (byte",
    "shape": "spans 512 bytes, but its shape of F32 needs 508 [rule NBYTES]",
    "missing": "is missing: the file does not match the exported model [rule NAMES]",
    "unexpected": "unexpected tensor 'extra.weight': the file does not match the exported model",
    "dtype": "its shape of I64 needs 1024 [rule NBYTES]",
    "offsets": "spans 1000000000000 bytes",
    "negative": "not a non-negative integer below 2^62 [rule INTEGER]",
    "bytes": "spans 100 bytes",
}


@pytest.mark.parametrize("case", sorted(EXPECT))
def test_corrupt_weights_are_errors_not_crashes(exported, tmp_path, case: str) -> None:
    _, out = exported
    p = tmp_path / "model.safetensors"
    p.write_bytes(_variants()[case])
    r = run_cli(out.cli, "--weights", str(p), "--tokens", "2")
    assert r.returncode == 2, (r.returncode, r.stderr)  # an error exit, not a signal
    assert EXPECT[case] in r.stderr, r.stderr
    assert r.stderr.startswith("error (")


def test_missing_file_and_tokenizer_check(exported) -> None:
    """Unreadable paths are io errors; a vocab/merges file other than the exported one is refused."""
    _, out = exported
    r = run_cli(out.cli, "--weights", "/nonexistent/model.safetensors")
    assert r.returncode == 2 and "error (io)" in r.stderr
    r = run_cli(out.cli, "--weights", str(out.directory / "src"))  # a directory without model.safetensors
    assert r.returncode == 2 and "not a regular file" in r.stderr
    r = run_cli(out.cli, "--weights", str(MODEL), "--vocab", str(MODEL / "merges.txt"))
    assert r.returncode == 2 and "error (tokenizer)" in r.stderr
    r = run_cli(
        out.cli,
        "--weights",
        str(MODEL),
        "--vocab",
        str(MODEL / "vocab.json"),
        "--merges",
        str(MODEL / "merges.txt"),
        "--tokens",
        "3",
    )
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (["--prompt", ""], "the prompt is empty"),
        (["--prompt", "a " * 300], "context limit"),
        (["--top-p", "0"], "top_p must be in (0, 1]"),
        (["--temperature", "-1"], "temperature must be >= 0"),
        (["--repetition-penalty", "0"], "repetition_penalty must be > 0"),
    ],
)
def test_bad_options(exported, args: list[str], msg: str) -> None:
    _, out = exported
    r = run_cli(out.cli, "--weights", str(MODEL), *args)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


C_CLIENT = r"""
#include <stdio.h>
#include "gpt2.h"
static int stop_after_3(int32_t id, const char *text, size_t len, void *user) {
  int *n = user; (void)text; (void)len; printf("tok %d\n", id); return ++*n >= 3;
}
int main(int argc, char **argv) {
  int err = -1;
  gpt2_ctx *bad = gpt2_init("/nonexistent", NULL, NULL, &err);
  printf("bad %d %s %s\n", bad == NULL, gpt2_error_name(err), gpt2_last_error(NULL)[0] ? "msg" : "nomsg");
  gpt2_ctx *ctx = gpt2_init(argv[1], NULL, NULL, &err);
  if (!ctx) { printf("init failed %s\n", gpt2_last_error(NULL)); return 1; }
  int32_t ids[64]; int64_t n = 0;
  gpt2_tokenize(ctx, argv[2], ids, 64, &n);
  printf("ids");
  for (int64_t i = 0; i < n; i++) printf(" %d", ids[i]);
  printf("\nctx %lld vocab %lld\n", (long long)gpt2_context_length(ctx), (long long)gpt2_vocab_size(ctx));
  gpt2_options o; gpt2_default_options(&o); o.max_new_tokens = 10;
  int count = 0;
  int rc = gpt2_generate(ctx, argv[2], &o, stop_after_3, &count);
  printf("rc %d count %d\n", rc, count);
  gpt2_free(ctx);
  return 0;
}
"""


def test_c_api_from_a_c_program(exported, python_api, tmp_path) -> None:
    """The header and library used directly from C: init errors, tokenize, callback stop, free."""
    _, out = exported
    _, tok = python_api
    src = tmp_path / "client.c"
    src.write_text(C_CLIENT)
    exe = tmp_path / "client"
    subprocess.run(
        [
            "cc",
            "-O1",
            f"-I{out.directory}",
            "-o",
            str(exe),
            str(src),
            f"-L{out.directory}",
            "-lgpt2",
            f"-Wl,-rpath,{out.directory}",
        ],
        check=True,
        capture_output=True,
    )
    text = "To be, or not to be: that is the question."
    r = subprocess.run([str(exe), str(MODEL), text], capture_output=True, text=True, env={}, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "bad 1 io msg"
    assert lines[1] == "ids " + " ".join(str(i) for i in tok.encode(text))
    assert lines[2] == "ctx 256 vocab 4096"
    assert sum(1 for x in lines if x.startswith("tok ")) == 3
    assert lines[-1] == "rc 0 count 3"


def test_library_exports_only_the_api(exported) -> None:
    _, out = exported
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("needs nm")
    r = subprocess.run(
        [nm, "-D", "--defined-only", str(out.library)], capture_output=True, text=True, check=True
    )
    names = {line.split()[-1] for line in r.stdout.splitlines() if line.strip()}
    assert {"gpt2_init", "gpt2_generate", "gpt2_free", "gpt2_last_error", "gpt2_tokenize"} <= names
    assert not any(n.startswith(("caten_", "ct_", "kern")) for n in names), names


def _cli_ids(out, weights: Path) -> list[int]:
    return sampled_cli_ids(out.cli, weights)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_files_load_like_their_float32_rounding(exported, tmp_path, dtype: str) -> None:
    """F16 / BF16 tensors are widened in C exactly: same tokens as the float32 file of the rounded values."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file, save_file

    _, out = exported
    sd = load_file(str(MODEL / "model.safetensors"))
    half = {k: v.to(getattr(torch, dtype)).contiguous() for k, v in sd.items()}
    save_file(half, str(tmp_path / "half.safetensors"))
    save_file({k: v.float().contiguous() for k, v in half.items()}, str(tmp_path / "rounded.safetensors"))
    assert _cli_ids(out, tmp_path / "half.safetensors") == _cli_ids(out, tmp_path / "rounded.safetensors")


def test_names_without_transformer_prefix_are_accepted(exported, tmp_path) -> None:
    """Older GPT-2 checkpoints name tensors 'h.0.attn...' / 'wte.weight' (no 'transformer.')."""
    from safetensors.numpy import load_file, save_file

    _, out = exported
    sd = load_file(str(MODEL / "model.safetensors"))
    save_file({k.removeprefix("transformer."): v for k, v in sd.items()}, str(tmp_path / "old.safetensors"))
    assert _cli_ids(out, tmp_path / "old.safetensors") == _cli_ids(out, MODEL / "model.safetensors")


TOKENIZE_CLIENT = r"""
#include <stdio.h>
#include <stdlib.h>
#include "gpt2.h"
int main(int argc, char **argv) {
  int err = 0;
  gpt2_ctx *ctx = gpt2_init(argv[1], argv[2], argc > 4 ? argv[4] : NULL, &err);
  if (!ctx) { fprintf(stderr, "error (%s): %s\n", gpt2_error_name(err), gpt2_last_error(NULL)); return 2; }
  FILE *f = fopen(argv[3], "rb");
  static char text[1 << 20];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  int64_t count = 0;
  int32_t *ids = malloc(sizeof(int32_t) * (n + 1));
  gpt2_tokenize(ctx, text, ids, (int64_t)n + 1, &count);
  for (int64_t i = 0; i < count; i++) printf("%d ", ids[i]);
  gpt2_free(ctx);
  free(ids);
  return 0;
}
"""

VARIED = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n"
    "Ünïcödé — 中文字符 русский текст العربية 😀🎉 don't we'll I'm\t\ttabs   spaces\n\n\n"
    "numbers 12345 3.14159 and punctuation!!! ??? ... (brackets) [more] {braces}\n"
) * 30


@pytest.fixture(scope="module")
def tokenize_client(exported, tmp_path_factory) -> Path:
    _, out = exported
    d = tmp_path_factory.mktemp("tok_client")
    (d / "client.c").write_text(TOKENIZE_CLIENT)
    exe = d / "client"
    subprocess.run(
        [
            "cc",
            "-O1",
            f"-I{out.directory}",
            "-o",
            str(exe),
            str(d / "client.c"),
            f"-L{out.directory}",
            "-lgpt2",
            f"-Wl,-rpath,{out.directory}",
        ],
        check=True,
        capture_output=True,
    )
    return exe


def _c_tokenize(
    exe: Path, vocab: Path, text: Path, merges: Path | None = None
) -> subprocess.CompletedProcess:
    args = [str(exe), str(MODEL), str(vocab), str(text)] + ([str(merges)] if merges else [])
    return subprocess.run(args, capture_output=True, text=True, env={}, timeout=120)


def test_vocab_file_tables_are_built_at_init(tokenize_client, tmp_path) -> None:
    """A vocab.json other than the exported one: the C runtime builds the BPE tables from it, and
    tokenizes exactly like the Python tokenizer loaded from the same files."""
    import random

    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    vocab = json.loads((MODEL / "vocab.json").read_text(encoding="utf-8"))
    text = tmp_path / "text.txt"
    text.write_text(VARIED, encoding="utf-8")
    # 1) the same vocabulary written differently (\\u escapes, other key order): a different file
    items = list(vocab.items())
    random.Random(0).shuffle(items)
    same = tmp_path / "same.json"
    same.write_text(json.dumps(dict(items), ensure_ascii=True, indent=1))
    want = GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt").encode(VARIED)
    r = _c_tokenize(tokenize_client, same, text, MODEL / "merges.txt")
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want
    # 2) a different vocabulary of the same size: ids of multi-byte tokens permuted
    long_ids = sorted(i for t, i in vocab.items() if len(t) > 2)
    perm = long_ids[:]
    random.Random(1).shuffle(perm)
    remap = dict(zip(long_ids, perm))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({t: remap.get(i, i) for t, i in vocab.items()}))
    want = GPT2Tokenizer.from_files(other, MODEL / "merges.txt").encode(VARIED)
    r = _c_tokenize(tokenize_client, other, text)
    assert r.returncode == 0, r.stderr
    assert [int(x) for x in r.stdout.split()] == want
    assert want != GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt").encode(VARIED)


@pytest.mark.parametrize(
    ("content", "msg"),
    [
        ("[1, 2]", "not a JSON object mapping tokens to ids [rule JSON]"),
        ('{"a": 1,', "the vocabulary is not valid JSON (byte 8) [rule JSON]"),
        ('{"a": 0, "b": 1}', "the vocabulary has 2 tokens"),
        ('{"a": 99999}', "has an id that is not an integer in 0..4095 [rule VOCAB_ID]"),
        ('{"\\u4e2d": 0}', "not in GPT-2's byte-level alphabet"),
    ],
)
def test_bad_vocab_files(tokenize_client, tmp_path, content: str, msg: str) -> None:
    bad = tmp_path / "vocab.json"
    bad.write_text(content)
    text = tmp_path / "t.txt"
    text.write_text("hello")
    r = _c_tokenize(tokenize_client, bad, text)
    assert r.returncode == 2 and "error (tokenizer)" in r.stderr and msg in r.stderr, r.stderr


def test_bad_merges_file(tokenize_client, tmp_path) -> None:
    bad = tmp_path / "merges.txt"
    bad.write_text("#version: 0.2\nh e\nthree parts here\n")
    text = tmp_path / "t.txt"
    text.write_text("hello")
    r = _c_tokenize(tokenize_client, MODEL / "vocab.json", text, bad)
    assert r.returncode == 2 and "merges.txt:3: malformed merge rule" in r.stderr, r.stderr
