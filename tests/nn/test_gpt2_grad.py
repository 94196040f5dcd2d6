"""Gradients of a whole GPT-2 loss against PyTorch's, for the bundled model's config and weights.

``cross_entropy(model(tokens)[:, :-1], tokens[:, 1:])`` through ``loss.backward()``: every parameter's
gradient (the tied embedding gets both its lookup and its lm_head part) within float32 rounding of
``transformers.GPT2LMHeadModel``'s. With the KV cache (batch 1) the gradient also flows through the
cache's in-place stores; without it (``use_cache=False``) a batch of sequences trains.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

from caten_lab.config import settings
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import realize
from caten_lab.nn import GPT2
from caten_lab.nn import functional as F

BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"


@pytest.fixture(scope="module")
def hf() -> transformers.GPT2LMHeadModel:
    return transformers.GPT2LMHeadModel.from_pretrained(BUNDLED).eval()


def _tokens(batch: int, seq: int, vocab: int) -> np.ndarray:
    return np.random.default_rng(0).integers(0, vocab, size=(batch, seq)).astype(np.int64)


def _torch_grads(hf: transformers.GPT2LMHeadModel, tokens: np.ndarray) -> tuple[float, dict[str, np.ndarray]]:
    hf.zero_grad()
    t = torch.tensor(tokens)
    logits = hf(t).logits
    loss = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1)
    )
    loss.backward()
    grads = {}
    for name, p in hf.named_parameters():
        g = p.grad.numpy()
        if name.endswith(("c_attn.weight", "c_proj.weight", "c_fc.weight")):
            g = g.T  # HF Conv1D is [in, out]; ours is [out, in]
        grads[name if name.startswith("transformer.") else f"transformer.{name}"] = g
    return loss.item(), grads


def _caten_grads(hf: transformers.GPT2LMHeadModel, tokens: np.ndarray, use_cache: bool) -> tuple:
    model = GPT2(hf.config, use_cache=use_cache).load_hf_state_dict(hf.state_dict())
    ids = Tensor.from_numpy(tokens)
    logits = model(ids)
    b, s, v = logits.shape
    loss = F.cross_entropy(logits[:, :-1].reshape(b * (s - 1), v), ids[:, 1:].reshape(b * (s - 1)))
    loss.backward()
    params = dict(model.named_parameters())
    names = sorted(params)
    got = realize([loss, *(params[n].grad for n in names)], {})
    return float(got[0]), dict(zip(names, got[1:]))


def _compare(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert set(got) == set(want)
    for name, g in got.items():
        w = want[name]
        assert g.shape == w.shape, name
        err = np.abs(g - w).max()
        assert err <= 2e-3 * np.abs(w).max() + 1e-7, (name, err, np.abs(w).max())


@pytest.mark.parametrize(
    ("backend", "batch", "seq", "use_cache"),
    [
        ("numpy", 2, 24, False),
        ("numpy", 1, 16, True),
        ("c", 2, 24, False),
        ("c", 1, 16, True),
    ],
)
def test_gpt2_loss_gradients_match_pytorch(hf, backend: str, batch: int, seq: int, use_cache: bool) -> None:
    tokens = _tokens(batch, seq, hf.config.vocab_size)
    want_loss, want = _torch_grads(hf, tokens)
    with settings(backend=backend):
        loss, got = _caten_grads(hf, tokens, use_cache)
    assert abs(loss - want_loss) <= 1e-4 * abs(want_loss)
    _compare(got, want)
