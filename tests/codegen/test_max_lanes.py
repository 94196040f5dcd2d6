"""The ``max_lanes`` rule (codegen/max_lanes.py): max and min reductions split into vector lanes.

The split changes only the order of the comparisons, which cannot change a maximum: results equal
NumPy's exactly, a NaN anywhere in a row still wins, rows shorter than two vectors keep the plain loop,
and lengths that are not a multiple of the lane count run their tail in the original loop."""

import numpy as np
import pytest

from caten_lab.air import Sym
from caten_lab.compiler import compile as compile_graph
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import trace

pytestmark = pytest.mark.c_backend


@pytest.mark.parametrize("k", [5, 32, 33, 100, 4096])
@pytest.mark.parametrize("op", ["max", "min"])
def test_row_reduction_equals_numpy(op, k):
    rng = np.random.default_rng(k)
    x = rng.standard_normal((7, k)).astype(np.float32) * 100
    x[1, k // 2] = np.nan                      # a NaN in the middle of a row
    x[2, -1] = np.nan                          # in the tail
    x[3] = -np.inf if op == "max" else np.inf  # a row of the identity
    x[4, k - 1] = np.inf if op == "max" else -np.inf
    got = getattr(Tensor.from_numpy(x), op)(axis=-1).numpy()
    want = getattr(np, op)(x, axis=-1)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[1]) and np.isnan(got[2])


def test_the_rule_fires_on_long_rows_only():
    def source(k: int) -> str:
        out = Tensor.from_numpy(np.zeros((4, k), np.float32)).max(axis=-1)
        tr = trace([out])
        return compile_graph(tr.graph).c_source
    assert "float acc1_l[16];" in source(64)  # 16 float lanes: one AVX-512 register
    assert "acc1_l" not in source(16)  # one vector: the plain loop


def test_softmax_of_logits_equals_numpy():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((64, 4096)) * 8).astype(np.float32)
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    np.testing.assert_allclose(Tensor.from_numpy(x).softmax(-1).numpy(), e / e.sum(-1, keepdims=True),
                               rtol=2e-6, atol=1e-9)


@pytest.mark.parametrize("op", ["max", "min"])
def test_symbolic_length_equals_numpy(op):
    """A length known at run time only (a decode step's attention row): the lane loop and its tail are
    bounded by the symbol (rounded down by a mask, no division), one program for every length."""
    x = Tensor.placeholder((3, Sym("n")), "float32", name="x")
    t = trace([getattr(x, op)(axis=-1)])
    prog = compile_graph(t.graph)
    src = prog.c_source
    kernel = src[src.index("/* cl:kernel"):]
    kernel = kernel[:kernel.index("/* cl:end */")]
    assert "_l[16];" in kernel and "cl_imod" not in kernel and "cl_idiv" not in kernel
    rng = np.random.default_rng(1)
    for n in (1, 5, 16, 31, 32, 33, 100):
        a = rng.standard_normal((3, n)).astype(np.float32)
        a[2, n // 2] = np.nan
        (got,) = prog({"x": a})
        np.testing.assert_array_equal(got.reshape(3), getattr(np, op)(a, axis=-1))
