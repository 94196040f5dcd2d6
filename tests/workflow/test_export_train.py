"""The exported training workflow: the C trainer (data loader action + compiled step + fixed C) against the
Python Trainer — the same losses and the same checkpoint, bit for bit — and its refusals of bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import transformers
from safetensors.numpy import load_file

from caten_lab.config import config
from caten_lab.models import gpt2_weights
from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.models.trainer import Trainer, TrainingArguments, load_tokens, window_starts
from caten_lab.nn import GPT2
from caten_lab.workflow.tokenizers import GPT2Tokenizer
from caten_lab.workflow.train_actions import fill_batch
from caten_lab.workflow.training import ExportedTrainer, export_training
from tests.workflow.export_helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "assets" / "tiny_gpt2"
STEPS = 20


def _model() -> GPT2:
    w = gpt2_weights.load_hf_dir(BUNDLED)
    return GPT2(w.config, use_cache=False).load_hf_state_dict(w.state_dict)


def _args(**kw: object) -> TrainingArguments:
    base = dict(steps=STEPS, batch=2, block=32, lr=3e-3, warmup=3, log_every=1, seed=11, progress=False)
    base.update(kw)
    return TrainingArguments(**base)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """The bundled model's training step exported once, and a token file of real text (uint16)."""
    root = tmp_path_factory.mktemp("train_export")
    tok = GPT2Tokenizer.from_files(BUNDLED / "vocab.json", BUNDLED / "merges.txt")
    ids = tok.encode((ROOT / "assets" / "tiny_gpt2_heldout.txt").read_text()[:20000])
    np.asarray(ids, np.uint16).tofile(root / "tokens.bin")
    out = export_training(Trainer(_model(), _args()), root / "lib")
    return root, out


def test_the_cli_gives_the_python_trainers_losses_and_checkpoint(exported: tuple[Path, object]) -> None:
    root, out = exported
    r = run_cli(out.cli, "--init", str(out.directory / "init"), "--data", str(root / "tokens.bin"),
                "--out", str(root / "run"), "--threads", str(config().threads))
    assert r.returncode == 0, r.stderr
    c_losses = [float(line.split()[3]) for line in r.stdout.splitlines() if line.startswith("step ")]
    trainer = Trainer(_model(), _args(output_dir=str(root / "py")), load_tokens(root / "tokens.bin"))
    py_losses = [h["loss"] for h in trainer.train() if "loss" in h]
    assert len(c_losses) == STEPS
    np.testing.assert_array_equal(np.float32(c_losses), np.float32(py_losses))  # 9 digits round-trip float32
    got, want = load_file(root / "run" / "model.safetensors"), load_file(root / "py" / "model.safetensors")
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
    # the C checkpoint is a Hugging Face directory both loaders read, and the runner generates from it
    hf = transformers.GPT2LMHeadModel.from_pretrained(root / "run")
    np.testing.assert_array_equal(hf.transformer.h[0].attn.c_attn.weight.detach().numpy(),
                                  want["transformer.h.0.attn.c_attn.weight"])
    assert len(GPT2Runner.from_pretrained(root / "run").generate([1, 2, 3], 4)) == 7


@pytest.mark.parametrize("width", [2, 4])
def test_the_data_loader_action_draws_the_trainers_windows(width: int) -> None:
    ids = np.random.default_rng(width).integers(0, 60000, 777).astype(np.uint16 if width == 2 else np.uint32)
    if width == 4:
        ids = ids * 7000  # ids above 2**16
    data = np.frombuffer(ids.tobytes(), np.uint8)
    seed, step, batch, w = (1 << 40) + 12345, 5, 3, 17
    starts = window_starts(seed, step, batch, len(ids) - w)
    want = np.stack([ids[s:s + w] for s in starts]).astype(np.int64)
    for run in (fill_batch, fill_batch.compile()):
        out, st = np.zeros((batch, w), np.int64), np.zeros(2, np.int64)
        top = run(data, len(ids), width, seed >> 32, seed & 0xFFFFFFFF, step, out, st)
        np.testing.assert_array_equal(out, want)
        assert top == want.max()


def test_the_c_schedule_is_the_python_one(exported: tuple[Path, object]) -> None:
    root, out = exported
    lib = ExportedTrainer(out.library, out.directory / "init", root / "tokens.bin")
    try:
        assert lib.options.steps == STEPS and lib.options.warmup == 3 and lib.options.seed == 11  # the export's
        for code, schedule in enumerate(["constant", "linear", "cosine"]):
            for warmup in (None, 0, 7):
                args = _args(steps=97, lr=1e-3 * 3.7, warmup=warmup, min_lr_ratio=0.13, schedule=schedule)
                lib.options.steps, lib.options.lr, lib.options.min_lr_ratio = 97, args.lr, 0.13
                lib.options.warmup, lib.options.schedule = -1 if warmup is None else warmup, code
                for s in range(100):
                    assert lib.lr_at(s) == args.lr_at(s), (schedule, warmup, s)
        # the library driven through its API: the CLI's first steps
        lib.options.steps, lib.options.lr, lib.options.warmup, lib.options.schedule = STEPS, 3e-3, 3, 2
        lib.options.min_lr_ratio = 0.1
        trainer = Trainer(_model(), _args(), load_tokens(root / "tokens.bin"))
        for _ in range(3):
            assert np.float32(lib.step()) == np.float32(trainer.training_step(trainer.next_batch()))
    finally:
        lib.close()


def test_bad_input_is_refused_with_the_reason(exported: tuple[Path, object]) -> None:
    root, out = exported
    init = str(out.directory / "init")

    def fails(*args: str) -> str:
        r = run_cli(out.cli, *args)
        assert r.returncode != 0
        return r.stderr

    assert "usage" in fails("--init", init, "--data", str(root / "tokens.bin"))
    (root / "short.bin").write_bytes(np.arange(20, dtype=np.uint16).tobytes())
    assert "cannot fill one window of 33" in fails("--init", init, "--data", str(root / "short.bin"), "--out", "x")
    (root / "odd.bin").write_bytes(b"\0" * 1001)
    assert "not a whole number of 2-byte" in fails("--init", init, "--data", str(root / "odd.bin"), "--out", "x")
    np.full(100, 5000, np.uint16).tofile(root / "big.bin")
    err = fails("--init", init, "--data", str(root / "big.bin"), "--out", "x")
    assert "id 5000, outside the vocabulary [0, 4096)" in err
    assert "cannot open the token file" in fails("--init", init, "--data", str(root / "nope.bin"), "--out", "x")
    assert "cannot open the weights file" in fails("--init", str(root), "--data", str(root / "tokens.bin"), "--out", "x")
    # another model's weights: the shape is named
    other = GPT2(gpt2_weights.GPT2Config(vocab_size=4096, n_positions=256, n_embd=64, n_layer=4, n_head=4,
                                         bos_token_id=0, eos_token_id=0), use_cache=False)
    gpt2_weights.save_hf_dir(other, root / "other")
    assert "the exported model expects" in fails("--init", str(root / "other"), "--data", str(root / "tokens.bin"),
                                                 "--out", "x")
