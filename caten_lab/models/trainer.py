"""``Trainer``: a causal-LM training loop in the spirit of Hugging Face's, compiled by caten_lab.

Every step samples ``batch`` windows of ``block + 1`` tokens from a token array (:func:`window_starts`:
SplitMix64 of (seed, sample number), the counter RNG of the samplers, so the exported training library's
data loader action draws the same windows, as does PyTorch's reference script), runs forward + backward +
AdamW as ONE compiled program (built once, reused by every step), and reports the loss. Checkpoints are Hugging
Face directories (``config.json`` + ``model.safetensors``, loadable by ``GPT2Runner.from_pretrained`` and
``transformers``) plus the optimizer moments and the step count, so ``resume`` continues
exactly where an interrupted run stopped: the same parameters, bit for bit, as an uninterrupted run.

    args = TrainingArguments(steps=300, batch=16, block=128, lr=3e-3, output_dir="run")
    trainer = Trainer(GPT2(config, use_cache=False), args, train_tokens, eval_tokens)
    trainer.train()          # tqdm bar with loss and tokens/s; eval every eval_every steps
    trainer.evaluate()       # mean next-token cross-entropy over eval windows
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from caten_lab.errors import CatenError
from caten_lab.frontend.build import Traced, commit, realize, trace
from caten_lab.frontend.lazy import no_grad
from caten_lab.frontend.realize import execute
from caten_lab.frontend.tensor import Tensor
from caten_lab.models.gpt2_weights import hf_config, load_hf_dir, save_hf_dir
from caten_lab.models.sampling import uniform
from caten_lab.nn import functional as F
from caten_lab.nn.optim import AdamW, clip_grad_norm, cosine_schedule, linear_schedule


@dataclass
class TrainingArguments:
    """What a run needs (names follow transformers' TrainingArguments where one exists)."""

    steps: int = 1000
    batch: int = 16
    block: int = 128
    lr: float = 3e-3
    schedule: str = "cosine"  # cosine (warmup, then down to min_lr_ratio * lr) | linear | constant
    warmup: int | None = None  # default: steps // 20
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.1  # on weights of 2 or more axes; biases and norms get none
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    max_grad_norm: float | None = 1.0
    eval_every: int = 0  # 0: no evaluation during training
    eval_batches: int = 8
    save_every: int = 0
    log_every: int = 50
    seed: int = 1234
    output_dir: str | None = None
    progress: bool = True
    history: list = field(default_factory=list, repr=False)

    def lr_at(self, step: int) -> float:
        warmup = self.warmup if self.warmup is not None else max(1, self.steps // 20)
        if self.schedule == "constant":
            return self.lr
        if self.schedule == "linear":
            return linear_schedule(step, lr=self.lr, warmup=warmup, total=self.steps)
        if self.schedule == "cosine":
            return cosine_schedule(step, lr=self.lr, warmup=warmup, total=self.steps, min_lr=self.lr * self.min_lr_ratio)
        raise CatenError(f"TrainingArguments: unknown schedule {self.schedule!r}", hint="cosine, linear or constant")


def load_tokens(path: str | os.PathLike, token_bytes: int = 2) -> np.ndarray:
    """A token file (little-endian ids of ``token_bytes`` bytes: 2 = uint16, 4 = uint32, as
    ``np.asarray(ids, np.uint16).tofile(path)`` writes them), memory-mapped: what the exported trainer reads."""
    if token_bytes not in (2, 4):
        raise CatenError(f"load_tokens: token_bytes is {token_bytes}", hint="2 (uint16) or 4 (uint32)")
    size = Path(path).stat().st_size
    if size % token_bytes:
        raise CatenError(f"{path}: {size} bytes is not a whole number of {token_bytes}-byte token ids")
    return np.memmap(path, dtype="<u2" if token_bytes == 2 else "<u4", mode="r")


def check_tokens(tokens: np.ndarray, block: int, vocab: int) -> None:
    """Refuse training tokens that are not 1-d integers, cannot fill a window or leave the vocabulary."""
    if tokens.ndim != 1 or not np.issubdtype(tokens.dtype, np.integer):
        raise CatenError(f"Trainer: train_tokens must be a 1-d integer array, got {tokens.dtype}{list(tokens.shape)}")
    if len(tokens) <= block + 1:
        raise CatenError(f"Trainer: {len(tokens)} training tokens cannot fill one window of {block + 1}",
                         hint="lower block or give more data")
    low, high = int(tokens.min()), int(tokens.max())
    if low < 0 or high >= vocab:
        bad = int(np.flatnonzero((tokens < 0) | (tokens >= vocab))[0])
        raise CatenError(f"Trainer: token {bad} is id {int(tokens[bad])}, outside the vocabulary [0, {vocab})")


def window_starts(seed: int, step: int, batch: int, span: int) -> list[int]:
    """Where step ``step``'s ``batch`` windows start in ``[0, span)``: sample ``step * batch + b`` of the
    counter RNG ``uniform(seed, n)`` (models/sampling.py), scaled and truncated. Stateless: a resumed run
    and the exported data loader (workflow/train_actions.py) draw the same windows from the step alone."""
    return [int(uniform(seed, step * batch + b) * span) for b in range(batch)]


def next_token_loss(model: Any, windows: np.ndarray) -> Tensor:
    """Mean cross-entropy of predicting ``windows[:, 1:]`` from ``windows[:, :-1]`` (lazy)."""
    x = Tensor.from_numpy(np.ascontiguousarray(windows, dtype=np.int64), name="tokens")
    logits = model(x[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1))


class Trainer:
    """Train a causal LM (``model(tokens)`` -> logits, e.g. ``GPT2(config, use_cache=False)``) on tokens."""

    def __init__(self, model: Any, args: TrainingArguments,
                 train_tokens: np.ndarray | str | os.PathLike | None = None,
                 eval_tokens: np.ndarray | None = None) -> None:
        """``train_tokens``: a 1-d integer array, or the path of a token file (:func:`load_tokens`); None
        for a trainer that only builds or exports its step (``workflow.training.export_training``)."""
        if isinstance(train_tokens, str | os.PathLike):
            train_tokens = load_tokens(train_tokens)
        if train_tokens is not None:
            train_tokens = np.asarray(train_tokens)
            check_tokens(train_tokens, args.block, model.config.vocab_size)
        if args.output_dir:  # a config the checkpoint loaders would refuse fails now, not after training
            hf_config(model.config, f"Trainer(output_dir={args.output_dir!r})")
        self.model, self.args = model, args
        self.train_tokens = train_tokens  # as given (a uint16 memmap stays one): windows become int64
        self.eval_tokens = None if eval_tokens is None else np.asarray(eval_tokens, np.int64)
        named = dict(model.named_parameters())
        decay = [p for n, p in named.items() if p.ndim >= 2]
        no_decay = [p for n, p in named.items() if p.ndim < 2]
        self.optimizer = AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                {"params": no_decay, "weight_decay": 0.0}],
                               lr=args.lr, betas=args.betas, eps=args.eps)
        self.step = 0
        self._graph: Traced | None = None  # the training step's graph, built by the first step
        self.hyper_name = ""  # the step graph's input holding the optimizer's per-step scalars
        self.history: list[dict[str, float]] = []  # one dict per logged step: step, loss, lr, tokens_s

    # ---- data --------------------------------------------------------------------------------------
    def next_batch(self) -> np.ndarray:
        """This step's windows of ``block + 1`` tokens (:func:`window_starts`)."""
        a, data = self.args, self.train_tokens
        if data is None:
            raise CatenError("Trainer: no training tokens", hint="Trainer(model, args, train_tokens)")
        starts = window_starts(a.seed, self.step, a.batch, len(data) - a.block - 1)
        return np.stack([data[s:s + a.block + 1] for s in starts]).astype(np.int64)

    # ---- one step ----------------------------------------------------------------------------------
    def training_step(self, windows: np.ndarray) -> float:
        """Forward, backward, clipping and AdamW on one batch: one compiled call. Returns the loss.

        The first step builds the step's graph (forward, ``backward()``, clipping, the optimizer's update) and
        keeps it; every later step writes the new batch and the optimizer's scalars into that graph's input
        arrays and runs it again (the same graph, so the same compiled program), without rebuilding it in
        Python. The parameters and the optimizer state are updated in place, in their own arrays."""
        lr = self.args.lr_at(self.step)
        for g in self.optimizer.param_groups:
            g["lr"] = lr
        windows = np.ascontiguousarray(windows, dtype=np.int64)
        step = self.step_graph(windows.shape)
        self.optimizer.steps += 1
        step.arrays["tokens"][...] = windows
        step.arrays[self.hyper_name][...] = self.optimizer.hyper_rows()
        out = execute(step.graph, step.arrays, {})
        self.step += 1
        return float(out[0])

    def step_graph(self, shape: tuple[int, ...] | None = None) -> Traced:
        """The graph of one training step on windows of ``shape`` (default ``(batch, block + 1)``): the loss
        first, then the updated parameters and optimizer state. Its inputs are the parameters, the moments
        (updated in place), ``tokens`` and the optimizer's scalars (``hyper_name``). Built on first use, or
        for another shape or replaced arrays (a ``load_state_dict``); building runs nothing."""
        shape = tuple(shape or (self.args.batch, self.args.block + 1))
        step = self._graph
        if (step is not None and step.arrays["tokens"].shape == shape
                and all(buf.array is step.arrays.get(name) for name, buf in step.states.items())):
            return step
        loss = next_token_loss(self.model, np.zeros(shape, np.int64))
        self.optimizer.zero_grad()
        loss.backward()
        if self.args.max_grad_norm is not None:
            clip_grad_norm(self.model.parameters(), self.args.max_grad_norm)
        updated = self.optimizer.record_step()
        self.optimizer.steps -= 1  # recorded, not taken: training_step counts each step it runs
        step = trace([loss, *updated])
        self.hyper_name = next(k for k, v in step.arrays.items() if v is self.optimizer.hyper)
        commit(step)  # nothing ran: the model's tensors read their (unchanged) buffers again
        self.optimizer.zero_grad()
        self._graph = step
        return step

    def train(self, callback: Callable[[Trainer, dict[str, float]], None] | None = None) -> list[dict[str, float]]:
        """Run until ``args.steps`` (continuing from a resumed step); returns the logged history.
        ``callback(trainer, entry)`` sees every logged entry as it is made (a live loss plot)."""
        a = self.args
        bar = _progress(a.steps, self.step) if a.progress else None
        t_last, tokens = time.perf_counter(), 0
        try:
            while self.step < a.steps:
                loss = self.training_step(self.next_batch())
                tokens += a.batch * a.block
                if not math.isfinite(loss):
                    raise CatenError(f"Trainer: the loss is {loss} at step {self.step}",
                                     hint="lower lr, or keep max_grad_norm clipping on")
                now = time.perf_counter()
                rate = tokens / max(now - t_last, 1e-9)
                if self.step % max(1, a.log_every) == 0 or self.step == a.steps or self.step == 1:
                    self._log({"step": self.step, "loss": loss, "lr": a.lr_at(self.step - 1), "tokens_s": rate},
                              callback)
                    t_last, tokens = now, 0
                if bar is not None:
                    bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{rate:.0f}")
                    bar.update(1)
                if a.eval_every and self.step % a.eval_every == 0 and self.eval_tokens is not None:
                    self._log({"step": self.step, "eval_loss": self.evaluate(a.eval_batches)}, callback)
                if a.save_every and a.output_dir and self.step % a.save_every == 0:
                    self.save(a.output_dir)
        finally:
            if bar is not None:
                bar.close()
        if a.output_dir:
            self.save(a.output_dir)
        return self.history

    def _log(self, entry: dict[str, float], callback: Callable[[Trainer, dict[str, float]], None] | None) -> None:
        self.history.append(entry)
        if callback is not None:
            callback(self, entry)

    def evaluate(self, max_batches: int | None = None, tokens: np.ndarray | None = None) -> float:
        """Mean next-token cross-entropy over consecutive non-overlapping windows of the eval tokens."""
        data = self.eval_tokens if tokens is None else np.asarray(tokens, np.int64)
        if data is None:
            raise CatenError("Trainer.evaluate: no eval tokens", hint="pass eval_tokens to Trainer(...)")
        a = self.args
        n = (len(data) - 1) // a.block
        if max_batches is not None:
            n = min(n, a.batch * max_batches)
        starts = [i * a.block for i in range(n)]
        total, count = 0.0, 0
        for k in range(0, len(starts), a.batch):
            windows = np.stack([data[s:s + a.block + 1] for s in starts[k:k + a.batch]])
            with no_grad():
                (value,) = realize([next_token_loss(self.model, windows)], {})
            total += float(value) * len(windows)
            count += len(windows)
        return total / max(count, 1)

    # ---- checkpoints -------------------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """A Hugging Face directory of the weights, plus ``trainer_state.json`` and ``optimizer.npz``."""
        d = Path(directory)
        save_hf_dir(self.model, d)
        np.savez(d / "optimizer.npz", **self.optimizer.state_arrays())
        state = {"step": self.step, "optimizer_steps": self.optimizer.steps,
                 "args": {k: v for k, v in asdict(self.args).items() if k != "history"}, "history": self.history}
        (d / "trainer_state.json").write_text(json.dumps(state, indent=1, default=str) + "\n")
        return d

    def resume(self, directory: str | Path) -> Trainer:
        """Continue from a checkpoint :meth:`save` wrote: weights, optimizer moments and step (the windows
        follow from the step: :func:`window_starts`)."""
        d = Path(directory)
        state = json.loads((d / "trainer_state.json").read_text())
        self._graph = None
        self.model.load_hf_state_dict(load_hf_dir(d).state_dict)
        with np.load(d / "optimizer.npz") as z:
            self.optimizer.load_state_arrays({k: z[k] for k in z.files}, int(state["optimizer_steps"]))
        self.step = int(state["step"])
        self.history = list(state.get("history", []))
        return self


def _progress(total: int, done: int) -> Any:
    return tqdm(total=total, initial=done, desc="train", unit="step")
