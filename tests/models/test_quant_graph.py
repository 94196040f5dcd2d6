"""GGUF-quantized weights read in place (caten_lab.models.quant_graph, caten_lab.formats.gguf_quant), with
float activations (``activations="f32"``: the dequantization as AIR inside the kernels; the 8-bit activation
path is tests/codegen/test_quant_matmul.py).

References: ``gguf.quants.dequantize`` for the byte layouts, NumPy (float64) on the dequantized weights
for Linear (matvec and matmul) and Embedding (tied to the output head), on the interpreter and the C
backend. The compiled program is inspected: the weight's raw byte inputs are read by the matvec /
gather kernels themselves, and no buffer of the weight's size is ever written.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

import caten_lab.codegen.kir as kir
from caten_lab.codegen.kir_walk import loads_of, vars_of, walk
from caten_lab.compiler import compile as compile_graph
from caten_lab.config import settings
from caten_lab.formats import gguf_quant as gq
from caten_lab.formats.rules import FormatError
from caten_lab.frontend import Sym, Tensor, build_graph, placeholder
from caten_lab.models.quant_graph import (
    RAW_SUFFIXES,
    SUFFIX_DTYPES,
    quantize_graph,
    raw_input_specs,
    raw_inputs,
)
from caten_lab.nn.functional import embedding

from .quant_cases import BACKENDS, TYPES, assert_reads_raw, close, compile_with, k_for, quantized, weights

# ---- byte layouts -------------------------------------------------------------------------------


@pytest.mark.parametrize("t", TYPES)
def test_reference_dequantizer_equals_gguf(t):
    raw, want = quantized(t, 5, k_for(t, 3))
    got = gq.dequantize(raw.reshape(-1), t, want.shape)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t", ["Q4_K", "Q5_K", "Q6_K"])
def test_k_quantizer_round_trip_error(t):
    """Our K-quant encoder (gguf cannot encode these): gguf decodes it, within half a grid step. The
    step of a sub-block is its range over the levels, rounded up by the 6-bit (8-bit) scale of d."""
    w = weights(np.random.default_rng(1), 9, 768)
    raw = gq.quantize(w, t)
    assert raw.shape == (9, 3 * gq.LAYOUTS[t][1])
    back = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[t])
    sub = 16 if t == "Q6_K" else 32
    x = w.reshape(-1, 256 // sub, sub).astype(np.float64)  # (super-blocks, sub-blocks, values)
    err = np.abs(back.reshape(x.shape) - x).max(axis=2)
    if t == "Q6_K":  # symmetric: q in -32..31 from |x| / 31, 8-bit scales
        rng_ = np.abs(x).max(axis=2) / 31
        step = rng_ + rng_.max(axis=1, keepdims=True) / 127
    else:  # asymmetric: q in 0..levels over [min(x, 0), max(x)], 6-bit scales and mins
        levels = 15 if t == "Q4_K" else 31
        span = x.max(axis=2) - np.minimum(x.min(axis=2), 0)
        span = span + span.max(axis=1, keepdims=True) / 63
        step = span / levels + span.max(axis=1, keepdims=True) / levels / 63
    assert np.all(err <= 0.5 * step * 1.002 + 1e-7), f"{t}: worst error / step {(err / step).max()}"
    assert np.abs(back - w).max() < 0.2 * np.abs(w).max()  # and not trivially loose


def test_specials_decode_exactly():
    """F16/BF16: every bit pattern (subnormals, ±0, ±inf, NaN), through the compiled AIR decoding."""
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    for t in ("F16", "BF16"):
        raw = bits.view(np.uint8).reshape(256, 512)  # 256 rows of 256 values
        want = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[t]).astype(np.float32)
        w = placeholder((256, 256), "float32", name="w")
        graph, _ = build_graph([w * 1.0])
        quantize_graph(graph, {"w": t}, activations="f32")
        prog = compile_with(graph, "c")
        got = prog(raw_inputs("w", t, raw))[0]
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=t)
        ok = ~np.isnan(want)
        np.testing.assert_array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32), err_msg=t)


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_decoding_is_exact(t, backend):
    """The AIR decoding alone (the weight as the output), bit for bit gguf's dequantization."""
    raw, want = quantized(t, 7, k_for(t, 2), seed=2)
    w = placeholder(want.shape, "float32", name="w")
    graph, _ = build_graph([w + 0.0])
    quantize_graph(graph, {"w": t}, activations="f32")
    got = compile_with(graph, backend)(raw_inputs("w", t, raw))[0]
    np.testing.assert_array_equal(got, want)


