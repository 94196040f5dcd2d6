"""The pass debugger and the miscompile bisector, on real passes and deliberately broken ones."""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.air import Pat, Rule, interpret
from caten_lab.errors import CompileError
from caten_lab.notebook.bisect import bisect_miscompile
from caten_lab.notebook.debugger import InvariantError, PassDebugger
from caten_lab.passes import FunctionPass, RewritePass

from .conftest import kernel_passes, pipeline, small_graph


def _ref(g, inputs):
    return interpret(g, inputs)


def test_step_runs_pass_by_pass_and_matches_the_pass_manager(inputs):
    g = small_graph()
    dbg = PassDebugger(g, pipeline())
    names = []
    while not dbg.done:
        names.append(dbg.step().name)
    assert names == ["const_fold", "simplify", "fold_views"]
    ref = pipeline().run(small_graph(), trace=False).graph
    assert dbg.graph.structurally_equal(ref)
    np.testing.assert_allclose(interpret(dbg.graph, inputs)[0], _ref(g, inputs)[0], rtol=1e-6)
    assert dbg.step() is None
    assert [r.name for r in dbg.trace.records] == names


def test_step_rewrite_back_and_run_to():
    dbg = PassDebugger(small_graph(), pipeline())
    dbg.run_to("const_fold")
    assert dbg.position == 1 and len(dbg.records) == 1
    n0 = len(dbg.graph)
    rw1 = dbg.step_rewrite()
    assert rw1.rule == "x*1 -> x" and len(dbg.graph) == n0 - 1
    rw2 = dbg.step_rewrite()
    assert rw2.rule == "x+0 -> x"
    rec = dbg.step_rewrite()  # all rewrites shown: the pass finishes
    assert rec.name == "simplify" and dbg.position == 2
    dbg.back()
    assert dbg.position == 1 and dbg._pending is not None and dbg._pending.shown == 2
    dbg.back()
    assert len(dbg.graph) == n0 - 1 and dbg._pending.shown == 1
    dbg.back()  # undo the first rewrite (and the start of the pass)
    assert len(dbg.graph) == n0 and dbg._pending is None and dbg.position == 1
    dbg.step()
    assert dbg.position == 2 and "simplify" in repr(dbg)
    with pytest.raises(CompileError, match="no pass"):
        dbg.run_to("nope")


def test_skip_replace_and_hand_edits():
    dbg = PassDebugger(small_graph(), pipeline())
    dbg.skip()  # no const folding
    dbg.replace("fold_views", FunctionPass("noop", "does nothing", lambda g, ctx: g))
    dbg.run_all()
    assert [r.name for r in dbg.records] == ["simplify", "noop"]
    assert dbg.records[-1].nodes_after == len(dbg.graph)
    with pytest.raises(CompileError, match="ahead of the cursor"):
        dbg.replace("simplify", FunctionPass("x", "x", lambda g, ctx: g))

    # edit the graph by hand between passes, then continue
    dbg = PassDebugger(small_graph(), pipeline())
    dbg.step()
    out = dbg.graph.outputs[0]
    new = dbg.graph.insert("neg", [out])
    dbg.graph.outputs = [new]
    dbg.run_all()
    assert dbg.graph.producer_of(dbg.graph.outputs[0]).op == "neg"


def test_first_pass_breaking_an_invariant_is_named():
    def corrupt(graph, ctx):
        # change a node's recorded dtype without changing its operands: types no longer agree
        n = next(n for n in graph.nodes if n.op == "exp2")
        from caten_lab.air.dtypes import DType

        n.dtype = DType.int32
        return graph

    pm = pipeline()
    pm.insert("simplify", FunctionPass("corrupt_types", "breaks the graph", corrupt))
    dbg = PassDebugger(small_graph(), pm)
    with pytest.raises(InvariantError, match="corrupt_types") as info:
        dbg.run_all()
    assert info.value.pass_name == "corrupt_types"
    dbg.back()
    assert dbg.position == 2  # back to the good state before the bad pass


def test_hand_edit_that_breaks_the_graph_is_blamed_on_the_edit():
    dbg = PassDebugger(small_graph(), pipeline())
    dbg.step()
    dbg.graph.outputs = ["v_does_not_exist"]
    with pytest.raises(InvariantError, match="edited by hand"):
        dbg.step()


def _bad_rule() -> Rule:
    """A wrong 'simplification': x + c -> x (drops a non-zero constant)."""
    return Rule("x+c -> x (WRONG)", Pat("add", ["x", Pat("const", name="c")]), lambda m: m["x"])


def test_bisect_finds_the_pass_and_rewrite_of_a_miscompile(inputs):
    pm = pipeline()
    pm.insert("simplify", RewritePass("bad_simplify", "a rule that drops constants", [_bad_rule()]))
    res = bisect_miscompile(small_graph(), inputs, pipeline=pm, run_program=False)
    assert not res.ok and res.stage == "pass"
    assert res.pass_name == "bad_simplify" and res.rewrite_index == 1 and res.rule == "x+c -> x (WRONG)"
    assert res.max_abs_err > 0 and "bad_simplify" in repr(res)


