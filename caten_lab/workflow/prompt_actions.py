"""Prompt assembly as an action: special-token ids and tokenized text segments -> one id sequence.

A chat prompt (workflow/chat_layout.py) is a run of parts: a special token (``<|im_start|>``, as
its id: never text the tokenizer could split or a user could forge) or a text segment (literal
template text and the user's message, tokenized on its own as llama.cpp and transformers tokenize
the text between special tokens). The caller tokenizes the segments into ``seg_ids`` (segment s is
``seg_ids[seg_start[s]:seg_start[s + 1]]``); ``assemble_prompt`` lays the parts out in order.
Interpreted in Python, compiled into the exported library.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.action import action
from caten_lab.workflow.types import Array, i32, i64

PART_SPECIAL = 0  # part value: a token id
PART_SEGMENT = 1  # part value: a segment index


@action
def assemble_prompt(
    kinds: Array[i32, ("np",)],
    values: Array[i32, ("np",)],
    n_parts: i64,
    seg_ids: Array[i32, ("ns",)],
    seg_start: Array[i32, ("nseg",)],
    n_vocab: i64,
    out: Array[i32, ("cap",)],
    cap: i64,
) -> i64:
    """The ids of parts[0:n_parts] into ``out``; their count, -1 if more than ``cap``, -2 if a part
    is malformed (an unknown kind, a segment out of range, a token id outside the vocabulary)."""
    n = i64(0)
    for i in range(n_parts):
        if kinds[i] == 0:
            if values[i] < 0 or values[i] >= n_vocab:
                return -2
            if n >= cap:
                return -1
            out[n] = values[i]
            n = n + 1
        elif kinds[i] == 1:
            s = values[i]
            if s < 0 or s + 1 >= len(seg_start):
                return -2
            for j in range(seg_start[s], seg_start[s + 1]):
                if n >= cap:
                    return -1
                out[n] = seg_ids[j]
                n = n + 1
        else:
            return -2
    return n
