"""Helpers the model benchmarks share: one measured row per subprocess, and the printed table of rows.

A row is a dict (``system``, ``threads``, measurements, maybe ``error``). ``run_worker`` runs a worker
command with the thread-count environment every system reads (OpenMP, caten_lab) and returns the last
JSON line it printed; ``Table`` prints rows under one header, a failed row with its error after it.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB: VmHWM, the high-water mark of its own memory map.
    (getrusage's ru_maxrss survives execve on Linux: a worker started by a 0.9 GB parent reported the
    parent's peak as its own.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def worker_env(threads: int, cache: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a worker: ``threads`` for OpenMP and caten_lab, passive OpenMP waits (a busy
    second core must not stall spinning threads), no hub access, quiet transformers."""
    env = dict(os.environ)
    env.update(
        OMP_NUM_THREADS=str(threads),
        OMP_WAIT_POLICY="PASSIVE",
        CATEN_THREADS=str(threads),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
        PYTHONWARNINGS="ignore",
    )
    if cache is not None:
        env["CATEN_CACHE_DIR"] = str(cache)
    env.update(extra)
    return env


def run_worker(cmd: list[str], env: dict[str, str], base: dict, timeout: float = 1800) -> dict:
    """Run one worker; its row is the last stdout line that starts with ``{``, else ``base`` + an error."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        err = (p.stderr.strip().splitlines() or ["?"])[-1]
        return {**base, "error": err[:200]}
    return json.loads(lines[-1])


def fmt(v: object) -> str:
    """A table cell: floats with 3 decimals below 100, whole numbers above; None as ``-``."""
    if isinstance(v, float):
        return f"{v:.3f}" if v < 100 else f"{v:.0f}"
    return "-" if v is None else str(v)


class Table:
    """Rows printed under one header of ``cols``, each cell right-aligned in ``width`` characters (or its
    column name's length, if longer)."""

    def __init__(self, cols: Iterable[str], width: int = 13) -> None:
        self.cols = list(cols)
        self.widths = [max(width, len(c)) for c in self.cols]
        self._header_done = False

    def print_row(self, r: dict) -> None:
        if not self._header_done:
            print(" | ".join(f"{c:>{w}s}" for c, w in zip(self.cols, self.widths)))
            self._header_done = True
        line = " | ".join(f"{fmt(r.get(c)):>{w}s}" for c, w in zip(self.cols, self.widths))
        if "error" in r:
            line += f"   ({r['error']})"
        print(line, flush=True)


def torch_greedy(model: object, prompt: list[int], n: int) -> tuple[list[int], float]:
    """Greedy generation of ``n`` tokens after ``prompt`` with a transformers causal LM and its KV cache
    (call under ``torch.inference_mode()``): the tokens and the decode rate, tokens/s over the ``n - 1``
    steps after the prompt's forward."""
    import torch

    out = model(torch.tensor([prompt]), use_cache=True)  # type: ignore[operator]
    past, tok = out.past_key_values, int(out.logits[0, -1].argmax())
    toks, spent = [tok], 0.0
    while len(toks) < n:
        t = time.perf_counter()
        out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)  # type: ignore[operator]
        past, tok = out.past_key_values, int(out.logits[0, -1].argmax())
        spent += time.perf_counter() - t
        toks.append(tok)
    return toks, (n - 1) / spent if spent > 0 else 0.0


def agreement(ours: list[int], theirs: list[int]) -> str:
    """``"k/n"``: how many leading tokens of ``ours`` equal the reference's ``theirs`` (n of them)."""
    same = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    return f"{same}/{len(theirs)}"
