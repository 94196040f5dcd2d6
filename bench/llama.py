"""SmolLM2-135M-Instruct (the real Q4_1 GGUF) decode and prefill speed: caten_lab vs llama.cpp vs transformers.

Same file for all three: llama.cpp reads it through the xllamacpp wheel (tests/refs/llamacpp.py runs it
in its own process); transformers dequantizes it to a float32 ``LlamaForCausalLM``; caten_lab compiles it
(``LlamaRunner``). Every row runs in a fresh process with its thread count (OMP_WAIT_POLICY=PASSIVE).

Columns: decode tokens/s (greedy after the ChatML prompt "What is the capital of France?", EOS ignored;
llama.cpp's own ``predicted_per_second``, the others time their decode steps), prefill tokens/s (a
``--prefill``-token English text, evaluated in full), both as the median of ``--runs`` runs after a
warm-up, each as a ratio to llama.cpp at the same thread count; ``agree``: how many of the first greedy
tokens equal llama.cpp's (llama.cpp multiplies with 8-bit activations, so where its two best tokens nearly
tie it may pick another one than a float evaluation does, and the texts then part: on the chat prompt
SmolLM2's first answer token is such a near-tie, "[" at -1.85 vs "The" at -2.01 nats); ``tf_top1``: the
teacher-forced top-1 agreement with llama.cpp over the prefill text (the share of its positions where the
row's most likely next token is llama.cpp's, llama.cpp's from tests/refs/llamacpp.py's cached
``teacher_forced``; caten_lab steps through the text one decode step at a time, transformers takes one
forward); load time (for caten_lab: load + compile + the warm-up generation) and peak RSS of the row's process.

caten_lab's weights: ``gguf`` (the default) keeps the file's quantized blocks, what
``LlamaRunner.from_pretrained`` does; ``fp32``, ``fp16``, ``int8`` dequantize the file first
(``dequantize=True``) and store the floats in that format.

    python bench/llama.py                       # threads 1 and 2: 64 decode tokens, 128-token prefill, 3 runs
    python bench/llama.py --quick               # < 1 minute: threads 2, 16 tokens, 32-token prefill, 1 run
    python bench/llama.py --systems llamacpp,transformers --threads-list 1 --json out.json
    python bench/llama.py --caten-weights gguf,fp32,int8   # one caten_lab row per weight format
    python bench/llama.py --gguf PATH           # another Llama GGUF (default: $CATEN_SMOLLM2 or the fetched one)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench_rows import Table, agreement, peak_rss_mb, run_worker, torch_greedy, worker_env

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from refs import llamacpp  # noqa: E402
from refs.texts import CHAT_PROMPT, LIGHTHOUSE  # noqa: E402

from caten_lab.config import config  # noqa: E402

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SYSTEMS = ("llamacpp", "caten_lab", "transformers")
COLUMNS = [
    "system",
    "weights",
    "threads",
    "decode_tok_s",
    "decode_vs_llamacpp",
    "prefill_tok_s",
    "prefill_vs_llamacpp",
    "agree",
    "tf_top1",
    "load_s",
    "peak_rss_mb",
]


def default_gguf() -> Path:
    env = os.environ.get("CATEN_SMOLLM2")
    return Path(env) if env else config().cache_dir / "models" / SMOLLM2_FILE


def llamacpp_row(
    gguf: Path, threads: int, prompt: list[int], prefill: list[int], gen: int, runs: int
) -> dict:
    """llama.cpp's row: one process, a warm-up run, then ``runs`` decode and ``runs`` prefill runs."""
    jobs = [{"op": "generate", "ids": prompt, "n": gen}] * (runs + 1)
    jobs += [{"op": "generate", "ids": prefill, "n": 1}] * runs
    res = llamacpp.run_jobs(gguf, jobs, threads=threads)
    decode, pre = res[1 : runs + 1], res[runs + 1 :]
    return {
        "system": "llamacpp",
        "weights": "gguf",
        "threads": threads,
        "tokens": res[0]["tokens"],
        "decode_tok_s": statistics.median(r["predicted_per_second"] for r in decode),
        "prefill_tok_s": statistics.median(r["prompt_per_second"] for r in pre),
        "load_s": res[0]["load_s"],
        "peak_rss_mb": res[-1]["peak_rss_mb"],
    }