# ---- Linear: matvec (seq 1) and matmul (seq > 1) ----------------------------------------------------

@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_linear_equals_numpy(t, backend):
    rows, k = 37, k_for(t, 2)
    raw, deq = quantized(t, rows, k, seed=3)
    x = placeholder((Sym("seq"), k), "float32", name="x")
    graph, arrays = build_graph([x @ Tensor.from_numpy(np.zeros((rows, k), np.float32), name="w").T])
    quantize_graph(graph, {"w": t}, activations="f32")
    assert "w" not in {n.attrs.name for n in graph.inputs()}
    prog = compile_with(graph, backend)
    bind = {**{n: a for n, a in arrays.items() if n != "w"}, **raw_inputs("w", t, raw)}
    rng = np.random.default_rng(4)
    for seq in (1, 2, 9):
        xs = rng.standard_normal((seq, k)).astype(np.float32)
        got = prog({**bind, "x": xs}, {"seq": seq})[0]
        want = xs.astype(np.float64) @ deq.T.astype(np.float64)
        close(got, want, np.abs(xs).astype(np.float64) @ np.abs(deq.T).astype(np.float64), f"{t} seq={seq}")


@pytest.mark.parametrize("t", ["Q4_1", "Q8_0", "Q6_K"])
def test_compiled_linear_reads_raw_bytes(t):
    rows, k = 300, k_for(t, 1)
    raw, _ = quantized(t, rows, k)
    x = placeholder((Sym("seq"), k), "float32", name="x")
    graph, _ = build_graph([x @ Tensor.from_numpy(np.zeros((rows, k), np.float32), name="w").T])
    quantize_graph(graph, {"w": t}, activations="f32")
    prog = compile_with(graph, "c")
    names = set(raw_input_specs("w", t, (rows, k)))
    assert_reads_raw(prog, rows * k, names)
    assert len(prog.schedule.kernels) == 1
    (fn,) = [f for f in prog.artifacts["kernel_ir"].functions if f.linkage == "kernel"]
    ptrs = [p for p in fn.params if p.pointer and p.dtype.value != "int64"]
    raw_params = {p.name for p in ptrs if p.dtype.value in ("float16", "uint8", "int8")}
    assert len(raw_params) == len(names) and len(ptrs) == len(names) + 2  # + x and the output
    stmts = list(walk(fn.body))
    loaded = {ld.buf for s in stmts for ld in loads_of(s)}
    stored = {s.buf for s in stmts if isinstance(s, kir.Store)}
    assert raw_params <= loaded, "the kernel does not read the raw bytes"
    assert all(p.dtype.value == "float32" for p in ptrs if p.name in stored)  # writes the output only
    assert any(isinstance(s, kir.For) and (s.reduction or s.simd) for s in stmts), "no reduction loop"


# ---- Embedding: one-hot gather, tied to the output head --------------------------------------------

