"""Load-time tables of the tokenizers: character classes on every code point, hashes, .model parsing."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.errors import CatenError
from caten_lab.workflow.tokenizers import lookup, pretokenize
from caten_lab.workflow.tokenizers.spm_model import parse_model
from caten_lab.workflow.tokenizers.tables import (
    LETTER,
    NUMBER,
    SPACE,
    build_bytes_table,
    build_pair_table,
    class_table,
    codepoint_classes,
)

ALL = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def _tiktoken_class_set(pattern: str) -> set[int]:
    """Code points tiktoken's regex engine puts in ``pattern`` (matches kept, the rest dropped)."""
    tiktoken = pytest.importorskip("tiktoken")
    ranks = {bytes([i]): i for i in range(256)}
    enc = tiktoken.Encoding("probe" + pattern, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    return set(map(ord, bytes(enc.encode_ordinary("".join(map(chr, ALL)))).decode("utf-8")))


def _hf_class_set(pattern: str) -> set[int]:
    tokenizers = pytest.importorskip("tokenizers")
    split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(pattern), behavior="removed")
    rest: set[int] = set()
    for piece, _ in split.pre_tokenize_str("".join(map(chr, ALL))):
        rest.update(map(ord, piece))
    return set(ALL) - rest


@pytest.mark.parametrize(("pattern", "cls"), [(r"\p{L}", LETTER), (r"\p{N}", NUMBER), (r"\s", SPACE)])
def test_classes_match_tiktoken_and_tokenizers_on_every_code_point(pattern, cls):
    ours = set(np.flatnonzero(codepoint_classes() == cls).tolist())
    assert ours == _tiktoken_class_set(pattern)
    assert ours == _hf_class_set(pattern)


def test_two_stage_table_equals_flat_classes():
    flat = codepoint_classes()
    t = class_table()
    cps = np.arange(0x110000)
    assert np.array_equal(t.stage2[t.stage1[cps >> 8] + (cps & 255)], flat)
    assert t.stage1.nbytes + t.stage2.nbytes < 200_000


def test_utf8_classify_action_decodes_like_python():
    text = "aé€😀 1٣\u3000x\u00a0".encode()
    n = len(text)
    arr = np.frombuffer(text, dtype=np.uint8)
    starts = np.zeros(n + 1, dtype=np.int32)
    classes = np.zeros(n + 1, dtype=np.uint8)
    t = class_table()
    count = pretokenize.utf8_classify(arr, n, t.stage1, t.stage2, starts, classes)
    chars = text.decode()
    assert count == len(chars)
    assert [len(c.encode()) for c in chars] == np.diff(starts[: count + 1]).tolist()
    assert classes[:count].tolist() == [1, 1, 0, 0, 3, 2, 2, 3, 1, 3]


@pytest.mark.parametrize("bad", [b"\xff", b"\xc0\xaf", b"\xe0\x80\x80", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
                                 b"\xe2\x82", b"\x80"])
def test_utf8_char_len_rejects_malformed_sequences(bad):
    arr = np.frombuffer(bad + b"a", dtype=np.uint8)
    assert pretokenize.utf8_char_len(arr, len(bad) + 1, 0) == 0


def test_hash_tables_agree_between_python_and_actions():
    rng = np.random.default_rng(0)
    items = [bytes(rng.integers(0, 256, size=int(rng.integers(1, 12))).tolist()) for _ in range(3000)]
    table = build_bytes_table(items)
    blob = np.frombuffer(b"".join(items) + b"zzzzzzzzzzzzzzz", dtype=np.uint8)
    pos = 0
    for i, item in enumerate(items[:500]):
        expected = items.index(item)
        assert table.find(item) == expected
        end = pos + len(item)
        got = lookup.bytes_find(blob, pos, end, table.slots, table.mask, table.offsets, table.data)
        assert got == expected, i
        pos += len(item)
    tail = len(blob) - 15
    assert lookup.bytes_find(blob, tail, tail + 15, table.slots, table.mask, table.offsets, table.data) == -1
    a = rng.integers(0, 60000, 5000)
    b = rng.integers(0, 60000, 5000)
    pairs = build_pair_table(a, b, np.arange(5000), np.arange(5000) + 7)
    for k in range(0, 5000, 37):
        slot = lookup.pair_find(int(a[k]), int(b[k]), pairs.left, pairs.right, pairs.mask)
        assert slot == pairs.find(int(a[k]), int(b[k])) >= 0
        assert pairs.result[slot] - 7 == pairs.rank[slot]
    assert lookup.pair_find(70000, 1, pairs.left, pairs.right, pairs.mask) == -1


def test_model_parser_rejects_garbage():
    with pytest.raises(CatenError):
        parse_model(b"\x0a\xff\xff\xff")
    with pytest.raises(CatenError):
        parse_model(b"")
