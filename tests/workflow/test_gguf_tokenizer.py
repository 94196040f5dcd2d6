"""Tokenizers from GGUF metadata against llama.cpp (xllamacpp, in a subprocess) and transformers' GGUF tokenizer.

Every kind is checked token for token on about 1 MB of varied text (code, prose, many scripts,
emoji, whitespace runs, digits) with special tokens mixed in: the real SmolLM2 file (``smollm``),
small files with GPT-2's real vocabulary under the ``gpt-2``/``llama3``/``llama-bpe``/``qwen2``
pre-tokenizers, and SentencePiece models as ``model = "llama"``. Where transformers and llama.cpp
disagree we follow llama.cpp, and a test pins down where:
- transformers' GGUF loader has no ``smollm`` split (it never isolates digits): compared here with
  its pre-tokenizer set to SmolLM2's own (``Digits(individual_digits=True)`` then ``ByteLevel``);
- for SentencePiece-style files llama.cpp prepends a space to text after a special token,
  transformers does not: the transformers comparison uses text without special tokens.
"""

from __future__ import annotations

import random
import time
from pathlib import Path

import numpy as np
import pytest
from gguf_tokenizer_files import EXTRA_CONTROL, EXTRA_USER, gpt2_vocab_gguf, spm_vocab_gguf
from llamacpp_tokenize import llamacpp_special_ids, llamacpp_tokens

from caten_lab.errors import CatenError
from caten_lab.workflow.tokenizers import tokenizer_from_gguf
from caten_lab.workflow.tokenizers._action import entry_args
from caten_lab.workflow.tokenizers.corpus import all_code_points_text, local_text, varied_text
from caten_lab.workflow.tokenizers.static_data import pack_static

MB_CHARS = 700_000  # about 1.04 MB of UTF-8


def with_specials(text: str, specials: list[str], seed: int) -> str:
    """``text`` with special-token strings (and near misses) inserted every few hundred characters."""
    rng = random.Random(seed)
    pieces = specials + ["<|im_", "<|", "|>", "<tool", "<s", "</"]
    out, i = [], 0
    while i < len(text):
        j = i + rng.randint(50, 800)
        out.append(text[i:j])
        out.append(rng.choice(pieces) + rng.choice(["", "\n", " ", "user\n"]))
        i = j
    return "".join(out)


def first_difference(a: list[int], b: list[int]) -> str:
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return f"lengths {len(a)} / {len(b)}, first difference at {i}: {a[i - 3 : i + 5]} vs {b[i - 3 : i + 5]}"


def assert_same(ours: list[int], ref: list[int], what: str) -> None:
    assert ours == ref, f"{what}: {first_difference(ours, ref)}"


@pytest.fixture(scope="module")
def cache_dir(request: pytest.FixtureRequest) -> Path | None:
    """pytest's cache directory (llama.cpp's results survive across runs), or the default one."""
    cache = getattr(request.config, "cache", None)
    return Path(cache.mkdir("llamacpp_tokens")) if cache is not None else None


@pytest.fixture(scope="module")
def corpus() -> str:
    return varied_text(MB_CHARS, seed=31)


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf: Path):
    return tokenizer_from_gguf(smollm2_gguf, compiled=True)


@pytest.fixture(scope="module")
def gpt2_files_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("gguf_bpe")
    for pre in ("gpt-2", "llama3", "llama-bpe", "qwen2"):
        (root / pre).mkdir()
        gpt2_vocab_gguf(root / pre / "tok.gguf", pre, add_bos=pre == "llama3")
    return root


@pytest.fixture(scope="module")
def spm_files_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    spm = pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp("gguf_spm")
    (root / "corpus.txt").write_text(local_text(120_000, seed=12), encoding="utf-8")
    for kind in ("bpe", "unigram"):
        spm.SentencePieceTrainer.train(input=str(root / "corpus.txt"), model_prefix=str(root / kind), model_type=kind,
                                       vocab_size=2000, character_coverage=0.9995, byte_fallback=True,
                                       normalization_rule_name="identity", remove_extra_whitespaces=False,
                                       user_defined_symbols=["<sep>"], num_threads=1, minloglevel=2)
        (root / kind).mkdir()
        spm_vocab_gguf(root / kind / "tok.gguf", root / f"{kind}.model")
    return root


def hf_gguf_tokenizer(path: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)


# ---------------------------------------------------------------------------------------- SmolLM2


