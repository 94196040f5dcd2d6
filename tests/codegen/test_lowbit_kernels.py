"""Low-bit (fp16, int8) matvec/matmul kernels: the lane-split dot product (:mod:`caten_lab.codegen.lanes`)
and the widened int8 weight buffer of the tiled prefill (:mod:`caten_lab.codegen.rowblock`), checked
against the NumPy interpreter for short and long rows, decode and prefill row counts (fixed and
symbolic), and every float16 bit pattern. What the passes built is read from the kernel IR."""

from __future__ import annotations

import numpy as np
import pytest

import caten_lab.codegen.kir as kir
from caten_lab.codegen.kir_names import expr_names
from caten_lab.codegen.kir_walk import const, walk
from caten_lab.codegen.lanes import LaneOptions, Lanes
from caten_lab.compiler import compile as compile_graph
from caten_lab.compiler import default_pipeline
from caten_lab.config import settings
from caten_lab.frontend import Sym, Tensor, build_graph, placeholder
from caten_lab.models.quantize import apply_weight_format

N = 37
SEQS = (1, 2, 5, 8, 9, 17, 40)


def _stmts(prog) -> list:
    return [s for f in prog.artifacts["kernel_ir"].functions for s in walk(f.body)]


def _lane_arrays(prog) -> list[int]:
    """Lane counts of the lane-split reductions (their ``acc_l[L]`` partial-sum arrays)."""
    return [s.size.value for s in _stmts(prog) if isinstance(s, kir.Decl) and s.size is not None
            and s.var.startswith("acc") and s.var.endswith("_l")]


def _h2f_calls(prog) -> list[kir.Call]:
    return [s.value for s in _stmts(prog) if isinstance(s, kir.Eval) and s.value.fn == "cl_h2f_n"]


def _graph(fmt: str, k: int, n: int, seq, norm: bool):
    """``y = f(x) @ W^T`` with ``W`` (n x k) stored as ``fmt``; ``norm`` puts a LayerNorm in front."""
    rng = np.random.default_rng(k * 31 + n)
    x = placeholder((seq, k), "float32", name="x")
    w = Tensor.from_numpy(rng.standard_normal((n, k)).astype(np.float32), name="lin.weight")
    a = x
    if norm:
        mu = x.mean(1, keepdim=True)
        a = (x - mu) * ((x - mu) * (x - mu)).mean(1, keepdim=True).add(1e-5).sqrt().reciprocal()
    graph, arrays = build_graph([a @ w.T])
    return apply_weight_format(graph, dict(arrays), ["lin.weight"], fmt)


def _close(got: np.ndarray, want: np.ndarray, bound: np.ndarray, msg: str) -> None:
    """Equal up to reassociating the sums: ``|got - want| <= eps * sum |terms|`` (NaN/inf where the reference has them)."""
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=msg)
    fin = np.isfinite(want)
    np.testing.assert_array_equal(got[~fin & ~np.isnan(want)], want[~fin & ~np.isnan(want)], err_msg=msg)
    err = np.abs(got[fin].astype(np.float64) - want[fin])
    assert np.all(err <= 1e-5 * bound[fin] + 1e-6), f"{msg}: max error {err.max()}"


def _weights(arrays: dict, fmt: str) -> np.ndarray:
    if fmt == "fp16":
        return arrays["lin.weight.fp16"].astype(np.float64)
    return arrays["lin.weight.int8"].astype(np.float64) * arrays["lin.weight.scale"].astype(np.float64)


