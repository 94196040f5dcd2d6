"""Decode-speed codegen (hoisted matvec operands, OpenMP placement, float16 loads, the call hot path),
checked against the NumPy interpreter: these change how the C computes, never what it computes."""

from __future__ import annotations

import numpy as np
import pytest
from pipelines import pre_team

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.codegen.kir import Alu, Const, Decl, For, Var
from caten_lab.codegen.kir_walk import exprs_of, walk
from caten_lab.compiler import compile as compile_graph
from caten_lab.compiler import lower_to_c
from caten_lab.config import from_env, settings
from caten_lab.models.quantize import apply_weight_format
from caten_lab.nn.gpt2 import GPT2, GPT2Config


def _loops(body: tuple):  # noqa: ANN202
    return [s for s in walk(body) if isinstance(s, For)]


def _exprs(body: tuple):  # noqa: ANN202
    return [e for s in walk(body) for e in exprs_of(s)]


def _decoder(fmt: str = "fp32", vocab: int = 211):
    model = GPT2(GPT2Config(vocab_size=vocab, n_positions=32, n_embd=48, n_layer=2, n_head=4))
    dec = model.decoder_graph(last_only=True)
    names = [k for k, v in dec.arrays.items() if v.ndim == 2 and k.endswith(".weight") and "wpe" not in k]
    graph, arrays = apply_weight_format(dec.graph, dict(dec.arrays), names, fmt)
    return graph, arrays, dec.tokens


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8"])
def test_gpt2_decoder_c_equals_interpreter_prefill_and_decode(fmt):
    graph, arrays, tokens = _decoder(fmt)
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    ref = compile_graph(graph, backend="numpy")
    a_c = {k: v.copy() for k, v in arrays.items()}
    a_n = {k: v.copy() for k, v in arrays.items()}
    steps = [([3, 17, 5, 200, 9], 0), ([4], 5), ([11], 6), ([0], 7), ([210], 8)]
    for ids, pos in steps:
        for a in (a_c, a_n):
            a[tokens] = np.array([ids], dtype=np.int64)
        sym = {"seq": len(ids), "pos": pos}
        got = prog(a_c, sym)[0]
        want = ref(a_n, sym)[0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    for name in arrays:  # the KV caches were updated in place identically
        np.testing.assert_allclose(a_c[name], a_n[name], rtol=2e-4, atol=2e-5)


def test_matvec_operands_are_hoisted_and_lm_head_runs_in_parallel():
    graph, _, _ = _decoder(vocab=1500)  # 72k operations: enough for two threads
    prog = lower_to_c(graph, threads=2, pipeline=pre_team()).ctx.artifacts["kernel_ir"]
    # the last LayerNorm + lm_head kernel: its vocabulary loop is a top-level loop
    (fn,) = [f for f in prog.functions if any(isinstance(s, For) and s.stop == Const(1500, DType.int64)
                                               for s in f.body)]
    at = next(i for i, s in enumerate(fn.body) if isinstance(s, For) and s.stop == Const(1500, DType.int64))
    vocab = fn.body[at]
    # the LayerNorm of the last row is computed once into a local array, outside the vocabulary loop
    hoisted = [s for s in fn.body[:at] if isinstance(s, For) and s.role == "hoist"]
    arrays = [s for s in fn.body[:at] if isinstance(s, Decl) and s.size == Const(48, DType.int64)]
    assert hoisted and arrays
    assert vocab.parallel is not None  # the vocabulary loop runs in parallel, the hoisted loop before it serially
    ops = {e.op for e in _exprs(vocab.body) if isinstance(e, Alu)}
    assert not ops & {"sqrt", "floormod", "floordiv", "div"}  # nothing but the dot product per row
    # GELU is evaluated once per hidden unit, not once per (hidden unit, output) pair
    gelu = Const(0.044715, DType.float32)
    in_reduction = [s for f in prog.functions for s in _loops(f.body) if s.reduction and gelu in _exprs(s.body)]
    assert any(gelu in _exprs(f.body) for f in prog.functions) and not in_reduction


_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
        "ge": lambda a, b: a >= b, "lt": lambda a, b: a < b, "land": lambda a, b: a and b}


def _value(e, env: dict) -> int:  # noqa: ANN001
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    assert isinstance(e, Alu) and e.op in _OPS, e
    return _OPS[e.op](*(_value(a, env) for a in e.args))


