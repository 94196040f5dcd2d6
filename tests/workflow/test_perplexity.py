"""The exported perplexity workflow against PyTorch (transformers GPT2LMHeadModel on the same weights)."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"
WINDOW = 64

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
    "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
    "MENENIUS:\nWhat work's, my countrymen, in hand? where go you\nWith bats and clubs? The matter? speak, I pray you.\n"
) * 12 + "Héllo wörld 😀 don't   stop\n\n\n  tabs\there 1234567\n"


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from caten_lab.workflow.export import export
    from caten_lab.workflow.perplexity import perplexity_workflow

    wf = perplexity_workflow(MODEL, window=WINDOW)
    out = export(wf, tmp_path_factory.mktemp("ppl_export"))
    text = tmp_path_factory.mktemp("ppl_text") / "text.txt"
    text.write_text(TEXT, encoding="utf-8")
    return wf, out, text


def torch_perplexity(ids: list[int]) -> tuple[float, int]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.GPT2LMHeadModel.from_pretrained(str(MODEL), local_files_only=True).eval()
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(0, len(ids), WINDOW):
            win = ids[i : i + WINDOW]
            if len(win) < 2:
                continue
            x = torch.tensor([win])
            loss = model(x, labels=x).loss.item()  # mean over len(win) - 1 predictions
            nll += loss * (len(win) - 1)
            count += len(win) - 1
    return math.exp(nll / count), count


def run_cli(out, *args: str) -> dict[str, float]:
    r = subprocess.run([str(out.cli), *args], capture_output=True, text=True, env={}, timeout=300)
    assert r.returncode == 0, r.stderr
    return {k: float(v) for k, v in (line.split() for line in r.stdout.splitlines())}


def test_cli_perplexity_matches_pytorch(exported) -> None:
    wf, out, text = exported
    got = run_cli(out, "--weights", str(MODEL), "--text", str(text))
    ids = wf.tokenizer.encode(TEXT)
    want, count = torch_perplexity(ids)
    assert got["tokens"] == count
    assert abs(got["perplexity"] - want) / want < 1e-3, (got, want)


@pytest.mark.parametrize("chunk", ["7", "100", "4096"])
def test_streaming_chunks_give_the_same_result(exported, chunk: str) -> None:
    """Reading the file in small chunks tokenizes exactly as the whole text (same windows, same sum)."""
    wf, out, text = exported
    from caten_lab.workflow.perplexity import perplexity_python

    ref = perplexity_python(wf, TEXT)
    got = run_cli(out, "--weights", str(MODEL), "--text", str(text), "--chunk", chunk)
    assert got["tokens"] == ref.tokens and got["windows"] == ref.windows
    assert abs(got["nll"] - ref.nll_sum) <= 1e-9 * ref.nll_sum
    assert abs(got["perplexity"] - ref.perplexity) / ref.perplexity < 1e-9


def test_smaller_window_and_errors(exported, tmp_path) -> None:
    wf, out, text = exported
    got = run_cli(out, "--weights", str(MODEL), "--text", str(text), "--window", "16")
    assert got["windows"] > 10
    r = subprocess.run(
        [str(out.cli), "--weights", str(MODEL), "--text", str(text), "--window", "1000"],
        capture_output=True,
        text=True,
        env={},
    )
    assert r.returncode == 2 and "window must be in 2..64" in r.stderr
    r = subprocess.run(
        [str(out.cli), "--weights", str(MODEL), "--text", str(tmp_path / "nope.txt")],
        capture_output=True,
        text=True,
        env={},
    )
    assert r.returncode == 2 and "error (io)" in r.stderr
    bad = tmp_path / "model.safetensors"
    bad.write_bytes((MODEL / "model.safetensors").read_bytes()[:1000])
    r = subprocess.run(
        [str(out.cli), "--weights", str(bad), "--text", str(text)], capture_output=True, text=True, env={}
    )
    assert r.returncode == 2 and "error (format)" in r.stderr


def test_log_and_chunk_actions() -> None:
    from caten_lab.workflow.perplexity_actions import chunk_end, log_f64

    for x in [1e-300, 1e-5, 0.5, 1.0, 1.5, 2.0, 3.0, 4096.0, 1e300]:
        assert abs(log_f64(x) - math.log(x)) <= 4.5e-16 * max(1.0, abs(math.log(x)))
    buf = np.frombuffer(b"ab\ncd\n\nef\n gh", dtype=np.uint8)
    assert chunk_end(buf, len(buf), 0) == 7  # after the newline that precedes "ef" (not "\n gh")
    assert chunk_end(buf, len(buf), 1) == len(buf)