def _tied_graph(t: str, vocab: int, dim: int):
    ids = placeholder((Sym("seq"),), "int64", name="ids")
    w = Tensor.from_numpy(np.zeros((vocab, dim), np.float32), name="tok.weight")
    h = embedding(ids, w)
    graph, _ = build_graph([h, h @ w.T])  # the hidden state and the logits of the tied head
    quantize_graph(graph, {"tok.weight": t}, activations="f32")
    return graph


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_tied_embedding_and_head_equal_numpy(t, backend):
    vocab, dim = 53, k_for(t, 2)
    raw, deq = quantized(t, vocab, dim, seed=5)
    graph = _tied_graph(t, vocab, dim)
    specs = raw_input_specs("tok.weight", t, (vocab, dim))
    assert {n.attrs.name for n in graph.inputs()} == {"ids", *specs}  # one raw input set serves both
    prog = compile_with(graph, backend)
    bind = raw_inputs("tok.weight", t, raw)
    for seq in (1, 4):
        ids = np.random.default_rng(seq).integers(0, vocab, seq)
        h, logits = prog({**bind, "ids": ids}, {"seq": seq})
        np.testing.assert_array_equal(h, deq[ids])  # a gather is exact
        want = deq[ids].astype(np.float64) @ deq.T.astype(np.float64)
        close(logits, want, np.abs(deq[ids]).astype(np.float64) @ np.abs(deq.T).astype(np.float64), f"{t}")
    if backend == "c":
        assert_reads_raw(prog, vocab * dim, set(specs))


@pytest.mark.parametrize("t", ["Q4_1", "Q8_0", "Q4_K"])
def test_embedding_gather_reads_one_row(t):
    """The one-hot sum over the vocabulary lowers to a gather of one row even through the decoding:
    no loop runs over the vocabulary."""
    vocab, dim = 97, k_for(t, 1)
    raw, deq = quantized(t, vocab, dim)
    ids = placeholder((Sym("seq"),), "int64", name="ids")
    graph, _ = build_graph([embedding(ids, Tensor.from_numpy(np.zeros((vocab, dim), np.float32), name="e"))])
    quantize_graph(graph, {"e": t}, activations="f32")
    prog = compile_with(graph, "c")
    stops = [s.stop for f in prog.artifacts["kernel_ir"].functions for s in walk(f.body) if isinstance(s, kir.For)]
    assert stops and not any(isinstance(s, kir.Const) and s.value == vocab for s in stops), "a loop over the vocabulary"
    ids_ = np.array([96, 0, 50, 50])
    np.testing.assert_array_equal(prog({**raw_inputs("e", t, raw), "ids": ids_}, {"seq": 4})[0], deq[ids_])


# ---- raw inputs and bad input -------------------------------------------------------------------

@pytest.mark.parametrize("t", TYPES)
def test_raw_inputs_are_views_of_the_bytes(t):
    raw, _ = quantized(t, 3, k_for(t, 1))
    arrays = raw_inputs("w", t, raw)
    specs = raw_input_specs("w", t, (3, k_for(t, 1)))
    assert list(arrays) == [f"w#{s}" for s in RAW_SUFFIXES[t]] == list(specs)
    for name, a in arrays.items():
        dt, count = specs[name]
        assert a.dtype == dt.np and a.shape == (count,) and count * dt.itemsize == raw.nbytes
        assert np.shares_memory(a, raw), f"{name} is a copy"
        assert SUFFIX_DTYPES[name.rpartition("#")[2]] == dt


@pytest.mark.parametrize("t,dtype", [("F32", np.float32), ("F16", np.float16)])
def test_raw_inputs_take_float_tensors_as_bytes(t, dtype):
    """gguf's reader gives F32/F16 tensors as float (rows, K) arrays: the same views of the same bytes."""
    raw, _ = quantized(t, 3, 35)
    floats = raw.view(dtype)
    assert floats.shape == (3, 35)
    got, want = raw_inputs("w", t, floats), raw_inputs("w", t, raw)
    assert list(got) == list(want) and all(np.shares_memory(got[n], raw) for n in got)
    for n in got:
        np.testing.assert_array_equal(got[n], want[n])


