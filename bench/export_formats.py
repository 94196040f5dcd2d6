"""The exported C library per weight format: load time (read + convert in C), decode tokens/s, peak RSS.

Weights are random GPT-2-small dims (no hub downloads) in HF layout, with a synthetic 50257-token
byte-level vocabulary (the export links the tokenizer tables, so it needs one of the model's size).
Each format is exported once; a small C client times ``gpt2_init`` (parse the safetensors, transpose,
convert to fp16 / int8) and the decode steps of a greedy run, in a process with no Python.

    python bench/export_formats.py                   # GPT-2 small dims, fp32/fp16/int8
    python bench/export_formats.py --config tiny     # the bundled assets/tiny_gpt2
    python bench/export_formats.py --quick --json out.json   # < 1 minute: tiny model, 1 run each
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)

CLIENT = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>
#include "gpt2.h"
/* kB of a /proc/self/status field: VmHWM (peak) is this program's own (getrusage's ru_maxrss keeps
   the high-water mark of the Python process that forked it) */
static long status_kb(const char *key) {
  char line[256]; long v = -1; FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) if (!strncmp(line, key, strlen(key))) v = atol(line + strlen(key) + 1);
  fclose(f);
  return v;
}
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static double first, last; static int count;
static int on_token(int32_t id, const char *text, size_t len, void *user) {
  (void)id; (void)text; (void)len; (void)user;
  last = now(); if (count++ == 0) first = last; return 0;
}
int main(int argc, char **argv) {
  int err = 0;
  double t0 = now();
  gpt2_ctx *ctx = gpt2_init(argv[1], NULL, NULL, &err);
  double load = now() - t0;
  if (!ctx) { fprintf(stderr, "%s\n", gpt2_last_error(NULL)); return 2; }
  long hwm_load = status_kb("VmHWM"), rss_load = status_kb("VmRSS");
  gpt2_options o; gpt2_default_options(&o); o.max_new_tokens = atoi(argv[2]); o.stop_at_eos = 0;
  if (gpt2_generate(ctx, "The quick brown fox jumps over the lazy dog", &o, on_token, NULL)) return 2;
  printf("{\"format\": \"%s\", \"load_s\": %.4f, \"decode_tok_s\": %.2f, \"rss_after_load_mb\": %.1f, "
         "\"peak_load_mb\": %.1f, \"peak_rss_mb\": %.1f}\n", gpt2_weight_format(), load, (count - 1) / (last - first),
         rss_load / 1024.0, hwm_load / 1024.0, status_kb("VmHWM") / 1024.0);
  gpt2_free(ctx);
  return 0;
}
"""


def small_model_dir(root: Path) -> Path:
    """Random GPT-2-small weights + a synthetic byte-level vocabulary of 50257 tokens."""
    d = root / "gpt2_small_random"
    if (d / "model.safetensors").exists():
        return d
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(**SMALL, bos_token_id=50256, eos_token_id=50256)
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(d, safe_serialization=True)
    base = json.loads((REPO / "assets" / "tiny_gpt2" / "vocab.json").read_text(encoding="utf-8"))
    items = sorted((t for t in base if t != "<|endoftext|>"), key=base.__getitem__)
    vocab = {t: i for i, t in enumerate(items)}
    merges = []
    for a in items:  # pairs of known tokens, in a fixed order, until the vocabulary is full
        for b in items[:64]:
            if len(vocab) == SMALL["vocab_size"] - 1:
                break
            if a + b not in vocab:
                vocab[a + b] = len(vocab)
                merges.append(f"{a} {b}")
    vocab["<|endoftext|>"] = len(vocab)
    (d / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (d / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    return d


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", choices=["small", "tiny"], default="small")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--n-ctx", type=int, default=256)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "caten_export_formats"))
    ap.add_argument("--formats", default="fp32,fp16,int8")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="the bundled tiny model, one run per format")
    ap.add_argument("--json", metavar="PATH", help="write the table (median per format) as JSON")
    args = ap.parse_args()
    if args.quick:
        args.config, args.repeat = "tiny", 1
    from caten_lab.workflow.export import export, generation_workflow

    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    model = small_model_dir(root) if args.config == "small" else REPO / "assets" / "tiny_gpt2"
    exes = []
    for fmt in args.formats.split(","):
        out = export(
            generation_workflow(model, n_ctx=args.n_ctx, weight_format=fmt), root / f"{args.config}_{fmt}"
        )
        exe = out.directory / "bench_client"
        (out.directory / "bench_client.c").write_text(CLIENT)
        subprocess.run(
            [
                shutil.which("cc") or "cc",
                "-O2",
                f"-I{out.directory}",
                "-o",
                str(exe),
                str(exe) + ".c",
                f"-L{out.directory}",
                "-lgpt2",
                "-Wl,-rpath,$ORIGIN",
            ],
            check=True,
        )
        exes.append(exe)
    runs: dict[str, list[dict]] = {}
    for _ in range(args.repeat):  # formats interleaved: a busy shared machine slows them alike
        for exe in exes:
            r = subprocess.run(
                [str(exe), str(model), str(args.tokens)],
                capture_output=True,
                text=True,
                env={"OMP_WAIT_POLICY": "PASSIVE"},
                check=True,
            )
            row = json.loads(r.stdout)
            runs.setdefault(row["format"], []).append(row)
            print(json.dumps(row), flush=True)
    print(
        f"\n{args.config}, n_ctx {args.n_ctx}, {args.tokens} tokens; median of {args.repeat} runs (warm page cache)"
    )
    print("| format | load (gpt2_init) | decode tok/s | RSS after load | peak RSS while loading |")
    print("|---|---|---|---|---|")
    table = []
    for fmt, rs in runs.items():
        med = {
            k: statistics.median(r[k] for r in rs)
            for k in ("load_s", "decode_tok_s", "rss_after_load_mb", "peak_load_mb")
        }
        table.append({"format": fmt, **med})
        print(
            f"| {fmt} | {med['load_s']:.2f} s | {med['decode_tok_s']:.1f} | {med['rss_after_load_mb']:.0f} MB "
            f"| {med['peak_load_mb']:.0f} MB |"
        )
    if args.json:
        Path(args.json).write_text(
            json.dumps({"config": args.config, "n_ctx": args.n_ctx, "tokens": args.tokens, "rows": table}, indent=2)
        )


if __name__ == "__main__":
    main()
