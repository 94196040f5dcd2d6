"""Top-1 agreement with llama.cpp on the real SmolLM2-135M-Instruct Q4_1 file, teacher forced over 256 tokens.

llama.cpp (in-process through xllamacpp, in a subprocess: tests/refs/llamacpp.py) gives its greedy next
token after every prefix of a fixed English text, which our GGUF tokenizer splits exactly as llama.cpp
does. Its matrix products quantize the activations to 8 bits (Q8_1 blocks) and read the Q4_1 weights
directly, so it is not bit-equal to a float evaluation: where the two best tokens are within a few tenths
of a nat of each other the winner can differ. Hence the agreement threshold of 95% (issue 15), and every
disagreement must be such a near-tie, under both models' log-probabilities.

Checked against llama.cpp: caten_lab with the file's quantized blocks kept (``LlamaRunner.from_pretrained``,
the default: 8-bit activations and integer block dot products, as llama.cpp), caten_lab on the dequantized
float32 weights (``dequantize=True``), and transformers (float32, dequantized from the same file) as a check of
the reference itself. (2026-12-06, the 8-bit path: 247/256 as well, 96.48%.) Measured on a 2-core Xeon, all three
agree with llama.cpp on 247 of 256 positions (96.5%), the same 9 disagreements each (caten_lab's logits,
on both paths, are within 1e-4 of transformers' over the 256 positions); at those, llama.cpp's
own top-1 beats the other's pick by at most 0.23 nats in llama.cpp's log-probabilities and the other's
pick beats llama.cpp's by at most 0.14 nats in its own; the log-probability of llama.cpp's top-1 differs
between the two by 0.04 nats on average, 0.21 at most.
"""

from __future__ import annotations

import numpy as np
import pytest
from refs import llamacpp
from refs.texts import LIGHTHOUSE

from caten_lab.models.llama import LlamaRunner
from caten_lab.workflow.tokenizers.gguf_vocab import tokenizer_from_gguf

pytestmark = pytest.mark.skipif(
    not llamacpp.available(), reason="xllamacpp (the [dev] extra) is not installed"
)

N_TOKENS = 256
MIN_AGREEMENT = 0.95
NEAR_TIE_NATS = 0.3  # at a disagreement, either side's top-1 beats the other's pick by less than this
LOGPROB_TOL_NATS = 0.35  # |log p(llama.cpp's top-1)| under both; measured 0.21 at most
TOP_K = 5


@pytest.fixture(scope="module")
def text_ids(smollm2_gguf) -> list[int]:
    ids = tokenizer_from_gguf(smollm2_gguf).encode(LIGHTHOUSE, add_special=False)
    assert ids == llamacpp.tokenize(smollm2_gguf, [LIGHTHOUSE])[0]  # our tokenizer splits as llama.cpp
    assert len(ids) >= N_TOKENS
    return ids[:N_TOKENS]


@pytest.fixture(scope="module")
def llama_cpp(smollm2_gguf, text_ids) -> llamacpp.TeacherForced:
    tf = llamacpp.teacher_forced(smollm2_gguf, text_ids, k=TOP_K)
    assert len(tf.top1) == N_TOKENS
    return tf


def log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def check_agreement(name: str, logp: np.ndarray, tf: llamacpp.TeacherForced) -> float:
    """Assert ``logp`` (positions x vocab) agrees with llama.cpp's top-1 as documented; returns the rate."""
    assert logp.shape[0] == N_TOKENS
    ours, theirs = logp.argmax(-1), np.asarray(tf.top1)
    rate = float(np.mean(ours == theirs))
    differ = np.flatnonzero(ours != theirs)
    print(f"llama.cpp vs {name}: top-1 agreement {rate:.2%} ({N_TOKENS - differ.size}/{N_TOKENS})")
    assert rate >= MIN_AGREEMENT
    pos = np.arange(N_TOKENS)
    gap = logp[pos, ours] - logp[pos, theirs]  # how much worse llama.cpp's pick is under our model
    assert gap.max() < NEAR_TIE_NATS, (
        f"position {int(gap.argmax())} is a real disagreement ({gap.max():.3f} nats)"
    )
    for i in differ:  # and ours under llama.cpp's: it must be among its top-k, close behind its top-1
        top = dict(tf.top[i])
        assert int(ours[i]) in top, f"position {i}: our pick {int(ours[i])} is not in llama.cpp's top {TOP_K}"
        assert top[int(theirs[i])] - top[int(ours[i])] < NEAR_TIE_NATS, f"position {i}: {tf.top[i]}"
    lp_llama = np.array([top[0][1] for top in tf.top])
    assert np.abs(logp[pos, theirs] - lp_llama).max() < LOGPROB_TOL_NATS
    return rate


@pytest.mark.parametrize("dequantize", [False, True], ids=["quantized", "dequantized"])
def test_caten_lab_agrees_with_llamacpp(smollm2_gguf, text_ids, llama_cpp, dequantize):
    """caten_lab teacher forced in one prefill with every position's logits, on both weight paths."""
    runner = LlamaRunner.from_pretrained(smollm2_gguf, dequantize=dequantize, n_ctx=N_TOKENS, all_logits=True)
    logits = runner.forward(text_ids, 0)[0]
    assert logits.shape == (N_TOKENS, runner.config.vocab_size)
    name = "caten_lab (" + ("float32, dequantized" if dequantize else "Q4_1 blocks kept") + ")"
    check_agreement(name, log_softmax(logits), llama_cpp)


def test_llamacpp_agrees_with_float_transformers(smollm2_gguf, text_ids, llama_cpp):
    """The reference itself: llama.cpp against transformers' float32 model dequantized from the same file."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32
    ).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([text_ids])).logits[0]
    check_agreement("transformers float32", log_softmax(logits.numpy()), llama_cpp)
