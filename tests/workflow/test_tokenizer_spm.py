"""SentencePiece BPE and unigram written as actions vs the `sentencepiece` library.

Models are trained here on local text (identity normalization, whitespace kept, byte fallback) so
the test needs no downloads; a few option variants cover the normalizer switches and <unk> runs.
"""

from __future__ import annotations

import random

import pytest
from tokenizer_refs import slow_scale

from caten_lab.errors import CatenError
from caten_lab.workflow.tokenizers import SentencePieceTokenizer
from caten_lab.workflow.tokenizers.corpus import generated_text, local_text, varied_text

spm = pytest.importorskip("sentencepiece")

USER_SYMBOLS = ["<sep>", "<cls>", "[MASK]", "def", "the", "\u2581the", "ab"]
BASE = dict(vocab_size=1000, character_coverage=0.99, num_threads=1, normalization_rule_name="identity",
            remove_extra_whitespaces=False, byte_fallback=True, minloglevel=2)
VARIANTS = {
    "bpe": dict(model_type="bpe"),
    "unigram": dict(model_type="unigram"),
    "bpe_no_dummy_extra_ws": dict(model_type="bpe", add_dummy_prefix=False, remove_extra_whitespaces=True),
    "unigram_no_byte_fallback": dict(model_type="unigram", byte_fallback=False),
    "bpe_no_byte_fallback": dict(model_type="bpe", byte_fallback=False),
    "bpe_user_symbols": dict(model_type="bpe", user_defined_symbols=USER_SYMBOLS),
    "unigram_user_symbols": dict(model_type="unigram", user_defined_symbols=USER_SYMBOLS),
    "bpe_across_spaces": dict(model_type="bpe", split_by_whitespace=False),  # pieces like "of▁the"
}


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("spm") / "corpus.txt"
    path.write_text(local_text(80_000, seed=2) + generated_text(4_000, seed=3), encoding="utf-8")
    return path


@pytest.fixture(scope="module", params=list(VARIANTS))
def models(request, corpus_file):
    prefix = corpus_file.parent / request.param
    spm.SentencePieceTrainer.train(input=str(corpus_file), model_prefix=str(prefix),
                                   **{**BASE, **VARIANTS[request.param]})
    model_file = f"{prefix}.model"
    return (request.param, SentencePieceTokenizer.from_model_file(model_file),
            spm.SentencePieceProcessor(model_file=model_file))


EDGE_CASES = ["", " ", "   ", "a", "hello world", "  leading and trailing  ", "x\n\ny\r\n z\t\tw",
              "日本語のテキスト 😀 👨‍👩‍👧", "Ünïcödé ąęł ñ", "def f(x):\n    return x ** 2\n",
              "\u2581already\u2581spaced", "1234567890", "a" * 200, " " * 50, "\U0001F9D1\u200D\U0001F4BB!",
              "x<sep>y <cls> [MASK]<sep><sep> the theme, define abab", "<se<sep>p>",
              "-" * 57, "## " + "-" * 16, "=" * 40 + "\n" + "#" * 33]  # equal-score paths: float32 ties


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases(models, text):
    _, ours, ref = models
    expected = ref.encode(text)
    assert ours.encode(text) == expected
    assert ours.decode(expected) == ref.decode(expected)


def test_varied_text_matches(models):
    name, ours, ref = models
    text = varied_text(6_000 if ("no_" in name or "user" in name or "across" in name) else 15_000, seed=4)
    if "user" in name:
        text = text.replace(" a", " <sep> a").replace("e", "e[MASK]")
    expected = ref.encode(text)
    assert ours.encode(text) == expected
    assert ours.decode(expected) == ref.decode(expected)


def test_invalid_utf8_bytes_match(models):
    _, ours, ref = models
    rng = random.Random(8)
    pieces = [b"hello", b" ", b"\xff", b"\xe2\x82", b"\x80", b"world", b"\xf0\x9f\x98", b"\n", b"\xc3\xa9"]
    for _ in range(60):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 10)))
        assert ours.encode_bytes(data) == ref.encode(data), data


def test_decode_of_arbitrary_ids_matches(models):
    _, ours, ref = models
    rng = random.Random(9)
    for _ in range(100):
        ids = [rng.randrange(ours.n_vocab) for _ in range(rng.randint(0, 12))]
        assert ours.decode(ids) == ref.decode(ids), ids


def test_vocabulary_and_pieces_match(models):
    _, ours, ref = models
    assert ours.n_vocab == ref.get_piece_size()
    assert all(ours.id_to_piece(i) == ref.id_to_piece(i) for i in range(ours.n_vocab))


def test_unsupported_models_are_rejected(corpus_file):
    prefix = corpus_file.parent / "nfkc"
    spm.SentencePieceTrainer.train(input=str(corpus_file), model_prefix=str(prefix), model_type="bpe",
                                   vocab_size=1000, character_coverage=0.99, num_threads=1, minloglevel=2)
    with pytest.raises(CatenError, match="identity"):
        SentencePieceTokenizer.from_model_file(f"{prefix}.model")
    with pytest.raises(CatenError):
        SentencePieceTokenizer.from_model_file(corpus_file)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_large_text_matches(corpus_file, kind):
    """>= 1 MB at CATEN_SLOW_SCALE=1; a small slice by default (interpreted mode is slow)."""
    prefix = corpus_file.parent / f"large_{kind}"
    spm.SentencePieceTrainer.train(input=str(corpus_file), model_prefix=str(prefix), model_type=kind, **BASE)
    ours = SentencePieceTokenizer.from_model_file(f"{prefix}.model")
    ref = spm.SentencePieceProcessor(model_file=f"{prefix}.model")
    text = varied_text(max(3_000, int(1_100_000 * slow_scale())), seed=31)
    assert ours.encode(text) == ref.encode(text)


def test_word_by_word_bpe_only_when_no_piece_spans_a_space(models):
    name, ours, _ = models
    spans = any("\u2581" in ours.id_to_piece(i)[1:] for i in range(ours.n_vocab))
    assert ours.tables.ws_split == (0 if spans else 1)
    if name == "bpe_across_spaces":
        assert spans