def test_smollm2_metadata_and_special_ids_match_llamacpp(smollm2, smollm2_gguf, cache_dir):
    ref = llamacpp_special_ids(smollm2_gguf, cache_dir)
    assert smollm2.kind == "gpt2" and smollm2.n_vocab == 49152 and smollm2.meta.pre == "smollm"
    assert [smollm2.bos_id] == ref["BOS"] and [smollm2.eos_id] == ref["EOS"]
    assert sorted(smollm2.eog_ids) == sorted(ref["EOG"])
    assert smollm2.add_bos is False  # tokenizer.ggml.add_bos_token = false
    assert smollm2.special_ids["<|im_start|>"] == 1 and smollm2.special_ids["<|im_end|>"] == 2


def test_smollm2_1mb_matches_llamacpp(smollm2, corpus, smollm2_gguf, cache_dir):
    text = with_specials(corpus, list(smollm2.special_ids), seed=1)
    assert len(text.encode()) >= 1_000_000
    ref = llamacpp_tokens(smollm2_gguf, [text], cache_dir=cache_dir)[0]
    start = time.perf_counter()
    ours = smollm2.encode(text)
    seconds = time.perf_counter() - start
    print(f"SmolLM2 compiled encode: {len(text.encode()) / seconds / 1e6:.2f} MB/s ({len(ours)} tokens)")
    assert_same(ours, ref, "SmolLM2 vs llama.cpp")


def test_smollm2_1mb_matches_transformers_with_smollm_split(smollm2, corpus, smollm2_gguf):
    from tokenizers import pre_tokenizers

    hf = hf_gguf_tokenizer(smollm2_gguf)
    # SmolLM2's tokenizer.json: isolate digits, then GPT-2's byte-level split (the GGUF loader omits the first)
    hf.backend_tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)])
    text = with_specials(corpus, list(smollm2.special_ids), seed=1)
    assert_same(smollm2.encode(text), hf.encode(text, add_special_tokens=False), "SmolLM2 vs transformers")


def test_transformers_gguf_loader_skips_the_smollm_digit_split(smollm2, smollm2_gguf, cache_dir):
    """Where the references disagree we follow llama.cpp: ' ½' and ' 2024' are one pre-token for
    transformers' GGUF tokenizer, a space and single digits for llama.cpp."""
    texts = ["Price: ½ of 2024", "x 12345"]
    ref = llamacpp_tokens(smollm2_gguf, texts, cache_dir=cache_dir)
    hf = hf_gguf_tokenizer(smollm2_gguf)
    assert [smollm2.encode(t) for t in texts] == ref
    assert hf.encode(texts[0], add_special_tokens=False) != ref[0]


def test_smollm2_chat_prompt_and_flags_match_llamacpp(smollm2, smollm2_gguf, cache_dir):
    chat = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
            "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    for add_special in (False, True):
        for parse_special in (False, True):
            ref = llamacpp_tokens(smollm2_gguf, [chat], add_special=add_special, parse_special=parse_special,
                                  cache_dir=cache_dir)[0]
            assert smollm2.encode(chat, add_special=add_special, parse_special=parse_special) == ref
    ids = smollm2.encode(chat)
    assert ids[0] == 1 and smollm2.decode(ids, special=True) == chat
    assert smollm2.decode(ids) == chat.replace("<|im_start|>", "").replace("<|im_end|>", "")


@pytest.mark.parametrize("which", ["smollm2", "llama3"])
def test_every_code_point_matches_llamacpp(which, smollm2_gguf, gpt2_files_dir, cache_dir):
    """All 1.1M code points (4.4 MB): llama.cpp's Unicode 15.1 classes, not tiktoken's Unicode 16."""
    path = smollm2_gguf if which == "smollm2" else gpt2_files_dir / "llama3" / "tok.gguf"
    text = all_code_points_text()
    ref = llamacpp_tokens(path, [text], cache_dir=cache_dir)[0]
    ours = tokenizer_from_gguf(path, compiled=True).encode(text, add_special=False)
    assert_same(ours, ref, f"{which}, every code point")


def test_unicode_16_letters_follow_llamacpp_not_transformers(gpt2_files_dir, cache_dir):
    """llama.cpp's tables are Unicode 15.1: a Unicode 16 letter (Egyptian Hieroglyphs Ext-A) is
    punctuation-like there, a letter for transformers' regex engine. We follow llama.cpp."""
    path = gpt2_files_dir / "llama3" / "tok.gguf"
    probe = "".join(f"{chr(c)}'s\n" for c in range(0x13460, 0x13470))
    ref = llamacpp_tokens(path, [probe], cache_dir=cache_dir)[0]
    assert tokenizer_from_gguf(path).encode(probe, add_special=False) == ref
    assert hf_gguf_tokenizer(path).encode(probe, add_special_tokens=False) != ref


