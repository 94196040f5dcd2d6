"""The generation-loop action: interpreted with the Python runner bound to its host calls, and linked C."""

from __future__ import annotations

from pathlib import Path

import pytest

from caten_lab.errors import CatenError
from caten_lab.models.sampling import SamplingOptions

MODEL = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"


@pytest.fixture(scope="module")
def api():
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    return GPT2Runner.from_pretrained(MODEL), GPT2Tokenizer.from_files(
        MODEL / "vocab.json", MODEL / "merges.txt"
    )


@pytest.mark.parametrize(
    "opts",
    [
        SamplingOptions(),
        SamplingOptions(temperature=0.8, seed=5, repetition_penalty=1.2),
        SamplingOptions(temperature=1.0, top_k=8, seed=2**40),
    ],
)
def test_interpreted_loop_matches_runner_stream(api, opts: SamplingOptions) -> None:
    from caten_lab.workflow.generation import generate_interpreted

    runner, tok = api
    ids = tok.encode("The king said")
    want = list(runner.stream(ids, 10, opts, stop_tokens=[runner.config.eos_token_id]))
    assert generate_interpreted(runner, ids, 10, opts) == want


def test_interpreted_loop_stops_at_full_context(api) -> None:
    from caten_lab.workflow.generation import generate_interpreted

    runner, tok = api
    ids = tok.encode("a " * 240)[:245]
    want = list(runner.stream(ids, 50, SamplingOptions()))
    got = generate_interpreted(runner, ids, 50, SamplingOptions(), stop_at_eos=False)
    assert got == want and len(got) == runner.n_ctx - len(ids) + 1


def test_unbound_host_action_is_a_clear_error() -> None:
    import numpy as np

    from caten_lab.workflow.generation import model_forward

    with pytest.raises(CatenError, match="no implementation bound"):
        model_forward(np.zeros(1, np.int32), 1, 0, np.zeros(4, np.float32))
    with pytest.raises(CatenError, match="no C body"):
        model_forward.compile()


def test_linked_c_calls_the_host_functions() -> None:
    from caten_lab.workflow.export import loop_unit

    src = loop_unit()
    assert "return host_model_forward(" in src and "return host_emit_token(" in src
    assert "int32_t host_model_forward(" in src  # the extern prototype the glue implements
    assert "caten_action_generate_loop(" in src
