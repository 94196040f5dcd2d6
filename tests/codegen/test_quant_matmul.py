"""The quantized matmul ops end to end: ``quantize_graph(activations="q8")`` rewrites ``x @ W.T`` over GGUF
blocks into ``quant_matmul(quant_rows(x), W's bytes)``, the scheduler and lowering turn it into helper calls
(``cl_quant_rows_*``, ``cl_qdot_*``, and ``cl_qgemm_*`` tiles for many rows), and the compiled C agrees with the
NumPy interpreter running :mod:`caten_lab.formats.act_quant`, for every weight type, decode and prefill row
counts, one and two threads. Against the float product (the dequantized weight times the float activations)
the error stays within the 8-bit rounding bound of the activations."""

from __future__ import annotations

import numpy as np
import pytest

import caten_lab.codegen.kir as k
from caten_lab.codegen.kir_walk import exprs_of, walk
from caten_lab.compiler import compile as compile_graph
from caten_lab.config import settings
from caten_lab.formats import act_quant as aq
from caten_lab.formats import gguf_quant as gq
from caten_lab.frontend import Sym, Tensor, build_graph, placeholder
from caten_lab.models.quant_graph import quantize_graph, raw_inputs
from caten_lab.passes.linear_form import linear_uses

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"]
SEQS = (1, 3, 4, 9, 70)  # decode, short prompts, tiles: a full row tile of 64 and a ragged one