@pytest.mark.parametrize("fmt", ["fp16", "int8"])
@pytest.mark.parametrize("k", [7, 16, 64, 65, 300])
def test_lowbit_matmul_equals_interpreter(fmt, k):
    graph, arrays = _graph(fmt, k, N, Sym("seq"), norm=k % 2 == 1)
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    ref = compile_graph(graph, backend="numpy")
    if k >= LaneOptions().min_lanes:  # the decode branch reduces in lanes: 64 bytes of the weight type
        want_lanes = min(64 // {"fp16": 2, "int8": 1}[fmt], 1 << (k.bit_length() - 1))
        assert max(16, want_lanes) in _lane_arrays(prog), "lane split missing"
    # the tiled prefill widens each column's weights once into a float buffer (float16: by cl_h2f_n)
    bufs = [s for s in _stmts(prog) if isinstance(s, kir.Decl) and s.var.endswith("_c1_w")]
    assert bufs and all(b.size == const(k) for b in bufs), "widened weight buffer missing"
    if fmt == "fp16":  # cl_h2f_n(&w[k * j_c1], x_c1_w, k): column 1's row, converted once per register tile
        calls = _h2f_calls(prog)
        col = [c for c in calls if c.args[1].name.endswith("_c1_w")]
        assert col and col[0].args[2] == const(k) and any(n.endswith("_c1") for n in expr_names(col[0].args[0]))
        if k >= 32:  # and the decode branch converts each lane block with it
            blocks = [c for c in calls if c.args[1].name.endswith("_h")]
            assert blocks and blocks[0].args[2] == const(32), "lane-block conversion missing"
            assert any(n.endswith("_b") for n in expr_names(blocks[0].args[0]))
    w = np.abs(_weights(arrays, fmt))
    rng = np.random.default_rng(k)
    for seq in SEQS:
        x = rng.standard_normal((seq, k)).astype(np.float32)
        got = prog({**arrays, "x": x}, {"seq": seq})[0]
        want = ref({**arrays, "x": x}, {"seq": seq})[0]
        a = np.abs(x.astype(np.float64))
        if k % 2 == 1:  # normalized rows: |a| is at most sqrt(k)
            a = np.full_like(a, np.sqrt(k))
        _close(got, want, a @ w.T, f"{fmt} k={k} seq={seq}")


@pytest.mark.parametrize("fmt", ["fp16", "int8"])
@pytest.mark.parametrize("seq", [1, 12])
def test_fixed_row_count_matvec(fmt, seq):
    graph, arrays = _graph(fmt, 64, 300, seq, norm=True)
    with settings(threads=1):
        prog = compile_graph(graph, backend="c")
    ref = compile_graph(graph, backend="numpy")
    x = np.random.default_rng(3).standard_normal((seq, 64)).astype(np.float32) * 3
    got, want = prog({**arrays, "x": x})[0], ref({**arrays, "x": x})[0]
    _close(got, want, np.full((seq, 64), 8.0) @ np.abs(_weights(arrays, fmt)).T, f"{fmt} seq={seq}")


@pytest.mark.parametrize("k", [64, 65])
def test_float16_weights_every_bit_pattern(k):
    """All 65,536 half patterns as weights (subnormals, ±0, ±inf, NaN, the largest values) in a lane-split
    matvec and a tiled matmul: NaN and inf where the reference has them, the rest equal up to reassociation."""
    n = -(-65536 // k)
    graph, arrays = _graph("fp16", k, n, Sym("seq"), norm=False)
    bits = (np.arange(n * k, dtype=np.uint32) * 40503 % 65536).astype(np.uint16)  # a permutation: every pattern
    assert len(np.unique(bits)) == 65536
    arrays["lin.weight.fp16"] = bits.view(np.float16).reshape(n, k)
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    ref = compile_graph(graph, backend="numpy")
    assert _lane_arrays(prog)
    w = arrays["lin.weight.fp16"].astype(np.float64)
    w = np.where(np.isfinite(w), np.abs(w), 0.0)
    rng = np.random.default_rng(5)
    for seq in (1, 9):
        x = rng.uniform(0.5, 1.0, (seq, k)).astype(np.float32) * np.where(rng.random((seq, k)) < 0.5, -1, 1)
        x = x.astype(np.float32)
        got = prog({**arrays, "x": x}, {"seq": seq})[0]
        want = ref({**arrays, "x": x}, {"seq": seq})[0]
        _close(got, want, np.abs(x.astype(np.float64)) @ w.T, f"k={k} seq={seq}")


def test_lane_split_can_be_switched_off():
    graph, arrays = _graph("int8", 64, N, 1, norm=False)
    off, removed = default_pipeline(), default_pipeline()
    off.replace("lanes", Lanes(enabled=False))
    removed.remove("lanes")
    split = compile_graph(graph, backend="c")
    assert _lane_arrays(split) == [64]
    plain = compile_graph(graph, backend="c", pipeline=off)
    assert not _lane_arrays(plain) and not _lane_arrays(compile_graph(graph, backend="c", pipeline=removed))
    x = np.random.default_rng(4).standard_normal((1, 64)).astype(np.float32)
    want = compile_graph(graph, backend="numpy")({**arrays, "x": x})[0]
    for prog in (split, plain):
        _close(prog({**arrays, "x": x})[0], want, np.abs(x.astype(np.float64)) @ np.abs(_weights(arrays, "int8")).T,
               "int8 matvec")


def test_float16_widening_is_exact():
    """One-hot rows pick single weights: every finite half value comes out of both widening paths
    (the lane blocks of a matvec, the per-column buffer of the tiled matmul) exactly."""
    k = 64
    n = 65536 // k
    graph, arrays = _graph("fp16", k, n, Sym("seq"), norm=False)
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    w = bits.view(np.float16).copy()
    w[~np.isfinite(w)] = 0  # 0 * inf would be NaN
    arrays["lin.weight.fp16"] = w.reshape(n, k)
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    want = w.reshape(n, k).astype(np.float32).T  # (k, n): row r holds column r of W
    eye = np.eye(k, dtype=np.float32)
    got = prog({**arrays, "x": eye}, {"seq": k})[0]  # tiled
    np.testing.assert_array_equal(got, want)
    for r in (0, 1, 31, 32, 63):  # decode: lane blocks
        got = prog({**arrays, "x": eye[r:r + 1]}, {"seq": 1})[0]
        np.testing.assert_array_equal(got[0], want[r])


@pytest.mark.parametrize("fmt", ["fp16", "int8"])
def test_widened_weights_times_a_vector(fmt):
    """``x @ (W * g)^T`` with ``g`` along K: the widening loop also needs the per-K factor."""
    rng = np.random.default_rng(11)
    k, n = 40, 19
    x = placeholder((Sym("seq"), k), "float32", name="x")
    w = Tensor.from_numpy(rng.standard_normal((n, k)).astype(np.float32), name="lin.weight")
    g = Tensor.from_numpy(rng.standard_normal(k).astype(np.float32), name="g")
    graph, arrays = build_graph([x @ (w * g).T])
    graph, arrays = apply_weight_format(graph, dict(arrays), ["lin.weight"], fmt)
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    ref = compile_graph(graph, backend="numpy")
    bound_w = np.abs(_weights(arrays, fmt)) * np.abs(arrays["g"].astype(np.float64))
    for seq in (1, 8, 13):
        xs = rng.standard_normal((seq, k)).astype(np.float32)
        got = prog({**arrays, "x": xs}, {"seq": seq})[0]
        want = ref({**arrays, "x": xs}, {"seq": seq})[0]
        _close(got, want, np.abs(xs.astype(np.float64)) @ bound_w.T, f"{fmt} seq={seq}")
