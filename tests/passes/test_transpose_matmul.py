"""transpose_matmul: a matmul whose row operand's values along the reduction are far apart (a weight gradient
``g^T @ x`` over a wide ``g``) is computed transposed and read back through a view: NumPy's values on both
backends, bitwise the untransposed program's on C, and nothing changes where the rule does not pay."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab import compiler
from caten_lab.config import settings
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import trace
from caten_lab.passes import PassContext
from caten_lab.passes.transpose_matmul import MIN_K_STRIDE, transpose_matmul_pass

RNG = np.random.default_rng(0)
G = RNG.standard_normal((96, MIN_K_STRIDE)).astype(np.float32)  # rows MIN_K_STRIDE apart
X = RNG.standard_normal((96, 16)).astype(np.float32)
E = RNG.standard_normal((MIN_K_STRIDE, 16)).astype(np.float32)


def _rewrites(g: object) -> int:
    ctx = PassContext(tracing=True, rewrites=[])
    transpose_matmul_pass().run(g, ctx)
    return len(ctx.rewrites)


def _weight_grad(batched: bool) -> object:
    """``g^T @ x + e`` (a tied embedding's two gradients); ``batched``: g and x as (batch, seq, .) tensors,
    reduced over both leading axes as a training step's weight gradient is."""
    g, x = Tensor.from_numpy(G, name="g"), Tensor.from_numpy(X, name="x")
    if batched:
        g, x = g.reshape(4, 24, MIN_K_STRIDE), x.reshape(4, 24, 16)
        return trace([(g.reshape(-1, MIN_K_STRIDE).T @ x.reshape(-1, 16)) + Tensor.from_numpy(E, name="e")])
    return trace([g.T @ x + Tensor.from_numpy(E, name="e")])


@pytest.mark.parametrize("backend", ["numpy", "c"])
@pytest.mark.parametrize("batched", [False, True])
def test_weight_gradient_is_computed_transposed_with_the_same_values(backend: str, batched: bool) -> None:
    t = _weight_grad(batched)
    assert _rewrites(t.graph.copy()) == 1
    with settings(backend=backend):
        prog = compiler.compile(t.graph, backend=backend)
        (got,) = prog(t.arrays)
    np.testing.assert_allclose(got, G.T @ X + E, rtol=2e-5, atol=2e-5)
    if backend == "c":
        # the transposed product is a kernel of its own (not fused back into the add in the add's order)
        names = [k.name for k in prog.schedule.kernels]
        assert len(names) == 2 and "matmul" in names[0], names
        pm = compiler.default_pipeline()
        pm.remove("transpose_matmul")
        plain = compiler.compile(t.graph, backend="c", pipeline=pm)
        (want,) = plain(t.arrays)
        assert len(plain.schedule.kernels) == 1
        np.testing.assert_array_equal(got, want)  # the same sums in the same order


def test_operands_close_along_k_keep_their_form() -> None:
    x, g = Tensor.from_numpy(X), Tensor.from_numpy(G)
    assert _rewrites(trace([x.T @ g]).graph.copy()) == 0  # already the good orientation
    narrow = Tensor.from_numpy(G[:, : MIN_K_STRIDE // 2])
    assert _rewrites(trace([narrow.T @ x]).graph.copy()) == 0  # rows closer than MIN_K_STRIDE
    sq = Tensor.from_numpy(RNG.standard_normal((MIN_K_STRIDE, MIN_K_STRIDE)).astype(np.float32))
    w = Tensor.from_numpy(RNG.standard_normal((MIN_K_STRIDE, 256)).astype(np.float32))
    assert _rewrites(trace([sq.T @ w]).graph.copy()) == 0  # b's rows are not much closer than a's
