"""Prefill matmul tiling (rows x output features per register tile, column tiles per cache tile;
:mod:`caten_lab.codegen.rowblock`), checked against the NumPy interpreter at row counts around the
tile sizes, with K and N that are not multiples of anything, for every weight format. What the pass
built is read from the kernel IR (``program.artifacts['kernel_ir']``), not from the C text."""

from __future__ import annotations

import numpy as np
import pytest
from pipelines import pre_team

import caten_lab.codegen.kir as k
from caten_lab.codegen.kir_walk import const, var, walk
from caten_lab.codegen.rowblock import RowBlock
from caten_lab.codegen.rowblock_tiles import RowBlockOptions, register_tile, register_tile_for
from caten_lab.compiler import compile as compile_graph
from caten_lab.config import settings
from caten_lab.frontend import Sym, Tensor, build_graph, placeholder
from caten_lab.models.quantize import apply_weight_format

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


def _tiled(prog) -> list[k.If]:
    """The row-blocked nests of a compiled program: ``IF seq >= rows`` over a column-tile loop."""
    out = []
    for f in prog.artifacts["kernel_ir"].functions:
        for s in f.body:
            if isinstance(s, k.If) and s.then and isinstance(s.then[0], k.For) and s.then[0].role == "tile":
                out.append(s)
    return out


def _pipeline(**options):
    pm = pre_team()
    pm.replace("rowblock", RowBlock(**options))
    return pm


@pytest.mark.parametrize("norm", [False, True])
@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("tile_bytes", [None, 1, 8 * K * 4])
def test_tiled_matmul_equals_interpreter(fmt, norm, tile_bytes):
    # small column tiles: several tiles, a ragged last one, clamped columns
    o = RowBlockOptions() if tile_bytes is None else RowBlockOptions(tile_bytes=tile_bytes)
    graph, arrays = _graph(fmt, norm)
    with settings(threads=2):
        prog = compile_graph(graph, backend="c", pipeline=_pipeline() if tile_bytes is None else _pipeline(tile_bytes=tile_bytes))
    ref = compile_graph(graph, backend="numpy")
    nr, nc = register_tile({"fp32": 4, "fp16": 2, "int8": 1}[fmt], K, o)
    (nest,) = _tiled(prog)  # the tiled path is there, in parallel over (column tile, row block) pairs
    tiles = nest.then[0]
    assert nest.cond == k.Alu("ge", (var("S_seq"), const(nr)), nest.cond.dtype)
    assert tiles.stop == const(N) and tiles.parallel is not None and tiles.parallel.collapse == 2
    red = [s for s in walk(tiles.body) if isinstance(s, k.For) and s.reduction]
    assert len(red) == 1 and len(red[0].reduction) == nr * nc  # an accumulator per (row, output feature) pair
    rng = np.random.default_rng(1)
    for seq in SEQS:
        x = rng.standard_normal((seq, K)).astype(np.float32)
        got = prog({**arrays, "x": x}, {"seq": seq})[0]
        want = ref({**arrays, "x": x}, {"seq": seq})[0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=f"seq={seq}")


def test_register_tile_fits_the_accumulator_registers():
    o = RowBlockOptions()
    for wbytes in (1, 2, 4):
        nr, nc = register_tile_for(wbytes, o)
        assert nr * nc * (4 // wbytes) <= o.acc_regs and nr >= 4


def test_one_thread_tiles_without_parallel_loops():
    graph, _ = _graph("fp32", True)
    with settings(threads=1):
        prog = compile_graph(graph, backend="c")
    loops = [s for f in prog.artifacts["kernel_ir"].functions for s in walk(f.body) if isinstance(s, k.For)]
    assert loops and all(s.parallel is None for s in loops) and "omp parallel" not in prog.c_source
    (nest,) = _tiled(prog)
    assert nest.cond.args[1] == const(RowBlockOptions().rows) and nest.then[0].stop == const(N)


def test_rowblock_removed_or_disabled_keeps_the_results():
    """The pass is removable (or ``enabled=False``): the untiled program gives the same numbers."""
    graph, arrays = _graph("fp32", True)
    pm = pre_team()
    pm.remove("rowblock")
    with settings(threads=2):
        tiled = compile_graph(graph, backend="c", pipeline=pre_team())
        plain = compile_graph(graph, backend="c", pipeline=pm)
        off = compile_graph(graph, backend="c", pipeline=_pipeline(enabled=False))
    assert _tiled(tiled) and not _tiled(plain) and not _tiled(off)
    assert plain.artifacts["kernel_ir"] == off.artifacts["kernel_ir"]
    x = np.random.default_rng(2).standard_normal((20, K)).astype(np.float32)
    a = tiled({**arrays, "x": x}, {"seq": 20})[0]
    b = plain({**arrays, "x": x}, {"seq": 20})[0]
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_tiled_program_is_compile_cached(tmp_path):
    """The passes leave only codec-backed artifacts, so the default pipeline's result is stored and a
    second compile loads the same row-blocked kernel program instead of running the passes."""
    graph, _ = _graph("int8", True)
    with settings(cache_dir=tmp_path, threads=1):
        first = compile_graph(graph, backend="c")
        assert len(list(tmp_path.glob("artifacts_*.json"))) == 1
        second = compile_graph(graph, backend="c")
    assert second.artifacts["kernel_ir"] == first.artifacts["kernel_ir"] and _tiled(second)
