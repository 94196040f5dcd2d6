"""The ``sgemm`` pass (codegen/sgemm_tiles.py, codegen/c/sgemm.h): a jammed float32 matmul tile's reduction
becomes one ``cl_sgemm_12x32`` call. The same sums in the same order: bitwise the program without the pass
(AVX-512 and portable helper alike), NumPy's values to float rounding, on the forms a training step has
(a plain x @ W, an epilogue after it, a weight gradient reduced over two axes, rows not a multiple of 12)."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab import compiler
from caten_lab.config import settings
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import trace

pytestmark = pytest.mark.c_backend
RNG = np.random.default_rng(5)


def _t(*shape: int) -> Tensor:
    return Tensor.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def _cases() -> dict:
    x, w, b = _t(100, 96), _t(96, 64), _t(64)
    g, h = _t(2, 50, 64), _t(2, 50, 96)
    return {
        "x @ W (100 rows: the last jam clamps)": (x @ w, x.numpy() @ w.numpy()),
        "gelu(x @ W + b)": ((x @ w + b).gelu(), None),
        "weight gradient over batch and sequence": (
            h.reshape(-1, 96).T @ g.reshape(-1, 64), h.numpy().reshape(-1, 96).T @ g.numpy().reshape(-1, 64)),
    }


def _kernels(src: str) -> str:
    return src[src.index("/* cl:kernel"):]


@pytest.mark.parametrize("case", list(_cases()))
def test_tile_helper_is_bitwise_the_loops(case: str) -> None:
    out, want = _cases()[case]
    t = trace([out])
    prog = compiler.compile(t.graph)
    assert "cl_sgemm_12x32(" in _kernels(prog.c_source)
    pm = compiler.default_pipeline()
    pm.remove("sgemm")
    plain = compiler.compile(t.graph, pipeline=pm)
    assert "cl_sgemm_12x32(" not in _kernels(plain.c_source)
    (got,) = prog(t.arrays)
    (ref,) = plain(t.arrays)
    np.testing.assert_array_equal(got, ref)
    with settings(cc="cc -DCL_SGEMM_PORTABLE"):  # the helper's portable loops (no AVX-512)
        (port,) = compiler.compile(t.graph, force=True)(t.arrays)
    np.testing.assert_array_equal(port, ref)
    if want is None:
        (want,) = compiler.compile(t.graph, backend="numpy")(t.arrays)
    np.testing.assert_allclose(got, want, rtol=3e-5, atol=3e-5)


def test_the_rewrite_is_traced_and_other_tiles_keep_their_loops() -> None:
    def rules(cols: int) -> list[str]:
        res = compiler.lower_to_c(trace([_t(100, 96) @ _t(96, cols)]).graph, trace=True)
        return [r.rule for r in res.trace["sgemm"].rewrites]

    assert rules(64) == ["sgemm_tile"]  # one stage loop, run by both 32-column tiles
    assert rules(48) == []  # 48 columns: the tile width is min(32, 48 - t), not the helper's constant 32
