"""caten_lab vs llama.cpp vs transformers on the same GGUF files: decode, prefill, time to first token, RSS.

Files (bench/llm_files.py writes the non-downloaded ones once into ``<cache dir>/bench_llm``):
``gpt2-f32``, ``gpt2-f16``, ``gpt2-q8_0`` (GPT-2 small, random weights, the real GPT-2 tokenizer in the
metadata), ``smollm2-Q4_1`` (the real SmolLM2-135M-Instruct file: ``$CATEN_SMOLLM2``), ``smollm2-Q4_K``,
``smollm2-Q6_K`` (that file re-quantized by caten_lab's quantizers where the row length allows).

Systems, each row in its own process (OMP_WAIT_POLICY=PASSIVE, the thread count for OpenMP, caten_lab
and torch), the systems alternating run after run:
- ``llamacpp``: the xllamacpp wheel through tests/refs/llamacpp.py (its server's own timings);
- ``caten_lab``: ``GPT2Runner`` / ``LlamaRunner.from_pretrained(file)`` defaults (column ``ran``: the file's
  blocks kept, the quantized ones multiplied with 8-bit activations in integer block dot products as
  llama.cpp does, F16/F32 ones read as floats);
- ``transformers``: ``from_pretrained(dir, gguf_file=...)``, dequantized to float32.

Columns: decode tokens/s (``--gen`` greedy tokens after the prompt, EOS ignored), prefill tokens/s (the
same ``--prefill``-token English prompt for every system: tests/refs/texts.py's LIGHTHOUSE, tokenized by
llama.cpp), both the median over ``--runs`` processes (each after a warm-up generation), and their ratio to
llama.cpp's at the same thread count; ``ttft_cold_s``: from loading the file to the first token in the
first process (caten_lab: an empty compile and prepared-weights cache; llama.cpp: model load + prompt);
``ttft_warm_s``: the same in the later processes (caten_lab's caches filled), median; ``agree``: leading
greedy tokens equal to llama.cpp's; peak RSS: the largest over the row's processes.

    python bench/llm.py                      # every file, threads 1 and 2, 128 tokens, 3 runs (long)
    python bench/llm.py --quick              # gpt2-f32 + smollm2-Q4_1, 2 threads, 16 tokens, 1 run
    python bench/llm.py --files smollm2-Q4_1 --systems llamacpp,caten_lab --json out.json
    python bench/llm.py --busy --threads-list 2  # another process keeps a core busy meanwhile

``--busy``: a busy-looping process runs through every measurement (a second core someone else uses); the
ratio keys then end in ``+busy``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import llm_files
from bench_rows import Table, agreement, peak_rss_mb, run_worker, torch_greedy, worker_env
from refs import llamacpp  # llm_files put tests/ on sys.path
from refs.texts import LIGHTHOUSE

SYSTEMS = ("llamacpp", "caten_lab", "transformers")
FILES = ("gpt2-f32", "gpt2-f16", "gpt2-q8_0", "smollm2-Q4_1", "smollm2-Q4_K", "smollm2-Q6_K")
QUICK_FILES = ("gpt2-f32", "smollm2-Q4_1")
COLUMNS = [
    "file",
    "system",
    "ran",
    "threads",
    "decode_tok_s",
    "decode_vs_llamacpp",
    "prefill_tok_s",
    "prefill_vs_llamacpp",
    "ttft_cold_s",
    "ttft_warm_s",
    "agree",
    "peak_rss_mb",
]
RAN = {"llamacpp": "gguf as stored", "transformers": "fp32 dequant"}


def smollm2_file() -> Path:
    env = os.environ.get("CATEN_SMOLLM2")
    from caten_lab.config import config

    return Path(env) if env else config().cache_dir / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def file_path(name: str) -> Path:
    """The GGUF file of a benchmark file name (written on first use)."""
    family, kind = name.split("-", 1)
    if family == "gpt2":
        return llm_files.gpt2_small_gguf(kind)
    src = smollm2_file()
    if not src.is_file():
        sys.exit(f"no SmolLM2 file at {src}: run `caten-lab models fetch smollm2` or set CATEN_SMOLLM2")
    return src if kind == "Q4_1" else llm_files.smollm2_requantized(src, kind)


# ---- workers (one process per measurement) --------------------------------------------------------
def _caten_lab(row: dict, path: Path, prompt: list[int], gen: int) -> None:
    if row["family"] == "gpt2":
        from caten_lab.models.gpt2 import GPT2Runner as Runner
    else:
        from caten_lab.models.llama import LlamaRunner as Runner
    from caten_lab.formats.act_quant import QUANT_MATMUL_TYPES

    t0 = time.perf_counter()
    runner = Runner.from_pretrained(path)
    quantized = {str(t) for t in runner.raw_types.values()} & set(QUANT_MATMUL_TYPES)
    row["ran"] = "gguf blocks" + (", 8-bit act." if quantized and runner.activations == "q8" else "")
    first = list(runner.stream(prompt, 1))
    row["ttft_s"] = time.perf_counter() - t0  # load + trace + compile (or the caches) + prefill + sample
    if not gen:
        return
    row["tokens"] = runner.generate(prompt, gen)[len(prompt) :]  # warm-up of the decode steps
    assert row["tokens"][:1] == first
    runner.generate(prompt, gen)
    row["decode_tok_s"] = runner.stats.decode_tok_s  # steps and greedy sampling, as llama.cpp's timing
    runner.forward(prompt, 0)
    t = time.perf_counter()
    runner.forward(prompt, 0)
    row["prefill_tok_s"] = len(prompt) / (time.perf_counter() - t)


def _transformers(row: dict, path: Path, prompt: list[int], gen: int) -> None:
    import torch
    import transformers

    torch.set_num_threads(row["threads"])
    row["ran"] = RAN["transformers"]
    t0 = time.perf_counter()
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    with torch.inference_mode():
        tok = int(model(torch.tensor([prompt])).logits[0, -1].argmax())
        row["ttft_s"] = time.perf_counter() - t0  # load (dequantize every tensor) + prefill + sample
        if not gen:
            return
        row["tokens"], _ = torch_greedy(model, prompt, gen)  # warm-up
        assert row["tokens"][0] == tok
        row["decode_tok_s"] = torch_greedy(model, prompt, gen)[1]
        model(torch.tensor([prompt]))
        t = time.perf_counter()
        model(torch.tensor([prompt]))
        row["prefill_tok_s"] = len(prompt) / (time.perf_counter() - t)


def worker(args: argparse.Namespace) -> dict:
    row = {"system": args.worker, "threads": args.threads, "family": args.family}
    prompt = json.loads(Path(args.ids).read_text())
    {"caten_lab": _caten_lab, "transformers": _transformers}[args.worker](
        row, Path(args.file), prompt, args.gen
    )
    row["peak_rss_mb"] = peak_rss_mb()
    return row


def llamacpp_run(path: Path, threads: int, prompt: list[int], gen: int) -> dict:
    """One llama.cpp process: a first generation (time to first token = load + its prompt), then the
    measured one (decode and prefill rates from the server's timings)."""
    jobs = [{"op": "generate", "ids": prompt, "n": max(gen, 1)}] * (2 if gen else 1)
    base = {"system": "llamacpp", "threads": threads, "ran": RAN["llamacpp"]}
    try:
        res = llamacpp.run_jobs(path, jobs, threads=threads)
    except llamacpp.LlamaCppError as e:
        return {**base, "error": str(e).splitlines()[0][:200]}
    row = {
        **base,
        "ttft_s": res[0]["load_s"] + res[0]["prompt_ms"] / 1000,
        "peak_rss_mb": res[-1]["peak_rss_mb"],
    }
    if gen:
        row.update(
            tokens=res[0]["tokens"],
            decode_tok_s=res[1]["predicted_per_second"],
            prefill_tok_s=res[1]["prompt_per_second"],
        )
    return row


def measure(
    system: str, name: str, path: Path, threads: int, ids_file: Path, prompt: list[int], gen: int, cache: Path
) -> dict:
    if system == "llamacpp":
        return llamacpp_run(path, threads, prompt, gen)
    family = name.split("-", 1)[0]
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        system,
        "--family",
        family,
        "--file",
        str(path),
        "--threads",
        str(threads),
        "--ids",
        str(ids_file),
        "--gen",
        str(gen),
    ]
    return run_worker(cmd, worker_env(threads, cache), {"system": system, "threads": threads})


