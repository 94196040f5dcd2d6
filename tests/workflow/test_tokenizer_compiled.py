"""Tokenizer actions type-check; compiled to C they give the same ids as interpreted and the references."""

from __future__ import annotations

import pytest
from tokenizer_refs import hf_gpt2, slow_scale, tiktoken_gpt2

from caten_lab.workflow.tokenizers import GPT2Tokenizer, SentencePieceTokenizer
from caten_lab.workflow.tokenizers._action import ACTIONS
from caten_lab.workflow.tokenizers.compiled import ENTRY_POINTS, compiled_available
from caten_lab.workflow.tokenizers.corpus import all_code_points_text, local_text, varied_text

needs_compiler = pytest.mark.skipif(not compiled_available(), reason="action compiler not available")


@pytest.mark.parametrize("name", sorted(ACTIONS))
def test_every_tokenizer_action_type_checks(name):
    action = ACTIONS[name]
    if not hasattr(action, "check"):
        pytest.skip("the @action DSL is not installed; actions are plain functions")
    action.check()
    assert set(ENTRY_POINTS) <= set(ACTIONS)


@pytest.fixture(scope="module")
def gpt2_compiled():
    return GPT2Tokenizer.gpt2(compiled=True)


@pytest.fixture(scope="module")
def spm_models(tmp_path_factory):
    spm = pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp("spm_compiled")
    corpus = root / "corpus.txt"
    corpus.write_text(local_text(120_000, seed=12), encoding="utf-8")
    out = {}
    for kind in ("bpe", "unigram", "bpe_user", "unigram_user"):
        prefix = root / kind
        user = ["<sep>", "the", "def"] if kind.endswith("_user") else []
        spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(prefix),
                                       model_type=kind.removesuffix("_user"), user_defined_symbols=user,
                                       vocab_size=2000, character_coverage=0.9995, byte_fallback=True,
                                       normalization_rule_name="identity", remove_extra_whitespaces=False,
                                       num_threads=1, minloglevel=2)
        out[kind] = (SentencePieceTokenizer.from_model_file(f"{prefix}.model", compiled=True),
                     SentencePieceTokenizer.from_model_file(f"{prefix}.model"),
                     spm.SentencePieceProcessor(model_file=f"{prefix}.model"))
    return out


@needs_compiler
def test_compiled_gpt2_matches_tiktoken_and_interpreted(gpt2_compiled):
    text = varied_text(200_000, seed=13)
    expected = tiktoken_gpt2().encode_ordinary(text)
    assert gpt2_compiled.encode(text) == expected
    assert gpt2_compiled.decode(expected) == text
    small = text[:5_000]
    assert gpt2_compiled.encode(small) == GPT2Tokenizer.gpt2().encode(small)


@needs_compiler
@pytest.mark.parametrize("kind", ["bpe", "unigram", "bpe_user", "unigram_user"])
def test_compiled_sentencepiece_matches(spm_models, kind):
    compiled, interpreted, ref = spm_models[kind]
    text = varied_text(100_000, seed=14).replace(" a", " <sep> a")
    expected = ref.encode(text)
    assert compiled.encode(text) == expected
    assert compiled.decode(expected) == ref.decode(expected)
    assert compiled.encode(text[:3_000]) == interpreted.encode(text[:3_000])


@needs_compiler
@pytest.mark.slow
def test_compiled_large_texts_match(gpt2_compiled, spm_models):
    """>= 1 MB per tokenizer at CATEN_SLOW_SCALE=1, plus every code point (4.4 MB) for GPT-2."""
    text = varied_text(max(50_000, int(800_000 * slow_scale())), seed=15)  # 800k chars ~ 1.2 MB
    expected = tiktoken_gpt2().encode_ordinary(text)
    assert gpt2_compiled.encode(text) == expected
    assert hf_gpt2().encode(text).ids == expected
    every = all_code_points_text()
    assert gpt2_compiled.encode(every) == tiktoken_gpt2().encode_ordinary(every)
    for compiled, _, ref in spm_models.values():
        assert compiled.encode(text) == ref.encode(text)


@needs_compiler
@pytest.mark.parametrize("text", ["a" * 20_000, " " * 20_000, "ab" * 10_000 + "\n", "日" * 5_000,
                                  "x" + " " * 30_000 + "y", "😀" * 5_000, "1" * 30_000, "", "<|endoftext|>"])
def test_compiled_gpt2_long_runs_match_tiktoken(gpt2_compiled, text):
    """Long single pieces take the heap merge path (O(n log n)); they must still match exactly."""
    expected = tiktoken_gpt2().encode_ordinary(text)
    assert gpt2_compiled.encode(text) == expected
    assert gpt2_compiled.decode(expected) == text