def _parallel_conditions(prog, op: str) -> list:  # noqa: ANN001
    """The conditions of the parallel loops (and of the ifs choosing them) in kernels computing ``op``."""
    conds = []
    for f in prog.functions:
        if any(isinstance(e, Alu) and e.op == op for e in _exprs(f.body)):
            for s in walk(f.body):
                if isinstance(s, For) and s.parallel is not None:
                    conds.append(s.parallel.cond if s.parallel.cond is not None else Const(True, DType.bool))
    return conds


def test_decode_attention_stays_serial_while_its_work_is_small():
    """The work estimate adds the softmax's three (pos + seq)-long reductions instead of multiplying
    them: at pos 8 the decode attention kernel (a few thousand flops) must not open a parallel region
    (it cost 12 thread wake-ups per step, 1 ms at 2 threads against 0.07 ms serial), and a long
    prefill still runs in parallel."""
    graph, _, _ = _decoder()
    prog = lower_to_c(graph, threads=2, pipeline=pre_team()).ctx.artifacts["kernel_ir"]
    conds = _parallel_conditions(prog, "exp2")
    assert conds, "the attention kernel should still be parallel for big sizes"
    assert not any(_value(c, {"S_pos": 8, "S_seq": 1}) for c in conds), conds
    assert any(_value(c, {"S_pos": 0, "S_seq": 512}) for c in conds), conds


def test_float16_loads_are_exact_for_every_bit_pattern():
    g = Graph()
    h = g.insert("allocate", [], shape=(65536,), dtype=DType.float16, name="h")
    g.mark_output(g.insert("cast", [h], dtype=DType.float32))
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    x = bits.view(np.float16)
    got = compile_graph(g, backend="c")({"h": x})[0]
    want = x.astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


def _axpy_graph():
    g = Graph()
    from caten_lab.air.symbolic import Sym

    n = Sym("n")
    x = g.insert("allocate", [], shape=(n,), dtype=DType.float32, name="x")
    y = g.insert("allocate", [], shape=(n,), dtype=DType.float32, name="y")
    t = g.insert("mul", [x, 2.0])
    s = g.insert("add", [t, y])
    g.mark_output(g.insert("mul", [s, s]))
    return g


def test_hot_path_sees_new_arrays_new_contents_and_new_sizes():
    prog = compile_graph(_axpy_graph(), backend="c")
    rng = np.random.default_rng(0)
    x = rng.standard_normal(5).astype(np.float32)
    y = rng.standard_normal(5).astype(np.float32)
    f = lambda x, y: ((2 * x + y) ** 2).astype(np.float32)  # noqa: E731
    np.testing.assert_allclose(prog({"x": x, "y": y})[0], f(x, y), rtol=1e-6)
    x[...] = 3.0  # same array object, new contents
    np.testing.assert_allclose(prog({"x": x, "y": y})[0], f(x, y), rtol=1e-6)
    x2 = rng.standard_normal(5).astype(np.float32)  # a new object
    np.testing.assert_allclose(prog({"x": x2, "y": y})[0], f(x2, y), rtol=1e-6)
    big = rng.standard_normal(40).astype(np.float64)[::2]  # converted copy: must not be cached
    yb = np.ones(20, np.float32)
    np.testing.assert_allclose(prog({"x": big, "y": yb})[0], f(big.astype(np.float32), yb), rtol=1e-6)
    big[...] = 1.0
    np.testing.assert_allclose(prog({"x": big, "y": yb})[0], f(big.astype(np.float32), yb), rtol=1e-6)
    for n in (1, 7, 3, 64, 2):  # grow and shrink
        xs, ys = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
        out = prog({"x": xs, "y": ys})[0]
        assert out.shape == (n,)
        np.testing.assert_allclose(out, f(xs, ys), rtol=1e-6)
    a = prog({"x": x, "y": y})[0]
    b = prog({"x": x, "y": y})[0]
    assert a is not b  # outputs are fresh arrays: a result never changes under the caller


def test_config_memo_follows_the_environment(monkeypatch):
    monkeypatch.setenv("CATEN_THREADS", "1")
    assert from_env().threads == 1
    monkeypatch.setenv("CATEN_THREADS", "3")
    assert from_env().threads == 3
