"""The Llama-3 family of pre-tokenizers as a hand-written scanner action (one scanner, two variants).

llama.cpp's ``llama3`` (also ``llama-bpe``) pattern is
``(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+``;
``qwen2``'s is the same with ``\\p{N}`` (one digit per piece). The scanner takes the first
alternative that matches at a character, as the regex engines do; ``max_digits`` is the only
difference between the variants. The contractions are case-insensitive for ASCII letters only, as
llama.cpp writes them (``'[sS]|'[tT]|...``). Characters past ``end`` (the end of the fragment being
split) do not exist for the scanner.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.tokenizers._action import action
from caten_lab.workflow.types import Array, i32, u8

# character classes of tables.py
OTHER = 0
LETTER = 1
NUMBER = 2
SPACE = 3


@action
def ascii_lower_at(text: Array[u8, ("n",)], char_start: Array[i32, ("n1",)], k: i32) -> i32:
    """The first byte of character ``k``, lower-cased when it is an ASCII capital."""
    b = i32(text[char_start[k]])
    if b >= 65 and b <= 90:
        b = b + 32
    return b


@action
def is_cr_or_lf(text: Array[u8, ("n",)], char_start: Array[i32, ("n1",)], k: i32) -> i32:
    """1 when character ``k`` is ``\\r`` or ``\\n``."""
    b = i32(text[char_start[k]])
    if b == 10 or b == 13:
        return 1
    return 0


@action
def llama3_piece_end(
    text: Array[u8, ("n",)], char_start: Array[i32, ("n1",)], char_cls: Array[u8, ("n1",)],
    end: i32, k: i32, max_digits: i32,
) -> i32:
    """Character index where the Llama-3-style pre-token starting at character ``k`` ends."""
    b0 = i32(text[char_start[k]])
    c0 = i32(char_cls[k])
    # (?i:'s|'t|'re|'ve|'m|'ll|'d)
    if b0 == 39 and k + 1 < end:
        b1 = ascii_lower_at(text, char_start, k + 1)
        if b1 == 115 or b1 == 116 or b1 == 109 or b1 == 100:
            return k + 2
        if k + 2 < end:
            b2 = ascii_lower_at(text, char_start, k + 2)
            if (b1 == 114 and b2 == 101) or (b1 == 118 and b2 == 101) or (b1 == 108 and b2 == 108):
                return k + 3
    # [^\r\n\p{L}\p{N}]?\p{L}+
    starts_word = c0 == LETTER or (k + 1 < end and i32(char_cls[k + 1]) == LETTER)
    if b0 != 10 and b0 != 13 and c0 != NUMBER and starts_word:
        e = k + 1
        while e < end and i32(char_cls[e]) == LETTER:
            e = e + 1
        return e
    # \p{N}{1,max_digits}
    if c0 == NUMBER:
        e = k + 1
        while e < end and e - k < max_digits and i32(char_cls[e]) == NUMBER:
            e = e + 1
        return e
    # ` ?[^\s\p{L}\p{N}]+[\r\n]*`
    j = k
    if b0 == 32 and k + 1 < end:
        j = k + 1
    if i32(char_cls[j]) == OTHER:
        e = j + 1
        while e < end and i32(char_cls[e]) == OTHER:
            e = e + 1
        while e < end and is_cr_or_lf(text, char_start, e) == 1:
            e = e + 1
        return e
    # `\s*[\r\n]+`: up to the last line break of the whitespace run
    e = k
    last_break = -1
    while e < end and i32(char_cls[e]) == SPACE:
        if is_cr_or_lf(text, char_start, e) == 1:
            last_break = e + 1
        e = e + 1
    if last_break > 0:
        return last_break
    # `\s+(?!\S)` then `\s+`: a whitespace run leaves its last space to a following non-space
    if e - k > 1 and e < end:
        return e - 1
    if e > k:
        return e
    return k + 1
