"""bench/llm.py end to end on its smallest case: the real SmolLM2 Q4_1 file, every system, tiny sizes.

Checks the rows and the JSON ``ratios`` as documented and that every measured number is positive and
finite; no timing is asserted. llama.cpp's greedy tokens are checked against the harness's own generation.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from refs import llamacpp
from refs.texts import LIGHTHOUSE

from caten_lab.config import config

pytestmark = pytest.mark.skipif(
    not llamacpp.available() or importlib.util.find_spec("transformers") is None,
    reason="xllamacpp and transformers (the [dev] extra) are needed",
)

BENCH = Path(__file__).resolve().parents[2] / "bench" / "llm.py"
NUMBERS = (
    "decode_tok_s",
    "prefill_tok_s",
    "ttft_cold_s",
    "ttft_warm_s",
    "peak_rss_mb",
    "decode_vs_llamacpp",
    "prefill_vs_llamacpp",
)


def test_bench_llm_quick_json(smollm2_gguf, tmp_path):
    out = tmp_path / "llm.json"
    cmd = [
        sys.executable,
        str(BENCH),
        "--quick",
        "--files",
        "smollm2-Q4_1",
        "--gen",
        "3",
        "--prefill",
        "8",
        "--json",
        str(out),
        # the session's compile cache: SmolLM2 with the defaults is compiled once for this, the chat tests and
        # notebook 08 (a cold compile here would be ~30 s more, and the timings are not asserted)
        "--cache-dir",
        str(config().cache_dir),
    ]
    env = dict(os.environ, CATEN_SMOLLM2=str(smollm2_gguf))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "decode_vs_llamacpp" in p.stdout and "smollm2-Q4_1@2t" in p.stdout
    data = json.loads(out.read_text())
    assert (data["gen"], data["prefill"], data["runs"], data["threads"]) == (3, 8, 1, [2])
    rows = data["rows"]
    assert [(r["file"], r["system"], r["threads"]) for r in rows] == [
        ("smollm2-Q4_1", s, 2) for s in ("llamacpp", "caten_lab", "transformers")
    ]
    for r in rows:
        assert "error" not in r, r
        for key in NUMBERS:
            assert isinstance(r[key], float) and math.isfinite(r[key]) and r[key] > 0, (
                r["system"],
                key,
                r[key],
            )
        assert len(r["tokens"]) == 3 and r["ran"]
    assert rows[0]["decode_vs_llamacpp"] == rows[0]["prefill_vs_llamacpp"] == 1.0
    assert set(data["ratios"]) == {"decode_vs_llamacpp", "prefill_vs_llamacpp"}
    for key, ratios in data["ratios"].items():
        assert list(ratios) == ["smollm2-Q4_1@2t"]
        assert ratios["smollm2-Q4_1@2t"] == rows[1][key] > 0
    prompt = llamacpp.tokenize(smollm2_gguf, [LIGHTHOUSE])[0][:8]
    assert rows[0]["tokens"] == llamacpp.generate(smollm2_gguf, prompt, 3).tokens
