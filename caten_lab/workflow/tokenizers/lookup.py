"""Hash-table lookups written as actions (the same hashes as ``tables.py``).

No ``from __future__ import annotations`` here: the action compiler reads real annotation objects.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.tokenizers._action import action
from caten_lab.workflow.types import Array, i32, i64, u8


@action
def bytes_find(
    text: Array[u8, ("n",)], start: i32, end: i32,
    slots: Array[i32, ("slots",)], mask: i64,
    offsets: Array[i32, ("n_items1",)], data: Array[u8, ("n_bytes",)],
) -> i32:
    """Id of the byte string ``text[start:end]`` in a ``BytesTable``, or -1."""
    h = i64(2166136261)
    for i in range(start, end):
        h = ((h ^ i64(text[i])) * 16777619) & i64(4294967295)
    slot = (h ^ (h >> 15)) & mask
    found = -1
    item = i32(slots[slot])
    while item >= 0:
        a = i32(offsets[item])
        if i32(offsets[item + 1]) - a == end - start:
            same = 1
            for j in range(end - start):
                if text[start + j] != data[a + j]:
                    same = 0
                    break
            if same == 1:
                found = item
                break
        slot = (slot + 1) & mask
        item = i32(slots[slot])
    return found


@action
def pair_find(
    a: i32, b: i32, left: Array[i32, ("pairs",)], right: Array[i32, ("pairs",)], mask: i64,
) -> i32:
    """Slot of the key (a, b) in a ``PairTable``, or -1."""
    h = i64(a) * 1000003 + i64(b) * 19349663
    slot = (h ^ (h >> 15)) & mask
    found = -1
    x = i32(left[slot])
    while x >= 0:
        if x == a and i32(right[slot]) == b:
            found = i32(slot)
            break
        slot = (slot + 1) & mask
        x = i32(left[slot])
    return found
