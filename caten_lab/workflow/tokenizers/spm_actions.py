"""SentencePiece encode/decode as actions: normalization, BPE by score, unigram Viterbi, byte fallback.

These follow sentencepiece's own algorithms: BPE repeatedly merges the adjacent pair whose
concatenation is the highest-scoring piece (leftmost on ties), and unigram takes the best path
over all pieces (float32 piece scores summed in float64, as sentencepiece does), unknown characters
costing ``min_score - 10``.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.tokenizers._action import action
from caten_lab.workflow.tokenizers.bpe_actions import heap_pop, heap_push
from caten_lab.workflow.tokenizers.lookup import bytes_find, pair_find
from caten_lab.workflow.tokenizers.pretokenize import utf8_char_len
from caten_lab.workflow.types import Array, f32, f64, i32, i64, u8


@action
def spm_normalize(
    text: Array[u8, ("n",)], n: i32, add_dummy_prefix: i32, remove_extra: i32, out: Array[u8, ("m",)],
) -> i32:
    """Identity normalization: spaces become U+2581, malformed bytes U+FFFD; returns the length."""
    p = 0
    if remove_extra != 0:
        while p < n and i32(text[p]) == 32:
            p = p + 1
    if p >= n:
        return 0
    o = 0
    if add_dummy_prefix != 0:
        out[0] = u8(226)
        out[1] = u8(150)
        out[2] = u8(129)
        o = 3
    prev_space = remove_extra
    while p < n:
        size = utf8_char_len(text, n, p)
        if size == 0:
            out[o] = u8(239)
            out[o + 1] = u8(191)
            out[o + 2] = u8(189)
            o = o + 3
            p = p + 1
            prev_space = 0
        elif size == 1 and i32(text[p]) == 32:
            if prev_space == 0:
                out[o] = u8(226)
                out[o + 1] = u8(150)
                out[o + 2] = u8(129)
                o = o + 3
            prev_space = 1
            p = p + 1
        else:
            for j in range(size):
                out[o + j] = text[p + j]
            o = o + size
            p = p + size
            prev_space = 0
        if remove_extra == 0:
            prev_space = 0
    if remove_extra != 0:
        while o >= 3 and i32(out[o - 3]) == 226 and i32(out[o - 2]) == 150 and i32(out[o - 1]) == 129:
            o = o - 3
    return o


@action
def spm_push_pair(
    norm: Array[u8, ("m",)], left: i32, sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)],
    right: i32, vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)], score_rank: Array[i32, ("vocab",)], heap: Array[i64, ("h",)], size: i32,
) -> i32:
    """Push the pair (left, right) if their concatenation is a piece; returns the heap size."""
    start = i32(sym_start[left])
    pid = bytes_find(norm, start, start + sym_len[left] + sym_len[right], vslots, vmask, voffsets, vdata)
    if pid < 0:
        return size
    return heap_push(heap, size, i64(score_rank[pid]) * 4294967296 + left)


@action
def spm_bpe(
    norm: Array[u8, ("m",)], m: i32,
    vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)],
    score_rank: Array[i32, ("vocab",)],
    sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)], nxt: Array[i32, ("w",)],
    prv: Array[i32, ("w",)], heap: Array[i64, ("h",)], ids: Array[i32, ("w",)],
) -> i32:
    """SentencePiece BPE over the normalized bytes.

    Leaves the final symbols in ``sym_start``/``sym_len``/``ids`` (id -1 = unknown) and returns
    their count.
    """
    ns = 0
    p = 0
    while p < m:
        size = utf8_char_len(norm, m, p)
        if size == 0:
            size = 1
        sym_start[ns] = p
        sym_len[ns] = size
        prv[ns] = ns - 1
        nxt[ns] = ns + 1
        ns = ns + 1
        p = p + size
    if ns == 0:
        return 0
    nxt[ns - 1] = -1
    hs = 0
    for i in range(ns - 1):
        hs = spm_push_pair(norm, i, sym_start, sym_len, i + 1, vslots, vmask, voffsets, vdata, score_rank,
                           heap, hs)
    while hs > 0:
        key = i64(heap[0])
        hs = heap_pop(heap, hs)
        r = i32(key >> 32)
        left = i32(key & 4294967295)
        right = i32(nxt[left])
        if sym_len[left] == 0 or right < 0:
            continue
        start = i32(sym_start[left])
        pid = bytes_find(norm, start, start + sym_len[left] + sym_len[right], vslots, vmask, voffsets, vdata)
        if pid < 0:
            continue
        if score_rank[pid] != r:
            continue
        sym_len[left] = sym_len[left] + sym_len[right]
        sym_len[right] = 0
        after = i32(nxt[right])
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        before = i32(prv[left])
        if before >= 0:
            hs = spm_push_pair(norm, before, sym_start, sym_len, left, vslots, vmask, voffsets, vdata,
                               score_rank, heap, hs)
        if after >= 0:
            hs = spm_push_pair(norm, left, sym_start, sym_len, after, vslots, vmask, voffsets, vdata,
                               score_rank, heap, hs)
    count = 0
    i = 0
    while i >= 0:
        start = i32(sym_start[i])
        sym_start[count] = start
        sym_len[count] = sym_len[i]
        ids[count] = bytes_find(norm, start, start + sym_len[i], vslots, vmask, voffsets, vdata)
        count = count + 1
        i = i32(nxt[i])
    return count


@action
def spm_unigram(
    norm: Array[u8, ("m",)], m: i32,
    tleft: Array[i32, ("tpairs",)], tright: Array[i32, ("tpairs",)], tchild: Array[i32, ("tpairs",)],
    tmask: i64, node_piece: Array[i32, ("nodes",)], scores: Array[f32, ("vocab",)],
    unk_score: f32, unk_id: i32,
    best_score: Array[f64, ("m1",)], best_start: Array[i32, ("m1",)], best_id: Array[i32, ("m1",)],
    sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)], ids: Array[i32, ("w",)],
) -> i32:
    """Unigram Viterbi over a trie of pieces; final pieces go to ``sym_start``/``sym_len``/``ids``.

    Path scores are float64 sums of the float32 piece scores: sentencepiece does the same, and on
    megabyte inputs float32 sums round differently and pick other paths.
    """
    for i in range(m + 1):
        best_start[i] = -1
        best_score[i] = f64(0.0)
        best_id[i] = -1
    pos = 0
    while pos < m:
        base = f64(best_score[pos])
        lead = i32(norm[pos])
        size = 1
        if lead >= 240:
            size = 4
        elif lead >= 224:
            size = 3
        elif lead >= 192:
            size = 2
        size = min(size, m - pos)
        has_single = 0
        node = 0
        key = pos
        while key < m:
            slot = pair_find(node, i32(norm[key]), tleft, tright, tmask)
            if slot < 0:
                break
            node = i32(tchild[slot])
            key = key + 1
            pid = i32(node_piece[node])
            if pid >= 0:
                cand = f64(scores[pid]) + base
                if best_start[key] == -1 or cand > best_score[key]:
                    best_score[key] = cand
                    best_start[key] = pos
                    best_id[key] = pid
                if key - pos == size:
                    has_single = 1
        if has_single == 0:
            cand = f64(unk_score) + base
            if best_start[pos + size] == -1 or cand > best_score[pos + size]:
                best_score[pos + size] = cand
                best_start[pos + size] = pos
                best_id[pos + size] = unk_id
        pos = pos + size
    count = 0
    end = m
    while end > 0:
        start = i32(best_start[end])
        sym_start[count] = start
        sym_len[count] = end - start
        ids[count] = best_id[end]
        count = count + 1
        end = start
    for i in range(count // 2):
        j = count - 1 - i
        t = i32(sym_start[i])
        sym_start[i] = sym_start[j]
        sym_start[j] = t
        t = i32(sym_len[i])
        sym_len[i] = sym_len[j]
        sym_len[j] = t
        t = i32(ids[i])
        ids[i] = ids[j]
        ids[j] = t
    return count


@action
def spm_emit(
    norm: Array[u8, ("m",)], sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)],
    ids: Array[i32, ("w",)], count: i32, unk_id: i32, byte_fallback: i32, byte_ids: Array[i32, (256,)],
    out: Array[i32, ("w",)],
) -> i32:
    """Final ids: unknown pieces become their UTF-8 byte pieces (byte fallback) or one merged <unk>."""
    o = 0
    prev_unk = 0
    for c in range(count):
        pid = i32(ids[c])
        if pid < 0 or pid == unk_id:
            if byte_fallback != 0:
                start = i32(sym_start[c])
                for j in range(sym_len[c]):
                    out[o] = byte_ids[i32(norm[start + j])]
                    o = o + 1
            elif prev_unk == 0:
                out[o] = unk_id
                o = o + 1
            prev_unk = 1
        else:
            out[o] = pid
            o = o + 1
            prev_unk = 0
    return o


@action
def spm_encode(
    text: Array[u8, ("n",)], n: i32, add_dummy_prefix: i32, remove_extra: i32, is_bpe: i32,
    vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)],
    score_rank: Array[i32, ("vocab",)],
    tleft: Array[i32, ("tpairs",)], tright: Array[i32, ("tpairs",)], tchild: Array[i32, ("tpairs",)],
    tmask: i64, node_piece: Array[i32, ("nodes",)], scores: Array[f32, ("vocab",)],
    unk_score: f32, unk_id: i32, byte_fallback: i32, byte_ids: Array[i32, (256,)],
    norm: Array[u8, ("m",)], sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)],
    nxt: Array[i32, ("w",)], prv: Array[i32, ("w",)], heap: Array[i64, ("h",)],
    best_score: Array[f64, ("m1",)], ids: Array[i32, ("w",)], out: Array[i32, ("w",)],
) -> i32:
    """Encode UTF-8 bytes with a SentencePiece model (BPE when ``is_bpe``, else unigram)."""
    m = spm_normalize(text, n, add_dummy_prefix, remove_extra, norm)
    count = 0
    if is_bpe != 0:
        count = spm_bpe(norm, m, vslots, vmask, voffsets, vdata, score_rank, sym_start, sym_len, nxt, prv,
                        heap, ids)
    else:
        count = spm_unigram(norm, m, tleft, tright, tchild, tmask, node_piece, scores, unk_score, unk_id,
                            best_score, nxt, prv, sym_start, sym_len, ids)
    return spm_emit(norm, sym_start, sym_len, ids, count, unk_id, byte_fallback, byte_ids, out)


@action
def spm_decode(
    ids: Array[i32, ("t",)], count: i32, offsets: Array[i32, ("vocab1",)], data: Array[u8, ("vbytes",)],
    kind: Array[u8, ("vocab",)], n_vocab: i32, strip_mode: i32, out: Array[u8, ("o",)],
) -> i32:
    """Concatenate piece surfaces, dropping the space of the leading U+2581 like sentencepiece.

    ``kind``: 0 normal, 1 normal starting with U+2581, 2 control, 3 unknown, 4 byte.
    ``strip_mode``: 0 keep, 1 strip one leading space (dummy prefix), 2 strip every leading
    space-only piece (remove_extra_whitespaces). Returns the byte count, or -1-i for a bad id at i.
    """
    p = 0
    at_start = 1
    seen = 0
    for i in range(count):
        t = i32(ids[i])
        if t < 0 or t >= n_vocab:
            return -1 - i
        k = i32(kind[t])
        a = i32(offsets[t])
        b = i32(offsets[t + 1])
        if k == 4:
            at_start = 0
        else:
            if seen == 1 or p > 0:
                at_start = 0
            seen = 0
            if k == 1 and at_start == 1 and strip_mode != 0:
                a = a + 1
                if strip_mode == 1:
                    seen = 1
        for j in range(a, b):
            out[p] = data[j]
            p = p + 1
    return p
