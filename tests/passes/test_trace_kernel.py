"""Codegen passes in the PassTrace: kernel programs before/after, kernel-IR rewrites replayed by
program_at, change detection, reports, the kernel-IR check in verify mode, and the scheduler's
fusion log."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from kernel_passes import kernel_pipeline, lower_function, rule_pass, unroll_rule

from caten_lab.codegen import kir_rewrite
from caten_lab.codegen.kir import For, Program, Store, Var
from caten_lab.codegen.kir_check import validate
from caten_lab.errors import CompileError
from caten_lab.frontend import build_graph, placeholder
from caten_lab.passes import FunctionPass, PassManager
from caten_lab.passes.fusion import FusionDecision, fusion_summary
from caten_lab.passes.schedule import schedule_graph
from caten_lab.passes.simplify import simplify_pass


def three_kernels():
    """softmax-like rows (one kernel), a sum of the same exp (a second), a max (a third)."""
    x = placeholder((4, 8), name="x")
    e = (x * 2.0).exp()
    y = e / e.sum(-1, keepdim=True)
    g, _ = build_graph([y + 0.0, e.sum(), x.max(-1)])
    return g


@pytest.fixture
def traced():
    res = kernel_pipeline([simplify_pass()], verify=True, kernel_check=validate).run(three_kernels(), trace=True)
    return res


def test_codegen_records_hold_kernel_programs(traced):
    tr = traced.trace
    assert tr.kernel_passes() == ["lower", "split", "unroll", "parallel", "memory_plan", "render"]
    sched, lower, split = tr["schedule"], tr["lower"], tr["split"]
    assert not sched.is_codegen and sched.kernel_before is None and sched.kernel_after is None
    assert lower.kernel_before is None and lower.kernel_after is not None and lower.changed
    assert split.kernel_before is lower.kernel_after  # snapshots are shared, not copied
    assert tr["parallel"].kernel_after is traced.ctx.artifacts["kernel_ir"]
    names = [f.name for f in lower.kernel_after.functions]
    assert names == [k.name for k in traced.ctx.artifacts["schedule"].kernels] and len(names) == 3
    # each codegen pass that changed the program is changed; the one that only read it is not
    assert [tr[n].changed for n in ("split", "unroll", "parallel", "memory_plan")] == [True, True, True, False]
    assert tr["memory_plan"].kernel_before is tr["memory_plan"].kernel_after
    assert not tr["memory_plan"].kernel_changed and tr["unroll"].kernel_changed


def test_kernel_rewrites_are_recorded_per_pass(traced):
    tr = traced.trace
    split = tr["split"]
    # only k0's outer loop (4 rows) splits; k1 (a scalar) and k2 (one row of 4) have one row
    assert split.graph_rewrites == [] and len(split.kernel_rewrites) == 1
    (rw,) = split.kernel_rewrites
    assert (rw.rule, rw.function, rw.path, rw.field, rw.index, len(rw.before), len(rw.after)) == (
        "split_half", "k0_mul_exp2_add_recip", (), "body", 0, 1, 2)
    # inner loops of 2..8 iterations unroll: k0's two halves (8 wide) and k2's row (4 wide)
    unroll = tr["unroll"]
    assert split.rule_counts() == {"split_half": 1}
    assert unroll.rule_counts() == {"unroll_small": 3}
    assert [rw.function for rw in unroll.kernel_rewrites] == ["k0_mul_exp2_add_recip"] * 2 + ["k2_max"]
    assert tr["parallel"].rule_counts() == {"parallel_outer": 4}
    for rw in unroll.kernel_rewrites:
        assert isinstance(rw, kir_rewrite.KRewrite) and rw.location.endswith(str(unroll_rule.__code__.co_firstlineno))


def test_program_at_replays_rewrite_by_rewrite(traced):
    tr = traced.trace
    for name in ("split", "unroll", "parallel"):
        rec = tr[name]
        assert tr.program_at(name, 0) is rec.kernel_before
        assert tr.program_at(name) is rec.kernel_after
        n = len(rec.kernel_rewrites)
        assert tr.program_at(name, n) == rec.kernel_after  # replaying every rewrite rebuilds the pass's result
        prog = rec.kernel_before
        for k, rw in enumerate(rec.kernel_rewrites, start=1):
            prog = kir_rewrite.apply_one(prog, rw)
            assert tr.program_at(name, k) == prog
            assert tr.program_at(rec.index, k).text() == prog.text()
    # step 1 of "unroll" changed exactly one loop of one function
    one = tr.program_at("unroll", 1)
    before = tr["unroll"].kernel_before
    changed = [f.name for f, g in zip(one.functions, before.functions) if f != g]
    assert changed == [tr["unroll"].kernel_rewrites[0].function]
    assert one.text().count("unroll(") == 1 and before.text().count("unroll(") == 0


def test_program_at_errors(traced):
    tr = traced.trace
    n = len(tr["unroll"].kernel_rewrites)
    with pytest.raises(CompileError) as e:
        tr.program_at("unroll", n + 1)
    assert e.value.message == f"pass 'unroll' (#{tr['unroll'].index}) recorded {n} kernel-IR rewrites; rewrite_index {n + 1} is out of range"
    assert e.value.hint == f"use 0..{n}"
    with pytest.raises(CompileError, match="out of range"):
        tr.program_at("unroll", -1)
    with pytest.raises(CompileError) as e:
        tr.program_at("simplify")
    assert "ran before the kernel IR existed" in e.value.message
    assert e.value.hint.startswith("kernel programs exist from pass 'lower' on")
    with pytest.raises(CompileError) as e:
        tr.program_at("lower", 0)
    assert "made the first kernel program: there is none before it" in e.value.message
    with pytest.raises(CompileError, match="pass index 99 is out of range"):
        tr.program_at(99)


def test_graph_at_does_not_replay_kernel_rewrites(traced):
    tr = traced.trace
    g0 = tr.graph_at("unroll", 0)
    assert g0.structural_key() == tr["unroll"].before.structural_key()
    with pytest.raises(CompileError) as e:
        tr.graph_at("unroll", 1)
    n = len(tr["unroll"].kernel_rewrites)
    assert e.value.message == (f"pass 'unroll' (#{tr['unroll'].index}) recorded 0 graph rewrites; rewrite_index 1 is "
                               f"out of range (its {n} kernel-IR rewrites are stepped by trace.program_at)")
    assert "trace.program_at('unroll', 1)" in e.value.hint
    # graph passes still replay as before
    k = len(tr["simplify"].rewrites)
    assert k > 0 and tr.graph_at("simplify", k).structural_key() == tr["simplify"].after.structural_key()


def test_reports_and_json_handle_both_kinds(traced):
    tr = traced.trace
    text = tr.summary(order="pipeline")
    rows_text = [ln for ln in text.splitlines() if ln.startswith("  ") and "(" in ln]
    lines = {ln.split("  [")[0].split()[-1]: ln for ln in rows_text}
    assert "[kernel IR: 0 -> 9 stmts]" in lines["lower"]  # 3 functions of 2 loops and a store
    assert "[kernel IR: 9 -> 12 stmts]" in lines["split"]  # k0's loop nest split in two
    assert "[kernel IR" not in lines["simplify"]
    rows = {r["pass"]: r for r in tr.table()}
    assert rows["unroll"]["kernel_rewrites"] == len(tr["unroll"].kernel_rewrites) == rows["unroll"]["rewrites"]
    assert rows["simplify"]["kernel_rewrites"] == 0
    doc = json.loads(tr.dumps())
    recs = {r["name"]: r for r in doc["records"]}
    assert recs["split"]["kernel_after"] == tr.program_at("split").text()
    assert recs["lower"]["kernel_before"] is None
    assert "kernel_after" not in recs["simplify"]
    rw = recs["split"]["rewrites"][0]
    assert rw["kind"] == "kernel" and rw["rule"] == "split_half" and rw["before"] == 1 and rw["after"] == 2
    assert "kind" not in recs["simplify"]["rewrites"][0] and "matched" in recs["simplify"]["rewrites"][0]
    assert "kernel_after" not in json.loads(tr.dumps(graphs=False))["records"][3]


def _bad_store(body, i, rctx):  # noqa: ANN001, ANN201 - stores an undefined variable
    s = body[i]
    if isinstance(s, Store) and not isinstance(s.value, Var):
        return 1, (replace(s, value=Var("nowhere", s.value.dtype)),)
    return None


def test_verify_runs_the_kernel_check_after_each_codegen_pass():
    pm = kernel_pipeline(verify=True, kernel_check=validate)
    pm.insert("unroll", rule_pass("breaks_ir", [("bad_store", _bad_store)]))
    with pytest.raises(CompileError) as e:
        pm.run(three_kernels(), trace=True)
    assert e.value.message.startswith("the kernel program is broken after pass 'breaks_ir'")
    assert "nowhere" in e.value.message
    assert e.value.pass_name == "breaks_ir"
    assert e.value.trace["breaks_ir"].error.startswith("kernel check:")
    # untraced runs check too
    with pytest.raises(CompileError, match="broken after pass 'breaks_ir'"):
        pm.run(three_kernels())
    # without verify the broken program goes through (the check costs nothing when off)
    res = PassManager(pm.passes).run(three_kernels(), trace=True)
    assert "nowhere" in res.trace.program_at("breaks_ir").text()


def test_a_pass_that_edits_outside_its_rewrites_is_named_on_replay():
    def sneaky(graph, ctx):  # noqa: ANN001, ANN202 - records a rewrite, then changes the program behind it
        prog = ctx.artifacts["kernel_ir"]
        f = prog.functions[0]
        new = replace(f, body=(replace(f.body[0], role="stage"),))
        ctx.artifacts["kernel_ir"] = kir_rewrite.replace_function(prog, "retag", new, ctx.rewrites)
        f2 = ctx.artifacts["kernel_ir"].functions[0]
        ctx.artifacts["kernel_ir"] = ctx.artifacts["kernel_ir"].with_functions(
            [replace(f2, body=(replace(f2.body[0], role="rows"),)), *ctx.artifacts["kernel_ir"].functions[1:]])
        kir_rewrite.replace_function(ctx.artifacts["kernel_ir"], "retag_again", replace(f2, body=()), ctx.rewrites)

    pm = kernel_pipeline()
    pm.insert("lower", FunctionPass("sneaky", "edits outside its recorded rewrites", sneaky))
    tr = pm.run(three_kernels(), trace=True).trace
    assert tr.program_at("sneaky", 1).functions[0].body[0].role == "stage"
    with pytest.raises(CompileError) as e:
        tr.program_at("sneaky", 2)
    assert e.value.message.startswith("kernel-IR rewrite 2 ('retag_again') of pass 'sneaky'")
    assert "outside its recorded rewrites" in e.value.hint


def test_kernel_program_of_a_failed_pass_is_kept():
    def boom(graph, ctx):  # noqa: ANN001, ANN202
        raise ValueError("codegen exploded")

    pm = kernel_pipeline()
    pm.insert("unroll", FunctionPass("boom", "fails", boom))
    with pytest.raises(CompileError) as e:
        pm.run(three_kernels(), trace=True)
    rec = e.value.trace["boom"]
    assert rec.error == "ValueError: codegen exploded"
    assert e.value.trace.program_at("boom") is rec.kernel_before is e.value.trace["unroll"].kernel_after
    assert not rec.changed


# ---- fusion decisions ------------------------------------------------------------------------


def refused_graph():
    """A row sum read by two kernels (its own output and a normalized copy): fusing would compute it twice."""
    x = placeholder((4, 8), name="x")
    s = x.exp().sum(-1, keepdim=True)
    g, _ = build_graph([x / s, s * 2.0])
    return g


def test_schedule_records_fusion_decisions(traced):
    dec = traced.trace["schedule"].artifacts["fusion"]
    assert all(isinstance(d, FusionDecision) for d in dec)
    sched = traced.ctx.artifacts["schedule"]
    # every node of every kernel is either its root or was inlined into it, and nothing else
    for k in sched.kernels:
        mine = {d.node for d in dec if k.name in d.kernels and d.action in ("root", "inline")}
        assert mine == set(k.node_ids), k.name
    roots = [d for d in dec if d.action == "root"]
    assert sorted(d.kernels[0] for d in roots) == sorted(k.name for k in sched.kernels)
    assert all(d.reason == "a graph output" for d in roots)
    assert not any(d.refused for d in dec)
    json.dumps([d.to_json() for d in dec])
    assert fusion_summary(dec).startswith("3 kernel roots, ")


def test_refused_fusion_says_why():
    g = refused_graph()
    dec: list = []
    sched = schedule_graph(g, None, dec)
    assert [k.name for k in sched.kernels] == [k.name for k in schedule_graph(g).kernels]  # same kernels
    refused = [d for d in dec if d.refused]
    assert len(refused) == 1
    (r,) = refused
    assert r.op == "reduce" and r.action == "root"
    assert r.reason == "read by 2 kernels and holds a reduction: fusing would recompute it in each"
    assert str(r).endswith("(fusion refused): " + r.reason)
    assert r.kernels[0] in [k.name for k in sched.kernels]
    reader_kernels = {d.kernels for d in dec if d.action == "inline" and d.op == "exp2"}
    assert reader_kernels == {(r.kernels[0],)}  # exp is fused into the reduce's kernel only


def test_fusion_log_only_when_tracing():
    res = kernel_pipeline().run(three_kernels())
    assert "fusion" not in res.ctx.artifacts
    res = kernel_pipeline().run(three_kernels(), trace=True)
    assert res.ctx.artifacts["fusion"] is res.trace["schedule"].artifacts["fusion"]


def test_lower_function_validates():
    f = lower_function("k", "out", ["a", "b"], (2, 3), (1, 2))
    validate(Program((f,)))
    assert isinstance(f.body[0], For) and f.body[0].body[0].origin.nodes == (1, 2)


def test_a_rebuilt_but_equal_program_is_not_a_change():
    def rebuild(graph, ctx):  # noqa: ANN001, ANN202 - new objects, same program
        prog = ctx.artifacts["kernel_ir"]
        ctx.artifacts["kernel_ir"] = prog.with_functions([replace(f) for f in prog.functions])

    pm = kernel_pipeline()
    pm.insert("lower", FunctionPass("rebuild", "rebuilds the program unchanged", rebuild))
    tr = pm.run(three_kernels(), trace=True).trace
    rec = tr["rebuild"]
    assert rec.kernel_after is not rec.kernel_before and rec.kernel_after == rec.kernel_before
    assert not rec.kernel_changed and not rec.changed


def test_fusion_log_in_the_trace_json(traced):
    doc = json.loads(traced.trace.dumps(graphs=False))
    sched = next(r for r in doc["records"] if r["name"] == "schedule")
    assert sched["fusion"] == [d.to_json() for d in traced.trace["schedule"].artifacts["fusion"]]
    assert "fusion" in sched["artifacts"] and all("fusion" not in r for r in doc["records"] if r is not sched)


def test_kernel_diff_names_the_functions_a_pass_changed(traced):
    tr = traced.trace
    assert tr["lower"].kernel_diff() == {"added": [f.name for f in tr["lower"].kernel_after.functions],
                                         "removed": [], "changed": []}
    assert tr["unroll"].kernel_diff() == {"added": [], "removed": [], "changed": ["k0_mul_exp2_add_recip", "k2_max"]}
    assert tr["memory_plan"].kernel_diff() == {"added": [], "removed": [], "changed": []}
    assert tr["simplify"].kernel_diff() == {"added": [], "removed": [], "changed": []}
    assert repr(tr["unroll"]).endswith("3 rewrites (3 kernel IR)>") and "kernel IR" not in repr(tr["simplify"])
