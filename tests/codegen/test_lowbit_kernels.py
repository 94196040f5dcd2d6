"""Low-bit (fp16, int8) matvec/matmul kernels: the lane-split dot product (:mod:`caten_lab.codegen.lanes`)
and the widened int8 weight buffer of the tiled prefill (:mod:`caten_lab.codegen.rowblock`), checked
against the NumPy interpreter for short and long rows, decode and prefill row counts (fixed and
symbolic), and every float16 bit pattern."""

from __future__ import annotations

import re

import numpy as np
import pytest

import caten_lab.codegen.lanes as lanes
from caten_lab.compiler import compile as compile_graph
from caten_lab.config import settings
from caten_lab.frontend import Sym, Tensor, build_graph, placeholder
from caten_lab.models.quantize import apply_weight_format

N = 37
SEQS = (1, 2, 5, 8, 9, 17, 40)
_LANES = re.compile(r"float (acc\d+)_l\[(\d+)\];")


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
    src = prog.c_source
    if k >= lanes.MIN_LANES:  # the decode branch reduces in lanes: 64 bytes of the weight type
        want_lanes = min(64 // {"fp16": 2, "int8": 1}[fmt], 1 << (k.bit_length() - 1))
        assert any(int(m.group(2)) == max(16, want_lanes) for m in _LANES.finditer(src)), "lane split missing"
    # the tiled prefill widens each column's weights once into a float buffer (float16: by cl_h2f_n)
    assert re.search(r"float x\d+_c1_w\[" + str(k) + r"\];", src), "widened weight buffer missing"
    if fmt == "fp16":
        assert re.search(r"cl_h2f_n\(\(const uint16_t \*\)p\d+ \+ \(" + str(k) + r"\*l\d+_c1\), x\d+_c1_w, " + str(k), src)
        if k >= 32:  # and the decode branch converts each lane block with it
            assert re.search(r"cl_h2f_n\([^;]*_b, x\d+_h, 32\);", src), "lane-block conversion missing"
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
    assert _LANES.search(prog.c_source)
    w = arrays["lin.weight.fp16"].astype(np.float64)
    w = np.where(np.isfinite(w), np.abs(w), 0.0)
    rng = np.random.default_rng(5)
    for seq in (1, 9):
        x = rng.uniform(0.5, 1.0, (seq, k)).astype(np.float32) * np.where(rng.random((seq, k)) < 0.5, -1, 1)
        x = x.astype(np.float32)
        got = prog({**arrays, "x": x}, {"seq": seq})[0]
        want = ref({**arrays, "x": x}, {"seq": seq})[0]
        _close(got, want, np.abs(x.astype(np.float64)) @ w.T, f"k={k} seq={seq}")


def test_lane_split_can_be_switched_off(monkeypatch):
    monkeypatch.setattr(lanes, "ENABLED", False)
    graph, _ = _graph("int8", 64, N, 1, norm=False)
    assert not _LANES.search(compile_graph(graph, backend="c", force=True).c_source)


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
