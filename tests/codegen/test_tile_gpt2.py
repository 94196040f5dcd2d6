"""The ``rowblock`` and ``lanes`` passes in a traced compile of one GPT-2 small block (real dimensions:
768 features, 50,257-token lm_head): each changes the kernel program, its recorded rewrites replay
from the program before the pass to the one after, and the validator accepts every step."""

from __future__ import annotations

import pytest

import caten_lab.codegen.kir as k
from caten_lab.codegen.kir_check import validate
from caten_lab.codegen.kir_rewrite import KRewrite, replay
from caten_lab.codegen.kir_walk import const, walk
from caten_lab.compiler import lower_to_c
from caten_lab.models.quantize import format_graph
from caten_lab.nn.gpt2 import GPT2, GPT2Config


def _graph(fmt: str):
    dec = GPT2(GPT2Config(n_layer=1, n_ctx=1024)).decoder_graph(bind=False, last_only=True)
    weights = [n.attrs.name for n in dec.graph.inputs()
               if len(n.shape) == 2 and n.attrs.name.endswith(".weight") and "wpe" not in n.attrs.name]
    return format_graph(dec.graph, weights, fmt)


@pytest.mark.parametrize("fmt,blocked,laned", [("fp32", 4, 1), ("fp16", 4, 6), ("int8", 4, 6)])
def test_gpt2_block_rowblock_and_lanes_change_the_program_and_replay(fmt, blocked, laned):
    res = lower_to_c(_graph(fmt), threads=2, trace=True)
    tr = res.trace
    recs = {r.name: r for r in tr.records}
    rb, ln = recs["rowblock"], recs["lanes"]
    assert rb.changed and ln.changed and rb.kernel_changed and ln.kernel_changed
    assert all(isinstance(r, KRewrite) for r in rb.rewrites + ln.rewrites)
    assert [r.rule for r in rb.rewrites] == ["rowblock"] * blocked
    assert [r.rule for r in ln.rewrites if r.rule != "max_lanes"] == ["lanes"] * laned
    assert [r.rule for r in ln.rewrites].count("max_lanes") == 1  # the attention's row maximum (softmax)
    before, mid, after = rb.kernel_before, rb.kernel_after, ln.kernel_after
    assert ln.kernel_before is mid and before != mid != after
    for i in range(len(rb.rewrites) + 1):  # every step of the pass rebuilds (as the Inspector steps it) and validates
        step = tr.program_at("rowblock", i)
        assert step == replay(before, rb.rewrites[:i])
        validate(step)
    assert tr.program_at("rowblock", len(rb.rewrites)) == mid and replay(mid, ln.rewrites) == after
    assert tr.program_at("lanes") is after
    validate(after)
    assert sorted(rb.kernel_diff()["changed"]) == sorted({rw.function for rw in rb.rewrites})
    # rowblock: the prefill matmuls (symbolic row count), each now IF seq >= rows THEN tiles ELSE the nest
    for rw in rb.rewrites:
        (new,) = rw.after
        assert isinstance(new, k.If) and new.then[0].role == "tile" and new.orelse == rw.before
    # lanes: low-bit weights split the lm_head's dot products (50,257 outputs of 768); float32 only the
    # short rows of attention (64 per head); float16 rows are converted per lane block by cl_h2f_n
    head = [rw for rw in ln.rewrites if any(isinstance(s, k.For) and s.stop == const(50257)
                                             for s in walk(tuple(mid.function(rw.function).body)))]
    assert bool(head) == (fmt != "fp32")
    convs = [s for rw in ln.rewrites for s in walk(rw.after) if isinstance(s, k.Eval) and s.value.fn == "cl_h2f_n"]
    assert bool(convs) == (fmt == "fp16")
