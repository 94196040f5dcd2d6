"""Token ids are ints in the vocabulary at every Python entry point that takes a token list: never
truncated (1.9 -> 1), wrapped (-1 -> the last id) or cast (True -> 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.models.sampling import SamplingOptions, check_token_ids, process_logits, sample

MODEL = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"


def test_good_ids_come_back_as_python_ints():
    assert check_token_ids([3, np.int32(4), np.uint8(5)], 10) == [3, 4, 5]
    assert check_token_ids((0, 9), 10) == [0, 9]
    assert check_token_ids(range(3), 10) == [0, 1, 2]
    assert check_token_ids(iter([7]), 10) == [7]
    assert check_token_ids(np.array([[1, 2]], np.int64), 10) == [1, 2]
    assert check_token_ids([], 10) == [] and check_token_ids(np.zeros(0, np.int32), 10) == []
    assert all(type(v) is int for v in check_token_ids(np.array([1, 2], np.uint16), 10))


@pytest.mark.parametrize(
    ("ids", "msg"),
    [
        ([1.9, 2.2], "prompt: item 0 is 1.9 (float), not an integer token id"),
        ([1, 2.0], "prompt: item 1 is 2.0 (float), not an integer token id"),
        ([1, True], "prompt: item 1 is True (bool), not an integer token id"),
        ([np.float32(3)], "prompt: item 0 is 3.0 (float32), not an integer token id"),
        ([1, "2"], "prompt: item 1 is '2' (str), not an integer token id"),
        ([1, None], "prompt: item 1 is None (NoneType), not an integer token id"),
        ([0, 5, -1], "prompt: item 2 = -1 is outside the vocabulary 0..9"),
        ([0, 10], "prompt: item 1 = 10 is outside the vocabulary 0..9"),
        ([2**70], "prompt: item 0 = 1180591620717411303424 is outside the vocabulary 0..9"),
        (np.array([1.0, 2.0]), "prompt: token ids must be integers, got an array of float64 (item 0 is 1.0)"),
        (np.array([True]), "prompt: token ids must be integers, got an array of bool (item 0 is True)"),
        (np.array([1, 2, 99]), "prompt: item 2 = 99 is outside the vocabulary 0..9"),
        (np.array([-3], np.int8), "prompt: item 0 = -3 is outside the vocabulary 0..9"),
        ("12", "prompt: expected a sequence of integer token ids, got a string"),
        (7, "prompt: expected a sequence of integer token ids, got an int"),
    ],
)
def test_bad_ids_name_the_item_and_its_index(ids, msg):
    with pytest.raises(CatenError) as info:
        check_token_ids(ids, 10, "prompt")
    assert str(info.value).splitlines()[0] == msg


def test_sampler_refuses_bad_previous_tokens():
    logits = np.linspace(-1, 1, 10)
    opts = SamplingOptions(repetition_penalty=1.3)
    # before: -1 silently penalized the last id and 2.7 the id 2
    with pytest.raises(CatenError, match="previous tokens: item 1 = -1 is outside the vocabulary 0..9"):
        sample(logits, [3, -1], opts, 0)
    with pytest.raises(CatenError, match=r"previous tokens: item 0 is 2.7 \(float\)"):
        process_logits(logits, [2.7], opts)
    x = process_logits(logits, [9, 9], opts)  # a good history: the top logit is divided by the penalty
    assert x[9] == pytest.approx(1 / 1.3) and x[8] == pytest.approx(logits[8])


@pytest.fixture(scope="module")
def runner():
    from caten_lab.models.gpt2 import GPT2Runner

    return GPT2Runner.from_pretrained(MODEL, n_ctx=32, backend="c")


def test_runner_generate_refuses_float_and_out_of_range_prompts(runner):
    v = runner.config.vocab_size
    with pytest.raises(CatenError, match=r"prompt: item 0 is 1.9 \(float\), not an integer token id"):
        runner.generate([1.9, 2.2], 3)  # before: ran the prompt [1, 2]
    with pytest.raises(CatenError, match=f"prompt: item 1 = {v} is outside the vocabulary 0..{v - 1}"):
        runner.generate([5, v], 3)
    with pytest.raises(CatenError, match="stop_tokens: item 0 is 0.5"):
        runner.generate([5, 6], 3, stop_tokens=[0.5])
    with pytest.raises(CatenError, match="max_new_tokens must be a non-negative int, got 2.5"):
        runner.generate([5, 6], 2.5)
    with pytest.raises(CatenError, match=r"forward: item 0 is 3.5 \(float\)"):
        runner.forward([3.5], 0)
    with pytest.raises(CatenError, match="forward: item 0 = -2 is outside the vocabulary"):
        runner.forward(np.array([-2]), 0)
    got = runner.generate(np.array([5, 6], np.int32), 3)  # integer arrays are fine
    assert got[:2] == [5, 6] and len(got) == 5 and all(type(t) is int for t in got)
    assert got == runner.generate([5, 6], 3)


def test_interpreted_generation_loop_refuses_bad_prompts(runner):
    from caten_lab.workflow.generation import generate_interpreted

    with pytest.raises(CatenError, match=r"prompt: item 1 is 2.2 \(float\)"):
        generate_interpreted(runner, [1, 2.2], 3, SamplingOptions())
    with pytest.raises(CatenError, match="prompt: item 0 = -1 is outside the vocabulary"):
        generate_interpreted(runner, [-1], 3, SamplingOptions())
    with pytest.raises(CatenError, match="max_new must be a non-negative int, got -1"):
        generate_interpreted(runner, [1], -1, SamplingOptions())
    assert generate_interpreted(runner, [5, 6], 3, SamplingOptions()) == runner.generate([5, 6], 3)[2:]


def test_tokenizer_decode_takes_only_integer_ids_in_the_vocabulary() -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    ours = GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt")
    ref = Tokenizer(models.BPE.from_file(str(MODEL / "vocab.json"), str(MODEL / "merges.txt")))
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ref.decoder = decoders.ByteLevel()
    ids = [5, 300, 17, 4095]
    assert ours.decode(ids) == ref.decode(ids)
    assert ours.decode(np.array(ids, np.uint16)) == ref.decode(ids)
    for bad, words in (([5.0, 300], "decode: item 0 is 5.0 (float)"), ([5, True], "decode: item 1 is True (bool)"),
                       ([5, -1], "decode: item 1 = -1 is outside the vocabulary"),
                       (np.array([1.9]), "decode: token ids must be integers")):
        with pytest.raises(CatenError, match=words.replace("(", r"\(").replace(")", r"\)")):
            ours.decode(bad)  # was: floats truncated (1.9 -> the text of token 1)


def test_nn_gpt2_generate_and_step_check_the_ids() -> None:
    from caten_lab.config import settings
    from caten_lab.nn.gpt2 import GPT2, GPT2Config

    model = GPT2(GPT2Config(vocab_size=16, n_positions=8, n_embd=8, n_layer=1, n_head=2))
    with settings(backend="numpy"):
        assert len(model.generate([1, 2], 2)) == 4
        with pytest.raises(CatenError, match=r"prompt: item 1 is 2\.0 \(float\)"):
            model.generate([1, 2.0], 2)  # was: silently the prompt [1, 2]
        with pytest.raises(CatenError, match="step: item 0 = 16 is outside the vocabulary 0..15"):
            model.step([16], 0)