def _transformers_worker(
    row: dict, gguf: Path, prompt: list[int], prefill: list[int], gen: int, runs: int
) -> None:
    import torch
    import transformers

    torch.set_num_threads(row["threads"])
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    model.eval()
    row["load_s"] = time.perf_counter() - t0  # includes dequantizing every tensor to float32

    def prefill_rate() -> float:
        t = time.perf_counter()
        model(torch.tensor([prefill]))
        return len(prefill) / (time.perf_counter() - t)

    with torch.inference_mode():
        row["tf_tokens"] = model(torch.tensor([prefill])).logits[0].argmax(-1).tolist()
        row["tokens"], _ = torch_greedy(model, prompt, gen)  # warm-up
        row["decode_tok_s"] = statistics.median(torch_greedy(model, prompt, gen)[1] for _ in range(runs))
        prefill_rate()
        row["prefill_tok_s"] = statistics.median(prefill_rate() for _ in range(runs))


def _caten_lab_worker(
    row: dict, gguf: Path, prompt: list[int], prefill: list[int], gen: int, runs: int
) -> None:
    from caten_lab.models.llama import LlamaRunner

    t0 = time.perf_counter()
    if row["weights"] == "gguf":
        runner = LlamaRunner.from_pretrained(gguf)  # the file's quantized blocks kept
    else:
        runner = LlamaRunner.from_pretrained(gguf, dequantize=True, weight_format=row["weights"])
    row["tokens"] = runner.generate(prompt, gen)[len(prompt) :]  # warm-up (compiles); greedy by default
    row["load_s"] = time.perf_counter() - t0  # load + trace + compile + the warm-up generation
    rates = []
    for _ in range(runs):
        runner.generate(prompt, gen)
        st = runner.stats
        rates.append(len(st.step_times) / sum(st.step_times))
    row["decode_tok_s"] = statistics.median(rates)
    runner.forward(prefill, 0)

    def prefill_rate() -> float:
        t = time.perf_counter()
        runner.forward(prefill, 0)
        return len(prefill) / (time.perf_counter() - t)

    row["prefill_tok_s"] = statistics.median(prefill_rate() for _ in range(runs))
    runner.reset()  # teacher forcing, one decode step per position: the prefill keeps only the last logits
    row["tf_tokens"] = [int(runner.forward([t], i)[0, -1].argmax()) for i, t in enumerate(prefill)]


def worker(args: argparse.Namespace) -> dict:
    """Measure one (system, threads) row in this process."""
    row = {"system": args.worker, "weights": args.weights, "threads": args.threads}
    ids = json.loads(Path(args.ids).read_text())
    fn = {"transformers": _transformers_worker, "caten_lab": _caten_lab_worker}[args.worker]
    fn(row, Path(args.gguf), ids["prompt"], ids["prefill"], args.gen, args.runs)
    row["peak_rss_mb"] = peak_rss_mb()
    return row


