"""Compile time of GPT-2-shaped models: frontend + passes + render (Python) and the C compiler, separately.

For n_layer in 1, 2, 4, 8, 12, 24, 48, 70 at width 768 (GPT-2 small blocks) and 64, this traces
``caten_lab.nn.GPT2.decoder_graph`` (weights are not materialized), runs the default pipeline up to
the C source, and compiles that source with a cold cache. The fitted exponent is the slope of
log(python_s) against log(n_layer). Targets (issue 4): 12 layers <= 0.3 s and 70 layers < 1 s
without cc, exponent <= 1.05. For reference, the seed compiler needed 10.5 s for 12 layers and
69 s for 35 layers. When a target is missed the per-pass profile of the largest model is printed.

    python bench/compile_time.py [--quick] [--json PATH] [--no-cc]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from caten_lab.compiler import lower_to_c  # noqa: E402
from caten_lab.config import config  # noqa: E402
from caten_lab.nn.gpt2 import GPT2, GPT2Config  # noqa: E402
from caten_lab.runtime.toolchain import build_library, toolchain  # noqa: E402

LAYERS = (1, 2, 4, 8, 12, 24, 48, 70)
QUICK_LAYERS = (1, 2, 4, 12, 24)
TARGET_12, TARGET_70, TARGET_EXP = 0.3, 1.0, 1.05


def model_config(n_layer: int, width: int) -> GPT2Config:
    if width == 768:
        return GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=n_layer, n_head=12)
    return GPT2Config(vocab_size=512, n_positions=128, n_embd=width, n_layer=n_layer, n_head=4)


def python_time(n_layer: int, width: int, threads: int, trace: bool = False):  # noqa: ANN201
    """(result, frontend wall s, passes wall s, total CPU s of this process)."""
    gc.collect()
    c0 = time.process_time()
    t0 = time.perf_counter()
    model = GPT2(model_config(n_layer, width))
    dec = model.decoder_graph(bind=False)
    t1 = time.perf_counter()
    res = lower_to_c(dec.graph, threads=threads, trace=trace, copy=False)
    t2 = time.perf_counter()
    return res, t1 - t0, t2 - t1, time.process_time() - c0


def fit_exponent(rows: list[dict]) -> float:
    pts = [(math.log(r["n_layer"]), math.log(r["python_s"])) for r in rows if r["n_layer"] >= 2 and r["python_s"] > 0]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sum((x - mx) ** 2 for x, _ in pts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer sizes; cc only for 1 and 12 layers")
    ap.add_argument("--json", type=Path, help="write rows and exponent here")
    ap.add_argument("--no-cc", action="store_true", help="skip the C compiler")
    args = ap.parse_args()
    layers = QUICK_LAYERS if args.quick else LAYERS
    cfg = config()
    threads = cfg.threads
    rows: list[dict] = []
    print(f"{'n_layer':>7} {'width':>5} {'nodes':>6} {'frontend_s':>10} {'passes_s':>9} {'python_s':>9} {'cpu_s':>6} "
          f"{'cc_s':>7} {'kernels':>7} {'unique':>6}  seed compiler (issue 4)")
    seed = {12: "10.5 s", 35: "69 s"}
    with tempfile.TemporaryDirectory(prefix="caten_bench_cc_") as tmp:
        tc = None if args.no_cc else toolchain(cfg.cc, Path(tmp))
        for width in (768, 64):
            for n in layers:
                res, fe_s, pass_s, cpu_s = python_time(n, width, threads)
                sched = res.ctx.artifacts["schedule"]
                cc_s = float("nan")
                if tc is not None and (not args.quick or n in (1, 12)):
                    built = build_library(res.ctx.artifacts["c_source"], tc, Path(tmp) / f"{width}_{n}",
                                          units=res.ctx.artifacts.get("c_units"))  # parallel build, as compile()
                    cc_s = built.cc_s
                row = {"n_layer": n, "width": width, "python_s": round(fe_s + pass_s, 4),
                       "cc_s": None if math.isnan(cc_s) else round(cc_s, 3), "kernels": len(sched.kernels),
                       "unique_kernels": sched.unique_kernels(), "frontend_s": round(fe_s, 4),
                       "passes_s": round(pass_s, 4), "python_cpu_s": round(cpu_s, 4), "nodes": len(res.graph)}
                rows.append(row)
                print(f"{n:>7} {width:>5} {row['nodes']:>6} {fe_s:>10.3f} {pass_s:>9.3f} {fe_s + pass_s:>9.3f} {cpu_s:>6.3f} "
                      f"{'-' if math.isnan(cc_s) else f'{cc_s:7.2f}':>7} {row['kernels']:>7} {row['unique_kernels']:>6}"
                      f"  {seed.get(n, '')}")
    exps = {w: fit_exponent([r for r in rows if r["width"] == w]) for w in (768, 64)}
    cpu_exps = {w: fit_exponent([{**r, "python_s": r["python_cpu_s"]} for r in rows if r["width"] == w]) for w in (768, 64)}
    exponent = max(exps.values())
    print(f"fitted exponent python_s ~ n_layer^k: width 768 k={exps[768]:.3f}, width 64 k={exps[64]:.3f} "
          f"(CPU time: {cpu_exps[768]:.3f}, {cpu_exps[64]:.3f})")
    try:
        import os

        print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
              "(wall times on a shared machine include waiting; cpu_s is this process's CPU time)")
    except OSError:
        pass
    by = {(r["width"], r["n_layer"]): r for r in rows}
    ok_all = True
    for key, label in (("python_s", "wall"), ("python_cpu_s", "cpu")):
        t12 = by.get((768, 12), {}).get(key)
        t70 = by.get((768, 70), {}).get(key)
        e = exponent if key == "python_s" else max(cpu_exps.values())
        checks = [("12 layers <= 0.3 s", t12 is not None and t12 <= TARGET_12, t12),
                  ("70 layers < 1 s", t70 is not None and t70 < TARGET_70, t70),
                  ("exponent <= 1.05", e <= TARGET_EXP, round(e, 3))]
        for name, ok, val in checks:
            verdict = "not measured (--quick)" if val is None else ("met" if ok else "MISSED")
            print(f"target ({label}) {name:<20} {verdict}" + ("" if val is None else f" ({val})"))
            ok_all &= ok or val is None
    if not ok_all:
        big = max(n for n in layers)
        res, fe_s, _, _ = python_time(big, 768, threads, trace=True)
        print(f"\nper-pass profile, width 768, {big} layers (frontend trace: {fe_s:.3f} s):")
        for r in res.trace.table():
            print(f"  {r['pass']:<12} {r['time_s']:8.3f} s  {100 * r['share']:5.1f}%  nodes {r['nodes_before']}->{r['nodes_after']}")
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "exponent": exponent, "exponents": exps,
                                         "cpu_exponents": cpu_exps}, indent=1))


if __name__ == "__main__":
    main()