def test_smollm2_decode_round_trip_1mb(smollm2, corpus):
    dropped = {b for b in range(128) if smollm2.tables.args["byte_ids"][b] < 0}  # bytes with no token
    text = with_specials(corpus, list(smollm2.special_ids), seed=1)
    expected = "".join(c for c in text if not (ord(c) < 128 and ord(c) in dropped))
    assert smollm2.decode(smollm2.encode(text), special=True) == expected


# ------------------------------------------------------------------ byte-level BPE, other pre-tokenizers


@pytest.mark.parametrize("pre", ["gpt-2", "llama3", "qwen2"])
def test_gpt2_vocab_1mb_matches_llamacpp_and_transformers(gpt2_files_dir, corpus, cache_dir, pre):
    path = gpt2_files_dir / pre / "tok.gguf"
    tok = tokenizer_from_gguf(path, compiled=True)
    text = with_specials(corpus, ["<|endoftext|>", *EXTRA_CONTROL, *EXTRA_USER], seed=2)
    ref = llamacpp_tokens(path, [text], cache_dir=cache_dir)[0]
    ours = tok.encode(text, add_special=False)
    assert_same(ours, ref, f"{pre} vs llama.cpp")
    assert_same(ours, hf_gguf_tokenizer(path).encode(text, add_special_tokens=False), f"{pre} vs transformers")
    assert tok.decode(ours, special=True) == text


def test_llama_bpe_is_llama3_and_pre_variants_differ(gpt2_files_dir, cache_dir):
    text = varied_text(60_000, seed=4) + " don'T 123456 x\r\n\n  y"
    toks = {pre: tokenizer_from_gguf(gpt2_files_dir / pre / "tok.gguf", compiled=True)
            for pre in ("gpt-2", "llama3", "llama-bpe", "qwen2")}
    ref = llamacpp_tokens(gpt2_files_dir / "llama-bpe" / "tok.gguf", [text], cache_dir=cache_dir)[0]
    assert toks["llama-bpe"].encode(text, add_special=False) == ref == toks["llama3"].encode(text, add_special=False)
    assert len({tuple(toks[p].encode(text, add_special=False)) for p in ("gpt-2", "llama3", "qwen2")}) == 3


def test_add_bos_and_parse_special_match_llamacpp(gpt2_files_dir, cache_dir):
    path = gpt2_files_dir / "llama3" / "tok.gguf"  # written with add_bos_token = true
    tok = tokenizer_from_gguf(path, compiled=True)
    text = "<|im_start|>user\nhello <tool> <|endoftext|> world<|im_end|>"
    for add_special in (False, True):
        for parse_special in (False, True):
            ref = llamacpp_tokens(path, [text], add_special=add_special, parse_special=parse_special,
                                  cache_dir=cache_dir)[0]
            assert tok.encode(text, add_special=add_special, parse_special=parse_special) == ref
    assert tok.encode("hi")[0] == tok.bos_id  # add_special=None: what the file says


def test_overlapping_special_tokens_are_taken_longest_first_like_llamacpp(tmp_path, cache_dir):
    """llama.cpp splits on the longest special token first everywhere, then shorter ones in what is
    left ('<to' + 'tool>' in '<tool>x': 'tool>' wins though '<to' starts earlier)."""
    path = gpt2_vocab_gguf(tmp_path / "overlap.gguf", "gpt-2", extra_user=("<to", "tool>x"))
    tok = tokenizer_from_gguf(path, compiled=True)
    texts = ["a<tool>x b", "<to<tool>xx", "tool>x<to", "<tol", "xtool>xtool>x<toolbar>"]
    ref = llamacpp_tokens(path, texts, cache_dir=cache_dir)
    assert [tok.encode(t) for t in texts] == ref
    assert [tokenizer_from_gguf(path).encode(t) for t in texts] == ref  # interpreted too