def test_bad_input_is_a_clear_error():
    raw, _ = quantized("Q4_1", 4, 64)
    with pytest.raises(FormatError, match="takes 160 bytes, got 159"):
        raw_inputs("blk.0.w", "Q4_1", raw.reshape(-1)[:-1], shape=(4, 64))
    with pytest.raises(FormatError, match="uint8"):
        raw_inputs("blk.0.w", "Q4_1", raw.view(np.int8), shape=(4, 64))
    with pytest.raises(FormatError, match="multiple of 32"):
        raw_input_specs("blk.0.w", "Q4_1", (4, 48))
    with pytest.raises(FormatError, match="Q5_0.*not supported"):
        raw_input_specs("blk.0.w", "Q5_0", (4, 64))
    x = placeholder((1, 48), "float32", name="x")
    graph, _ = build_graph([x @ Tensor.from_numpy(np.zeros((5, 48), np.float32), name="w").T])
    with pytest.raises(FormatError, match=r"'w'.*whole blocks of 256 values.*48"):
        quantize_graph(graph, {"w": "Q4_K"}, activations="f32")
    with pytest.raises(FormatError, match="'nope' is not an input"):
        quantize_graph(graph, {"nope": "Q8_0"}, activations="f32")
    with pytest.raises(FormatError, match="only 2-D static float32"):
        quantize_graph(_graph_1d(), {"b": "Q8_0"}, activations="f32")
    x = placeholder((1, 64), "float32", name="x")
    graph, _ = build_graph([x @ Tensor.from_numpy(np.zeros((4, 64), np.float32), name="w").T])
    quantize_graph(graph, {"w": "Q4_1"}, activations="f32")
    prog = compile_with(graph, "numpy")
    short = {"w#f16": raw.reshape(-1)[:-2].view(np.float16), "w#u8": raw.reshape(-1), "x": np.zeros((1, 64), np.float32)}
    with pytest.raises(Exception, match="w#f16"):  # the program's own shape check names the raw input
        prog(short)


def _graph_1d():
    x = placeholder((64,), "float32", name="x")
    graph, _ = build_graph([x * Tensor.from_numpy(np.zeros(64, np.float32), name="b")])
    return graph


def test_quantize_refuses_non_finite_and_bad_shapes():
    with pytest.raises(FormatError, match="NaN or inf"):
        gq.quantize(np.full((1, 256), np.inf, np.float32), "Q4_K")
    with pytest.raises(FormatError, match="multiple of 256"):
        gq.quantize(np.zeros((1, 100), np.float32), "Q6_K")
    with pytest.raises(FormatError, match="2-D"):
        gq.quantize(np.zeros(256, np.float32), "Q6_K")


