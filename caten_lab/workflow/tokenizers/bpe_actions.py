"""Byte-level BPE (GPT-2) as actions: merge loop, whole-text encode, decode.

Merging follows tiktoken: repeatedly merge the adjacent pair with the lowest rank (leftmost on
ties). Short pieces use a compact array and a linear min-scan (fast for the usual 2-10 byte
words); long pieces use a linked list and a binary heap, so a 100 kB run of spaces stays
O(n log n). The pair table decides the semantics: "ranks" (any split of a token, tiktoken) or
"merges" (only the listed merge rules, original GPT-2 / `tokenizers`).
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.tokenizers._action import action
from caten_lab.workflow.tokenizers.lookup import bytes_find, pair_find
from caten_lab.workflow.tokenizers.pretokenize import gpt2_piece_end, utf8_classify
from caten_lab.workflow.types import Array, i32, i64, u8

NO_RANK = 2147483647
LONG_PIECE = 64


@action
def heap_push(heap: Array[i64, ("h",)], size: i32, key: i64) -> i32:
    """Push ``key`` on a binary min-heap of ``size`` entries; returns the new size."""
    i = size
    heap[i] = key
    while i > 0:
        parent = (i - 1) >> 1
        if heap[parent] <= key:
            break
        heap[i] = heap[parent]
        i = parent
    heap[i] = key
    return size + 1


@action
def heap_pop(heap: Array[i64, ("h",)], size: i32) -> i32:
    """Remove the minimum (``heap[0]``); returns the new size."""
    size = size - 1
    if size <= 0:
        return 0
    key = i64(heap[size])
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child = child + 1
        if key <= heap[child]:
            break
        heap[i] = heap[child]
        i = child
    heap[i] = key
    return size


@action
def bpe_merge_short(
    text: Array[u8, ("n",)], start: i32, end: i32, byte_ids: Array[i32, (256,)],
    pleft: Array[i32, ("pairs",)], pright: Array[i32, ("pairs",)], prank: Array[i32, ("pairs",)],
    presult: Array[i32, ("pairs",)], pmask: i64,
    sym: Array[i32, ("w",)], rank: Array[i32, ("w",)], res: Array[i32, ("w",)],
    out: Array[i32, ("n",)], nout: i32,
) -> i32:
    """BPE of ``text[start:end]`` with a linear min-scan; appends to ``out``, returns the new count."""
    m = end - start
    for i in range(m):
        sym[i] = byte_ids[i32(text[start + i])]
    for i in range(m - 1):
        slot = pair_find(sym[i], sym[i + 1], pleft, pright, pmask)
        rank[i] = NO_RANK
        if slot >= 0:
            rank[i] = prank[slot]
            res[i] = presult[slot]
    count = m
    while count > 1:
        best = NO_RANK
        at = -1
        for i in range(count - 1):
            if rank[i] < best:
                best = i32(rank[i])
                at = i
        if at < 0:
            break
        sym[at] = res[at]
        for i in range(at + 1, count - 1):
            sym[i] = sym[i + 1]
            rank[i] = rank[i + 1]
            res[i] = res[i + 1]
        count = count - 1
        if at > 0:
            slot = pair_find(sym[at - 1], sym[at], pleft, pright, pmask)
            rank[at - 1] = NO_RANK
            if slot >= 0:
                rank[at - 1] = prank[slot]
                res[at - 1] = presult[slot]
        if at < count - 1:
            slot = pair_find(sym[at], sym[at + 1], pleft, pright, pmask)
            rank[at] = NO_RANK
            if slot >= 0:
                rank[at] = prank[slot]
                res[at] = presult[slot]
    for i in range(count):
        out[nout + i] = sym[i]
    return nout + count


@action
def bpe_merge_long(
    text: Array[u8, ("n",)], start: i32, end: i32, byte_ids: Array[i32, (256,)],
    pleft: Array[i32, ("pairs",)], pright: Array[i32, ("pairs",)], prank: Array[i32, ("pairs",)],
    presult: Array[i32, ("pairs",)], pmask: i64,
    sym: Array[i32, ("w",)], nxt: Array[i32, ("w",)], prv: Array[i32, ("w",)], heap: Array[i64, ("h",)],
    out: Array[i32, ("n",)], nout: i32,
) -> i32:
    """BPE of ``text[start:end]`` with a heap of (rank, position) keys and lazy invalidation."""
    m = end - start
    for i in range(m):
        sym[i] = byte_ids[i32(text[start + i])]
        nxt[i] = i + 1
        prv[i] = i - 1
    nxt[m - 1] = -1
    size = 0
    for i in range(m - 1):
        slot = pair_find(sym[i], sym[i + 1], pleft, pright, pmask)
        if slot >= 0:
            size = heap_push(heap, size, i64(prank[slot]) * 4294967296 + i)
    while size > 0:
        key = i64(heap[0])
        size = heap_pop(heap, size)
        r = i32(key >> 32)
        i = i32(key & 4294967295)
        j = i32(nxt[i])
        if sym[i] < 0 or j < 0:
            continue
        slot = pair_find(sym[i], sym[j], pleft, pright, pmask)
        if slot < 0 or prank[slot] != r:
            continue
        sym[i] = presult[slot]
        sym[j] = -1
        after = i32(nxt[j])
        nxt[i] = after
        if after >= 0:
            prv[after] = i
        before = i32(prv[i])
        if before >= 0:
            slot = pair_find(sym[before], sym[i], pleft, pright, pmask)
            if slot >= 0:
                size = heap_push(heap, size, i64(prank[slot]) * 4294967296 + before)
        if after >= 0:
            slot = pair_find(sym[i], sym[after], pleft, pright, pmask)
            if slot >= 0:
                size = heap_push(heap, size, i64(prank[slot]) * 4294967296 + i)
    i = 0
    while i >= 0:
        out[nout] = sym[i]
        nout = nout + 1
        i = i32(nxt[i])
    return nout


@action
def bpe_encode_piece(
    text: Array[u8, ("n",)], start: i32, end: i32, byte_ids: Array[i32, (256,)],
    vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)], whole_lookup: i32,
    pleft: Array[i32, ("pairs",)], pright: Array[i32, ("pairs",)], prank: Array[i32, ("pairs",)],
    presult: Array[i32, ("pairs",)], pmask: i64,
    sym: Array[i32, ("w",)], rank: Array[i32, ("w",)], res: Array[i32, ("w",)],
    heap: Array[i64, ("h",)], out: Array[i32, ("n",)], nout: i32,
) -> i32:
    """Tokens of one pre-token: a single byte, a whole-vocabulary hit, or the BPE merge loop."""
    m = end - start
    if m == 1:
        out[nout] = byte_ids[i32(text[start])]
        return nout + 1
    if whole_lookup != 0:
        tid = bytes_find(text, start, end, vslots, vmask, voffsets, vdata)
        if tid >= 0:
            out[nout] = tid
            return nout + 1
    if m <= LONG_PIECE:
        return bpe_merge_short(text, start, end, byte_ids, pleft, pright, prank, presult, pmask,
                               sym, rank, res, out, nout)
    return bpe_merge_long(text, start, end, byte_ids, pleft, pright, prank, presult, pmask,
                          sym, rank, res, heap, out, nout)


@action
def gpt2_encode(
    text: Array[u8, ("n",)], n: i32,
    stage1: Array[i32, (4352,)], stage2: Array[u8, ("stage2",)],
    byte_ids: Array[i32, (256,)],
    vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)], whole_lookup: i32,
    pleft: Array[i32, ("pairs",)], pright: Array[i32, ("pairs",)], prank: Array[i32, ("pairs",)],
    presult: Array[i32, ("pairs",)], pmask: i64,
    char_start: Array[i32, ("n1",)], char_cls: Array[u8, ("n1",)],
    sym: Array[i32, ("w",)], rank: Array[i32, ("w",)], res: Array[i32, ("w",)], heap: Array[i64, ("h",)],
    out: Array[i32, ("n",)],
) -> i32:
    """GPT-2 encode of UTF-8 bytes: pre-tokenize with the GPT-2 pattern, BPE each piece."""
    nc = utf8_classify(text, n, stage1, stage2, char_start, char_cls)
    k = 0
    nout = 0
    while k < nc:
        e = gpt2_piece_end(text, char_start, char_cls, nc, k)
        nout = bpe_encode_piece(text, char_start[k], char_start[e], byte_ids, vslots, vmask, voffsets,
                                vdata, whole_lookup, pleft, pright, prank, presult, pmask,
                                sym, rank, res, heap, out, nout)
        k = e
    return nout


@action
def tokens_to_bytes(
    ids: Array[i32, ("t",)], count: i32, offsets: Array[i32, ("vocab1",)], data: Array[u8, ("vbytes",)],
    n_vocab: i32, out: Array[u8, ("m",)],
) -> i32:
    """Concatenate the byte strings of ``ids``; returns the byte count, or -1-i for a bad id at i."""
    p = 0
    for i in range(count):
        t = i32(ids[i])
        if t < 0 or t >= n_vocab:
            return -1 - i
        a = i32(offsets[t])
        b = i32(offsets[t + 1])
        for j in range(a, b):
            out[p] = data[j]
            p = p + 1
    return p
