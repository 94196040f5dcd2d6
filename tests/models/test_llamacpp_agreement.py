"""Top-1 agreement with llama.cpp on the real SmolLM2-135M-Instruct Q4_1 file, teacher forced over 256 tokens.

llama.cpp (in-process through xllamacpp, in a subprocess: tests/refs/llamacpp.py) gives its greedy next
token after every prefix of a fixed English text. Its matrix products quantize the activations to 8 bits
(Q8_1 blocks) and read the Q4_1 weights directly, so it is not bit-equal to a float evaluation of the
dequantized weights: where the two best tokens are within a few hundredths of a nat of each other the
winner can differ. Hence the agreement threshold of 95% (issue 15), and every disagreement must be such a
near-tie.

Measured on a 2-core Xeon: llama.cpp vs transformers (the GGUF dequantized to float32) agree on 247 of
256 positions (96.5%); all 9 disagreements are near-ties (llama.cpp's top two within 0.14 nats); the
log-probability llama.cpp gives its top-1 token differs from the float reference's by 0.04 nats on average,
0.21 at most.
"""

from __future__ import annotations

import numpy as np
import pytest
from refs import llamacpp
from refs.texts import LIGHTHOUSE

N_TOKENS = 256
MIN_AGREEMENT = 0.95
NEAR_TIE_NATS = 0.3  # a disagreement: the reference's own top-1 beats the other's pick by less than this
LOGPROB_TOL_NATS = 0.35  # |log p(llama.cpp's top-1)| under both; measured 0.21 at most


@pytest.fixture(scope="module")
def text_ids(smollm2_gguf) -> list[int]:
    ids = llamacpp.tokenize(smollm2_gguf, [LIGHTHOUSE])[0]
    assert len(ids) >= N_TOKENS
    return ids[:N_TOKENS]


@pytest.fixture(scope="module")
def llama_cpp(smollm2_gguf, text_ids) -> llamacpp.TeacherForced:
    tf = llamacpp.teacher_forced(smollm2_gguf, text_ids, k=5)
    assert len(tf.top1) == N_TOKENS
    return tf


def agreement(ours: np.ndarray, theirs: list[int]) -> float:
    return float(np.mean(np.asarray(ours) == np.asarray(theirs)))


def test_llamacpp_agrees_with_float_transformers(smollm2_gguf, text_ids, llama_cpp):
    """The reference itself: llama.cpp against transformers' float32 model dequantized from the same file."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32
    ).eval()
    with torch.inference_mode():
        logits = model(torch.tensor([text_ids])).logits[0]
    logp = torch.log_softmax(logits.double(), dim=-1).numpy()
    ref_top1 = logp.argmax(-1)
    rate = agreement(ref_top1, llama_cpp.top1)
    print(f"llama.cpp vs transformers float32: top-1 agreement {rate:.2%} over {N_TOKENS} positions")
    assert rate >= MIN_AGREEMENT
    pos = np.arange(N_TOKENS)
    theirs = np.asarray(llama_cpp.top1)
    gap = logp[pos, ref_top1] - logp[pos, theirs]  # how much worse llama.cpp's pick is under the float model
    assert gap.max() < NEAR_TIE_NATS, (
        f"position {int(gap.argmax())} is a real disagreement ({gap.max():.3f} nats)"
    )
    lp_llama = np.array([top[0][1] for top in llama_cpp.top])
    assert np.abs(logp[pos, theirs] - lp_llama).max() < LOGPROB_TOL_NATS