# ------------------------------------------------------------------------------ SentencePiece-style


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_spm_1mb_matches_llamacpp_and_transformers(spm_files_dir, corpus, cache_dir, kind):
    path = spm_files_dir / kind / "tok.gguf"
    tok = tokenizer_from_gguf(path, compiled=True)
    assert tok.kind == "llama" and tok.add_bos
    text = with_specials(corpus, ["<s>", "</s>", "<unk>", "<sep>"], seed=3)
    ref = llamacpp_tokens(path, [text], cache_dir=cache_dir)[0]
    assert_same(tok.encode(text, add_special=False), ref, f"SPM {kind} vs llama.cpp")
    plain = corpus[: MB_CHARS // 4]
    ours = tok.encode(plain)
    assert_same(ours, hf_gguf_tokenizer(path).encode(plain), f"SPM {kind} vs transformers")
    # the prefix space is stripped from the first token only (llama.cpp's detokenize): here that is BOS
    assert ours[0] == tok.bos_id and tok.decode(ours) == " " + plain and tok.decode(ours[1:]) == plain


def test_spm_space_after_special_token_follows_llamacpp(spm_files_dir, cache_dir):
    path = spm_files_dir / "bpe" / "tok.gguf"
    tok = tokenizer_from_gguf(path, compiled=True)
    text = "<sep>user says hi"
    ref = llamacpp_tokens(path, [text], cache_dir=cache_dir)[0]
    assert tok.encode(text, add_special=False) == ref
    assert tok.token_text(ref[1]).startswith("\u2581")  # llama.cpp: a space after every special token
    assert hf_gguf_tokenizer(path).encode(text, add_special_tokens=False) != ref


# ------------------------------------------------------------------------ interpreted = compiled, export


def test_interpreted_matches_compiled(smollm2_gguf, gpt2_files_dir, spm_files_dir):
    text = with_specials(varied_text(2_500, seed=5), ["<|im_start|>", "<|endoftext|>", "<tool>", "<s>", "<sep>"],
                         seed=5)
    for path in (smollm2_gguf, gpt2_files_dir / "llama3" / "tok.gguf", gpt2_files_dir / "qwen2" / "tok.gguf",
                 spm_files_dir / "bpe" / "tok.gguf"):
        interpreted, compiled = tokenizer_from_gguf(path), tokenizer_from_gguf(path, compiled=True)
        ids = compiled.encode(text)
        assert interpreted.encode(text) == ids, path
        assert interpreted.decode(ids[:300], special=True) == compiled.decode(ids[:300], special=True)


def test_static_args_are_the_entry_tables(smollm2, spm_files_dir):
    for tok in (smollm2, tokenizer_from_gguf(spm_files_dir / "bpe" / "tok.gguf")):
        static = tok.static_args()
        blob = pack_static(static)
        assert blob.arrays and np.array_equal(blob.array("vdata"), static["vdata"])
        text = np.frombuffer(b"hello", dtype=np.uint8)
        with pytest.raises(KeyError, match="no value for parameter"):
            entry_args(tok.encode_entry, {**static, "text": text})  # only the work buffers are missing


# ----------------------------------------------------------------------------------- refusals


def _metadata_file(path: Path, **keys) -> Path:
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    tokens = keys.pop("tokens", ["a", "b"])
    writer.add_token_list(tokens)
    for key, value in keys.items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            writer.add_uint32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        else:
            writer.add_array(key, value)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(("keys", "match"), [
    ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "deepseek-llm"},
     r"tokenizer\.ggml\.pre = 'deepseek-llm' is not supported"),
    ({"tokenizer.ggml.model": "gpt2"}, r"tokenizer\.ggml\.pre = None is not supported"),
    ({"tokenizer.ggml.model": "bert"}, r"tokenizer\.ggml\.model = 'bert' is not supported"),
    ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2"}, r"tokenizer\.ggml\.merges is missing"),
    ({"tokenizer.ggml.model": "llama"}, r"tokenizer\.ggml\.scores is missing"),
    ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.merges": ["a b"],
      "tokenizer.ggml.token_type": [1, 6]}, r"token_type\[1\] = 6"),
    ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.merges": ["a b"],
      "tokenizer.ggml.add_bos_token": True}, r"add_bos_token is true but tokenizer\.ggml\.bos_token_id"),
    ({"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "gpt-2", "tokenizer.ggml.merges": ["a b"],
      "tokens": ["a", "a"]}, r"token 'a' is both id 0 and id 1"),
])
def test_unsupported_metadata_is_refused_naming_the_key(tmp_path, keys, match):
    path = _metadata_file(tmp_path / "bad.gguf", **keys)
    with pytest.raises(CatenError, match=match):
        tokenizer_from_gguf(path)


def test_not_a_gguf_file_is_refused(tmp_path):
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(CatenError, match="cannot read GGUF"):
        tokenizer_from_gguf(bad)
    with pytest.raises(CatenError, match="expected a GGUF path"):
        tokenizer_from_gguf(42)


def test_invalid_utf8_is_refused(smollm2):
    with pytest.raises(CatenError, match="invalid UTF-8 at byte 2"):
        smollm2.encode_bytes(b"ab\xff")
    assert smollm2.encode_bytes("né".encode()) == smollm2.encode("né")
