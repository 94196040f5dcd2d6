"""The transpose_tiles pass: a copy that reads its source across rows walks square tiles, with the same result."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.codegen.kir import Alu, For
from caten_lab.codegen.kir_walk import walk
from caten_lab.codegen.transpose_tiles import TRANSPOSE_TILE
from caten_lab.compiler import compile, default_pipeline
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import trace


def _tiles(prog) -> list[For]:  # noqa: ANN001
    return [s for f in prog.kernel_ir.functions for s in walk(f.body)
            if isinstance(s, For) and s.role == "tile" and s.step.value == TRANSPOSE_TILE]


@pytest.mark.parametrize("shape", [(64, 80), (67, 45), (40, 33)])
def test_a_transposing_copy_is_tiled_and_exact(shape) -> None:  # noqa: ANN001
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    t = trace([Tensor.from_numpy(x, name="x").T * 2.0])
    prog = compile(t.graph)
    plain_pm = default_pipeline()
    plain_pm.remove("transpose_tiles")
    plain = compile(t.graph, pipeline=plain_pm)
    got = prog(t.arrays)[0]
    np.testing.assert_array_equal(got, x.T * np.float32(2.0))
    np.testing.assert_array_equal(got, plain(t.arrays)[0])
    assert not _tiles(plain)
    (tile,) = _tiles(prog)  # rows in tiles of 16, then columns; the element loops stop at the tile's end,
    loops = [s for s in walk(tile.body) if isinstance(s, For)]  # clamped where the tile is partial
    assert [s.step.value for s in loops] == [TRANSPOSE_TILE, 1, 1]
    clamped = [isinstance(s.stop, Alu) and s.stop.op == "min" for s in loops[1:]]
    assert clamped == [d % TRANSPOSE_TILE != 0 for d in reversed(shape)]


def test_contiguous_and_small_copies_are_left_alone() -> None:
    x = np.random.default_rng(1).standard_normal((64, 80)).astype(np.float32)
    s = np.random.default_rng(2).standard_normal((12, 10)).astype(np.float32)
    t = trace([Tensor.from_numpy(x, name="x") * 2.0, Tensor.from_numpy(s, name="s").T * 3.0])
    prog = compile(t.graph)
    a, b = prog(t.arrays)
    np.testing.assert_array_equal(a, x * np.float32(2.0))
    np.testing.assert_array_equal(b, s.T * np.float32(3.0))
    assert not _tiles(prog)  # contiguous: collapsed; 12 x 10 is less than two tiles a side
