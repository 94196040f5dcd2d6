"""The Inspector's kernel views of codegen passes: kernel lists, listings before/after each kernel-IR
rewrite, highlighted lines, and the AIR <-> kernel IR <-> C links, checked against the trace itself
(program_at) and the renderer's maps."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir_rewrite
from caten_lab.codegen.kir import Assign, Const, For, Function
from caten_lab.frontend import build_graph, placeholder
from caten_lab.notebook import kernel_view
from caten_lab.notebook.inspector import Inspector, build_payload
from caten_lab.notebook.kernel_view import KernelTables, loop_nest
from caten_lab.passes import FunctionPass
from caten_lab.passes.simplify import simplify_pass

from .conftest import kernel_passes

I64 = DType.int64


def three_kernels():
    x = placeholder((4, 8), name="x")
    e = (x * 2.0).exp()
    g, _ = build_graph([e / e.sum(-1, keepdim=True), e.sum(), x.max(-1)])
    return g


@pytest.fixture(scope="module")
def run():
    res = kernel_passes.kernel_pipeline().run(three_kernels(), trace=True)
    return res, build_payload(res.trace)


def text_of(payload, si):
    kir = payload["kir"]
    return "\n".join(kir["lines"][i] for i in kir["states"][si]["lines"])


def test_graph_passes_have_no_kernel_block(run):
    res, p = run
    by = {q["name"]: q for q in p["passes"]}
    assert by["schedule"]["kir"] is None
    assert [q["name"] for q in p["passes"] if q["kir"]] == res.trace.kernel_passes()
    json.dumps(p)  # strict JSON


def test_listings_are_the_programs_of_the_trace(run):
    res, p = run
    tr = res.trace
    for q in p["passes"]:
        if not q["kir"]:
            continue
        after = tr.program_at(q["name"])
        assert [f["name"] for f in q["kir"]["functions"]] == [f.name for f in after.functions]
        for f in q["kir"]["functions"]:
            assert text_of(p, f["after"]) == after.text(f["name"])
            if f["before"] is not None:
                assert text_of(p, f["before"]) == tr.program_at(q["name"], 0).text(f["name"])
            assert f["changed"] == (f["before"] is None or text_of(p, f["before"]) != text_of(p, f["after"]))


def test_steps_replay_like_program_at(run):
    res, p = run
    tr = res.trace
    n_steps = 0
    for q in p["passes"]:
        if not q["kir"] or q["kir"]["n_steps"] == 0:
            continue
        steps = q["kir"]["steps"]
        assert len(steps) == q["kir"]["n_steps"] == len(tr[q["name"]].kernel_rewrites)
        for k, st in enumerate(steps, start=1):
            assert st["rule"] == tr[q["name"]].kernel_rewrites[k - 1].rule
            assert text_of(p, st["after"]) == tr.program_at(q["name"], k).text(st["fn"])
            assert text_of(p, st["before"]) == tr.program_at(q["name"], k - 1).text(st["fn"])
            n_steps += 1
    assert n_steps == 1 + 3 + 4  # split, unroll, parallel


def test_changed_lines_are_what_each_rewrite_touched(run):
    _, p = run
    by = {q["name"]: q["kir"] for q in p["passes"]}
    lines = lambda si, hl: [text_of(p, si).split("\n")[ln - 1].strip() for ln in hl]  # noqa: E731
    (split,) = by["split"]["steps"]
    # the loop nest split in two: both tile headers are new, the shared inner loop and store are not
    assert lines(split["after"], split["hl_after"]) == ["FOR i in [0, 2) [tile]", "FOR i in [2, 4) [tile]"]
    assert lines(split["before"], split["hl_before"]) == ["FOR i in [0, 4) [loop]"]
    u1, u2, u3 = by["unroll"]["steps"]
    assert u1["hl_after"] == [3] and u2["hl_after"] == [8]  # each half's inner loop, one at a time
    assert lines(u2["after"], u2["hl_after"]) == ["FOR j in [0, 8) [loop] unroll(8)"]
    assert u3["fn"] == "k2_max" and lines(u3["after"], u3["hl_after"]) == ["FOR j in [0, 4) [loop] unroll(4)"]
    # the whole pass: every unrolled loop of the function, nothing else
    k0 = by["unroll"]["functions"][0]
    assert lines(k0["after"], k0["hl_after"]) == ["FOR j in [0, 8) [loop] unroll(8)"] * 2
    assert lines(k0["before"], k0["hl_before"]) == ["FOR j in [0, 8) [loop]"] * 2
    untouched = by["unroll"]["functions"][1]
    assert not untouched["changed"] and untouched["hl_after"] == [] and untouched["before"] == untouched["after"]


def test_identity_rules_for_highlights():
    a = Assign("x", Const(1, I64))
    b = Assign("y", Const(2, I64))
    loop = For("i", Const(0, I64), Const(4, I64), Const(1, I64), (a, b))
    f0 = Function("f", (), (loop,))
    t = KernelTables()
    # a statement moved by the rewrite (same object, produced) is highlighted; left in place it is not
    swapped = replace(f0, body=(replace(loop, body=(b, a)),))
    assert t.changed_lines(f0, swapped, (b, a)) == ([], [3, 4])  # line 1 is FUNCTION, 2 the FOR
    assert t.changed_lines(f0, swapped, ()) == ([], [])
    # a new leaf inside a rebuilt parent: the leaf is marked, the parent's unchanged header is not
    c = Assign("y", Const(3, I64))
    f1 = replace(f0, body=(replace(loop, body=(a, c)),))
    assert t.changed_lines(f0, f1, (c,)) == ([4], [4])
    assert loop_nest(f1.body) == "i:4"


def test_statements_link_to_air_nodes_and_c_lines(run):
    res, p = run
    arts = res.ctx.artifacts
    c_lines = arts["c_source"].split("\n")
    smap = arts["source_map"]
    line_paths = arts["line_paths"]
    sched = {k.name: k for k in arts["schedule"].kernels}
    final = {f.name for f in arts["kernel_ir"].functions}
    kir = p["kir"]
    rendered = [st for st in kir["states"] if st["c"] is not None]
    assert sorted(st["fn"] for st in rendered) == sorted(final)
    covered = set()
    for st in rendered:
        for li, (text_i, oi, cls) in enumerate(zip(st["lines"], st["origins"], st["c"])):
            text = kir["lines"][text_i].strip()
            covered.update(cls)
            if text.startswith("out"):  # the store: its C line writes the same buffer, from the same AIR nodes
                (cl,) = cls
                assert c_lines[cl - 1].strip().startswith(text.split("[")[0] + "[")
                assert sorted(smap[cl - 1]) == sorted(kir["origins"][oi]) == sorted(sched[st["fn"]].node_ids)
            if text.startswith("FOR"):
                assert any(c_lines[cl - 1].strip().startswith("for (") for cl in cls)
            if text == "ENDFOR":
                assert cls == []
            assert li >= 0
    # every C line the renderer mapped to a statement is reachable from the listing
    assert covered == {ln for ln, at in enumerate(line_paths, start=1) if at is not None}
    # listings of programs that were not rendered link to C only through their AIR nodes
    assert all(st["c"] is None for st in kir["states"] if st not in rendered)
    # the last step of a function shows the recorded program itself, linked to C like the whole pass
    par = next(q for q in p["passes"] if q["name"] == "parallel")["kir"]
    last_k0 = [st for st in par["steps"] if st["fn"] == "k0_mul_exp2_add_recip"][-1]
    assert last_k0["after"] == par["functions"][0]["after"] and kir["states"][last_k0["after"]]["c"] is not None


def test_kernel_list_summaries_and_times(run):
    res, _ = run
    k2 = "k2_max"
    rows = [{"kernel": k2, "function": k2, "calls": 1, "seconds": 3e-6, "share": 1.0}]
    p = build_payload(res.trace, profile=rows)
    par = next(q for q in p["passes"] if q["name"] == "parallel")["kir"]
    by = {f["name"]: f for f in par["functions"]}
    assert by["k0_mul_exp2_add_recip"]["loops"] == "i:2 tile par › j:8 unroll8; i:2 tile par › j:8 unroll8"
    assert by[k2]["loops"] == "i:1 par › j:4 unroll4" and by[k2]["stmts"] == 3
    assert (by[k2]["seconds"], by[k2]["calls"]) == (3e-6, 1) and par["profiled"]
    assert by["k0_mul_exp2_add_recip"]["seconds"] is None
    assert by[k2]["kernels"] == [k2]


def test_fusion_log_reaches_the_payload(run):
    res, p = run
    dec = res.trace["schedule"].artifacts["fusion"]
    assert p["fusion"] == [d.to_json() for d in dec] and len(p["fusion"]) >= 8


def test_a_pass_that_does_not_replay_is_stepped_up_to_the_break():
    def sneaky(graph, ctx):  # noqa: ANN001, ANN202
        prog = ctx.artifacts["kernel_ir"]
        f = prog.functions[0]
        prog = kir_rewrite.replace_function(prog, "retag", replace(f, body=(replace(f.body[0], role="stage"),)),
                                            ctx.rewrites)
        f2 = prog.functions[0]
        prog = prog.with_functions([replace(f2, body=(replace(f2.body[0], role="rows"),)), *prog.functions[1:]])
        kir_rewrite.replace_function(prog, "retag_again", replace(f2, body=()), ctx.rewrites)
        ctx.artifacts["kernel_ir"] = prog

    pm = kernel_passes.kernel_pipeline()
    pm.insert("lower", FunctionPass("sneaky", "edits outside its rewrites", sneaky))
    p = build_payload(pm.run(three_kernels(), trace=True).trace)
    q = next(q for q in p["passes"] if q["name"] == "sneaky")["kir"]
    assert len(q["steps"]) == 1 and q["n_steps"] == 2
    assert q["steps_note"].startswith("rewrite 2 (retag_again) does not replay:")


def test_widget_shows_kernels(run):
    res, p = run
    w = Inspector(res.trace)
    assert w.payload["passes"][w.pass_index]["name"] == "simplify" or w.pass_index >= 0
    w.goto("unroll").show_kernel("k2_max", 3)
    assert (w.pass_index, w.kernel, w.kernel_line) == (w.pass_names.index("unroll"), "k2_max", 3)
    assert json.loads(w.data_json)["passes"][w.pass_index]["kir"]["n_steps"] == 3


def test_a_pass_with_too_many_rewrites_is_not_stepped(run, monkeypatch):
    res, _ = run
    monkeypatch.setattr(kernel_view, "MAX_KERNEL_STEPS", 2)
    p = build_payload(res.trace)
    par = next(q for q in p["passes"] if q["name"] == "parallel")["kir"]
    assert par["steps"] == [] and par["n_steps"] == 4 and par["steps_note"] == "4 rewrites (too many to step)"
    assert [f["changed"] for f in par["functions"]] == [True, True, True]  # the whole pass is still shown


def test_the_inspector_opens_on_the_first_pass_that_changed_the_graph(run):
    res, _ = run  # simplify is not in this pipeline: no graph pass changes anything
    w = Inspector(res.trace)
    assert w.pass_index == 0 and w.pass_names[0] == "schedule"
    x = placeholder((4, 8), name="x")
    g, _ = build_graph([(x * 1.0).exp()])  # simplify drops the * 1.0
    tr = kernel_passes.kernel_pipeline([FunctionPass("noop", "nothing", lambda g, c: None), simplify_pass()]).run(
        g, trace=True).trace
    assert tr["simplify"].changed and tr["lower"].changed
    assert Inspector(tr).pass_index == tr.names().index("simplify")


def test_steps_stop_at_the_listing_budget(run, monkeypatch):
    res, _ = run
    monkeypatch.setattr(kernel_view, "MAX_STEP_LINES", 20)  # k0's listing has 12 lines: two steps fit
    par = next(q for q in build_payload(res.trace)["passes"] if q["name"] == "parallel")["kir"]
    assert len(par["steps"]) == 2 and par["steps_note"] == "rewrites 3..4 not steppable: their listings exceed 20 lines"
