"""transpose_operands: ``x @ W.T`` shared by many output rows reads W through a transposed copy; the values
are NumPy's on both backends, and decode-shaped or symbolic matmuls keep the dot form."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab import compiler
from caten_lab.air import Sym
from caten_lab.config import settings
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import trace
from caten_lab.passes import PassContext
from caten_lab.passes.transpose_operands import MIN_ROWS, transpose_operands_pass


def _graph(rows: object, batch: tuple = ()) -> tuple:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((*batch, 96, 48)).astype(np.float32)
    xs = rng.standard_normal((*batch, rows if isinstance(rows, int) else 70, 48)).astype(np.float32)
    x = Tensor.from_numpy(xs, name="x") if isinstance(rows, int) else Tensor.placeholder(
        (*batch, rows, 48), "float32", name="x")
    out = x @ Tensor.from_numpy(w, name="w").transpose(-1, -2)
    t = trace([out])
    return t, xs, w


def _rewrites(g: object) -> int:
    ctx = PassContext(tracing=True, rewrites=[])
    transpose_operands_pass().run(g, ctx)
    return sum(r.rule.startswith("x @ W.T") for r in ctx.rewrites)


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_a_shared_operand_is_read_transposed_with_the_same_values(backend: str, batch: tuple) -> None:
    t, xs, w = _graph(MIN_ROWS + 6, batch)
    want = xs @ np.swapaxes(w, -1, -2)
    with settings(backend=backend):
        prog = compiler.compile(t.graph, backend=backend)
        (got,) = prog(t.arrays)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
    if backend == "c":  # the transposed copy of w is a kernel of its own, then the matmul reads it
        assert len(prog.schedule.kernels) == 2 and prog.schedule.kernels[0].inputs == ["w"]
    assert _rewrites(t.graph.copy()) == 1


def test_decode_rows_and_symbolic_rows_keep_the_dot_form() -> None:
    t, _, _ = _graph(1)  # one output row (a decode step): a copy would cost as much as the matmul
    assert _rewrites(t.graph.copy()) == 0
    t, _, _ = _graph(MIN_ROWS - 1)
    assert _rewrites(t.graph.copy()) == 0
    t, _, _ = _graph(Sym("seq"))  # a prompt length known only at run time
    assert _rewrites(t.graph.copy()) == 0
