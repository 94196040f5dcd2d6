"""Plot the training loss of the PyTorch run and the caten_lab run of ``train_tiny_gpt2.py``.

Each run writes ``loss_history.json`` into its output directory (one ``{"step", "loss"}`` per step; the
caten_lab run also has ``eval_loss`` entries). Usage, from the repository root:

    .venv/bin/python assets/plot_loss_curves.py TORCH_OUT CATEN_OUT assets/loss_curves.png
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(directory: str) -> tuple[list[int], list[float]]:
    hist = json.loads((Path(directory) / "loss_history.json").read_text())
    rows = [(h["step"], h["loss"]) for h in hist if "loss" in h]
    return [s for s, _ in rows], [v for _, v in rows]


def smooth(values: list[float], k: int = 25) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v - (values[i - k] if i >= k else 0.0)
        out.append(acc / min(i + 1, k))
    return out


def main() -> None:
    torch_dir, caten_dir, out = sys.argv[1:4]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for name, d, style in (("PyTorch", torch_dir, "-"), ("caten_lab", caten_dir, "--")):
        steps, losses = load(d)
        ax.plot(steps, smooth(losses), style, label=f"{name} (mean of 25 steps)")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (nats/token)")
    ax.set_title("tiny GPT-2 on Shakespeare: same init, batches and schedule")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main()
