"""Row lookups ``x[ids]``, ``gather`` and ``embedding`` with ids out of range (issue 13, found by the
differential fuzz): they used to return 0 rows silently on both backends. Now, as in torch, an id
outside the axis raises (RuntimeCheckError naming the AIR node and the source line; on the C backend at
safety >= 1, also naming the kernel), and ``x[ids]`` counts a negative id from the end as NumPy and
torch do (``gather`` and ``embedding`` refuse negatives, as torch does)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from caten_lab.codegen.kir import Call, For, If, Load
from caten_lab.codegen.kir_walk import exprs_of
from caten_lab.compiler import compile
from caten_lab.config import settings
from caten_lab.errors import RuntimeCheckError
from caten_lab.frontend import Tensor, build_graph
from caten_lab.nn import functional as F

from .helpers import close, tt

W = np.arange(15, dtype=np.float32).reshape(5, 3)


@pytest.fixture(params=["numpy", "c"])
def backend(request):  # noqa: ANN001, ANN201
    with settings(backend=request.param):
        yield request.param


@pytest.mark.parametrize("dtype", ["int64", "int32", "int8"])
def test_rows_with_negative_ids_count_from_the_end(backend: str, dtype: str) -> None:
    ids = np.array([0, -1, 4, -5, 2], dtype=dtype)
    got = Tensor.from_numpy(W)[Tensor.from_numpy(ids, dtype=ids.dtype)].numpy()
    np.testing.assert_array_equal(got, W[ids])
    close(got, tt(W)[torch.from_numpy(ids.astype(np.int64))])


@pytest.mark.parametrize(("ids", "bad"), [([0, 7, 1], 7), ([5], 5), ([1, -6], -1), ([-9, 0], -4)])
def test_row_id_out_of_range_raises(backend: str, ids: list[int], bad: int) -> None:
    with pytest.raises(IndexError):  # torch refuses it too
        tt(W)[torch.tensor(ids)]
    with pytest.raises(RuntimeCheckError, match=rf"index {bad} out of range for an axis of 5") as e:
        Tensor.from_numpy(W)[Tensor.from_numpy(np.array(ids))].numpy()
    assert "check_index" in str(e.value) and "test_index_checks.py" in str(e.value)  # the node and the line
    if backend == "c":
        assert "in kernel k" in str(e.value)


@pytest.mark.parametrize("dtype", ["uint8", "uint32"])
def test_unsigned_row_ids_never_wrap(backend: str, dtype: str) -> None:
    big = np.iinfo(dtype).max
    ids = np.array([1, big], dtype=dtype)
    with pytest.raises(RuntimeCheckError, match="out of range for an axis of 5"):
        Tensor.from_numpy(W)[Tensor.from_numpy(ids, dtype=ids.dtype)].numpy()
    ok = np.array([4, 0, 3], dtype=dtype)
    np.testing.assert_array_equal(Tensor.from_numpy(W)[Tensor.from_numpy(ok, dtype=ok.dtype)].numpy(), W[ok])


@pytest.mark.parametrize(("dim", "bad"), [(1, 3), (1, -1), (0, 5), (0, -2)])
def test_gather_index_out_of_range_raises(backend: str, dim: int, bad: int) -> None:
    idx = np.zeros((2, 3), dtype=np.int64)
    idx[1, 2] = bad
    with pytest.raises(RuntimeError, match="out of bounds"):  # torch.gather refuses negatives too
        torch.gather(tt(W), dim, torch.from_numpy(idx))
    n = W.shape[dim]
    with pytest.raises(RuntimeCheckError, match=rf"index {bad} out of range for an axis of {n}"):
        Tensor.from_numpy(W).gather(dim, Tensor.from_numpy(idx)).numpy()
    idx[1, 2] = n - 1  # in range: the same as torch
    close(Tensor.from_numpy(W).gather(dim, Tensor.from_numpy(idx)).numpy(), torch.gather(tt(W), dim, tt(idx)))


@pytest.mark.parametrize("bad", [5, -1])
def test_embedding_id_out_of_range_raises(backend: str, bad: int) -> None:
    ids = np.array([[1, bad]], dtype=np.int64)
    with pytest.raises(IndexError):
        torch.nn.functional.embedding(torch.from_numpy(ids), tt(W))
    with pytest.raises(RuntimeCheckError, match=rf"index {bad} out of range for an axis of 5"):
        F.embedding(Tensor.from_numpy(ids), Tensor.from_numpy(W)).numpy()
    ok = np.array([[1, 4], [0, 0]], dtype=np.int64)
    close(F.embedding(Tensor.from_numpy(ok), Tensor.from_numpy(W)).numpy(),
          torch.nn.functional.embedding(torch.from_numpy(ok), tt(W)))


def _loops_around(stmts: tuple, want, depth: tuple = ()) -> list[tuple]:  # noqa: ANN001
    """For every statement with an expression ``want(e)`` holds for: the roles of the For loops around it."""
    found = []
    for s in stmts:
        if not isinstance(s, For | If) and any(want(e) for e in exprs_of(s)):
            found.append(depth)
        elif isinstance(s, For):
            found += _loops_around(s.body, want, (*depth, s.role))
        elif isinstance(s, If):
            found += _loops_around(s.then, want, depth) + _loops_around(s.orelse, want, depth)
    return found


def _exprs(body: tuple):  # noqa: ANN202
    for s in body:
        if isinstance(s, For):
            yield from exprs_of(s)
            yield from _exprs(s.body)
        elif isinstance(s, If):
            yield from exprs_of(s)
            yield from _exprs(s.then)
            yield from _exprs(s.orelse)
        else:
            yield from exprs_of(s)


def test_the_c_check_is_one_compare_per_looked_up_row() -> None:
    """The embedding compiles to a gather whose id is checked once per looked-up row, outside the loop
    over the row's elements (which reads the table); safety 0 renders no check at all."""
    ids = Tensor.from_numpy(np.array([3, 1, 4, 1], dtype=np.int64), name="ids")
    table = Tensor.from_numpy(np.random.default_rng(0).random((50, 64), dtype=np.float32), name="wte")
    g, arrays = build_graph([F.embedding(ids, table)])
    prog = compile(g, backend="c", safety=1)
    np.testing.assert_array_equal(prog(arrays)[0], arrays["wte"][[3, 1, 4, 1]])
    (fn,) = [f for f in prog.kernel_ir.functions if f.get("checks")]
    checks = _loops_around(fn.body, lambda e: isinstance(e, Call) and e.fn == "cl_index_ck")
    table_param = next(p.name for p in fn.params if p.buffer == "wte")
    reads = _loops_around(fn.body, lambda e: isinstance(e, Load) and e.buf == table_param)
    assert len(checks) == 1 and len(reads) == 1
    assert len(checks[0]) == 1 and len(reads[0]) == 2  # the row loop; the row loop, then the element loop
    unchecked = compile(g, backend="c", safety=0).kernel_ir
    assert not [e for f in unchecked.functions for e in _exprs(f.body) if isinstance(e, Call)]


def test_empty_lookups_are_not_out_of_range(backend: str) -> None:
    """Over an empty table or with no ids nothing is looked up: no check fires (the C kernel hoists the id
    read out of its empty loops)."""
    empty = np.zeros((0, 3), np.float32)
    no_ids = np.zeros((0, 3), np.int64)
    got = Tensor.from_numpy(empty).gather(0, Tensor.from_numpy(no_ids)).numpy()
    close(got, torch.gather(tt(empty), 0, tt(no_ids)))
    rows = Tensor.from_numpy(W)[Tensor.from_numpy(np.zeros(0, np.int64))].numpy()
    assert rows.shape == (0, 3)
