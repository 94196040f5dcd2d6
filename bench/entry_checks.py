"""What each safety level checks at a compiled program's entry, and what it costs per call.

For a tiny program (the README's KV-cache example: one store, one windowed sum) and the GPT-2 decode
program (the bundled 4-layer model in assets/tiny_gpt2; without --quick also GPT-2 small's dimensions
with random weights), at safety 0, 1 and 2 side by side:

- ``entry_us``: the checks ``Program._enter`` makes before any kernel runs (inputs bound, symbol
  binding; at safety >= 1 input shapes and the window conditions), microseconds per call;
- ``windows_us``: of that, the window/dimension conditions alone (``program.entry.check``);
- ``conditions``: how many distinct conditions the program has (``len(program.entry)``);
- ``call_us``: one whole call (decode step for GPT-2: one token at pos 16);
- ``decode_tok_s``: greedy decode tokens/s over ``--tokens`` new tokens (GPT-2 rows).

Each row runs in this process; the machine's other load shows up in ``call_us`` and ``decode_tok_s``
more than in the entry times (many short repetitions, median of 5 batches).

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
    row["call_us"] = per_call_us(lambda: prog(inputs, sym), max(1, n // 20))
    return row


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


def gpt2_row(model_dir: Path, safety: int, n: int, tokens: int) -> dict:
    from caten_lab.models.gpt2 import GPT2Runner

    with settings(safety=safety):
        runner = GPT2Runner.from_pretrained(model_dir)
        prog = runner.compile()
    runner.reset()
    runner.forward(PROMPT, 0)
    inputs = {**runner.arrays, runner.tokens_name: np.array([[3]], np.int64)}
    row = measure(prog, inputs, {"seq": 1, "pos": len(PROMPT)}, n)
    runner.reset()
    runner.generate(PROMPT, tokens)
    row["decode_tok_s"] = runner.stats.decode_tok_s
    row["inputs"] = len(prog.input_shapes)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="the bundled tiny GPT-2 only, fewer repetitions")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--tokens", type=int, default=0, help="decode tokens per GPT-2 row (default 32; --quick 24)")
    args = ap.parse_args()
    n = 400 if args.quick else 2000
    tokens = args.tokens or (24 if args.quick else 32)
    models = [("gpt2-tiny (assets, 4x128)", REPO / "assets" / "tiny_gpt2")]
    tmp = tempfile.TemporaryDirectory()
    if not args.quick:
        models.append(("gpt2-small dims (12x768)", small_model_dir(Path(tmp.name))))
    rows = []
    for safety in (0, 1, 2):
        prog, inputs, sym = kv_program(safety)
        rows.append({"program": "kv-cache example", "safety": safety, **measure(prog, inputs, sym, n)})
        for name, d in models:
            rows.append({"program": name, "safety": safety, **gpt2_row(d, safety, n // 4, tokens)})
    cols = ["program", "safety", "conditions", "entry_us", "windows_us", "call_us", "decode_tok_s"]
    print(" | ".join(f"{c:>14}" if i else f"{c:<26}" for i, c in enumerate(cols)))
    for r in sorted(rows, key=lambda r: (r["program"], r["safety"])):
        cells = []
        for i, c in enumerate(cols):
            v = r.get(c)
            text = "-" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v)
            cells.append(f"{text:>14}" if i else f"{text:<26}")
        print(" | ".join(cells))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "quick": args.quick}, indent=2))
    tmp.cleanup()


if __name__ == "__main__":
    main()
