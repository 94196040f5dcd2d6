"""passes.indexing.unravel on blocked layouts: a row of whole blocks unravels without a ``% blocks``.

A quantized weight (rows, K) is a reshape of (rows, blocks, values): reading row ``i``, position ``r``
of it is flat index ``K*i + r``. The block coordinate must come out as ``r // values`` (the ``K*i``
term is a whole number of rows), and the value coordinate ``r % values``; checked symbolically and by
evaluating every coordinate against NumPy's unravel_index.
"""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.air.symbolic import evaluate, floordiv, mod
from caten_lab.passes.indexing import loop_var, unravel


@pytest.mark.parametrize("rows,blocks,values", [(5, 3, 32), (7, 6, 256), (2, 2, 16)])
def test_blocked_row_unravels_without_wraparound(rows, blocks, values):
    k = blocks * values
    i, r = loop_var("__i"), loop_var("__r")
    coords = unravel(k * i + r, (rows, blocks, values), {"__i": rows, "__r": k})
    assert coords[1] == floordiv(r, values) and coords[2] == mod(r, values)
    for ii in range(rows):
        for rr in range(0, k, 7):
            got = tuple(evaluate(c, {"__i": ii, "__r": rr}) for c in coords)
            assert got == tuple(np.unravel_index(k * ii + rr, (rows, blocks, values)))


def test_offset_past_a_row_keeps_the_modulo():
    """When the remainder can leave the row (r runs past K), the coordinate must still wrap."""
    i, r = loop_var("__i"), loop_var("__r")
    coords = unravel(96 * i + r, (4, 3, 32), {"__i": 4, "__r": 192})
    for ii in range(3):
        for rr in range(0, 192 - 96, 5):
            got = tuple(evaluate(c, {"__i": ii, "__r": rr}) for c in coords)
            assert got == tuple(np.unravel_index(96 * ii + rr, (4, 3, 32)))


def test_sub_block_coordinate_drops_whole_rows():
    """(rows, blocks, 2, 2, 32): the sub-block axes of a row are ``(r // 64) % 2`` and ``(r // 32) % 2``,
    without the row term, and every coordinate matches NumPy."""
    rows, blocks = 3, 6
    shape = (rows, blocks, 2, 2, 32)
    k = blocks * 128
    i, r = loop_var("__i"), loop_var("__r")
    coords = unravel(k * i + r, shape, {"__i": rows, "__r": k})
    assert coords[1] == floordiv(r, 128)
    assert coords[2] == mod(floordiv(r, 64), 2) and coords[3] == mod(floordiv(r, 32), 2)
    for ii in range(rows):
        for rr in range(0, k, 5):
            got = tuple(evaluate(c, {"__i": ii, "__r": rr}) for c in coords)
            assert got == tuple(np.unravel_index(k * ii + rr, shape))


@pytest.mark.parametrize("kv,group,d", [(3, 3, 64), (2, 4, 16), (1, 6, 8)])
def test_grouped_query_heads_unravel_without_symbolic_division(kv, group, d):
    """Attention output (t, h, d) read from (kv, group, seq, d) with a symbolic seq: the flat index
    ``d*t + d*seq*h + j`` over ``group*d*seq`` is ``h // group`` (rest < d*seq), not a division by
    ``group*d*seq`` per element; a second unravel of that result (its ``h // group`` and ``h % group``
    atoms standing where a loop variable would) stays free of divisions too. Checked against NumPy."""
    from caten_lab.air.symbolic import Expr

    seq = Expr({("seq",): 1})
    t, h, j = loop_var("__t"), loop_var("__h"), loop_var("__j")
    heads = kv * group
    bounds = {"__t": seq, "__h": heads, "__j": d}
    shape = (kv, group, seq, d)
    coords = unravel(d * t + d * seq * h + j, shape, bounds)
    want = (0, h) if kv == 1 else (floordiv(h, group), mod(h, group))  # h < group: no division at all
    assert coords[:2] == want
    again = unravel(coords[0] * (group * seq * d) + coords[1] * (seq * d) + t * d + j, shape, bounds)
    assert again == coords  # (kv, group, seq, d) read back at its own coordinates: the same, no new division
    for n in (1, 5):
        env = {"seq": n}
        for tt in range(n):
            for hh in range(heads):
                for jj in (0, d - 1):
                    e = {**env, "__t": tt, "__h": hh, "__j": jj}
                    got = tuple(evaluate(c, e) for c in coords)
                    assert got == tuple(np.unravel_index(d * tt + d * n * hh + jj, (kv, group, n, d)))
