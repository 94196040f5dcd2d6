"""GPT-2 decode/prefill speed: caten_lab (C; fp32, fp16, int8) vs PyTorch eager vs tinygrad vs NumPy.

Every system runs in its own subprocess (clean peak RSS, its own thread count), with
OMP_WAIT_POLICY=PASSIVE so a busy second core does not stall spinning OpenMP threads.

Columns: time to first token with a cold and a warm cache dir (load + trace + compile + prefill of
an 8-token prompt + first sample; warm = the compile cache and, for caten_lab, the prepared-weights
cache hit: ``wcache`` shows cold/warm status, ``warm_load_s``/``warm_rss_mb`` the warm process),
decode tokens/s (greedy, KV cache), prefill tokens/s for a 128-token prompt, peak RSS. Weights are
random (no hub downloads), saved once in HF layout.

    python bench/gpt2.py                 # tiny + GPT-2 small dims, 1 and 2 threads
    python bench/gpt2.py --quick         # < 1 minute: fewer tokens, 2 threads, fewer rows
    python bench/gpt2.py --configs small --systems caten_lab,torch   # only some rows
    python bench/gpt2.py --no-weight-cache   # warm rows re-read and re-convert the weights
    python bench/gpt2.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bench_rows import Table, peak_rss_mb, run_worker, worker_env

CONFIGS = {
    "tiny": dict(n_layer=2, n_embd=64, n_head=4, vocab_size=50257, n_positions=1024),
    "small": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
}
PROMPT = [464, 2068, 7586, 21831, 18045, 625, 262, 16931]


def make_model_dir(root: Path, name: str) -> Path:
    d = root / name
    if (d / "model.safetensors").exists():
        return d
    import torch
    import transformers

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(**CONFIGS[name], bos_token_id=50256, eos_token_id=50256)
    transformers.GPT2LMHeadModel(cfg).eval().save_pretrained(d)
    return d


def worker(args: argparse.Namespace) -> dict:
    """Measure one (system, config, weights, threads) row in this process."""
    model_dir = Path(args.model_dir)
    n_gen, n_prefill = args.gen, args.prefill
    row = {"system": args.system, "config": args.config, "weights": args.weights, "threads": args.threads}
    if args.system in ("caten_lab", "numpy"):
        from caten_lab.models.gpt2 import GPT2Runner

        backend = "c" if args.system == "caten_lab" else "numpy"
        t0 = time.perf_counter()
        runner = GPT2Runner.from_pretrained(model_dir, weight_format=args.weights, backend=backend)
        row["load_s"] = runner.load_s  # read the safetensors, or map the prepared-weights cache
        row["build_s"] = runner.trace_s  # transpose + convert (on a cache miss) + trace
        row["wcache"] = runner.weights_cache
        toks = list(runner.stream(PROMPT, 1))
        row["ttft_s"] = time.perf_counter() - t0  # everything: load + build + compile + prefill + sample
        row["compile_s"] = runner.compile_s
        if n_gen:
            runner.generate(PROMPT, n_gen)
            st = runner.stats
            row["decode_tok_s"] = (n_gen - 1) / sum(st.step_times) if st.step_times else 0.0
        if n_prefill:
            ids = [(i * 7919) % 50000 for i in range(n_prefill)]
            runner.forward(ids, 0)  # warm
            t = time.perf_counter()
            runner.forward(ids, 0)
            row["prefill_tok_s"] = n_prefill / (time.perf_counter() - t)
        del toks
    elif args.system == "torch":
        import torch
        import transformers

        torch.set_num_threads(args.threads)
        model = transformers.GPT2LMHeadModel.from_pretrained(model_dir).eval()
        if args.weights == "fp16":
            model = model.half()
        with torch.inference_mode():
            t0 = time.perf_counter()
            out = model(torch.tensor([PROMPT]), use_cache=True)
            int(out.logits[0, -1].argmax())
            row["ttft_s"] = time.perf_counter() - t0
            if n_gen:
                past, tok, times = out.past_key_values, int(out.logits[0, -1].argmax()), []
                for _ in range(n_gen - 1):
                    t = time.perf_counter()
                    o = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
                    past, tok = o.past_key_values, int(o.logits[0, -1].argmax())
                    times.append(time.perf_counter() - t)
                row["decode_tok_s"] = len(times) / sum(times)
            if n_prefill:
                ids = torch.tensor([[(i * 7919) % 50000 for i in range(n_prefill)]])
                model(ids)
                t = time.perf_counter()
                model(ids)
                row["prefill_tok_s"] = n_prefill / (time.perf_counter() - t)
    elif args.system == "tinygrad":
        _tinygrad_env(args.threads)  # before the import: tinygrad reads CACHEDB/PARALLEL at import time
        try:
            import tinygrad  # noqa: F401
        except ImportError:
            row["error"] = "tinygrad not installed (pip install tinygrad==0.14.0 to include it)"
            return row
        _tinygrad_worker(row, model_dir, n_gen, n_prefill)
        return row
    row["peak_rss_mb"] = peak_rss_mb()
    return row


def _tinygrad_env(threads: int) -> None:
    """CPU device (clang), a compile pool of ``threads``, and the compile cache in this row's cache dir."""
    os.environ.setdefault("DEV", "CPU")
    os.environ.setdefault("PARALLEL", str(threads))
    if os.environ.get("CATEN_CACHE_DIR"):
        os.environ.setdefault("CACHEDB", str(Path(os.environ["CATEN_CACHE_DIR"]) / "tinygrad_cache.db"))


