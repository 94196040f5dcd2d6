"""The training workflow's data loader as an action: a step's windows read from a token file's bytes.

``fill_batch`` is ``Trainer.next_batch`` (models/trainer.py) written in the action subset, so the exported
training library (workflow/training.py) samples exactly the windows the Python Trainer does: window ``b``
of step ``s`` starts at ``uniform(seed, s * batch + b) * span`` truncated (``window_starts``: the samplers'
SplitMix64 counter RNG, ``uniform01``), with ``span = n_tokens - (block + 1)``. The ids are read from the
memory-mapped file as little-endian integers of ``token_bytes`` bytes (2: uint16, 4: uint32, as NumPy's
``tofile`` writes them), so the file is never copied or converted.
"""
# ruff: noqa: F821, UP037  (symbolic dims are strings inside Array[...] annotations, not forward references)

from caten_lab.workflow.action import action
from caten_lab.workflow.samplers import uniform01
from caten_lab.workflow.types import Array, f64, i64, u8


@action
def fill_batch(
    data: Array[u8, ("n",)], n_tokens: i64, token_bytes: i64, seed_hi: i64, seed_lo: i64, step: i64,
    out: Array[i64, ("b", "w")], st: Array[i64, (2,)],
) -> i64:
    """Write step ``step``'s ``b`` windows of ``w`` tokens into ``out``; returns the largest id written."""
    batch = out.shape[0]
    w = out.shape[1]
    span = n_tokens - w
    top = 0
    for b in range(batch):
        start = i64(uniform01(seed_hi, seed_lo, step * batch + b, st) * f64(span))
        for t in range(w):
            at = (start + t) * token_bytes
            v = 0
            for k in range(token_bytes - 1, -1, -1):
                v = v * 256 + i64(data[at + k])
            out[b, t] = v
            top = max(top, v)
    return top
