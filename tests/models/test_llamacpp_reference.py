"""The llama.cpp reference harness (tests/refs/llamacpp.py) on the real SmolLM2 file.

The harness is itself checked before other tests trust it: its tokenizer agrees with transformers' GGUF
tokenizer, greedy generation agrees with teacher forcing position by position (so the positions are
indexed right), results come from the disk cache on a second call, a broken file is an error that carries
llama.cpp's log, and bench/llama.py reports llama.cpp's rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from refs import llamacpp
from refs.texts import CHAT_PROMPT, LIGHTHOUSE, VARIED

pytestmark = pytest.mark.skipif(
    not llamacpp.available(), reason="xllamacpp (the [dev] extra) is not installed"
)


def test_tokenize_matches_transformers_gguf_tokenizer(smollm2_gguf):
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    texts = [LIGHTHOUSE, *VARIED]
    ours = llamacpp.tokenize(smollm2_gguf, texts)
    for text, ids in zip(texts, ours):
        assert ids == tok(text, add_special_tokens=False)["input_ids"], text
    assert ours[0][:4] == tok("The old lighthouse stood")["input_ids"]
    assert 1 in ours[-1] and 2 in ours[-1]  # <|im_start|> and <|im_end|> are single special tokens


def test_greedy_generation_equals_teacher_forcing(smollm2_gguf):
    prompt = llamacpp.tokenize(smollm2_gguf, [LIGHTHOUSE])[0][:16]
    gen = llamacpp.generate(smollm2_gguf, prompt, 24)
    assert len(gen.tokens) == 24 and gen.predicted_n == 24 and gen.prompt_n == 16
    assert gen.prompt_per_second > 0 and gen.predicted_per_second > 0
    tf = llamacpp.teacher_forced(smollm2_gguf, prompt + gen.tokens[:-1], k=3)
    assert len(tf.top1) == 16 + 23
    assert tf.top1[15:] == gen.tokens  # position i predicts token i+1: the generated chain is reproduced
    assert tf.evaluated == len(prompt) + 23  # the prompt cache: each call evaluated only the new token
    for top1, top in zip(tf.top1, tf.top):
        assert len(top) == 3 and top[0][0] == top1
        lps = [lp for _, lp in top]
        assert lps == sorted(lps, reverse=True) and lps[0] <= 0.0


def test_results_are_cached_per_job(smollm2_gguf, tmp_path, monkeypatch):
    monkeypatch.setenv("CATEN_REF_CACHE", str(tmp_path))
    ids = [504, 3458, 282, 260]
    first = llamacpp.teacher_forced(smollm2_gguf, ids, k=2)
    assert len(list(tmp_path.glob("*.json"))) == 1

    def no_run(*args, **kwargs):
        raise AssertionError("llama.cpp ran although the result was cached")

    monkeypatch.setattr(llamacpp, "run_jobs", no_run)
    assert llamacpp.teacher_forced(smollm2_gguf, ids, k=2) == first
    with pytest.raises(AssertionError, match="although the result was cached"):
        llamacpp.teacher_forced(smollm2_gguf, ids, k=3)  # another job: a miss
    with pytest.raises(AssertionError, match="although the result was cached"):
        llamacpp.teacher_forced(smollm2_gguf, ids, k=2, threads=1)  # other parameters: a miss


def test_a_broken_file_is_an_error_with_llamacpp_log(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(llamacpp.LlamaCppError, match="broken.gguf") as info:
        llamacpp.teacher_forced(bad, [1, 2, 3], cache=False)
    message = str(info.value)
    assert "log (tail)" in message and "failed to load model" in message  # the second: llama.cpp's own log
    with pytest.raises(FileNotFoundError, match="no GGUF file"):
        llamacpp.generate(tmp_path / "missing.gguf", [1], 2)


def test_bench_llama_measures_llamacpp(smollm2_gguf, tmp_path):
    """bench/llama.py end to end on its llama.cpp rows (tiny sizes): rows, ratios and agreement as documented."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "llama.py"
    out = tmp_path / "llama.json"
    cmd = [
        sys.executable,
        str(bench),
        "--gguf",
        str(smollm2_gguf),
        "--systems",
        "llamacpp",
        "--threads-list",
        "1",
        "--gen",
        "4",
        "--prefill",
        "8",
        "--runs",
        "1",
        "--json",
        str(out),
    ]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "decode_vs_llamacpp" in p.stdout and "llamacpp |" in p.stdout
    data = json.loads(out.read_text())
    (row,) = data["rows"]
    assert (row["system"], row["threads"], data["gen"], data["prefill"]) == ("llamacpp", 1, 4, 8)
    assert row["decode_tok_s"] > 0 and row["prefill_tok_s"] > 0 and row["decode_vs_llamacpp"] == 1.0
    prompt = llamacpp.tokenize(smollm2_gguf, [CHAT_PROMPT])[0]
    assert row["tokens"] == llamacpp.generate(smollm2_gguf, prompt, 4, threads=1).tokens
    assert row["agree"] == "4/4"