def with_ratios(row: dict, ref: dict | None, ref_top1: list[int] | None = None) -> dict:
    """``row`` plus its speed as a ratio to llama.cpp's row ``ref``, how many leading tokens agree and its
    teacher-forced agreement with llama.cpp's top-1 ``ref_top1`` over the prefill text."""
    ours_tf = row.pop("tf_tokens", None)
    if ref is None or "error" in row or "error" in ref:
        return row
    if ours_tf is not None and ref_top1 is not None and len(ours_tf) == len(ref_top1):
        row["tf_top1"] = sum(a == b for a, b in zip(ours_tf, ref_top1)) / len(ref_top1)
    for key in ("decode_tok_s", "prefill_tok_s"):
        if row.get(key) and ref.get(key):
            row[key.replace("_tok_s", "_vs_llamacpp")] = row[key] / ref[key]
    row["agree"] = agreement(row.get("tokens") or [], ref.get("tokens") or [])
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--gguf", type=Path, default=None)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list (of {', '.join(SYSTEMS)})")
    ap.add_argument(
        "--threads-list", default="", help="comma list of thread counts (default 1,2; --quick: 2)"
    )
    ap.add_argument("--gen", type=int, default=None, help="decode tokens (default 64; --quick: 16)")
    ap.add_argument("--prefill", type=int, default=None, help="prefill tokens (default 128; --quick: 32)")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per number (default 3; --quick: 1)")
    ap.add_argument(
        "--caten-weights",
        default="gguf",
        help="comma list of caten_lab weights, one row each: gguf (the file's blocks), fp32, fp16, int8 "
        "(dequantized; default gguf)",
    )
    ap.add_argument("--worker")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--weights", default="fp32")
    ap.add_argument("--ids")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return

    gguf = args.gguf or default_gguf()
    if not gguf.is_file():
        sys.exit(
            f"no GGUF file at {gguf}: run `caten-lab models fetch smollm2`, set CATEN_SMOLLM2 or pass --gguf"
        )
    threads_list = (
        [int(t) for t in args.threads_list.split(",")]
        if args.threads_list
        else ([2] if args.quick else [1, 2])
    )
    gen = args.gen or (16 if args.quick else 64)
    n_prefill = args.prefill or (32 if args.quick else 128)
    runs = args.runs or (1 if args.quick else 3)
    systems = [s for s in SYSTEMS if s in set(args.systems.split(","))]
    unknown = set(args.systems.split(",")) - set(SYSTEMS)
    if unknown:
        sys.exit(f"unknown systems {sorted(unknown)} (known: {', '.join(SYSTEMS)})")

    prompt, text = llamacpp.tokenize(gguf, [CHAT_PROMPT, LIGHTHOUSE])
    if n_prefill > len(text):
        sys.exit(f"--prefill {n_prefill}: the text has only {len(text)} tokens")
    tmp = tempfile.TemporaryDirectory(prefix="bench_llama_")
    ids_file = Path(tmp.name) / "ids.json"
    ids_file.write_text(json.dumps({"prompt": prompt, "prefill": text[:n_prefill]}))
    print(
        f"{gguf.name}: decode {gen} tokens after a {len(prompt)}-token prompt, prefill {n_prefill} tokens, "
        f"median of {runs} run(s)"
    )

    ref_top1 = None  # llama.cpp's teacher-forced top-1 over the prefill text (cached), for the other rows
    if "llamacpp" in systems and len(systems) > 1:
        try:
            ref_top1 = llamacpp.teacher_forced(gguf, text[:n_prefill], k=1).top1
        except llamacpp.LlamaCppError as e:
            print(f"llama.cpp teacher forcing failed (no tf_top1 column): {str(e).splitlines()[0][:200]}")
    table, rows = Table(COLUMNS), []
    for threads in threads_list:
        ref = None
        if "llamacpp" in systems:
            try:
                ref = llamacpp_row(gguf, threads, prompt, text[:n_prefill], gen, runs)
            except llamacpp.LlamaCppError as e:
                ref = {
                    "system": "llamacpp",
                    "weights": "gguf",
                    "threads": threads,
                    "error": str(e).splitlines()[0][:200],
                }
            rows.append(with_ratios(ref, ref))
            table.print_row(rows[-1])
        plan = [("transformers", "fp32")] if "transformers" in systems else []
        if "caten_lab" in systems:
            plan = [("caten_lab", w) for w in args.caten_weights.split(",")] + plan
        for system, weights in plan:
            cmd = [
                sys.executable,
                __file__,
                "--worker",
                system,
                "--threads",
                str(threads),
                "--weights",
                weights,
                "--gguf",
                str(gguf),
                "--ids",
                str(ids_file),
                "--gen",
                str(gen),
                "--runs",
                str(runs),
            ]
            row = run_worker(
                cmd, worker_env(threads), {"system": system, "weights": weights, "threads": threads}
            )
            rows.append(with_ratios(row, ref, ref_top1))
            table.print_row(rows[-1])
    tmp.cleanup()
    if args.json:
        args.json.write_text(
            json.dumps(
                {"gguf": str(gguf), "gen": gen, "prefill": n_prefill, "runs": runs, "rows": rows}, indent=2
            )
        )


if __name__ == "__main__":
    main()
