"""SentencePiece encode/decode as actions: normalization, BPE by score, unigram Viterbi, byte fallback.

These follow sentencepiece's own algorithms: BPE repeatedly merges the adjacent pair whose
concatenation is the highest-scoring piece (leftmost on ties), and unigram takes the best path
over all pieces in float32 (re-centred every 1e5, as sentencepiece does), unknown characters
costing ``min_score - 10``.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.tokenizers._action import action
from caten_lab.workflow.tokenizers.lookup import bytes_find, pair_find
from caten_lab.workflow.tokenizers.pretokenize import utf8_char_len
from caten_lab.workflow.types import Array, f32, i32, i64, u8


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
def heap2_push(heap: Array[i64, ("h",)], size: i32, key: i64, payload: i64) -> i32:
    """Min-heap of (key, payload) entries stored pairwise in ``heap``; returns the new size."""
    i = size
    while i > 0:
        parent = (i - 1) >> 1
        if heap[2 * parent] <= key:
            break
        heap[2 * i] = heap[2 * parent]
        heap[2 * i + 1] = heap[2 * parent + 1]
        i = parent
    heap[2 * i] = key
    heap[2 * i + 1] = payload
    return size + 1


@action
def heap2_pop(heap: Array[i64, ("h",)], size: i32) -> i32:
    """Remove the entry with the smallest key (``heap[0]``, payload ``heap[1]``); returns the size."""
    size = size - 1
    if size <= 0:
        return 0
    key = i64(heap[2 * size])
    payload = i64(heap[2 * size + 1])
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[2 * child + 2] < heap[2 * child]:
            child = child + 1
        if key <= heap[2 * child]:
            break
        heap[2 * i] = heap[2 * child]
        heap[2 * i + 1] = heap[2 * child + 1]
        i = child
    heap[2 * i] = key
    heap[2 * i + 1] = payload
    return size


@action
def spm_push_pair(
    norm: Array[u8, ("m",)], left: i32, sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)],
    right: i32, vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)], score_rank: Array[i32, ("vocab",)], heap: Array[i64, ("h",)], size: i32,
    frozen: Array[u8, ("w",)],
) -> i32:
    """Push the pair (left, right) if their concatenation is a piece; returns the heap size.

    Key: (score rank, left) so the best-scoring, leftmost pair pops first; payload: (piece id,
    merged length) so a stale entry is recognised without a lookup. User-defined symbols are
    frozen: they never merge with a neighbour.
    """
    if frozen[left] != 0 or frozen[right] != 0:
        return size
    start = i32(sym_start[left])
    merged = i32(sym_len[left] + sym_len[right])
    pid = bytes_find(norm, start, start + merged, vslots, vmask, voffsets, vdata)
    if pid < 0:
        return size
    return heap2_push(heap, size, i64(score_rank[pid]) * 4294967296 + left, i64(pid) * 4294967296 + merged)


@action
def spm_user_match(
    norm: Array[u8, ("m",)], m: i32, p: i32,
    uleft: Array[i32, ("upairs",)], uright: Array[i32, ("upairs",)], uchild: Array[i32, ("upairs",)],
    umask: i64, unode_piece: Array[i32, ("unodes",)],
) -> i32:
    """Byte length of the longest user-defined symbol starting at ``p`` (0 if none)."""
    node = 0
    key = p
    best = 0
    while key < m:
        slot = pair_find(node, i32(norm[key]), uleft, uright, umask)
        if slot < 0:
            break
        node = i32(uchild[slot])
        key = key + 1
        if unode_piece[node] >= 0:
            best = key - p
    return best


@action
def spm_bpe(
    norm: Array[u8, ("m",)], m: i32,
    vslots: Array[i32, ("slots",)], vmask: i64, voffsets: Array[i32, ("vocab1",)],
    vdata: Array[u8, ("vbytes",)],
    score_rank: Array[i32, ("vocab",)],
    sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)], nxt: Array[i32, ("w",)],
    prv: Array[i32, ("w",)], heap: Array[i64, ("h",)], ids: Array[i32, ("w",)], frozen: Array[u8, ("w",)],
    uleft: Array[i32, ("upairs",)], uright: Array[i32, ("upairs",)], uchild: Array[i32, ("upairs",)],
    umask: i64, unode_piece: Array[i32, ("unodes",)], ws_split: i32,
) -> i32:
    """SentencePiece BPE over the normalized bytes.

    The text starts as one symbol per character, or per user-defined symbol (longest match,
    frozen). Leaves the final symbols in ``sym_start``/``sym_len``/``ids`` (id -1 = unknown) and
    returns their count.
    """
    ns = 0
    p = 0
    while p < m:
        size = spm_user_match(norm, m, p, uleft, uright, uchild, umask, unode_piece)
        frozen[ns] = u8(0)
        if size > 0:
            frozen[ns] = u8(1)
        else:
            size = utf8_char_len(norm, m, p)
        if size == 0:
            size = 1
        sym_start[ns] = p
        sym_len[ns] = size
        ids[ns] = bytes_find(norm, p, p + size, vslots, vmask, voffsets, vdata)
        prv[ns] = ns - 1
        nxt[ns] = ns + 1
        ns = ns + 1
        p = p + size
    if ns == 0:
        return 0
    nxt[ns - 1] = -1
    # Merge segment by segment: when no piece has U+2581 after its first character, no merge can
    # cross the start of a U+2581, so each word has its own small heap (same result, cache-friendly).
    seg = 0
    while seg < ns:
        seg_end = ns
        if ws_split != 0:
            seg_end = seg + 1
            while seg_end < ns and not (i32(norm[sym_start[seg_end]]) == 226 and sym_len[seg_end] >= 3
                                        and i32(norm[sym_start[seg_end] + 1]) == 150
                                        and i32(norm[sym_start[seg_end] + 2]) == 129):
                seg_end = seg_end + 1
        hs = 0
        for i in range(seg, seg_end - 1):
            hs = spm_push_pair(norm, i, sym_start, sym_len, i + 1, vslots, vmask, voffsets, vdata, score_rank,
                               heap, hs, frozen)
        while hs > 0:
            left = i32(heap[0] & 4294967295)
            payload = i64(heap[1])
            hs = heap2_pop(heap, hs)
            right = i32(nxt[left])
            if right < 0:
                continue
            # sizes only grow, so an unchanged total means both symbols are as they were when pushed
            if sym_len[left] == 0 or sym_len[right] == 0:
                continue
            merged = i32(payload & 4294967295)
            if sym_len[left] + sym_len[right] != merged:
                continue
            sym_len[left] = merged
            ids[left] = i32(payload >> 32)
            sym_len[right] = 0
            after = i32(nxt[right])
            nxt[left] = after
            if after >= 0:
                prv[after] = left
            before = i32(prv[left])
            if before >= seg:
                hs = spm_push_pair(norm, before, sym_start, sym_len, left, vslots, vmask, voffsets, vdata,
                                   score_rank, heap, hs, frozen)
            if after >= 0 and after < seg_end:
                hs = spm_push_pair(norm, left, sym_start, sym_len, after, vslots, vmask, voffsets, vdata,
                                   score_rank, heap, hs, frozen)
        seg = seg_end
    count = 0
    i = 0
    while i >= 0:
        start = i32(sym_start[i])
        sym_start[count] = start
        sym_len[count] = sym_len[i]
        ids[count] = ids[i]
        count = count + 1
        i = i32(nxt[i])
    return count


@action
def spm_unigram(
    norm: Array[u8, ("m",)], m: i32,
    tleft: Array[i32, ("tpairs",)], tright: Array[i32, ("tpairs",)], tchild: Array[i32, ("tpairs",)],
    tmask: i64, node_piece: Array[i32, ("nodes",)], scores: Array[f32, ("vocab",)],
    unk_score: f32, unk_id: i32, is_user: Array[u8, ("vocab",)], max_score: f32,
    best_score: Array[f32, ("m1",)], best_start: Array[i32, ("m1",)], best_id: Array[i32, ("m1",)],
    sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)], ids: Array[i32, ("w",)],
) -> i32:
    """Unigram Viterbi over a trie of pieces; final pieces go to ``sym_start``/``sym_len``/``ids``.

    Path scores are float32 like sentencepiece's, including its re-centring: when the score at
    the current position leaves [-1e5, 1e5] it is subtracted from every reachable end position.
    Ties and rounding then pick the same paths as the library, also on megabyte inputs.
    """
    for i in range(m + 1):
        best_start[i] = -1
        best_score[i] = f32(0.0)
        best_id[i] = -1
    pos = 0
    frontier = 0
    while pos < m:
        base = f32(best_score[pos])
        if base < f32(-100000.0) or base > f32(100000.0):
            # re-centre the float32 path scores (sentencepiece does this to keep precision)
            for i in range(pos, frontier + 1):
                if i == pos or best_start[i] != -1:
                    best_score[i] = f32(best_score[i] - base)
            base = f32(0.0)
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
                score = f32(scores[pid])
                if is_user[pid] != 0:  # a bonus that makes user-defined symbols always win
                    score = f32(f32(f32(key - pos) * max_score) - f32(0.1))
                cand = f32(score + base)
                frontier = max(frontier, key)
                if best_start[key] == -1 or cand > best_score[key]:
                    best_score[key] = cand
                    best_start[key] = pos
                    best_id[key] = pid
                if key - pos == size:
                    has_single = 1
        if has_single == 0:
            cand = f32(unk_score + base)
            frontier = max(frontier, pos + size)
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
    is_user: Array[u8, ("vocab",)], max_score: f32,
    uleft: Array[i32, ("upairs",)], uright: Array[i32, ("upairs",)], uchild: Array[i32, ("upairs",)],
    umask: i64, unode_piece: Array[i32, ("unodes",)], ws_split: i32,
    norm: Array[u8, ("m",)], sym_start: Array[i32, ("w",)], sym_len: Array[i32, ("w",)],
    nxt: Array[i32, ("w",)], prv: Array[i32, ("w",)], heap: Array[i64, ("h",)],
    best_score: Array[f32, ("m1",)], ids: Array[i32, ("w",)], frozen: Array[u8, ("w",)],
    out: Array[i32, ("w",)],
) -> i32:
    """Encode UTF-8 bytes with a SentencePiece model (BPE when ``is_bpe``, else unigram)."""
    m = spm_normalize(text, n, add_dummy_prefix, remove_extra, norm)
    count = 0
    if is_bpe != 0:
        count = spm_bpe(norm, m, vslots, vmask, voffsets, vdata, score_rank, sym_start, sym_len, nxt, prv,
                        heap, ids, frozen, uleft, uright, uchild, umask, unode_piece, ws_split)
    else:
        count = spm_unigram(norm, m, tleft, tright, tchild, tmask, node_piece, scores, unk_score, unk_id,
                            is_user, max_score, best_score, nxt, prv, sym_start, sym_len, ids)
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
