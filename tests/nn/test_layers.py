"""nn layers against their PyTorch counterparts (weights copied through load_state_dict)."""

from __future__ import annotations

import numpy as np
import torch

from caten_lab import nn
from caten_lab.frontend import Tensor
from caten_lab.nn import functional as F

RNG = np.random.default_rng(1)


def x_np(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def check(got: np.ndarray, want: torch.Tensor, atol: float = 1e-5) -> None:
    np.testing.assert_allclose(got, want.detach().numpy(), atol=atol, rtol=1e-5)


def test_linear() -> None:
    torch.manual_seed(0)
    ref = torch.nn.Linear(5, 3)
    m = nn.Linear(5, 3).load_state_dict(ref.state_dict())
    x = x_np(2, 4, 5)
    check(m(Tensor.from_numpy(x)).numpy(), ref(torch.from_numpy(x)))
    no_bias = torch.nn.Linear(5, 3, bias=False)
    m2 = nn.Linear(5, 3, bias=False).load_state_dict(no_bias.state_dict())
    check(m2(Tensor.from_numpy(x)).numpy(), no_bias(torch.from_numpy(x)))


def test_embedding() -> None:
    torch.manual_seed(0)
    ref = torch.nn.Embedding(11, 4)
    m = nn.Embedding(11, 4).load_state_dict(ref.state_dict())
    ids = np.array([[0, 3, 10], [7, 7, 1]], np.int64)
    check(m(Tensor.from_numpy(ids)).numpy(), ref(torch.from_numpy(ids)), atol=0)
    ids32 = ids.astype(np.int32)
    check(m(Tensor.from_numpy(ids32)).numpy(), ref(torch.from_numpy(ids)), atol=0)


def test_layer_norm_and_rms_norm() -> None:
    torch.manual_seed(0)
    ln = torch.nn.LayerNorm(6, eps=1e-5)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-1, 1)
    x = x_np(3, 6) * 4 + 2
    check(
        nn.LayerNorm(6).load_state_dict(ln.state_dict())(Tensor.from_numpy(x)).numpy(),
        ln(torch.from_numpy(x)),
    )
    rms = torch.nn.RMSNorm(6, eps=1e-6)
    with torch.no_grad():
        rms.weight.uniform_(0.5, 1.5)
    check(
        nn.RMSNorm(6).load_state_dict(rms.state_dict())(Tensor.from_numpy(x)).numpy(),
        rms(torch.from_numpy(x)),
    )


def test_gelu_both_forms() -> None:
    x = x_np(50) * 3
    check(nn.GELU()(Tensor.from_numpy(x)).numpy(), torch.nn.GELU()(torch.from_numpy(x)), atol=1e-6)
    check(
        nn.GELU("tanh")(Tensor.from_numpy(x)).numpy(), torch.nn.GELU("tanh")(torch.from_numpy(x)), atol=1e-6
    )


def test_mlp_names_and_values() -> None:
    m = nn.MLP(4, 16)
    assert sorted(m.state_dict()) == ["c_fc.bias", "c_fc.weight", "c_proj.bias", "c_proj.weight"]
    sd = {k: torch.from_numpy(v) for k, v in m.state_dict().items()}
    x = x_np(2, 4)
    tx = torch.from_numpy(x)
    want = torch.nn.functional.linear(
        torch.nn.functional.gelu(
            torch.nn.functional.linear(tx, sd["c_fc.weight"], sd["c_fc.bias"]), approximate="tanh"
        ),
        sd["c_proj.weight"],
        sd["c_proj.bias"],
    )
    check(m(Tensor.from_numpy(x)).numpy(), want)


def test_attention_without_cache_matches_sdpa() -> None:
    att = nn.CausalSelfAttention(8, 2, n_ctx=16, use_cache=False)
    sd = {k: torch.from_numpy(v) for k, v in att.state_dict().items()}
    x = x_np(1, 5, 8)
    tx = torch.from_numpy(x)
    q, k, v = torch.nn.functional.linear(tx, sd["c_attn.weight"], sd["c_attn.bias"]).split(8, 2)
    q, k, v = (z.view(1, 5, 2, 4).transpose(1, 2) for z in (q, k, v))
    y = (
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        .transpose(1, 2)
        .reshape(1, 5, 8)
    )
    want = torch.nn.functional.linear(y, sd["c_proj.weight"], sd["c_proj.bias"])
    check(att(Tensor.from_numpy(x)).numpy(), want)


def test_attention_with_cache_prefill_then_decode() -> None:
    att = nn.CausalSelfAttention(8, 2, n_ctx=16)
    ref = nn.CausalSelfAttention(8, 2, n_ctx=16, use_cache=False).load_state_dict(att.state_dict())
    x = x_np(1, 6, 8)
    full = ref(Tensor.from_numpy(x)).numpy()
    first = att(Tensor.from_numpy(x[:, :4]), 0).numpy()
    np.testing.assert_allclose(first, full[:, :4], atol=1e-5)
    for p in (4, 5):
        step = att(Tensor.from_numpy(x[:, p : p + 1]), p).numpy()
        np.testing.assert_allclose(step, full[:, p : p + 1], atol=1e-5)


def test_causal_mask_offsets_by_start() -> None:
    m = F.causal_mask(2, 5, 3).numpy()
    np.testing.assert_array_equal(m, np.array([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], bool))
