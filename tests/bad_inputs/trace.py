"""Bad inputs: reading codegen passes back from a trace (program_at, graph_at), the kernel-IR check of
verify mode, and the Inspector's kernel view. See tests/bad_inputs/__init__.py for the case format."""

from __future__ import annotations

from dataclasses import replace

from bad_inputs import Case
from caten_lab.air import Graph
from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir_rewrite
from caten_lab.codegen.kir import Const, For, Function, Param, Program, Store, Var
from caten_lab.codegen.kir_check import validate
from caten_lab.errors import CatenError, CompileError
from caten_lab.notebook.inspector import Inspector
from caten_lab.passes import FunctionPass, PassManager
from caten_lab.passes.trace import PassTrace

I64, F32 = DType.int64, DType.float32


def _graph() -> Graph:
    g = Graph()
    x = g.insert("allocate", [], shape=(4,), dtype="float32", name="x")
    g.mark_output(g.insert("exp2", [x]))
    return g


def _lower(graph: Graph, ctx) -> None:  # noqa: ANN001
    i = Var("i", I64)
    loop = For("i", Const(0, I64), Const(4, I64), Const(1, I64), (Store("out", i, Const(1.0, F32)),))
    ctx.artifacts["kernel_ir"] = Program((Function("k", (Param("out", F32),), (loop,)),))


def _unroll(body, i, rctx):  # noqa: ANN001, ANN202
    s = body[i]
    return (1, (replace(s, unroll=4),)) if isinstance(s, For) and not s.unroll else None


def _undefined(body, i, rctx):  # noqa: ANN001, ANN202
    s = body[i]
    return (1, (replace(s, value=Var("ghost", F32)),)) if isinstance(s, Store) and not isinstance(s.value, Var) else None


def _rules(name: str, rules: list) -> FunctionPass:
    def run(graph: Graph, ctx) -> None:  # noqa: ANN001
        ctx.artifacts["kernel_ir"] = kir_rewrite.apply_rules(ctx.artifacts["kernel_ir"], rules, {}, ctx.rewrites)

    return FunctionPass(name, f"kernel-IR rules {name}", run)


def _trace() -> PassTrace:
    pm = PassManager([FunctionPass("noop", "a graph pass", lambda g, ctx: None),
                      FunctionPass("lower", "toy lowering", _lower), _rules("unroll", [("unroll4", _unroll)])])
    return pm.run(_graph(), trace=True).trace


def program_at_rewrite_out_of_range() -> None:
    _trace().program_at("unroll", 2)


def program_at_negative_rewrite() -> None:
    _trace().program_at("unroll", -1)


def program_at_before_lowering() -> None:
    _trace().program_at("noop")


def program_at_before_the_first_program() -> None:
    _trace().program_at("lower", 0)


def program_at_bad_pass_index() -> None:
    _trace().program_at(7)


def program_at_unknown_pass() -> None:
    _trace().program_at("vectorize")


def graph_at_kernel_rewrite() -> None:
    _trace().graph_at("unroll", 1)


def kernel_check_catches_a_broken_pass() -> None:
    pm = PassManager([FunctionPass("lower", "toy lowering", _lower), _rules("ghost", [("ghost", _undefined)])],
                     verify=True, kernel_check=validate)
    pm.run(_graph(), trace=True)


def kernel_check_not_callable() -> None:
    PassManager([], verify=True, kernel_check="validate")


def _program_changed_outside_rewrites() -> None:
    def sneaky(graph: Graph, ctx) -> None:  # noqa: ANN001
        prog = ctx.artifacts["kernel_ir"]
        f = prog.functions[0]
        prog = kir_rewrite.replace_function(prog, "retag", replace(f, body=(replace(f.body[0], role="tile"),)),
                                            ctx.rewrites)
        g = prog.functions[0]
        prog = prog.with_functions([replace(g, body=(replace(g.body[0], role="rows"),))])  # not recorded
        ctx.artifacts["kernel_ir"] = kir_rewrite.replace_function(prog, "emptied", replace(g, body=()), ctx.rewrites)

    pm = PassManager([FunctionPass("lower", "toy lowering", _lower), FunctionPass("sneaky", "sneaky", sneaky)])
    pm.run(_graph(), trace=True).trace.program_at("sneaky", 2)


def inspector_unknown_kernel() -> None:
    Inspector(_trace(), static_fallback=False).show_kernel("k_nope")


def inspector_kernel_line_zero() -> None:
    Inspector(_trace(), static_fallback=False).show_kernel("k", 0)


def inspector_kernel_without_kernel_ir() -> None:
    tr = PassManager([FunctionPass("noop", "a graph pass", lambda g, ctx: None)]).run(_graph(), trace=True).trace
    Inspector(tr, static_fallback=False).show_kernel("k")


CASES: list[Case] = [
    ("trace: program_at rewrite index past the end", program_at_rewrite_out_of_range, CompileError,
     ("pass 'unroll' (#2) recorded 1 kernel-IR rewrites", "rewrite_index 2 is out of range", "use 0..1")),
    ("trace: program_at negative rewrite index", program_at_negative_rewrite, CompileError,
     ("rewrite_index -1 is out of range",)),
    ("trace: program_at of a graph pass", program_at_before_lowering, CompileError,
     ("pass 'noop' (#0) ran before the kernel IR existed", "kernel programs exist from pass 'lower' on")),
    ("trace: program_at before the first kernel program", program_at_before_the_first_program, CompileError,
     ("made the first kernel program: there is none before it", "trace.program_at('lower')")),
    ("trace: program_at pass index out of range", program_at_bad_pass_index, CompileError,
     ("pass index 7 is out of range: the trace has 3 passes",)),
    ("trace: program_at unknown pass", program_at_unknown_pass, CompileError,
     ("no pass named 'vectorize' in this trace", "passes: noop, lower, unroll")),
    ("trace: graph_at over kernel-IR rewrites", graph_at_kernel_rewrite, CompileError,
     ("recorded 0 graph rewrites", "stepped by trace.program_at", "trace.program_at('unroll', 1)")),
    ("trace: verify with kernel_check names the pass that broke the kernel IR", kernel_check_catches_a_broken_pass,
     CompileError, ("the kernel program is broken after pass 'ghost' (#1)", "ghost", "program_at")),
    ("trace: kernel_check not callable", kernel_check_not_callable, CompileError,
     ("kernel_check must be a function of the kernel program, not a string",)),
    ("trace: a rewrite that does not replay", _program_changed_outside_rewrites, CompileError,
     ("kernel-IR rewrite 2 ('emptied') of pass 'sneaky' (#1) does not replay", "outside its recorded rewrites")),
    ("inspector: unknown kernel", inspector_unknown_kernel, CatenError,
     ("show_kernel: no function 'k_nope'", "functions: k")),
    ("inspector: kernel line 0", inspector_kernel_line_zero, CatenError, ("line must be a listing line number >= 1",)),
    ("inspector: kernel view of a trace without kernel IR", inspector_kernel_without_kernel_ir, CatenError,
     ("no function 'k'", "no pass of this trace ran on a kernel program")),
]
