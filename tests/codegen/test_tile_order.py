"""The ``tile_order`` pass (codegen/tile_order.py): a matmul whose whole other operand fits in L2 walks its
column tiles inside the row loops. Every output is computed by the same statements: bitwise the program
without the pass, at one and two threads (the parallel loop moves to the rows); a large operand keeps the
tile loop outermost."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab import compiler
from caten_lab.config import settings
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import trace

pytestmark = pytest.mark.c_backend
RNG = np.random.default_rng(9)


def _t(*shape: int) -> Tensor:
    return Tensor.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def _rules(out: Tensor, threads: int = 1) -> list[str]:
    res = compiler.lower_to_c(trace([out]).graph, trace=True, threads=threads)
    return [r.rule for r in res.trace["tile_order"].rewrites]


@pytest.mark.parametrize("threads", [1, 2])
def test_rows_outer_is_bitwise_the_tile_order(threads: int) -> None:
    x, w, b, y = _t(2, 100, 128), _t(128, 256), _t(256), _t(2, 100, 256)
    out = (x @ w + b).gelu() * y  # an epilogue that reads an output-sized buffer
    assert _rules(out, threads) == ["rows_outer"]
    t = trace([out])
    with settings(threads=threads):
        pm = compiler.default_pipeline()
        pm.remove("tile_order")
        (got,) = compiler.compile(t.graph)(t.arrays)
        (ref,) = compiler.compile(t.graph, pipeline=pm)(t.arrays)
    np.testing.assert_array_equal(got, ref)
    (want,) = compiler.compile(t.graph, backend="numpy")(t.arrays)
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=3e-5)


def test_a_large_operand_keeps_its_panel_outermost() -> None:
    assert _rules(_t(100, 768) @ _t(768, 768)) == []  # 2.4 MB: one 32-column panel at a time