@pytest.mark.parametrize("t", ["Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "BF16"])
def test_tiled_prefill_and_lanes(t):
    """Long rows and many output rows: the lane-split decode and the register-tiled prefill branches."""
    rows, k = 301, k_for(t, 2 if gq.LAYOUTS[t][0] == 256 else 9)
    raw, deq = quantized(t, rows, k, seed=6)
    x = placeholder((Sym("seq"), k), "float32", name="x")
    graph, _ = build_graph([x @ Tensor.from_numpy(np.zeros((rows, k), np.float32), name="w").T])
    quantize_graph(graph, {"w": t}, activations="f32")
    prog = compile_with(graph, "c")
    rng = np.random.default_rng(7)
    for seq in (1, 8, 17, 40):
        xs = rng.standard_normal((seq, k)).astype(np.float32)
        got = prog({**raw_inputs("w", t, raw), "x": xs}, {"seq": seq})[0]
        want = xs.astype(np.float64) @ deq.T.astype(np.float64)
        close(got, want, np.abs(xs).astype(np.float64) @ np.abs(deq.T).astype(np.float64), f"{t} seq={seq}")
    assert_reads_raw(prog, rows * k, set(raw_input_specs("w", t, (rows, k))))


@pytest.mark.parametrize("t", ["Q4_0", "Q4_K", "Q6_K"])
def test_every_index_checked(t):
    """At safety 2 (every index inside the kernels checked) the raw views stay inside their buffers."""
    rows, k = 11, k_for(t, 2)
    raw, deq = quantized(t, rows, k, seed=8)
    x = placeholder((Sym("seq"), k), "float32", name="x")
    graph, _ = build_graph([x @ Tensor.from_numpy(np.zeros((rows, k), np.float32), name="w").T])
    quantize_graph(graph, {"w": t}, activations="f32")
    with settings(safety=2, threads=1):
        prog = compile_graph(graph, backend="c")
    xs = np.random.default_rng(9).standard_normal((3, k)).astype(np.float32)
    got = prog({**raw_inputs("w", t, raw), "x": xs}, {"seq": 3})[0]
    close(got, xs.astype(np.float64) @ deq.T.astype(np.float64),
           np.abs(xs).astype(np.float64) @ np.abs(deq.T).astype(np.float64), t)


@pytest.mark.parametrize("t,lanes,span", [("Q8_0", 32, 32), ("Q4_1", 16, 32), ("Q4_K", 32, 64), ("Q6_K", 16, 32)])
def test_lane_blocks_align_with_weight_blocks(t, lanes, span):
    """The decode matvec's lane blocks never straddle two weight blocks: the lane count divides the
    block (and sub-block) size, and the block's scale is read once per lane block, before the lane loop.
    A weight block of several lane blocks (Q4_1: 32 values, 16 lanes) is one step of ``span`` values with
    a lane loop per sub-block: its scales are read once for all of them, and the index tables that pick
    a Q4 nibble become constants per sub-block (codegen/lane_tables.py)."""
    rows, k = 40, k_for(t, 8 if gq.LAYOUTS[t][0] == 32 else 2)
    raw, deq = quantized(t, rows, k, seed=10)
    x = placeholder((1, k), "float32", name="x")
    graph, _ = build_graph([x @ Tensor.from_numpy(np.zeros((rows, k), np.float32), name="w").T])
    quantize_graph(graph, {"w": t}, activations="f32")
    prog = compile_with(graph, "c")
    (fn,) = [f for f in prog.artifacts["kernel_ir"].functions if f.linkage == "kernel"]
    f16 = {p.name for p in fn.params if p.pointer and p.dtype.value == "float16"}
    tables = {st.buf for s in walk(fn.body) if isinstance(s, kir.For) and s.role == "hoist"  # hoisted tables
              for st in s.body if isinstance(st, kir.Store)}
    blocks = [s for s in walk(fn.body) if isinstance(s, kir.For) and s.var.endswith("_b")]
    assert blocks and all(s.step == kir.Const(span, s.step.dtype) for s in blocks), [b.step for b in blocks]
    for b in blocks:
        inners = [s for s in b.body if isinstance(s, kir.For)]
        assert len(inners) == span // lanes and all(s.stop == kir.Const(lanes, s.stop.dtype) for s in inners)
        lane_vars = {i.var for i in inners} | {
            s.var for i in inners for s in i.body if isinstance(s, kir.Decl) and i.var in vars_of(s.init)}
        hoisted = [ld for s in b.body if not isinstance(s, kir.For) for ld in loads_of(s) if ld.buf in f16]
        inside = [ld for i in inners for s in i.body for ld in loads_of(s)]
        assert hoisted and all(not (vars_of(ld.index) & lane_vars) for ld in inside if ld.buf in f16), (hoisted, inside)
        assert len({(ld.buf, ld.index) for ld in hoisted}) == len(hoisted)  # each scale once per span
        if t == "Q4_1":
            assert tables and not [ld for ld in inside if ld.buf in tables], inside
    xs = np.random.default_rng(11).standard_normal((1, k)).astype(np.float32)
    got = prog({**raw_inputs("w", t, raw), "x": xs})[0]
    close(got, xs.astype(np.float64) @ deq.T.astype(np.float64),
           np.abs(xs).astype(np.float64) @ np.abs(deq.T).astype(np.float64), t)
