"""What 8-bit activations cost in accuracy: caten_lab's default path for GGUF blocks (``activations="q8"``: each
row quantized to 8 bits in blocks, integer block dot products, as llama.cpp) against float activations on the
same dequantized weights (``activations="f32"``), teacher forced over the same text.

Per file: perplexity of each path over the text (its next-token cross-entropy, exp'd), top-1 agreement of
the two paths' next-token choices, the mean KL divergence KL(f32 || q8) of the next-token distributions and
the largest difference (nats) of the log-probability of the float path's choice between the two. The text is the SmolLM2 tokenization of a Shakespeare excerpt (the bundled
model's held-out text, assets/tiny_gpt2_heldout.txt) for the SmolLM2 files; GPT-2's random-weight files are
left out (their "perplexity" says nothing).

    python bench/quant_accuracy.py                  # SmolLM2 Q4_1 (and the re-quantized Q4_K / Q6_K files)
    python bench/quant_accuracy.py --quick          # Q4_1, 128 tokens
    python bench/quant_accuracy.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_rows import Table  # noqa: E402
from llm import file_path  # noqa: E402

FILES = ("smollm2-Q4_1", "smollm2-Q4_K", "smollm2-Q6_K")
COLUMNS = ("file", "tokens", "ppl_f32", "ppl_q8", "ppl_change", "top1_agree", "mean_kl", "max_dlogp_top1")


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def measure(name: str, n_tokens: int) -> dict:
    from caten_lab.models.llama import LlamaRunner
    from caten_lab.workflow.tokenizers.gguf_vocab import tokenizer_from_gguf

    path = file_path(name)
    text = (REPO / "assets" / "tiny_gpt2_heldout.txt").read_text()
    ids = tokenizer_from_gguf(path).encode(text, add_special=False)[:n_tokens]
    logp = {}
    for act in ("f32", "q8"):
        runner = LlamaRunner.from_pretrained(path, n_ctx=len(ids), all_logits=True, activations=act)
        logp[act] = log_softmax(runner.forward(ids, 0)[0])
    nll = {a: -float(np.mean(lp[np.arange(len(ids) - 1), ids[1:]])) for a, lp in logp.items()}
    p = np.exp(logp["f32"])
    kl = np.sum(p * (logp["f32"] - logp["q8"]), axis=-1)
    top = logp["f32"].argmax(-1)
    rows = np.arange(len(ids))
    dlogp = np.abs(logp["f32"][rows, top] - logp["q8"][rows, top])  # the float path's choice, under both
    return {"file": name, "tokens": len(ids), "ppl_f32": float(np.exp(nll["f32"])), "ppl_q8": float(np.exp(nll["q8"])),
            "ppl_change": float(np.exp(nll["q8"] - nll["f32"]) - 1),
            "top1_agree": float(np.mean(logp["f32"].argmax(-1) == logp["q8"].argmax(-1))),
            "mean_kl": float(kl.mean()), "max_dlogp_top1": float(dlogp.max())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--files", default="", help=f"comma list of {', '.join(FILES)}")
    ap.add_argument("--tokens", type=int, default=None, help="tokens of the text (default 1024; --quick: 128)")
    args = ap.parse_args()
    files = args.files.split(",") if args.files else ["smollm2-Q4_1"] if args.quick else list(FILES)
    n = args.tokens or (128 if args.quick else 1024)
    table, rows = Table(COLUMNS, width=12), []
    for name in files:
        rows.append(measure(name, n))
        table.print_row(rows[-1])
    if args.json:
        args.json.write_text(json.dumps({"rows": rows}, indent=2))


if __name__ == "__main__":
    main()