def combine(name: str, runs: list[dict]) -> dict:
    """One row from a system's processes: medians of the rates, the first process's (cold) and the
    later ones' (warm) time to first token, the largest peak RSS."""
    failed = [r for r in runs if "error" in r]
    row = {"file": name, **{k: runs[0].get(k) for k in ("system", "threads", "ran")}}
    if failed:
        return {**row, "ran": row["ran"] or failed[0].get("ran"), "error": failed[0]["error"]}
    measured = [r for r in runs if "decode_tok_s" in r]
    row["ran"] = runs[0].get("ran")
    row["tokens"] = measured[0].get("tokens")
    for key in ("decode_tok_s", "prefill_tok_s"):
        row[key] = statistics.median(r[key] for r in measured)
    row["ttft_cold_s"] = runs[0]["ttft_s"]
    row["ttft_warm_s"] = statistics.median(r["ttft_s"] for r in runs[1:])
    row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return row


def with_ratios(row: dict, ref: dict | None) -> dict:
    if ref is None or "error" in row or "error" in ref:
        return row
    for key in ("decode", "prefill"):
        row[f"{key}_vs_llamacpp"] = row[f"{key}_tok_s"] / ref[f"{key}_tok_s"]
    row["agree"] = agreement(row.get("tokens") or [], ref.get("tokens") or [])
    return row