def _tinygrad_worker(row: dict, model_dir: Path, n_gen: int, n_prefill: int) -> None:
    """tinygrad 0.14 on CPU (clang): TTFT = un-jitted prompt prefill incl. schedule + codegen + clang.

    The compile cache (CACHEDB) lives in this row's fresh cache dir, so TTFT is a cold compile. Decode is
    timed after two warm-up steps (TinyJit compiles on call 0, captures on call 1, replays after).
    tinygrad's CPU kernels are single-threaded: the threads column only sizes its compile pool.
    """
    import shutil

    if shutil.which("clang") is None:
        row["error"] = "tinygrad DEV=CPU needs the clang binary (apt-get install -y clang)"
        return
    if row["weights"] != "fp32":
        row["error"] = "tinygrad runner measures fp32 only"
        return
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import numpy as np
    from _tinygrad_gpt2 import TinygradGPT2, load_hf_gpt2

    t0 = time.perf_counter()
    config, weights = load_hf_gpt2(model_dir)  # safetensors -> realized tinygrad tensors
    t1 = time.perf_counter()
    model = TinygradGPT2(config, weights)  # layers + zeroed KV caches
    row["load_s"], row["build_s"] = t1 - t0, time.perf_counter() - t1
    t = time.perf_counter()
    first_logits = model.prefill_logits(PROMPT)
    tokens = [int(np.argmax(first_logits))]
    row["ttft_s"] = time.perf_counter() - t  # from a loaded model: schedule + compile + prefill + sample
    pos = len(PROMPT)

    def step() -> float:
        nonlocal pos
        t = time.perf_counter()
        tokens.append(model.decode(tokens[-1], pos))
        pos += 1
        return time.perf_counter() - t

    n_check = 16 if row["config"] == "tiny" else 0
    if n_gen or n_check:
        row["jit_warmup_s"] = step() + step()  # call 0 compiles the decode kernels, call 1 captures
    if n_gen:
        times = [step() for _ in range(n_gen - 1)]
        row["decode_tok_s"] = len(times) / sum(times)
    while len(tokens) < n_check:
        step()
    if n_prefill:
        ids = [(i * 7919) % 50000 for i in range(n_prefill)]
        model.prefill(ids)  # warm (compiles the 128-token kernels)
        t = time.perf_counter()
        model.prefill(ids)
        row["prefill_tok_s"] = n_prefill / (time.perf_counter() - t)
    row["peak_rss_mb"] = peak_rss_mb()  # before the reference check loads torch
    if n_check:
        ref_tokens, ref_logits = _transformers_greedy(model_dir, n_check)
        ours = tokens[:n_check]
        row["check_max_abs_logit_diff"] = float(np.abs(first_logits - ref_logits).max())
        if ours == ref_tokens:
            row["check"] = f"greedy {n_check} tokens equal transformers'"
        else:
            bad = next(i for i, (a, b) in enumerate(zip(ours, ref_tokens)) if a != b)
            row["error"] = f"WARNING: greedy tokens differ from transformers' at step {bad}: {ours} vs {ref_tokens}"


def _transformers_greedy(model_dir: Path, n: int) -> tuple[list[int], object]:
    """Reference greedy tokens (KV cache loop) and first-token logits from HF transformers."""
    import torch
    import transformers

    model = transformers.GPT2LMHeadModel.from_pretrained(model_dir).eval()
    with torch.inference_mode():
        out = model(torch.tensor([PROMPT]), use_cache=True)
        first_logits = out.logits[0, -1].numpy().copy()
        past, tok, toks = out.past_key_values, int(out.logits[0, -1].argmax()), []
        while True:
            toks.append(tok)
            if len(toks) == n:
                return toks, first_logits
            out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, int(out.logits[0, -1].argmax())


