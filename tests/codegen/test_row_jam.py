"""The row_jam pass: a vector-tile matmul (the other operand stored [K, N]: weight gradients, ``g @ W``)
has several output rows share each load, with every output bit-identical to the unjammed program."""

from __future__ import annotations

import numpy as np
import pytest
from pipelines import pre_team

from caten_lab.air import Sym
from caten_lab.codegen.kir import Alu, Decl, For, If
from caten_lab.codegen.kir_walk import walk
from caten_lab.codegen.row_jam import JAM_ROWS
from caten_lab.compiler import compile
from caten_lab.frontend import Tensor
from caten_lab.frontend.build import trace


def _program(rows, k: int = 96, n: int = 130):  # noqa: ANN001, ANN202
    rng = np.random.default_rng(0)
    a = Tensor.placeholder((rows, k), name="a")
    w = Tensor.from_numpy(rng.standard_normal((k, n), dtype=np.float32), name="w")
    t = trace([(a.exp() @ w) * 0.5], bind=False)
    return t


def _jammed(prog) -> list[For]:  # noqa: ANN001
    return [s for f in prog.kernel_ir.functions for s in walk(f.body) if isinstance(s, For) and s.role == "jammed"]


@pytest.mark.parametrize("rows", [1, 3, JAM_ROWS, 37, "sym", "sym1"])
def test_jammed_matmul_is_bitwise_the_unjammed_one(rows) -> None:  # noqa: ANN001
    size = 37 if rows == "sym" else 1 if rows == "sym1" else rows
    symbolic = rows in ("sym", "sym1")
    t = _program(Sym("rows") if symbolic else rows)
    a = np.random.default_rng(1).standard_normal((size, 96)).astype(np.float32)
    inputs = {**t.arrays, "a": a}
    symbols = {"rows": size} if symbolic else None
    jam = compile(t.graph, pipeline=pre_team())  # (the jam as row_jam left it; team only splits its loop)
    plain_pm = pre_team()
    plain_pm.remove("row_jam")
    plain = compile(t.graph, pipeline=plain_pm)
    got, want = jam(inputs, symbols)[0], plain(inputs, symbols)[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, (np.exp(a) @ t.arrays["w"]) * 0.5, rtol=1e-4, atol=1e-4)
    loops = _jammed(jam)
    if rows in (1, 3):
        assert not loops  # fewer rows than a jam: the plain nest
        return
    assert len(loops) == 1 and loops[0].step.value == JAM_ROWS
    accs = [s for s in walk(loops[0].body) if isinstance(s, Decl) and s.size is not None]
    assert len(accs) == JAM_ROWS  # one accumulator tile per jammed row
    heads = [s for s in loops[0].body if isinstance(s, Decl) and s.size is None][:JAM_ROWS]
    clamped = [isinstance(h.init, Alu) and h.init.op == "min" for h in heads]
    # rows past the end clamped unless JAM_ROWS | rows
    assert clamped == ([False] * JAM_ROWS if rows == JAM_ROWS else [True] * JAM_ROWS)
    if symbolic:  # fewer rows than a jam (a decode step) run the original nest: chosen around the whole nest
        fn = next(f for f in jam.kernel_ir.functions if _jammed_in(f.body))
        top = [s for s in fn.body if isinstance(s, If)]
        assert top and _jammed_in(top[0].then) and not _jammed_in(top[0].orelse)


def _jammed_in(body) -> bool:  # noqa: ANN001
    return any(isinstance(s, For) and s.role == "jammed" for s in walk(body))


def test_dot_product_matmuls_are_left_to_rowblock() -> None:
    rng = np.random.default_rng(0)
    # 48 rows: fewer than passes/transpose_operands needs to give w a transposed copy (MIN_ROWS)
    x = Tensor.from_numpy(rng.standard_normal((48, 96), dtype=np.float32), name="x")
    w = Tensor.from_numpy(rng.standard_normal((80, 96), dtype=np.float32), name="w")
    t = trace([x @ w.T])  # reduction contiguous in both operands: the dot-product form
    assert not _jammed(compile(t.graph))
