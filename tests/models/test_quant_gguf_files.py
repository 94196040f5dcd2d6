"""Quantized weights and real GGUF files: the SmolLM2 file's own Q8_0/Q4_1 tensors read in place, and
llama.cpp (xllamacpp, in a subprocess: tests/models/llamacpp_kquant.py) decoding the K-quant bytes we
write as our dequantizer does. The model file is the ``smollm2_gguf`` fixture (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np

import caten_lab
from caten_lab.frontend import Sym, Tensor, build_graph, placeholder
from caten_lab.models.quant_graph import quantize_graph, raw_input_specs, raw_inputs
from caten_lab.nn.functional import embedding

from .quant_cases import assert_reads_raw, close, compile_with


def _helper(*args: str) -> dict:
    script = Path(__file__).with_name("llamacpp_kquant.py")
    env = {**os.environ, "PYTHONPATH": str(Path(caten_lab.__file__).parent.parent)}
    out = subprocess.run(
        [sys.executable, str(script), *args], capture_output=True, text=True, timeout=600, env=env
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines, f"helper {args[0]} printed nothing: {out.stderr[-2000:]}"
    return json.loads(lines[-1])


def test_llamacpp_reads_our_k_quants(tmp_path, smollm2_gguf):
    """llama.cpp decodes the Q4_K/Q5_K/Q6_K bytes we write as our dequantizer does: SmolLM2 with every
    ffn_down re-encoded by us generates the same greedy tokens as with those matrices stored as F32."""
    assert _helper("write", str(smollm2_gguf), str(tmp_path))["changed"] == 30
    kq = _helper("run", str(tmp_path / "kq.gguf"), "The capital of France is", "12")
    ref = _helper("run", str(tmp_path / "ref.gguf"), "The capital of France is", "12")
    assert len(kq["tokens"]) == 12 and kq["tokens"] == ref["tokens"], (kq["text"], ref["text"])


def test_real_smollm2_tensors_read_in_place(smollm2_gguf):
    """The real file's Q8_0 token embedding (49152 x 576, tied head) and a Q4_1 projection, bound as the
    memory-mapped bytes gguf's reader gives: gathered rows and a matvec equal to gguf's dequantization."""
    reader = gguf.GGUFReader(smollm2_gguf)
    tensors = {t.name: t for t in reader.tensors}
    emb, q = tensors["token_embd.weight"], tensors["blk.0.attn_q.weight"]
    assert (emb.tensor_type.name, q.tensor_type.name) == ("Q8_0", "Q4_1")
    ids = placeholder((Sym("seq"),), "int64", name="ids")
    e = Tensor.from_numpy(np.zeros((49152, 576), np.float32), name="token_embd.weight")
    wq = Tensor.from_numpy(np.zeros((576, 576), np.float32), name="blk.0.attn_q.weight")
    h = embedding(ids, e)
    graph, _ = build_graph([h, h @ wq.T])
    quantize_graph(graph, {"token_embd.weight": emb.tensor_type, "blk.0.attn_q.weight": q.tensor_type}, activations="f32")
    prog = compile_with(graph, "c")
    bind = {
        **raw_inputs("token_embd.weight", emb.tensor_type, emb.data),
        **raw_inputs("blk.0.attn_q.weight", q.tensor_type, q.data),
    }
    assert all(np.shares_memory(a, emb.data) or np.shares_memory(a, q.data) for a in bind.values())
    tok = np.array([1, 49151, 504, 7042, 504])
    got_h, got_y = prog({**bind, "ids": tok}, {"seq": len(tok)})
    want_h = gguf.quants.dequantize(emb.data[tok], emb.tensor_type)
    np.testing.assert_array_equal(got_h, want_h)
    wq32 = gguf.quants.dequantize(q.data, q.tensor_type).astype(np.float64)
    close(
        got_y, want_h.astype(np.float64) @ wq32.T, np.abs(want_h).astype(np.float64) @ np.abs(wq32).T, "real"
    )
    assert_reads_raw(prog, 576 * 576, set(raw_input_specs("blk.0.attn_q.weight", "Q4_1", (576, 576))))
