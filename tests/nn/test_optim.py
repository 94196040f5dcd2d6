"""Optimizers against torch.optim on the same model, data and hyperparameters, step by step.

A two-layer MLP trained for several steps with each optimizer (parameter groups with and without
weight decay, gradient clipping, a warmup + cosine learning-rate schedule): the parameters after every
step agree with PyTorch's to float32 rounding, and the program compiled for the first step is reused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caten_lab import compiler
from caten_lab.config import settings
from caten_lab.errors import CatenError
from caten_lab.frontend import Tensor
from caten_lab.nn import functional as F
from caten_lab.nn.module import Module, parameter
from caten_lab.nn.optim import SGD, AdamW, clip_grad_norm, cosine_schedule, set_lr


class MLP(Module):
    def __init__(self, w1: np.ndarray, b1: np.ndarray, w2: np.ndarray) -> None:
        self.w1 = parameter(w1.shape, lambda rng, s: w1.copy())
        self.b1 = parameter(b1.shape, lambda rng, s: b1.copy())
        self.w2 = parameter(w2.shape, lambda rng, s: w2.copy())

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(F.linear(x, self.w1, self.b1).gelu(approximate="tanh"), self.w2)


def _data(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    w1 = rng.standard_normal((16, 8)).astype(np.float32) * 0.5
    b1 = rng.standard_normal(16).astype(np.float32) * 0.1
    w2 = rng.standard_normal((5, 16)).astype(np.float32) * 0.5
    xs = [rng.standard_normal((12, 8)).astype(np.float32) for _ in range(6)]
    ys = [rng.integers(0, 5, 12).astype(np.int64) for _ in range(6)]
    return (w1, b1, w2), xs, ys


def _torch_run(make, init, xs, ys, clip, schedule):  # noqa: ANN001, ANN202
    w1, b1, w2 = (torch.tensor(a, requires_grad=True) for a in init)
    opt = make([{"params": [w1, w2]}, {"params": [b1], "weight_decay": 0.0}])
    base = [g["lr"] for g in opt.param_groups]
    history, losses = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        if schedule:
            for g, lr in zip(opt.param_groups, base):
                g["lr"] = cosine_schedule(i, lr=lr, warmup=2, total=len(xs))
        logits = torch.nn.functional.linear(
            torch.nn.functional.gelu(torch.nn.functional.linear(torch.tensor(x), w1, b1), approximate="tanh"),
            w2,
        )
        loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        if clip:
            torch.nn.utils.clip_grad_norm_([w1, b1, w2], clip)
        opt.step()
        losses.append(loss.item())
        history.append([t.detach().numpy().copy() for t in (w1, b1, w2)])
    return losses, history


def _caten_run(make, init, xs, ys, clip, schedule):  # noqa: ANN001, ANN202
    model = MLP(*init)
    opt = make([{"params": [model.w1, model.w2]}, {"params": [model.b1], "weight_decay": 0.0}])
    base = [g["lr"] for g in opt.param_groups]
    history, losses = [], []
    for i, (x, y) in enumerate(zip(xs, ys)):
        if schedule:
            set_lr(
                opt,
                lambda g, i=i: cosine_schedule(
                    i, lr=base[opt.param_groups.index(g)], warmup=2, total=len(xs)
                ),
            )
        loss = F.cross_entropy(model(Tensor.from_numpy(x)), Tensor.from_numpy(y))
        opt.zero_grad()
        loss.backward()
        if clip:
            clip_grad_norm(model.parameters(), clip)
        (value,) = opt.step(loss)
        losses.append(float(value))
        history.append([model.state_dict()[k].copy() for k in ("w1", "b1", "w2")])
    return losses, history


OPTIMIZERS = {
    "adamw": (
        lambda ps: AdamW(ps, lr=0.05, betas=(0.8, 0.95), weight_decay=0.1),
        lambda ps: torch.optim.AdamW(ps, lr=0.05, betas=(0.8, 0.95), weight_decay=0.1),
    ),
    "sgd momentum": (
        lambda ps: SGD(ps, lr=0.2, momentum=0.9, dampening=0.1, weight_decay=0.01),
        lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9, dampening=0.1, weight_decay=0.01),
    ),
    "sgd nesterov": (
        lambda ps: SGD(ps, lr=0.1, momentum=0.8, nesterov=True),
        lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.8, nesterov=True),
    ),
    "sgd plain": (lambda ps: SGD(ps, lr=0.3), lambda ps: torch.optim.SGD(ps, lr=0.3)),
}


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize(
    ("name", "clip", "schedule"),
    [
        ("adamw", None, False),
        ("adamw", 0.5, True),
        ("sgd momentum", None, True),
        ("sgd nesterov", 0.3, False),
        ("sgd plain", None, False),
    ],
)
def test_optimizer_steps_match_torch(backend: str, name: str, clip: float | None, schedule: bool) -> None:
    init, xs, ys = _data()
    mine, theirs = OPTIMIZERS[name]
    want_losses, want = _torch_run(theirs, init, xs, ys, clip, schedule)
    compiler.clear_cache()
    with settings(backend=backend):
        losses, got = _caten_run(mine, init, xs, ys, clip, schedule)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for step, (g, w) in enumerate(zip(got, want)):
        for k, (a, b) in enumerate(zip(g, w)):
            np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6, err_msg=f"step {step}, parameter {k}")
    if backend == "c":
        assert len(compiler._CACHE) == 1  # one program served every step  # noqa: SLF001


def test_step_without_gradients_says_what_to_do() -> None:
    model = MLP(*_data()[0])
    opt = AdamW(model.parameters())
    with pytest.raises(CatenError, match="backward"):
        opt.step()
    with pytest.raises(CatenError, match="unknown option"):
        AdamW([{"params": model.parameters(), "momentum": 0.9}])
