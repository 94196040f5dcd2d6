"""Frontend benchmark: time to build the AIR graph of GPT-2 (12x768 and 1..70 layers).

Only graph building is timed: tracing ``GPT2.forward`` with symbols seq/pos and ``build_graph``
(no weights are allocated: parameters stay unbound allocate nodes). The peer, measured side by side,
is ``torch.fx.symbolic_trace`` of an equivalent minimal PyTorch GPT-2 on the meta device.
Timings are the best CPU (process) time of several interleaved runs with the garbage collector
paused (as ``timeit`` does), so other jobs on a shared machine do not distort the fit; the
``gc_on_s`` column is one wall-clock run with the collector enabled. The growth exponent is the
least-squares slope of log(cpu time) against log(layers); the target is <= 1.1.

    python bench/frontend.py [--quick] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from caten_lab.nn import GPT2, GPT2Config  # noqa: E402


def _best(fn, repeats: int) -> float:  # noqa: ANN001
    """Best CPU time of ``repeats`` calls (process time: other jobs on a shared machine do not count)."""
    best = math.inf
    for _ in range(repeats):
        gc.collect()
        gc.disable()
        try:
            t = time.process_time()
            fn()
            best = min(best, time.process_time() - t)
        finally:
            gc.enable()
    return best


def caten_case(n_layer: int) -> tuple[dict, object]:
    """A model with ``n_layer`` GPT-2 small blocks (no weights) and one timed build with the collector on."""
    model = GPT2(GPT2Config(n_layer=n_layer))
    gc.collect()
    t = time.perf_counter()
    nodes = len(model.decoder_graph(bind=False).graph)
    gc_on = time.perf_counter() - t
    return {"layers": n_layer, "nodes": nodes, "gc_on_s": gc_on}, lambda: model.decoder_graph(bind=False)


def fx_case(n_layer: int) -> tuple[object, int] | None:
    """torch.fx.symbolic_trace of a minimal GPT-2 (same block structure), weights on the meta device."""
    try:
        import torch
        import torch.fx
        from torch import nn
    except ImportError:
        return None

    class Block(nn.Module):
        def __init__(self, e: int, h: int) -> None:
            super().__init__()
            self.h = h
            self.ln_1, self.ln_2 = nn.LayerNorm(e), nn.LayerNorm(e)
            self.c_attn, self.c_proj = nn.Linear(e, 3 * e), nn.Linear(e, e)
            self.c_fc, self.mlp_proj = nn.Linear(e, 4 * e), nn.Linear(4 * e, e)

        def forward(self, x):  # noqa: ANN001, ANN202
            b, t, e = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(e, dim=2)
            q, k, v = (z.view(b, t, self.h, e // self.h).transpose(1, 2) for z in (q, k, v))
            y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, e))
            return x + self.mlp_proj(nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

    class TorchGPT2(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.wte, self.wpe = nn.Embedding(50257, 768), nn.Embedding(1024, 768)
            self.h = nn.ModuleList([Block(768, 12) for _ in range(n)])
            self.ln_f = nn.LayerNorm(768)

        def forward(self, idx):  # noqa: ANN001, ANN202
            x = self.wte(idx) + self.wpe.weight[: idx.shape[1]]
            for blk in self.h:
                x = blk(x)
            return self.ln_f(x) @ self.wte.weight.T

    with torch.device("meta"):
        m = TorchGPT2(n_layer)
    nodes = len(torch.fx.symbolic_trace(m).graph.nodes)
    return (lambda: torch.fx.symbolic_trace(m)), nodes


def fit_exponent(xs: list[float], ys: list[float]) -> float:
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = sum(lx) / len(lx), sum(ly) / len(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and a lighter peer (< 1 min)")
    ap.add_argument("--json", metavar="PATH", help="write the table as JSON (keys: exponent, rows, ...)")
    args = ap.parse_args(argv)
    layers = [1, 2, 4, 8, 12, 24, 48, 70]
    rounds, per_round_s = (2, 0.05) if args.quick else (4, 0.2)
    peer_layers = {1, 12, 24} if args.quick else set(layers)
    rows, cases = [], []
    for n in layers:
        row, build = caten_case(n)
        peer = fx_case(n) if n in peer_layers else None
        row["model"] = "GPT-2 small (12x768)" if n == 12 else f"GPT-2 {n}x768"
        row["build_s"], row["runs"] = math.inf, 0
        row["torch_fx_s"], row["torch_fx_nodes"] = (math.inf, peer[1]) if peer else (None, None)
        rows.append(row)
        cases.append((row, build, peer[0] if peer else None))
    # interleaved rounds: load from other processes hits every size alike instead of bending the fit
    for _ in range(rounds):
        for row, build, fx in cases:
            k = max(1, min(20, int(per_round_s / max(row["gc_on_s"], 1e-4))))
            row["build_s"] = min(row["build_s"], _best(build, k))
            row["runs"] += k
            if fx is not None:
                row["torch_fx_s"] = min(row["torch_fx_s"], _best(fx, 1))
    exponent = fit_exponent([r["layers"] for r in rows], [r["build_s"] for r in rows])
    exponent_gc = fit_exponent([r["layers"] for r in rows], [r["gc_on_s"] for r in rows])
    prs = [r for r in rows if r["torch_fx_s"]]
    exponent_fx = (
        fit_exponent([r["layers"] for r in prs], [r["torch_fx_s"] for r in prs]) if len(prs) > 1 else None
    )

    print(
        f"{'model':<22} {'layers':>6} {'AIR nodes':>9} {'cpu ms':>9} {'wall+gc':>9} {'ms/layer':>9} "
        f"{'fx cpu ms':>11} {'fx nodes':>8}"
    )
    for r in rows:
        fx = f"{r['torch_fx_s'] * 1e3:11.1f}" if r["torch_fx_s"] else f"{'-':>11}"
        fxn = f"{r['torch_fx_nodes']:8d}" if r["torch_fx_nodes"] else f"{'-':>8}"
        print(
            f"{r['model']:<22} {r['layers']:6d} {r['nodes']:9d} {r['build_s'] * 1e3:9.1f} "
            f"{r['gc_on_s'] * 1e3:9.1f} {r['build_s'] * 1e3 / r['layers']:9.2f} {fx} {fxn}"
        )
    print(
        f"growth exponent (time ~ layers^k): caten_lab k = {exponent:.3f} (gc on: {exponent_gc:.3f})"
        + (f", torch.fx k = {exponent_fx:.3f}" if exponent_fx is not None else "")
        + f"  [target <= 1.1: {'PASS' if exponent <= 1.1 else 'FAIL'}]"
    )
    result = {
        "exponent": exponent,
        "exponent_gc_on": exponent_gc,
        "exponent_torch_fx": exponent_fx,
        "rows": rows,
        "quick": args.quick,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
