"""Prefill matmul tiling (rows x output features per register tile, column tiles per cache tile;
:mod:`caten_lab.codegen.rowblock`), checked against the NumPy interpreter at row counts around the
tile sizes, with K and N that are not multiples of anything, for every weight format."""

from __future__ import annotations

import re

import numpy as np
import pytest

import caten_lab.codegen.rowblock as rowblock
from caten_lab.compiler import compile as compile_graph
from caten_lab.config import settings
from caten_lab.frontend import Sym, Tensor, build_graph, placeholder
from caten_lab.models.quantize import apply_weight_format

_TILED = re.compile(r"collapse\(2\)[^\n]*\n\s*for \(int64_t (\w+)t = 0; \1t < 45; ")
K, N = 37, 45  # odd: no multiple of the vector width, the register tile or the cache tile
SEQS = (1, 3, 4, 5, 7, 8, 9, 17, 128)


def _graph(fmt: str, norm: bool):
    """``y = f(x) @ W^T + b + x[:, :N]``-like prefill matmul with a symbolic row count; ``norm`` puts a
    LayerNorm-style operand in front (hoisted per row, recomputed per column tile)."""
    rng = np.random.default_rng(7)
    x = placeholder((Sym("seq"), K), "float32", name="x")
    w = Tensor.from_numpy(rng.standard_normal((N, K)).astype(np.float32), name="lin.weight")
    b = Tensor.from_numpy(rng.standard_normal(N).astype(np.float32), name="lin.bias")
    a = x
    if norm:
        mu = x.mean(1, keepdim=True)
        a = (x - mu) * ((x - mu) * (x - mu)).mean(1, keepdim=True).add(1e-5).sqrt().reciprocal()
    y = (a @ w.T + b).relu()
    graph, arrays = build_graph([y])
    return apply_weight_format(graph, dict(arrays), ["lin.weight"], fmt)


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("tile_bytes", [None, 1, 8 * K * 4])
def test_tiled_matmul_equals_interpreter(fmt, norm, tile_bytes, monkeypatch):
    if tile_bytes is not None:  # small column tiles: several tiles, a ragged last one, clamped columns
        monkeypatch.setattr(rowblock, "TILE_BYTES", tile_bytes)
    graph, arrays = _graph(fmt, norm)
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    ref = compile_graph(graph, backend="numpy")
    nr, nc = rowblock.register_tile({"fp32": 4, "fp16": 2, "int8": 1}[fmt], str(K))
    src = prog.c_source
    assert f"S_seq >= {nr}" in src and _TILED.search(src)  # the tiled path is there
    if nc > 1:
        assert "_0c1" in src  # an accumulator per (row, output feature) pair
    rng = np.random.default_rng(1)
    for seq in SEQS:
        x = rng.standard_normal((seq, K)).astype(np.float32)
        got = prog({**arrays, "x": x}, {"seq": seq})[0]
        want = ref({**arrays, "x": x}, {"seq": seq})[0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=f"seq={seq}")


def test_register_tile_fits_the_accumulator_registers():
    for wbytes in (1, 2, 4):
        nr, nc = rowblock._register_tile(wbytes)
        assert nr * nc * (4 // wbytes) <= rowblock.ACC_REGS and nr >= 4


def test_one_thread_tiles_without_a_pragma():
    graph, _ = _graph("fp32", True)
    with settings(threads=1):
        src = compile_graph(graph, backend="c").c_source
    assert "omp parallel" not in src
    assert f"S_seq >= {rowblock.ROWS}" in src and re.search(r"for \(int64_t (\w+)t = 0; \1t < 45; ", src)
