"""bench/air_scaling.py runs end to end at a tiny size and writes the JSON the issue asks for."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "air_scaling.py"


def _load_bench():
    spec = importlib.util.spec_from_file_location("air_scaling_bench", BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


def test_bench_prints_every_exponent_and_writes_json(tmp_path, capsys):
    bench = _load_bench()
    out = tmp_path / "out.json"
    assert bench.main(["--sizes", "300,900", "--repeats", "1", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data["exponents"]) == set(bench.OPERATIONS)
    assert all(math.isfinite(e) for e in data["exponents"].values())
    assert data["sizes"] == [300, 900]
    assert data["tail_exponents"] == {}  # no two sizes past the caches in this run
    ops = {(r["graph"], r["operation"]) for r in data["rows"]}
    for graph in ("chain", "transformer"):
        assert {(graph, op) for op in bench.OPERATIONS + bench.REFERENCE_OPERATIONS} <= ops
    assert {"transformer/dead_walk", "transformer/node_walk"} <= set(data["reference_exponents"])
    printed = capsys.readouterr().out
    assert "worst exponent per operation" in printed and "dead_walk" in printed
