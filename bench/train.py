"""Training step benchmark: caten_lab against PyTorch eager and torch.compile, same model, data and AdamW.

Every system trains the same GPT-2 (the same initial weights, written once to a .npz) on the same
windows of the bundled held-out Shakespeare text, one AdamW step per batch, each in its own process:

- ``tiny``: the bundled model's config (4 layers, width 128, vocabulary 4096), batch 16 x 128 tokens;
- ``wide``: GPT-2-small width (768, 12 heads) with 2 layers and the same vocabulary, batch 4 x 128.

AdamW (lr 1e-3, weight decay 0.1 on matrices only) everywhere. ``caten_lab`` is ``Trainer.training_step``
(the step's graph is built once and re-run with each batch); ``caten_lab_export`` is that step exported as a C
library (workflow/training.py: the data loader action reads the windows from the token file, no Python between
steps; its first step includes the export); ``caten_lab_eager`` is the PyTorch-style loop
(``loss.backward(); opt.step(loss)``) that rebuilds the graph in Python every step. The windows are
``window_starts(1234, step, batch, span)``, the Trainer's, for every system.

Per row: median step time after the warmup steps (the first includes compiling), training tokens/s,
peak RSS, and the loss of every step. Ratios (higher is faster for caten_lab): ``step_vs_torch_eager``
and ``step_vs_torch_compile``, each ``"<config>@<threads>t"`` -> ratio; ``loss_max_rel_diff_vs_torch``:
the largest relative difference between caten_lab's and PyTorch eager's loss over the measured steps.

    .venv/bin/python bench/train.py [--quick] [--json out.json] [--steps N] [--configs tiny,wide]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rows import Table, peak_rss_mb, run_worker, worker_env  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = ROOT / "assets" / "tiny_gpt2"
CONFIGS = {
    "tiny": dict(n_layer=4, n_embd=128, n_head=4, batch=16),
    "wide": dict(n_layer=2, n_embd=768, n_head=12, batch=4),
}
SEQ, VOCAB, LR, WD, SEED = 128, 4096, 1e-3, 0.1, 1234


def prepare(root: Path, config: str, steps: int) -> tuple[Path, Path]:
    """The initial weights (HF layout, .npz) and the token windows of every step (.npy)."""
    import torch
    import transformers

    c = CONFIGS[config]
    init = root / f"{config}_init.npz"
    if not init.exists():
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(_hf_config(config))
        np.savez(
            init, **{k: v.numpy() for k, v in model.state_dict().items() if not k.endswith(".attn.bias")}
        )
    tok = transformers.GPT2TokenizerFast(str(BUNDLED / "vocab.json"), str(BUNDLED / "merges.txt"))
    ids = np.array(tok((ROOT / "assets" / "tiny_gpt2_heldout.txt").read_text())["input_ids"], np.int64)
    from caten_lab.models.trainer import window_starts  # the windows the Trainer and the exported loader draw

    ids.astype(np.uint16).tofile(root / "tokens.bin")
    starts = [window_starts(SEED, s, c["batch"], len(ids) - SEQ - 1) for s in range(steps)]
    data = root / f"{config}_{steps}_batches.npy"
    np.save(data, np.stack([np.stack([ids[s : s + SEQ + 1] for s in row]) for row in starts]))
    return init, data


def _hf_config(config: str):  # noqa: ANN202
    import transformers

    c = CONFIGS[config]
    return transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=256,
        n_embd=c["n_embd"],
        n_layer=c["n_layer"],
        n_head=c["n_head"],
        bos_token_id=0,
        eos_token_id=0,
        attn_pdrop=0.0,
        embd_pdrop=0.0,
        resid_pdrop=0.0,
    )


def _torch_steps(args: argparse.Namespace, batches: np.ndarray, weights: dict) -> list[tuple[float, float]]:
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    model = transformers.GPT2LMHeadModel(_hf_config(args.config))
    model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()}, strict=False)
    model.train()
    fwd = torch.compile(model) if args.worker == "torch_compile" else model
    opt = torch.optim.AdamW(_groups(list(model.parameters()), lambda p: p.dim()), lr=LR)
    out = []
    for b in batches:
        t0 = time.perf_counter()
        x = torch.tensor(b)
        logits = fwd(x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append((time.perf_counter() - t0, loss.item()))
    return out


def _groups(params: list, ndim) -> list[dict]:  # noqa: ANN001 - weight decay on matrices only (as Trainer)
    return [{"params": [p for p in params if ndim(p) >= 2], "weight_decay": WD},
            {"params": [p for p in params if ndim(p) < 2], "weight_decay": 0.0}]


def _caten_steps(args: argparse.Namespace, batches: np.ndarray, weights: dict) -> list[tuple[float, float]]:
    """``caten_lab``: Trainer.training_step (the step's graph built once, then re-run with each batch);
    ``caten_lab_eager``: the PyTorch-style loop that rebuilds the graph every step (``opt.step(loss)``)."""
    from caten_lab.frontend import Tensor
    from caten_lab.models.trainer import Trainer, TrainingArguments
    from caten_lab.nn import GPT2
    from caten_lab.nn import functional as F
    from caten_lab.nn.optim import AdamW

    model = GPT2(_hf_config(args.config), use_cache=False).load_hf_state_dict(weights)
    out = []
    targs = TrainingArguments(steps=len(batches), batch=batches.shape[1], block=SEQ, lr=LR, schedule="constant",
                              weight_decay=WD, betas=(0.9, 0.999), max_grad_norm=None, progress=False, seed=SEED)
    if args.worker == "caten_lab_export":
        return _export_steps(Trainer(model, targs), Path(args.data).parent / "tokens.bin", len(batches))
    if args.worker == "caten_lab":
        trainer = Trainer(model, targs, batches.reshape(-1))
        for b in batches:
            t0 = time.perf_counter()
            value = trainer.training_step(b)
            out.append((time.perf_counter() - t0, value))
        return out
    opt = AdamW(_groups(model.parameters(), lambda p: p.ndim), lr=LR)
    for b in batches:
        t0 = time.perf_counter()
        x = Tensor.from_numpy(b)
        logits = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        (value,) = opt.step(loss)
        out.append((time.perf_counter() - t0, float(value)))
    return out


def _export_steps(trainer: object, tokens: Path, steps: int) -> list[tuple[float, float]]:
    """``caten_lab_export``: the exported library's ``train_step`` (no Python inside a step); the first
    step's time includes exporting (tracing, compiling, the C compiler)."""
    from caten_lab.workflow.training import ExportedTrainer, export_training

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        exp = export_training(trainer, d)
        lib = ExportedTrainer(exp.library, exp.directory / "init", tokens)
        out = []
        for _ in range(steps):
            value = lib.step()
            out.append((time.perf_counter() - t0, value))
            t0 = time.perf_counter()
        lib.close()
    return out


def worker(args: argparse.Namespace) -> dict:
    batches = np.load(args.data)[: args.steps]
    weights = dict(np.load(args.init))
    steps = (
        _caten_steps(args, batches, weights)
        if args.worker.startswith("caten_lab")
        else _torch_steps(args, batches, weights)
    )
    times = [t for t, _ in steps[args.warmup :]] or [steps[-1][0]]
    step_s = statistics.median(times)
    tokens = batches.shape[1] * SEQ
    return {
        "system": args.worker,
        "config": args.config,
        "threads": args.threads,
        "first_step_s": steps[0][0],
        "step_s": step_s,
        "train_tok_s": tokens / step_s,
        "peak_rss_mb": peak_rss_mb(),
        "final_loss": steps[-1][1],
        "losses": [v for _, v in steps],
    }


COLUMNS = [
    "system",
    "config",
    "threads",
    "first_step_s",
    "step_s",
    "train_tok_s",
    "peak_rss_mb",
    "final_loss",
]
TABLE = Table(COLUMNS)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny config, 2 threads, 6 steps")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--configs", default="tiny,wide")
    ap.add_argument("--systems", default="caten_lab,caten_lab_export,caten_lab_eager,torch_eager,torch_compile")
    ap.add_argument("--threads-list", default="1,2")
    ap.add_argument(
        "--steps", type=int, default=30, help="steps per row (the loss comparison covers them all)"
    )
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--worker")
    ap.add_argument("--config", default="tiny")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--init")
    ap.add_argument("--data")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    configs, threads_list, steps = (
        args.configs.split(","),
        [int(t) for t in args.threads_list.split(",")],
        args.steps,
    )
    if args.quick:
        configs, threads_list, steps = ["tiny"], [2], 6
    root = Path(tempfile.gettempdir()) / "caten_lab_bench_train"
    root.mkdir(exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="caten_cache_"))
    rows: list[dict] = []
    for config in configs:
        init, data = prepare(root, config, steps)
        for threads in threads_list:
            for system in args.systems.split(","):
                cmd = [
                    sys.executable,
                    __file__,
                    "--worker",
                    system,
                    "--config",
                    config,
                    "--threads",
                    str(threads),
                    "--init",
                    str(init),
                    "--data",
                    str(data),
                    "--steps",
                    str(steps),
                    "--warmup",
                    str(args.warmup),
                ]
                row = run_worker(
                    cmd,
                    worker_env(threads, cache),
                    {"system": system, "config": config, "threads": threads},
                    timeout=3600,
                )
                rows.append(row)
                TABLE.print_row(row)
    ratios: dict[str, dict[str, float]] = {"step_vs_torch_eager": {}, "step_vs_torch_compile": {}}
    loss_diff: dict[str, float] = {}

    def find(system: str, config: str, threads: int) -> dict | None:
        return next(
            (
                r
                for r in rows
                if (r["system"], r["config"], r["threads"]) == (system, config, threads) and "error" not in r
            ),
            None,
        )

    for config in configs:
        for threads in threads_list:
            key = f"{config}@{threads}t"
            ours = find("caten_lab", config, threads)
            for peer, name in (
                ("torch_eager", "step_vs_torch_eager"),
                ("torch_compile", "step_vs_torch_compile"),
            ):
                theirs = find(peer, config, threads)
                if ours and theirs:
                    ratios[name][key] = theirs["step_s"] / ours["step_s"]
            eager = find("torch_eager", config, threads)
            if ours and eager:
                a, b = np.array(ours["losses"]), np.array(eager["losses"])
                loss_diff[key] = float(np.max(np.abs(a - b) / np.abs(b)))
    print("\nratios (step time, PyTorch / caten_lab: higher is faster for caten_lab):")
    for name, d in ratios.items():
        for k, v in d.items():
            print(f"  {name:24s} {k:10s} {v:6.2f}x")
    for k, v in loss_diff.items():
        print(f"  loss_max_rel_diff_vs_torch {k:10s} {v:.2e} over {steps} steps")
    if args.json:
        args.json.write_text(
            json.dumps({"rows": rows, "ratios": ratios, "loss_max_rel_diff_vs_torch": loss_diff}, indent=2)
        )


if __name__ == "__main__":
    main()