def run_row(system: str, config: str, weights: str, threads: int, model_dir: Path, cache: Path, gen: int, prefill: int,
            no_weight_cache: bool = False) -> dict:
    env = worker_env(threads, cache)
    cmd = [sys.executable, __file__, "--worker", system, "--config", config, "--weights", weights,
           "--threads", str(threads), "--model-dir", str(model_dir), "--gen", str(gen), "--prefill", str(prefill)]
    if no_weight_cache:
        env["CATEN_WEIGHT_CACHE"] = "0"
    base = {"system": system, "config": config, "weights": weights, "threads": threads}
    return run_worker(cmd, env, base)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--configs", default="tiny,small")
    ap.add_argument("--systems", default="", help="comma list to run only some rows (caten_lab,torch,tinygrad,numpy)")
    ap.add_argument("--threads-list", default="", help="comma list of thread counts (default 1,2; --quick: 2)")
    ap.add_argument("--no-weight-cache", action="store_true",
                    help="CATEN_WEIGHT_CACHE=0: warm rows re-read and re-convert the weights (compile cache only)")
    ap.add_argument("--worker")
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--weights", default="fp32")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--model-dir")
    ap.add_argument("--gen", type=int, default=32)
    ap.add_argument("--prefill", type=int, default=128)
    args = ap.parse_args()
    if args.worker:
        args.system = args.worker
        print(json.dumps(worker(args)))
        return

    root = Path(tempfile.gettempdir()) / "caten_lab_bench_gpt2"
    root.mkdir(exist_ok=True)
    thread_counts = [2] if args.quick else [1, 2]
    if args.threads_list:
        thread_counts = [int(t) for t in args.threads_list.split(",")]
    only = set(filter(None, args.systems.split(",")))
    gen = 8 if args.quick else 32
    prefill = 32 if args.quick else 128
    rows: list[dict] = []
    for config in args.configs.split(","):
        model_dir = make_model_dir(root, config)
        plan = [("caten_lab", "fp32"), ("caten_lab", "fp16"), ("caten_lab", "int8"), ("torch", "fp32"), ("tinygrad", "fp32")]
        if config == "tiny":
            plan.append(("numpy", "fp32"))
        if args.quick and config == "small":
            plan = [("caten_lab", "fp32"), ("caten_lab", "int8"), ("torch", "fp32"), ("tinygrad", "fp32")]
        if only:
            plan = [(s, w) for s, w in plan if s in only]
        for threads in thread_counts:
            for system, weights in plan:
                cache = Path(tempfile.mkdtemp(prefix="caten_cache_"))
                g, pf = (gen, prefill) if system != "numpy" else (4, 16)
                cold = run_row(system, config, weights, threads, model_dir, cache, g, pf, args.no_weight_cache)
                if system in ("caten_lab", "tinygrad") and "error" not in cold:
                    warm = run_row(system, config, weights, threads, model_dir, cache, 0, 0, args.no_weight_cache)
                    cold["ttft_warm_s"] = warm.get("ttft_s")
                    if "wcache" in warm:
                        cold["wcache"] = f"{cold.get('wcache')}/{warm['wcache']}"
                        cold["warm_load_s"], cold["warm_rss_mb"] = warm.get("load_s"), warm.get("peak_rss_mb")
                else:
                    cold["ttft_warm_s"] = cold.get("ttft_s")
                shutil.rmtree(cache, ignore_errors=True)  # holds a copy of the weights per format
                cold["ttft_cold_s"] = cold.pop("ttft_s", None)
                rows.append(cold)
                TABLE.print_row(cold)

    ratios = {}
    for threads in thread_counts:
        def get(system: str, weights: str, cfg: str = "small", t: int = threads) -> float | None:
            for r in rows:
                if (r["system"], r["weights"], r["config"], r["threads"]) == (system, weights, cfg, t):
                    return r.get("decode_tok_s")
            return None

        torch_fp32 = get("torch", "fp32")
        for key, w in (("decode_vs_torch_fp32", "fp32"), ("decode_fp16_vs_torch_fp32", "fp16"), ("decode_int8_vs_torch_fp32", "int8")):
            ours = get("caten_lab", w)
            if ours and torch_fp32:
                ratios[key if threads == max(thread_counts) else f"{key}@{threads}t"] = ours / torch_fp32
    print("\nratios (GPT-2 small dims, decode tokens/s, caten_lab / PyTorch fp32):")
    for k, v in ratios.items():
        print(f"  {k:32s} {v:6.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "ratios": ratios}, indent=2))


COLUMNS = ["system", "config", "weights", "threads", "ttft_cold_s", "ttft_warm_s", "decode_tok_s", "prefill_tok_s",
           "peak_rss_mb", "load_s", "build_s", "compile_s", "warm_load_s", "warm_rss_mb", "wcache"]
TABLE = Table(COLUMNS)


if __name__ == "__main__":
    main()