def bench_file(
    name: str,
    systems: list[str],
    threads_list: list[int],
    gen: int,
    n_prefill: int,
    runs: int,
    table: Table,
    cache_dir: Path | None = None,
    busy: bool = False,
) -> list[dict]:
    path = file_path(name)
    (text,) = llamacpp.tokenize(path, [LIGHTHOUSE])
    if n_prefill > len(text):
        sys.exit(f"--prefill {n_prefill}: the text has only {len(text)} tokens for {name}")
    prompt = text[:n_prefill]
    print(f"{name}: {path.name} ({llm_files.describe(path)})", flush=True)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        rows = _bench_threads(name, path, prompt, systems, threads_list, gen, runs, table, cache_dir)
    finally:
        if hog is not None:
            hog.kill()
            hog.wait()
    for r in rows:
        r["busy"] = busy
    return rows


def _bench_threads(name: str, path: Path, prompt: list[int], systems: list[str], threads_list: list[int], gen: int,
                   runs: int, table: Table, cache_dir: Path | None) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_llm_") as tmp:
        ids_file = Path(tmp) / "ids.json"
        ids_file.write_text(json.dumps(prompt))
        for threads in threads_list:
            caches = {s: cache_dir or Path(tmp) / f"cache-{s}-{threads}" for s in systems}  # empty: cold
            got: dict[str, list[dict]] = {s: [] for s in systems}
            plan = [gen] * runs + ([0] if runs == 1 else [])  # a warm process for ttft_warm_s
            for n in plan:
                for s in systems:  # alternating
                    got[s].append(measure(s, name, path, threads, ids_file, prompt, n, caches[s]))
            ref = combine(name, got["llamacpp"]) if "llamacpp" in systems else None
            for s in systems:
                row = ref if s == "llamacpp" else combine(name, got[s])
                rows.append(with_ratios(row, ref))
                table.print_row(rows[-1])
            for c in caches.values():
                if c != cache_dir:
                    shutil.rmtree(c, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--files",
        default="",
        help=f"comma list of {', '.join(FILES)} (default all; --quick: {', '.join(QUICK_FILES)})",
    )
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list of {', '.join(SYSTEMS)}")
    ap.add_argument(
        "--threads-list", default="", help="comma list of thread counts (default 1,2; --quick: 2)"
    )
    ap.add_argument("--gen", type=int, default=None, help="decode tokens (default 128; --quick: 16)")
    ap.add_argument("--prefill", type=int, default=128, help="prompt tokens (default 128)")
    ap.add_argument("--runs", type=int, default=None, help="processes per row (default 3; --quick: 1)")
    ap.add_argument(
        "--cache-dir",
        type=Path,
        help="caten_lab's compile cache for every process (default: an empty one per row, so ttft_cold_s is "
        "cold; with this it is the time on whatever DIR holds)",
    )
    ap.add_argument("--busy", action="store_true", help="a busy-looping process runs meanwhile (a busy core)")
    ap.add_argument("--worker")
    ap.add_argument("--family")
    ap.add_argument("--file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ids")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return

    files = args.files.split(",") if args.files else list(QUICK_FILES if args.quick else FILES)
    systems = [s for s in SYSTEMS if s in args.systems.split(",")]
    bad = (set(files) - set(FILES)) | (set(args.systems.split(",")) - set(SYSTEMS))
    if bad:
        sys.exit(
            f"unknown files/systems {sorted(bad)} (files: {', '.join(FILES)}; systems: {', '.join(SYSTEMS)})"
        )
    threads_list = (
        [int(t) for t in args.threads_list.split(",")] if args.threads_list else [2] if args.quick else [1, 2]
    )
    gen = args.gen or (16 if args.quick else 128)
    runs = args.runs or (1 if args.quick else 3)
    print(
        f"decode {gen} greedy tokens after a {args.prefill}-token prompt (also the prefill), median of "
        f"{runs} process(es) per row, systems alternating"
    )
    table, rows = Table(COLUMNS, width=11), []
    for name in files:
        rows += bench_file(name, systems, threads_list, gen, args.prefill, runs, table, args.cache_dir, args.busy)
    ratios: dict[str, dict[str, float]] = {"decode_vs_llamacpp": {}, "prefill_vs_llamacpp": {}}
    for r in rows:
        if r["system"] == "caten_lab":
            for key, d in ratios.items():
                if r.get(key) is not None:
                    d[f"{r['file']}@{r['threads']}t" + ("+busy" if r.get("busy") else "")] = r[key]
    print("\ncaten_lab / llama.cpp:")
    for key, d in ratios.items():
        print(f"  {key}: " + ", ".join(f"{k} {v:.2f}x" for k, v in d.items()))
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "gen": gen,
                    "prefill": args.prefill,
                    "runs": runs,
                    "threads": threads_list,
                    "busy": args.busy,
                    "rows": rows,
                    "ratios": ratios,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
