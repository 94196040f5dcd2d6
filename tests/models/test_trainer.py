"""Trainer against a PyTorch loop doing the same thing (same init, windows, AdamW groups, clipping and
schedule); checkpoints that transformers and GPT2Runner load; resuming gives the uninterrupted result."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from caten_lab.config import settings
from caten_lab.errors import CatenError
from caten_lab.frontend import no_grad
from caten_lab.frontend.build import realize
from caten_lab.models import gpt2_weights
from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.models.trainer import Trainer, TrainingArguments, next_token_loss, window_starts
from caten_lab.nn import GPT2

BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"


def _tokens(n: int = 4000) -> np.ndarray:
    return np.random.default_rng(5).integers(0, 4096, n).astype(np.int64)


def _args(**kw: object) -> TrainingArguments:
    base = dict(steps=6, batch=2, block=32, lr=3e-3, warmup=2, log_every=1, seed=7, progress=False)
    base.update(kw)
    return TrainingArguments(**base)  # type: ignore[arg-type]


def _model() -> GPT2:
    w = gpt2_weights.load_hf_dir(BUNDLED)
    return GPT2(w.config, use_cache=False).load_hf_state_dict(w.state_dict)


def _torch_losses(args: TrainingArguments, data: np.ndarray) -> tuple[list[float], dict]:
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel.from_pretrained(BUNDLED)
    hf.train()
    decay = [p for p in hf.parameters() if p.dim() >= 2]
    no_decay = [p for p in hf.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=args.betas)
    losses = []
    for step in range(args.steps):
        starts = window_starts(args.seed, step, args.batch, len(data) - args.block - 1)
        xs = torch.from_numpy(np.stack([data[s:s + args.block + 1] for s in starts]))
        for g in opt.param_groups:
            g["lr"] = args.lr_at(step)
        logits = hf(input_ids=xs[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 4096), xs[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(hf.parameters(), args.max_grad_norm)
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().numpy() for k, v in hf.state_dict().items()}


@pytest.mark.parametrize("backend", ["numpy", "c"])
def test_trainer_matches_a_pytorch_loop(backend: str, tmp_path: Path) -> None:
    data = _tokens()
    args = _args(output_dir=str(tmp_path / "run"))
    want_losses, want = _torch_losses(args, data)
    with settings(backend=backend):
        trainer = Trainer(_model(), args, data)
        history = trainer.train()
    losses = [h["loss"] for h in history if "loss" in h]
    np.testing.assert_allclose(losses, want_losses, rtol=2e-5)
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "run")  # the checkpoint, read by transformers
    for k, v in hf.state_dict().items():
        if k in want and not k.endswith(".attn.bias"):
            # Adam divides by sqrt(v): a parameter whose gradients are ~0 moves by a sign-sensitive
            # amount, so a few elements may differ by a fraction of one step (lr = 3e-3); on average ~0
            # (the key bias's gradient is 0 exactly, softmax cancels it: both sides move it by noise)
            got, ref = v.numpy(), want[k]
            if k.endswith("c_attn.bias"):
                n = got.shape[0] // 3
                got, ref = np.delete(got, np.s_[n:2 * n]), np.delete(ref, np.s_[n:2 * n])
            err = np.abs(got - ref)
            assert err.max() < 2e-4 and err.mean() < 2e-6, (k, err.max(), err.mean())


def test_resuming_gives_the_uninterrupted_result(tmp_path: Path) -> None:
    data = _tokens()
    straight = Trainer(_model(), _args(), data)
    straight.train()
    first = Trainer(_model(), _args(steps=6), data)
    first.args.steps = 3
    first.train()
    first.save(tmp_path / "ckpt")
    resumed = Trainer(_model(), _args(), data).resume(tmp_path / "ckpt")
    assert resumed.step == 3
    resumed.train()
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_checkpoint_generates_with_the_runner(tmp_path: Path) -> None:
    trainer = Trainer(_model(), _args(steps=2), _tokens())
    trainer.train()
    trainer.save(tmp_path / "ckpt")
    runner = GPT2Runner.from_pretrained(tmp_path / "ckpt")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "ckpt").eval()
    prompt = [1, 2, 3, 4]
    ours = runner.generate(prompt, 8)
    with torch.no_grad():
        theirs = hf.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False,
                             pad_token_id=0)[0, 4:].tolist()
    assert ours[4:] == theirs


def test_bad_data_is_refused() -> None:
    with pytest.raises(CatenError, match="outside the vocabulary"):
        Trainer(_model(), _args(), np.array([1, 2, 99999] * 50))
    with pytest.raises(CatenError, match="cannot fill one window"):
        Trainer(_model(), _args(), np.arange(10))


def test_a_batch_of_another_shape_rebuilds_the_step() -> None:
    """The step's graph is reused only for batches of its shape: a smaller one gets its own graph (never a
    broadcast into the old token array), and its loss is the model's loss on that batch."""
    data = _tokens()
    trainer = Trainer(_model(), _args(), data)
    trainer.training_step(trainer.next_batch())
    trainer.training_step(trainer.next_batch())  # the reused graph
    small = data[None, 100:133]  # 1 row: without the shape check it would broadcast into the 2-row array
    with no_grad():
        (want,) = realize([next_token_loss(trainer.model, small)], {})
    got = trainer.training_step(small)
    assert trainer._graph.arrays["tokens"].shape == small.shape  # noqa: SLF001
    np.testing.assert_allclose(got, float(want), rtol=1e-6)


def test_a_token_file_and_the_stateless_windows(tmp_path: Path) -> None:
    """A uint16 token file is read mapped; step s's windows are window_starts(seed, s, ...) of it, so a
    trainer at step s (a resumed one) draws the windows an uninterrupted one draws."""
    data = _tokens().astype(np.uint16)
    data.tofile(tmp_path / "tokens.bin")
    trainer = Trainer(_model(), _args(), tmp_path / "tokens.bin")
    assert trainer.train_tokens.dtype == np.uint16  # kept as the file stores it (mapped), not converted
    trainer.step = 4
    starts = window_starts(7, 4, 2, len(data) - 33)
    np.testing.assert_array_equal(trainer.next_batch(), np.stack([data[s:s + 33] for s in starts]).astype(np.int64))
    (tmp_path / "odd.bin").write_bytes(b"\0" * 7)
    with pytest.raises(CatenError, match="not a whole number of 2-byte"):
        Trainer(_model(), _args(), tmp_path / "odd.bin")


def test_building_the_step_runs_nothing() -> None:
    """step_graph() (what export_training compiles) traces the step without taking it: the weights, the
    optimizer's step count and the moments stay as they were; a trainer without tokens says so."""
    trainer = Trainer(_model(), _args())
    before = trainer.model.state_dict()
    step = trainer.step_graph()
    assert trainer.optimizer.steps == 0 and step.arrays["tokens"].shape == (2, 33)
    for k, v in trainer.model.state_dict().items():
        np.testing.assert_array_equal(v, before[k], err_msg=k)
    assert all(not a.any() for n, a in step.arrays.items() if n.endswith((".exp_avg", ".exp_avg_sq")))
    with pytest.raises(CatenError, match="no training tokens"):
        trainer.next_batch()