def _graph(n: int, k: int, heads: bool = False):
    """``silu(rmsnorm(x) @ W.T)`` (or ``x`` as heads (seq, 4, k / 4) read as rows), W (n, k) a weight input."""
    x = placeholder((Sym("seq"), 4, k // 4) if heads else (Sym("seq"), k), "float32", name="x")
    a = x.reshape(Sym("seq"), k) if heads else x
    h = a * (a * a).mean(1, keepdim=True).add(1e-5).sqrt().reciprocal()
    y = h @ Tensor.from_numpy(np.zeros((n, k), np.float32), name="w").T
    graph, arrays = build_graph([y * (y.neg().exp() + 1).reciprocal()])
    return graph, {a: v for a, v in arrays.items() if a != "w"}


def _calls(prog) -> set[str]:  # noqa: ANN001
    return {e.fn for f in prog.artifacts["kernel_ir"].functions for s in walk(f.body) for e in exprs_of(s)
            if isinstance(e, k.Call)}


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("threads", [1, 2])
def test_quant_matmul_equals_the_interpreter(t, threads):
    n, kk = 37, 512
    rng = np.random.default_rng(3)
    w = rng.standard_normal((n, kk)).astype(np.float32)
    raw = gq.quantize(w, t)
    graph, arrays = _graph(n, kk)
    quantize_graph(graph, {"w": t})
    ops = [node.op for node in graph]
    assert ops.count("quant_rows") == ops.count("quant_matmul") == 1 and "reduce" in ops  # (the norm's mean)
    bound = {name: a for name, a in raw_inputs("w", t, raw).items() if name in {n.attrs.name for n in graph.inputs()}}
    with settings(threads=threads):
        prog = compile_graph(graph, backend="c")
    ref = compile_graph(graph, backend="numpy")
    helper = f"cl_qdot_{t.lower()}"
    assert {helper, f"cl_qgemm_{t.lower()}", f"cl_quant_rows_a{aq.act_block(t)}"} <= _calls(prog)
    deq = gq.dequantize(raw.reshape(-1), t, (n, kk)).astype(np.float64)
    for seq in SEQS:
        x = rng.standard_normal((seq, kk)).astype(np.float32)
        got = prog({**arrays, **bound, "x": x}, {"seq": seq})[0]
        want = ref({**arrays, **bound, "x": x}, {"seq": seq})[0]
        # the same integer dot products, float32 scale arithmetic in another order
        h = x / np.sqrt((x.astype(np.float64) ** 2).mean(1, keepdims=True) + 1e-5)
        scale = np.abs(h) @ np.abs(deq).T
        np.testing.assert_allclose(got, want, rtol=0, atol=float(2e-6 * scale.max() + 1e-6), err_msg=f"seq={seq}")
        # against float activations: within half an 8-bit step of each activation block, times |w|
        blocks = np.abs(h).reshape(seq, -1, aq.act_block(t)).max(axis=2) / 127 / 2
        err_bound = np.repeat(blocks, aq.act_block(t), axis=1) @ np.abs(deq).T
        y = h @ deq.T
        silu = y / (1 + np.exp(-y))
        slope = 1.1  # |silu'| < 1.1
        assert np.all(np.abs(got - silu) <= slope * err_bound + 1e-4 * (1 + np.abs(silu))), f"{t} seq={seq}"


def test_decode_calls_the_dot_product_and_prefill_the_tiles():
    """One row (a decode step) runs ``cl_qdot`` per output; many rows the ``cl_qgemm`` tiles, chosen at run
    time by the row count."""
    graph, _ = _graph(40, 256)
    quantize_graph(graph, {"w": "Q4_1"})
    with settings(threads=1):
        prog = compile_graph(graph, backend="c")
    (fn,) = [f for f in prog.artifacts["kernel_ir"].functions if any(
        isinstance(e, k.Call) and e.fn.startswith("cl_q") for s in walk(f.body) for e in exprs_of(s))
        and "qmatmul" in f.name]
    (choice,) = [s for s in fn.body if isinstance(s, k.If)]
    assert choice.cond.args[1] == k.Const(4, choice.cond.args[1].dtype)
    tiled = {e.fn for s in walk(choice.then) for e in exprs_of(s) if isinstance(e, k.Call)}
    plain = {e.fn for s in walk(choice.orelse) for e in exprs_of(s) if isinstance(e, k.Call)}
    assert "cl_qgemm_q4_1" in tiled and "cl_qdot_q4_1" not in tiled
    assert "cl_qdot_q4_1" in plain and "cl_qgemm_q4_1" not in plain


def test_attention_heads_read_as_rows_are_a_linear_use():
    """``o_proj(attn)`` reads the attention output (seq, heads, d) as rows of heads * d: still quantized."""
    graph, arrays = _graph(24, 256, heads=True)
    quantize_graph(graph, {"w": "Q8_0"})
    assert [n.op for n in graph].count("quant_matmul") == 1
    rng = np.random.default_rng(5)
    raw = gq.quantize(rng.standard_normal((24, 256)).astype(np.float32), "Q8_0")
    bound = {n: a for n, a in raw_inputs("w", "Q8_0", raw).items() if n in {x.attrs.name for x in graph.inputs()}}
    x = rng.standard_normal((5, 4, 64)).astype(np.float32)
    got = compile_graph(graph, backend="c")({**arrays, **bound, "x": x}, {"seq": 5})[0]
    want = compile_graph(graph, backend="numpy")({**arrays, **bound, "x": x}, {"seq": 5})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_other_uses_keep_the_dequantized_weight():
    """An embedding's row lookup and ``activations="f32"`` read the dequantization; x @ W (no transpose) too."""
    rng = np.random.default_rng(6)
    emb = Tensor.from_numpy(np.zeros((50, 64), np.float32), name="e")
    ids = placeholder((Sym("seq"),), "int64", name="ids")
    x = placeholder((Sym("seq"), 64), "float32", name="x")
    graph, arrays = build_graph([emb[ids], x @ emb.T])
    quantize_graph(graph, {"e": "Q4_0"})
    assert [n.op for n in graph].count("quant_matmul") == 1  # x @ e.T; the lookup reads the dequantization
    graph2, _ = build_graph([x @ Tensor.from_numpy(np.zeros((50, 64), np.float32), name="e").T])
    quantize_graph(graph2, {"e": "Q4_0"}, activations="f32")
    assert "quant_matmul" not in {n.op for n in graph2}
    raw = gq.quantize(rng.standard_normal((50, 64)).astype(np.float32), "Q4_0")
    bound = {n: a for n, a in raw_inputs("e", "Q4_0", raw).items() if n in {v.attrs.name for v in graph.inputs()}}
    feed = {**{a: v for a, v in arrays.items() if a != "e"}, **bound, "ids": np.array([3, 49, 0]),
            "x": rng.standard_normal((3, 64)).astype(np.float32)}
    for got, want in zip(compile_graph(graph, backend="c")(feed, {"seq": 3}),
                         compile_graph(graph, backend="numpy")(feed, {"seq": 3})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_linear_form_matches_exactly():
    """``linear_uses`` takes x @ W.T and nothing that only looks like it (x @ W, a sum over another axis)."""
    x = placeholder((Sym("seq"), 8), "float32", name="x")
    w = Tensor.from_numpy(np.zeros((8, 8), np.float32), name="w")
    for y, want in ((x @ w.T, 1), (x @ w, 0), ((x[:, None, :] * w[None]).sum(1), 0)):
        graph, _ = build_graph([y])
        (wn,) = [n for n in graph.inputs() if n.attrs.name == "w"]
        found = [u for v in graph.users_of(wn.out) for u in linear_uses(graph, v)]
        assert len(found) == want


def test_quant_ops_refuse_what_does_not_fit():
    """Building the ops checks their operands: what was wrong, which op, what to do."""
    from caten_lab.air.graph import Graph
    from caten_lab.errors import AirError

    g = Graph()
    x = g.insert("allocate", [], shape=(2, 48), dtype="float32", name="x")
    with pytest.raises(AirError, match="no whole number of 32-value blocks"):
        g.insert("quant_rows", [x], block=32)
    with pytest.raises(AirError, match="32 or 256"):
        g.insert("quant_rows", [g.insert("allocate", [], shape=(2, 64), dtype="float32", name="y")], block=64)
    xq = g.insert("quant_rows", [g.insert("allocate", [], shape=(2, 64), dtype="float32", name="z")], block=32)
    w = g.insert("allocate", [], shape=(3 * 40,), dtype="uint8", name="w")  # Q4_1 (3, 64) takes 120 bytes
    assert g.producer_of(g.insert("quant_matmul", [xq, w], wtype="Q4_1", n=3, k=64)).shape == (2, 3)
    with pytest.raises(AirError, match=r"\(3, 64\) Q4_0 tensor \(108 bytes\), got uint8\(120,\)"):
        g.insert("quant_matmul", [xq, w], wtype="Q4_0", n=3, k=64)  # Q4_0 rows are 36 bytes: 108
    with pytest.raises(AirError, match="does not read F16"):
        g.insert("quant_matmul", [xq, w], wtype="F16", n=3, k=64)
    with pytest.raises(AirError, match="from quant_rows"):
        g.insert("quant_matmul", [w, w], wtype="Q4_1", n=3, k=64)
