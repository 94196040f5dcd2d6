"""Running an exported CLI from the tests: no environment at all (no Python, no caten_lab)."""

from __future__ import annotations

import subprocess
from pathlib import Path

# the sampled run the export tests compare with GPT2Runner.stream: SamplingOptions(0.9, top_k=20, seed=9)
SAMPLED_ARGS = ("--prompt", "The king said", "--tokens", "15", "--ids", "--temperature", "0.9", "--top-k", "20", "--seed", "9")


def run_cli(cli: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(cli), *args], capture_output=True, text=True, env={}, timeout=120)


def sampled_cli_ids(cli: Path, weights: Path) -> list[int]:
    """Token ids of the CLI's sampled run (SAMPLED_ARGS) on ``weights``."""
    r = run_cli(cli, "--weights", str(weights), *SAMPLED_ARGS)
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]
