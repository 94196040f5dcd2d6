"""Encode/decode entry points for tokenizers described by GGUF metadata, as actions.

Both kinds first split the text on special tokens the way llama.cpp does (``special_mark``): the
special tokens are taken longest first, and each one claims its leftmost non-overlapping
occurrences in text no longer-or-earlier token has claimed. Control tokens take part only when
``parse_special`` is set; user-defined ones always do. The plain spans in between are then
tokenized on their own:

- ``gguf_bpe_encode``: byte-level BPE, with the pre-tokenizer that ``pre_kind`` selects (0: the
  GPT-2 scanner, 1: the Llama-3 scanner with ``max_digits`` digits per number), optionally after
  isolating every digit (``split_digits``, SmolLM's ``\\p{N}`` split).
- ``gguf_spm_encode``: SentencePiece-style BPE by score over each span with spaces written as
  U+2581, a U+2581 prepended to a span that starts the text or follows a special token when
  ``add_space_prefix`` (llama.cpp's rule), byte fallback for characters that are no token.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.tokenizers._action import action
from caten_lab.workflow.tokenizers.bpe_actions import bpe_encode_piece
from caten_lab.workflow.tokenizers.pretokenize import gpt2_piece_end, utf8_classify
from caten_lab.workflow.tokenizers.pretokenize_llama3 import llama3_piece_end
from caten_lab.workflow.tokenizers.spm_actions import spm_bpe, spm_emit
from caten_lab.workflow.types import Array, i32, i64, u8

FREE = -1  # a byte no special token claimed
INSIDE = -2  # a byte inside (not at the start of) a claimed special token
NUMBER = 2


@action
def special_mark(
    text: Array[u8, ("n",)], n: i32, parse_special: i32,
    sids: Array[i32, ("ns",)], salways: Array[u8, ("ns",)], nspecial: i32,
    voffsets: Array[i32, ("vocab1",)], vdata: Array[u8, ("vbytes",)], mark: Array[i32, ("n1",)],
) -> i32:
    """Mark special-token occurrences: ``mark[p]`` = the id starting at byte p, INSIDE, or FREE.

    ``sids`` lists the special tokens longest first. Returns the number of occurrences.
    """
    for p in range(n + 1):
        mark[p] = FREE
    found = 0
    for s in range(nspecial):
        if parse_special == 0 and salways[s] == 0:
            continue
        tid = i32(sids[s])
        a = i32(voffsets[tid])
        length = i32(voffsets[tid + 1]) - a
        if length <= 0:
            continue
        first = vdata[a]
        p = 0
        while p + length <= n:
            if text[p] != first or mark[p] != FREE:
                p = p + 1
                continue
            same = 1
            for j in range(1, length):
                if text[p + j] != vdata[a + j] or mark[p + j] != FREE:
                    same = 0
                    break
            if same == 0:
                p = p + 1
                continue
            mark[p] = tid
            for j in range(1, length):
                mark[p + j] = INSIDE
            found = found + 1
            p = p + length
    return found


@action
def gguf_bpe_encode(
    text: Array[u8, ("n",)], n: i32, parse_special: i32,
    stage1: Array[i32, (4352,)], stage2: Array[u8, ("stage2",)],
    byte_ids: Array[i32, (256,)],
    vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)], whole_lookup: i32,
    pleft: Array[i32, ("pairs",)], pright: Array[i32, ("pairs",)], prank: Array[i32, ("pairs",)],
    presult: Array[i32, ("pairs",)], pmask: i64,
    pre_kind: i32, split_digits: i32, max_digits: i32,
    sids: Array[i32, ("ns",)], salways: Array[u8, ("ns",)], nspecial: i32,
    mark: Array[i32, ("n1",)], char_start: Array[i32, ("n1",)], char_cls: Array[u8, ("n1",)],
    sym: Array[i32, ("w",)], rank: Array[i32, ("w",)], res: Array[i32, ("w",)], heap: Array[i64, ("h",)],
    out: Array[i32, ("n",)],
) -> i32:
    """Byte-level BPE encode of UTF-8 bytes: special tokens, then pre-tokenize and merge each span."""
    special_mark(text, n, parse_special, sids, salways, nspecial, voffsets, vdata, mark)
    nc = utf8_classify(text, n, stage1, stage2, char_start, char_cls)
    k = 0
    nout = 0
    while k < nc:
        tid = i32(mark[char_start[k]])
        if tid >= 0:
            out[nout] = tid
            nout = nout + 1
            stop = char_start[k] + voffsets[tid + 1] - voffsets[tid]
            while k < nc and char_start[k] < stop:
                k = k + 1
            continue
        hi = k
        while hi < nc and mark[char_start[hi]] == FREE:
            hi = hi + 1
        frag = k  # with split_digits: the next digit at or after k (the end of the fragment)
        while k < hi:
            end = hi
            if split_digits != 0:
                if frag <= k:
                    frag = k
                    while frag < hi and i32(char_cls[frag]) != NUMBER:
                        frag = frag + 1
                end = frag
            e = k + 1
            if end > k:
                if pre_kind == 0:
                    e = gpt2_piece_end(text, char_start, char_cls, end, k)
                else:
                    e = llama3_piece_end(text, char_start, char_cls, end, k, max_digits)
            nout = bpe_encode_piece(text, char_start[k], char_start[e], byte_ids, vslots, vmask, voffsets,
                                    vdata, whole_lookup, pleft, pright, prank, presult, pmask,
                                    sym, rank, res, heap, out, nout)
            k = e
    # bytes without a single-byte token come out as -1: llama.cpp leaves them out
    kept = 0
    for i in range(nout):
        if out[i] >= 0:
            out[kept] = out[i]
            kept = kept + 1
    return kept


@action
def spm_escape_span(
    text: Array[u8, ("n",)], start: i32, end: i32, prefix: i32, norm: Array[u8, ("m",)],
) -> i32:
    """``text[start:end]`` with every space written as U+2581 (and one more in front when
    ``prefix``); returns the length written to ``norm``."""
    o = 0
    if prefix != 0:
        norm[0] = u8(226)
        norm[1] = u8(150)
        norm[2] = u8(129)
        o = 3
    for p in range(start, end):
        if i32(text[p]) == 32:
            norm[o] = u8(226)
            norm[o + 1] = u8(150)
            norm[o + 2] = u8(129)
            o = o + 3
        else:
            norm[o] = text[p]
            o = o + 1
    return o


@action
def gguf_spm_encode(
    text: Array[u8, ("n",)], n: i32, parse_special: i32, add_space_prefix: i32,
    vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)], score_rank: Array[i32, ("vocab",)],
    unk_id: i32, byte_ids: Array[i32, (256,)], ws_split: i32,
    uleft: Array[i32, ("upairs",)], uright: Array[i32, ("upairs",)], uchild: Array[i32, ("upairs",)],
    umask: i64, unode_piece: Array[i32, ("unodes",)],
    sids: Array[i32, ("ns",)], salways: Array[u8, ("ns",)], nspecial: i32,
    mark: Array[i32, ("n1",)], norm: Array[u8, ("m",)], sym_start: Array[i32, ("w",)],
    sym_len: Array[i32, ("w",)], nxt: Array[i32, ("w",)], prv: Array[i32, ("w",)], heap: Array[i64, ("h",)],
    ids: Array[i32, ("w",)], frozen: Array[u8, ("w",)], piece_out: Array[i32, ("w",)],
    out: Array[i32, ("w",)],
) -> i32:
    """SentencePiece-style encode of UTF-8 bytes as llama.cpp's ``llama`` vocabularies do it."""
    special_mark(text, n, parse_special, sids, salways, nspecial, voffsets, vdata, mark)
    p = 0
    nout = 0
    prev_special = 1
    while p < n:
        tid = i32(mark[p])
        if tid >= 0:
            out[nout] = tid
            nout = nout + 1
            p = p + voffsets[tid + 1] - voffsets[tid]
            prev_special = 1
            continue
        q = p
        while q < n and mark[q] == FREE:
            q = q + 1
        prefix = 0
        if add_space_prefix != 0 and prev_special != 0:
            prefix = 1
        m = spm_escape_span(text, p, q, prefix, norm)
        count = spm_bpe(norm, m, vslots, vmask, voffsets, vdata, score_rank, sym_start, sym_len, nxt, prv,
                        heap, ids, frozen, uleft, uright, uchild, umask, unode_piece, ws_split)
        got = spm_emit(norm, sym_start, sym_len, ids, count, unk_id, 1, byte_ids, piece_out)
        for i in range(got):
            out[nout + i] = piece_out[i]
        nout = nout + got
        prev_special = 0
        p = q
    return nout


@action
def gguf_decode(
    ids: Array[i32, ("t",)], count: i32, offsets: Array[i32, ("vocab1",)], data: Array[u8, ("vbytes",)],
    hidden: Array[u8, ("vocab",)], n_vocab: i32, special: i32, lstrip_first: i32, out: Array[u8, ("m",)],
) -> i32:
    """Concatenate token pieces (llama.cpp's ``token_to_piece``): a token with ``hidden`` 1 (control,
    unknown) gives nothing unless ``special``, one with ``hidden`` 2 (unused) never; with ``lstrip_first`` the first token loses one
    leading space. Returns the byte count, or -1-i for a bad id at i."""
    p = 0
    for i in range(count):
        t = i32(ids[i])
        if t < 0 or t >= n_vocab:
            return -1 - i
        h = i32(hidden[t])
        if h == 2 or (h == 1 and special == 0):
            continue
        a = i32(offsets[t])
        b = i32(offsets[t + 1])
        if i == 0 and lstrip_first != 0 and a < b and i32(data[a]) == 32:
            a = a + 1
        for j in range(a, b):
            out[p] = data[j]
            p = p + 1
    return p
