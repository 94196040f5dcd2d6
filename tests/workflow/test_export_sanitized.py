"""The exported runtime under AddressSanitizer + UBSan: fuzzed weights files never crash or leak."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

MODEL = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")]


@pytest.fixture(scope="module", params=["fp32", "int8"])
def asan_cli(request, tmp_path_factory) -> Path:
    """The CLI built from all units under the sanitizers; int8 also runs the load-time conversion."""
    from caten_lab.workflow.export import export, generation_workflow

    wf = generation_workflow(MODEL, weight_format=request.param)
    out = export(wf, tmp_path_factory.mktemp(f"asan_export_{request.param}"))
    exe = out.directory / "gpt2_asan"
    units = [p for p in out.sources if p.suffix == ".c"]
    r = subprocess.run(
        [
            "cc",
            "-O1",
            "-g",
            # line tables and variables, without gcc's variable-location tracking: that pass alone took
            # ~16 of the 18 s of compiling the model's unit under the sanitizers (-O1 -g)
            "-fno-var-tracking-assignments",
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fopenmp",
            f"-I{out.directory}",
            "-o",
            str(exe),
            *map(str, units),
            "-lm",
        ],
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"sanitizers unavailable: {r.stderr[:200]}")
    return exe


def _run(exe: Path, weights: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {"ASAN_OPTIONS": "detect_leaks=1", "UBSAN_OPTIONS": "print_stacktrace=1"}
    return subprocess.run(
        [str(exe), "--weights", str(weights), "--tokens", "2", *extra],
        capture_output=True,
        text=True,
        errors="replace",
        env=env,
        timeout=120,
    )


def test_fuzzed_headers_are_clean_errors(asan_cli, tmp_path) -> None:
    scale = float(os.environ.get("CATEN_SLOW_SCALE", "0.2"))
    src = (MODEL / "model.safetensors").read_bytes()
    n = int.from_bytes(src[:8], "little")
    rng = random.Random(0)
    for t in range(max(10, int(150 * scale))):
        b = bytearray(src[: 8 + n + 2000])
        for _ in range(rng.randint(1, 8)):
            b[rng.randint(0, 8 + n - 1)] = rng.randint(0, 255)
        data = bytes(b[: rng.randint(0, len(b))]) if t % 3 == 0 else bytes(b) + src[8 + n + 2000 :]
        p = tmp_path / "fuzz.safetensors"
        p.write_bytes(data)
        r = _run(asan_cli, p)
        assert r.returncode in (0, 2), (t, r.returncode, r.stderr[-2000:])
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, (t, r.stderr[-2000:])


def test_generation_is_sanitizer_clean(asan_cli) -> None:
    r = _run(
        asan_cli,
        MODEL,
        "--tokens",
        "20",
        "--temperature",
        "0.8",
        "--top-k",
        "10",
        "--top-p",
        "0.9",
        "--prompt",
        "Héllo wörld 😀 don't",
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr


def test_fuzzed_vocab_files_are_clean_errors(asan_cli, tmp_path) -> None:
    """Vocabulary files are parsed and turned into tables in C at init: fuzz that path too."""
    scale = float(os.environ.get("CATEN_SLOW_SCALE", "0.2"))
    src = (MODEL / "vocab.json").read_bytes()
    rng = random.Random(1)
    for t in range(max(10, int(80 * scale))):
        b = bytearray(src)
        for _ in range(rng.randint(1, 5)):
            b[rng.randint(0, len(b) - 1)] = rng.randint(0, 255)
        p = tmp_path / "vocab.json"
        p.write_bytes(bytes(b[: rng.randint(0, len(b))]) if t % 2 else bytes(b))
        r = _run(asan_cli, MODEL, "--vocab", str(p))
        assert r.returncode in (0, 2), (t, r.returncode, r.stderr[-2000:])
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, (t, r.stderr[-2000:])


def test_nonfinite_weight_values_are_sanitizer_clean(asan_cli, tmp_path) -> None:
    """NaN / inf / huge values in the tensor data reach the load-time conversion (int8: a NaN row,
    an infinite scale): defined results, no undefined float-to-int casts."""
    src = bytearray((MODEL / "model.safetensors").read_bytes())
    n = int.from_bytes(src[:8], "little")
    rng = random.Random(2)
    for pattern in (b"\xff\xff\xff\x7f", b"\x00\x00\x80\x7f", b"\x00\x00\x80\xff", b"\xff\xff\x7f\x7f"):
        b = bytearray(src)
        for _ in range(200):
            at = 8 + n + 4 * rng.randrange((len(src) - 8 - n) // 4)
            b[at : at + 4] = pattern
        p = tmp_path / "values.safetensors"
        p.write_bytes(bytes(b))
        r = _run(asan_cli, p, "--temperature", "0.7", "--top-k", "5")
        assert r.returncode in (0, 2), (pattern, r.returncode, r.stderr[-2000:])
        assert "Sanitizer" not in r.stderr and "runtime error" not in r.stderr, (pattern, r.stderr[-2000:])