def test_bisect_ok_and_blames_codegen_when_graphs_agree(inputs):
    res = bisect_miscompile(small_graph(), inputs, pipeline=pipeline(), run_program=False)
    assert res.ok and res.evaluations >= 2

    def wrong_backend(graph, feed, symbols):
        return [o + 1 for o in interpret(graph, feed, symbols)]

    res = bisect_miscompile(small_graph(), inputs, pipeline=pipeline(), run_program=wrong_backend)
    assert not res.ok and res.stage == "codegen" and res.max_abs_err == pytest.approx(1.0)


def test_bisect_on_the_real_compiler(inputs):
    res = bisect_miscompile(small_graph(), inputs)
    assert res.ok, res


def test_debugger_over_the_compilers_default_pipeline():
    """Step the real pipeline (graph passes, then schedule/lower/render): the C appears in ctx.artifacts."""
    from caten_lab.frontend import Tensor, build_graph
    from caten_lab.notebook.compile_bridge import default_pipeline

    x = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
    g, arrays = build_graph([(x * 1.0 + 0.0).exp().sum(axis=1)])
    dbg = PassDebugger(g)
    dbg.run_to("simplify")
    assert dbg.records[-1].name == "simplify" and dbg.records[-1].rewrites
    dbg.run_all()
    assert [r.name for r in dbg.records] == default_pipeline().names()
    assert "int" in dbg.ctx.artifacts["c_source"] and dbg.ctx.artifacts["schedule"].kernels
    assert dbg.view().pass_names == dbg.names


def test_bisect_blames_a_codegen_pass_that_breaks_the_graph_without_stepping_its_kernel_rewrites(inputs):
    """A pass that records kernel-IR rewrites and also (wrongly) edits the graph: the bisector names the
    pass; it does not try to replay the kernel-IR rewrites on the graph."""
    kp = kernel_passes
    unroll = kp.rule_pass("unroll", [("unroll_small", kp.unroll_rule)])

    def bad_codegen(graph, ctx):  # noqa: ANN001, ANN202
        unroll.run(graph, ctx)
        for n in graph.nodes:
            if n.op == "exp2":
                graph.replace_uses(n.out, n.reads[0])  # drops the exp2: a wrong answer
                break

    pm = pipeline()
    for p in kp.codegen_passes()[:2]:  # schedule, lower
        pm.append(p)
    pm.append(FunctionPass("bad_codegen", "unrolls, and breaks the graph", bad_codegen))
    res = bisect_miscompile(small_graph(), inputs, pipeline=pm, run_program=False)
    assert not res.ok and res.stage == "pass" and res.pass_name == "bad_codegen"
    assert res.rewrite_index is None and res.max_abs_err > 0
    assert res.trace["bad_codegen"].kernel_rewrites and not res.trace["bad_codegen"].graph_rewrites


def test_debugger_steps_over_codegen_passes_and_records_their_kernel_programs():
    kp = kernel_passes
    pm = pipeline()
    for p in kp.codegen_passes():
        pm.append(p)
    dbg = PassDebugger(small_graph(), pm)
    dbg.run_to("unroll")
    rec = dbg.records[-1]
    assert rec.name == "unroll" and rec.kernel_rewrites and rec.changed  # finished in one step
    assert (
        rec.kernel_before is dbg.records[-2].kernel_after
        and rec.kernel_after is dbg.ctx.artifacts["kernel_ir"]
    )
    assert "unroll(" in rec.kernel_after.text() and "unroll(" not in rec.kernel_before.text()
    dbg.run_all()
    assert not dbg.records[-2].changed and dbg.records[-2].name == "memory_plan"


def _readme_snippet(first_line: str) -> str:
    """The README's ```python block that starts with ``first_line``."""
    from .lab_server import REPO

    text = (REPO / "README.md").read_text()
    for block in text.split("```python\n")[1:]:
        code = block.split("```", 1)[0]
        if code.startswith(first_line):
            return code
    raise AssertionError(f"no README snippet starts with {first_line!r}")


def test_readme_pass_debugger_snippet_runs_as_written():
    """The README's 'Debugging from code' block, exactly as printed, on a real graph and pipeline."""
    from caten_lab.frontend import Tensor, build_graph
    from caten_lab.notebook.compile_bridge import default_pipeline
    from caten_lab.passes import graph_pass

    code = _readme_snippet("from caten_lab.notebook.debugger import PassDebugger")
    x = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
    graph, arrays = build_graph([(x * 1.0 + 0.0).exp().sum(axis=1)])
    ran = []

    @graph_pass("my_cse", "the user's cse: records that it ran")
    def my_cse(g, ctx):
        ran.append(len(g))
        return g

    ns = {"graph": graph, "inputs": dict(arrays), "pm": default_pipeline(), "my_cse": my_cse}
    exec(compile(code, "README.md", "exec"), ns)
    dbg = ns["dbg"]
    names = [r.name for r in dbg.records]
    assert "simplify" not in names and "cse" not in names and "my_cse" in names and ran, names
    assert dbg.done and "c_source" in dbg.ctx.artifacts
    assert ns["bad"].ok, ns["bad"]
