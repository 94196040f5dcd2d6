"""GPT-2 byte-level BPE written as actions vs tiktoken and `tokenizers` on the real GPT-2 vocabulary."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from tokenizer_refs import hf_gpt2, ours_gpt2, slow_scale, tiktoken_gpt2

from caten_lab.errors import CatenError
from caten_lab.workflow.tokenizers import GPT2Tokenizer, gpt2_files
from caten_lab.workflow.tokenizers.bpe import GPT2_PATTERN
from caten_lab.workflow.tokenizers.corpus import all_code_points_text, generated_text, varied_text
from caten_lab.workflow.tokenizers.sentencepiece import PER_BYTE

pytest.importorskip("tiktoken")
pytest.importorskip("tokenizers")

EDGE_CASES = [
    "", " ", "  ", "\n", "a", "Hello world, this is GPT-2.", "I'm here, you're there, they'll've it's 'tis",
    "'s'S'll'LL' s", "x   y", "x   ", "   x", "\t\t x", "a\n\n\nb", "1234567890 3.14159 -42",
    "日本語のテキスト", "한국어 텍스트", "Ελληνικά Кириллица עברית العربية हिन्दी",
    "😀😃😄 👨‍👩‍👧 🇯🇵 ❤️", "e\u0301\u0302", "\u00a0\u2003\u3000x\u2028y\x85z",
    "<|endoftext|>", "a" * 300, " " * 500, "!" * 200 + "?", "ab" * 150, "١٢٣ ٤٥٦ ⅠⅡⅢ ½¾",
    "\U00013460\U00013461 \U00010d40",  # letters/digits newer than Python 3.11's Unicode 14 tables
]


@pytest.fixture(scope="module")
def ours():
    return ours_gpt2("ranks")


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_match_tiktoken_and_tokenizers(ours, text):
    expected = tiktoken_gpt2().encode_ordinary(text)
    assert ours.encode(text) == expected
    assert hf_gpt2().encode(text).ids == expected
    assert ours.decode(expected) == text


def test_varied_text_matches_tiktoken_and_tokenizers(ours):
    text = varied_text(25_000, seed=1)
    expected = tiktoken_gpt2().encode_ordinary(text)
    got = ours.encode(text)
    assert got == expected
    assert hf_gpt2().encode(text).ids == expected
    assert ours.decode(got) == text


def test_generated_multilingual_text_matches(ours):
    text = generated_text(12_000, seed=7)
    assert ours.encode(text) == tiktoken_gpt2().encode_ordinary(text)


def test_merges_semantics_matches_tokenizers():
    """The 'merges' table (only listed merge rules, no whole-piece shortcut) is what HF BPE does."""
    ours = ours_gpt2("merges")
    text = varied_text(8_000, seed=3)
    assert ours.encode(text) == hf_gpt2().encode(text).ids


def test_long_pieces_use_the_heap_path_and_still_match(ours):
    rng = random.Random(5)
    letters = "abcdefghijklmnopqrstuvwxyzé"
    long_word = "".join(rng.choice(letters) for _ in range(700))
    text = long_word + " " + "xy" * 90 + "\n" + "-=" * 100 + " 1" + "7" * 250
    assert ours.encode(text) == tiktoken_gpt2().encode_ordinary(text)


def test_lone_surrogates_are_replaced_like_tiktoken(ours):
    text = "abc\ud800def \udcff x\ud83d\ude00"
    assert ours.encode(text) == tiktoken_gpt2().encode_ordinary(text)


def _per_byte(data: bytes) -> str:
    return data.decode("utf-8", errors=PER_BYTE)


def test_invalid_utf8_bytes_act_as_replacement_characters(ours):
    """Raw invalid bytes: each one is a one-byte punctuation-class character, i.e. it splits text
    exactly where U+FFFD would (tiktoken turns such text into U+FFFD); decoding is lossless."""
    regex = pytest.importorskip("regex")
    rng = random.Random(11)
    pieces = [b"hello", b" ", b"\xff", b"\xe2\x82", b"\x80\x80", b"world", b"\xf0\x9f", b"\n", b"'s", b"123",
              b"  ", b"!"]
    for _ in range(200):
        data = b"".join(rng.choice(pieces) for _ in range(rng.randint(1, 12)))
        ids = ours.encode_bytes(data)
        assert ours.decode_bytes(ids) == data
        replaced = _per_byte(data)
        assert [_per_byte(p) for p in ours.pretokenize(data)] == regex.findall(GPT2_PATTERN, replaced)
        assert ours.encode(replaced) == tiktoken_gpt2().encode_ordinary(replaced)


def test_special_tokens_only_when_allowed(ours):
    text = "a<|endoftext|>b"
    assert ours.encode(text) == tiktoken_gpt2().encode_ordinary(text)
    assert ours.encode(text, allowed_special="all") == tiktoken_gpt2().encode(text, allowed_special="all")
    assert ours.decode([50256]) == "<|endoftext|>"
    with pytest.raises(CatenError, match="unknown special"):
        ours.encode(text, allowed_special={"<|im_start|>"})


def test_decode_matches_tiktoken_including_partial_utf8(ours):
    ids = tiktoken_gpt2().encode_ordinary("日本語 😀 ok")
    for k in range(len(ids) + 1):
        assert ours.decode(ids[:k]) == tiktoken_gpt2().decode(ids[:k])
        assert ours.decode_bytes(ids[:k]) == tiktoken_gpt2().decode_bytes(ids[:k])


def test_decode_rejects_out_of_range_ids(ours):
    with pytest.raises(CatenError, match="outside the vocabulary"):
        ours.decode([1, 50257])


def test_hf_style_vocab_json_and_merges_txt(tmp_path):
    """vocab.json + merges.txt (same content, HF names) load to the same tokenizer."""
    enc, bpe = gpt2_files()
    (tmp_path / "vocab.json").write_bytes(enc.read_bytes())
    (tmp_path / "merges.txt").write_bytes(bpe.read_bytes())
    tok = GPT2Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    text = "Hello world, isn't it?  \n 1234"
    assert tok.encode(text) == tiktoken_gpt2().encode_ordinary(text)


def test_self_trained_bytelevel_vocab_matches_tokenizers(tmp_path):
    """A small ByteLevel BPE trained here (HF ids, not GPT-2's order) with 'merges' semantics."""
    from tokenizers import ByteLevelBPETokenizer

    trainer = ByteLevelBPETokenizer()
    trainer.train_from_iterator([varied_text(40_000, seed=9)], vocab_size=700, min_frequency=2)
    trainer.save_model(str(tmp_path))
    ours = GPT2Tokenizer.from_files(tmp_path / "vocab.json", tmp_path / "merges.txt", semantics="merges")
    text = varied_text(6_000, seed=10)
    assert ours.encode(text) == trainer.encode(text).ids


def test_bad_files_raise_caten_errors(tmp_path):
    (tmp_path / "v.json").write_text("[1, 2]")
    (tmp_path / "m.txt").write_text("#version: 0.2\na b c\n")
    with pytest.raises(CatenError):
        GPT2Tokenizer.from_files(tmp_path / "v.json", tmp_path / "m.txt")
    from caten_lab.workflow.tokenizers.tables import bytes_to_unicode

    chars = [bytes_to_unicode()[b] for b in range(256)]
    (tmp_path / "v.json").write_text(json.dumps({c: i for i, c in enumerate(chars)}))
    with pytest.raises(CatenError, match="malformed merge"):
        GPT2Tokenizer.from_files(tmp_path / "v.json", tmp_path / "m.txt")


@pytest.mark.slow
def test_large_varied_text_matches(ours):
    """>= 1 MB at CATEN_SLOW_SCALE=1 (interpreted mode takes minutes; the default scale is small)."""
    size = max(4_000, int(1_100_000 * slow_scale()))
    text = varied_text(size, seed=21)
    expected = tiktoken_gpt2().encode_ordinary(text)
    assert ours.encode(text) == expected
    assert hf_gpt2().encode(text).ids == expected


@pytest.mark.slow
def test_every_code_point_in_context_matches(ours):
    """All 1.1M code points, shuffled between letters/digits/spaces (a slice at small scale)."""
    text = all_code_points_text()
    size = max(3_000, int(len(text) * min(1.0, slow_scale())))
    text = text[:size]
    expected = tiktoken_gpt2().encode_ordinary(text)
    assert ours.encode(text) == expected
    assert np.array_equal(np.array(hf_gpt2().encode(text).ids), np.array(expected))
