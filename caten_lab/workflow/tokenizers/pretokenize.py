"""UTF-8 decoding with character classes, and the GPT-2 pre-tokenizer, as actions.

The GPT-2 pattern ``'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+``
is implemented as a hand-written scanner: at each position it takes the first alternative that
matches, with the same greedy/backtracking outcome the regex engines produce. Invalid UTF-8 bytes
are single-byte characters of class OTHER (punctuation-like).
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.tokenizers._action import action
from caten_lab.workflow.types import Array, i32, u8


@action
def utf8_char_len(text: Array[u8, ("n",)], n: i32, p: i32) -> i32:
    """Length of the well-formed UTF-8 character at ``p``, or 0 if the byte there starts none."""
    b0 = i32(text[p])
    b1 = 0
    b2 = 0
    b3 = 0
    if p + 1 < n:
        b1 = i32(text[p + 1])
    if p + 2 < n:
        b2 = i32(text[p + 2])
    if p + 3 < n:
        b3 = i32(text[p + 3])
    size = 0
    if b0 < 128:
        size = 1
    elif b0 >= 194 and b0 <= 223:
        if p + 1 < n and b1 >= 128 and b1 <= 191:
            size = 2
    elif b0 >= 224 and b0 <= 239:
        lo = 128
        hi = 191
        if b0 == 224:
            lo = 160
        if b0 == 237:
            hi = 159
        if p + 2 < n and b1 >= lo and b1 <= hi and b2 >= 128 and b2 <= 191:
            size = 3
    elif b0 >= 240 and b0 <= 244:
        lo = 128
        hi = 191
        if b0 == 240:
            lo = 144
        if b0 == 244:
            hi = 143
        if p + 3 < n and b1 >= lo and b1 <= hi and b2 >= 128 and b2 <= 191 and b3 >= 128 and b3 <= 191:
            size = 4
    return size


@action
def utf8_classify(
    text: Array[u8, ("n",)], n: i32,
    stage1: Array[i32, (4352,)], stage2: Array[u8, ("stage2",)],
    char_start: Array[i32, ("n1",)], char_cls: Array[u8, ("n1",)],
) -> i32:
    """Split ``text`` into characters: their byte starts and classes; returns the count.

    ``char_start[count] = n`` so every character's end is the next start.
    """
    p = 0
    k = 0
    while p < n:
        size = utf8_char_len(text, n, p)
        cls = 0
        if size == 0:
            size = 1
        else:
            b0 = i32(text[p])
            cp = b0
            if size == 2:
                cp = ((b0 & 31) << 6) | (i32(text[p + 1]) & 63)
            elif size == 3:
                cp = ((b0 & 15) << 12) | ((i32(text[p + 1]) & 63) << 6) | (i32(text[p + 2]) & 63)
            elif size == 4:
                cp = (((b0 & 7) << 18) | ((i32(text[p + 1]) & 63) << 12) | ((i32(text[p + 2]) & 63) << 6)
                      | (i32(text[p + 3]) & 63))
            cls = i32(stage2[i32(stage1[cp >> 8]) + (cp & 255)])
        char_start[k] = p
        char_cls[k] = u8(cls)
        k = k + 1
        p = p + size
    char_start[k] = n
    return k


@action
def gpt2_piece_end(
    text: Array[u8, ("n",)], char_start: Array[i32, ("n1",)], char_cls: Array[u8, ("n1",)],
    nc: i32, k: i32,
) -> i32:
    """Character index where the GPT-2 pre-token starting at character ``k`` ends."""
    b0 = i32(text[char_start[k]])
    # 's 't 're 've 'm 'll 'd
    if b0 == 39 and k + 1 < nc:
        b1 = i32(text[char_start[k + 1]])
        if b1 == 115 or b1 == 116 or b1 == 109 or b1 == 100:
            return k + 2
        if k + 2 < nc:
            b2 = i32(text[char_start[k + 2]])
            if (b1 == 114 and b2 == 101) or (b1 == 118 and b2 == 101) or (b1 == 108 and b2 == 108):
                return k + 3
    # ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional space, then a run of one class
    j = k
    if b0 == 32 and k + 1 < nc and i32(char_cls[k + 1]) != 3:
        j = k + 1
    cj = i32(char_cls[j])
    e = j + 1
    if cj != 3:
        while e < nc and i32(char_cls[e]) == cj:
            e = e + 1
        return e
    # `\s+(?!\S)` then `\s+`: a whitespace run leaves its last space to a following non-space
    while e < nc and i32(char_cls[e]) == 3:
        e = e + 1
    if e < nc and e - k >= 2:
        return e - 1
    return e
