"""What each safety level checks at a compiled program's entry, and what it costs per call.

For a tiny program (the README's KV-cache example: one store, one windowed sum) and the GPT-2 decode
program (the bundled 4-layer model in assets/tiny_gpt2; without --quick also GPT-2 small's dimensions
with random weights), at safety 0, 1 and 2 side by side:

- ``entry_us``: the checks ``Program._enter`` makes before any kernel runs (inputs bound, symbol
  binding; at safety >= 1 input shapes and the window conditions), microseconds per call;
- ``windows_us``: of that, the window/dimension conditions alone (``program.entry.check``);
- ``conditions``: how many distinct conditions the program has (``len(program.entry)``);
- ``call_us``: one whole call (decode step for GPT-2: one token at pos 16);
- ``decode_tok_s``: greedy decode tokens/s over ``--tokens`` new tokens (GPT-2 rows);
- ``same_c_as_safety_0``: whether the generated C equals the safety-0 program's (then the two differ
  only by the entry checks; safety 1 adds C only for integer ``//``/``%`` by a non-constant divisor and
  one compare per looked-up row of a gather / ``x[ids]`` / embedding, e.g. GPT-2's token embedding).

Everything runs in this process: a warm-up round, then ``--rounds`` rounds, each measuring every
safety level in turn (so a burst of load on a shared machine hits all levels alike); the table shows
the median over the rounds (each entry time itself the median of 5 batches of many calls).

    python bench/entry_checks.py --quick --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from caten_lab.config import settings  # noqa: E402

PROMPT = [5, 17, 33, 2, 100, 7, 42, 9]


def per_call_us(fn, n: int) -> float:  # noqa: ANN001
    """Median over 5 batches of ``n`` calls, microseconds per call."""
    fn()
    batches = []
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        batches.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(batches)


def measure(prog, inputs: dict, sym: dict, n: int) -> dict:  # noqa: ANN001
    row: dict = {"conditions": len(prog.entry) if hasattr(prog, "entry") else None}
    if hasattr(prog, "_enter"):
        row["entry_us"] = per_call_us(lambda: prog._enter(inputs, sym), n)
        row["windows_us"] = per_call_us(lambda: prog.entry.check(sym), n)
    row["call_us"] = per_call_us(lambda: prog(inputs, sym), max(5, n // 10))
    return row


def median_rows(rounds: list[dict]) -> dict:
    """The median of each measured number over the rounds (the other keys from the first round)."""
    out = dict(rounds[0])
    for k, v in rounds[0].items():
        if isinstance(v, float):
            out[k] = statistics.median(r[k] for r in rounds)
    return out


def kv_program(safety: int):  # noqa: ANN201
    from caten_lab.compiler import compile
    from caten_lab.frontend import Sym, Tensor, build_graph, placeholder

    seq, pos = Sym("seq"), Sym("pos")
    cache = Tensor.from_numpy(np.zeros((1, 4, 128, 16), np.float32), name="cache")
    k = placeholder((1, 4, seq, 16), name="k")
    cache[:, :, pos:pos + seq] = k
    g, arrays = build_graph([cache[:, :, :pos + seq].sum(-1)])
    return compile(g, safety=safety), {**arrays, "k": np.ones((1, 4, 1, 16), np.float32)}, {"pos": 16, "seq": 1}


def small_model_dir(root: Path) -> Path:
    import torch
    import transformers

    d = root / "gpt2_small_random"
    if not (d / "model.safetensors").exists():
        torch.manual_seed(0)
        cfg = transformers.GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
        transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(d)
    return d


class GPT2Case:
    """One runner (weights loaded once) and its decode program compiled at each safety level."""

    def __init__(self, model_dir: Path) -> None:
        from caten_lab.models.gpt2 import GPT2Runner

        self.runner = GPT2Runner.from_pretrained(model_dir)
        self.programs = {}
        for safety in (0, 1, 2):
            with settings(safety=safety):
                self.programs[safety] = self.runner.compile()

    def row(self, safety: int, n: int, tokens: int) -> dict:
        r = self.runner
        prog = r._program = self.programs[safety]
        r.reset()
        r.forward(PROMPT, 0)
        inputs = {**r.arrays, r.tokens_name: np.array([[3]], np.int64)}
        row = measure(prog, inputs, {"seq": 1, "pos": len(PROMPT)}, n)
        r.reset()
        r.generate(PROMPT, tokens)
        row["decode_tok_s"] = r.stats.decode_tok_s
        row["inputs"] = len(prog.input_shapes)
        row["same_c_as_safety_0"] = prog.c_source == self.programs[0].c_source
        return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the bundled tiny GPT-2 only, fewer repetitions")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--tokens", type=int, default=0, help="decode tokens per GPT-2 row (default 32; --quick 24)")
    ap.add_argument("--threads", type=int, default=1,
                    help="OpenMP threads of the compiled programs (default 1: steadier on a shared machine)")
    ap.add_argument("--rounds", type=int, default=0, help="measured rounds per row, median reported (default 5; --quick 3)")
    args = ap.parse_args()
    n = 400 if args.quick else 2000
    tokens = args.tokens or (24 if args.quick else 32)
    args.rounds = args.rounds or (3 if args.quick else 5)
    models = [("gpt2-tiny (assets, 4x128)", REPO / "assets" / "tiny_gpt2")]
    tmp = tempfile.TemporaryDirectory()
    if not args.quick:
        models.append(("gpt2-small dims (12x768)", small_model_dir(Path(tmp.name))))
    with settings(threads=args.threads):
        rows = measure_all(args, n, tokens, models)
    print_table(rows)
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "quick": args.quick, "rounds": args.rounds,
                                         "threads": args.threads}, indent=2))
    tmp.cleanup()


def measure_all(args: argparse.Namespace, n: int, tokens: int, models: list) -> list[dict]:
    kv = {safety: kv_program(safety) for safety in (0, 1, 2)}
    cases = [(name, GPT2Case(d)) for name, d in models]
    rounds: dict[tuple[str, int], list[dict]] = {}
    for rnd in range(args.rounds + 1):  # round 0 warms up (first calls, page faults, OpenMP threads)
        for safety in (0, 1, 2):  # interleaved, so a burst of load on the shared machine hits every level
            prog, inputs, sym = kv[safety]
            r = {"program": "kv-cache example", "safety": safety, **measure(prog, inputs, sym, n),
                 "inputs": len(prog.input_shapes), "same_c_as_safety_0": prog.c_source == kv[0][0].c_source}
            if rnd:
                rounds.setdefault(("kv", safety), []).append(r)
            for name, case in cases:
                r = {"program": name, "safety": safety, **case.row(safety, n // 4, tokens)}
                if rnd:
                    rounds.setdefault((name, safety), []).append(r)
    return [median_rows(rs) for rs in rounds.values()]


def print_table(rows: list[dict]) -> None:
    cols = ["program", "safety", "inputs", "conditions", "entry_us", "windows_us", "call_us", "decode_tok_s",
            "same_c_as_safety_0"]
    print(" | ".join(f"{c:>14}" if i else f"{c:<26}" for i, c in enumerate(cols)))
    for r in sorted(rows, key=lambda r: (r["program"], r["safety"])):
        cells = []
        for i, c in enumerate(cols):
            v = r.get(c)
            text = "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
            cells.append(f"{text:>14}" if i else f"{text:<26}")
        print(" | ".join(cells))


if __name__ == "__main__":
    main()
