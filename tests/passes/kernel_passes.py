"""A small codegen pipeline for trace and Inspector tests: the real scheduler, a toy lowering to the
kernel IR (one function per scheduled kernel, a 2-deep loop nest, origins = the kernel's AIR nodes)
and three rule-table codegen passes that follow the contract (read ``ctx.artifacts["kernel_ir"]``,
write the new program back, record through ``ctx.rewrites``)."""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air import Graph
from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir_rewrite
from caten_lab.codegen.kir import (
    Alu,
    Const,
    For,
    Function,
    KernelCall,
    Load,
    Origin,
    Parallel,
    Param,
    Program,
    Store,
    Var,
)
from caten_lab.codegen.kir_walk import trip_count
from caten_lab.codegen.render import render_program
from caten_lab.passes import FunctionPass, PassContext, PassManager
from caten_lab.passes.schedule import ScheduleKernels

F32 = DType.float32
I64 = DType.int64


def _i(v: int) -> Const:
    return Const(v, I64)


def _dims(shape: tuple) -> tuple[int, int]:
    """(rows, cols): every dimension but the last, and the last (symbolic ones count as 1)."""
    dims = [d if isinstance(d, int) else 1 for d in shape] or [1]
    rows = 1
    for d in dims[:-1]:
        rows *= d
    return rows, dims[-1]


def lower_function(name: str, out: str, ins: list[str], shape: tuple, nodes: tuple[int, ...]) -> Function:
    rows, cols = _dims(shape)
    o = Origin(nodes)
    i, j = Var("i", I64), Var("j", I64)
    flat = Alu("add", (Alu("mul", (i, _i(cols)), I64), j), I64)
    value = Const(0.0, F32)
    for b in ins:
        value = Alu("add", (value, Load(b, flat, F32, origin=o)), F32, o)
    store = Store(out, flat, value, origin=o)
    inner = For("j", _i(0), _i(cols), _i(1), (store,), role="loop", origin=o)
    outer = For("i", _i(0), _i(rows), _i(1), (inner,), role="loop", origin=o)
    params = (Param(out, F32, buffer=out), *(Param(b, F32, const=True, buffer=b) for b in ins))
    return Function(name, params, (outer,), meta=(("kernel_names", (name,)), ("toy", True)), origin=o)


def toy_lower(graph: Graph, ctx: PassContext) -> None:
    """The first kernel program, from the schedule (what helper 'lower' does for real). A pipeline whose
    own lowering already made a kernel program keeps it (appended to the default pipeline, the toy
    passes then change nothing)."""
    if ctx.artifacts.get("kernel_ir") is not None:
        return
    sched = ctx.artifacts["schedule"]
    fns, calls = [], []
    buffers = list(sched.buffers)
    for k in sched.kernels:
        shape = sched.buffers[k.outputs[0]].shape
        fns.append(lower_function(k.name, k.outputs[0], list(k.inputs), tuple(shape), tuple(k.node_ids)))
        calls.append(KernelCall(k.name, tuple(buffers.index(b) for b in [*k.outputs, *k.inputs])))
    ctx.artifacts["kernel_ir"] = Program(tuple(fns), tuple(calls), tuple(sched.symbols), tuple(buffers))


def unroll_rule(body, i, rctx):  # noqa: ANN001, ANN201 - a kir_rewrite rule
    s = body[i]
    if isinstance(s, For) and s.unroll == 0 and rctx.loops:
        n = trip_count(s)
        if n is not None and 1 < n <= 64:
            return 1, (replace(s, unroll=min(n, 8)),)
    return None


def parallel_rule(body, i, rctx):  # noqa: ANN001, ANN201
    s = body[i]
    if isinstance(s, For) and s.parallel is None and not rctx.loops:
        return 1, (replace(s, parallel=Parallel(1, None)),)
    return None


def split_rule(body, i, rctx):  # noqa: ANN001, ANN201 - one loop becomes two halves (1 -> 2 statements)
    s = body[i]
    if isinstance(s, For) and s.role == "loop" and not rctx.loops:
        n = trip_count(s)
        if n is not None and n >= 4 and n % 2 == 0:
            half = _i(n // 2)
            return 1, (replace(s, stop=half, role="tile"), replace(s, start=half, role="tile"))
    return None


def rule_pass(name: str, rules: list) -> FunctionPass:
    def run(graph: Graph, ctx: PassContext) -> None:
        prog = ctx.artifacts["kernel_ir"]
        ctx.artifacts["kernel_ir"] = kir_rewrite.apply_rules(prog, rules, ctx.options, ctx.rewrites,
                                                             functions=lambda f: bool(f.get("toy")))

    return FunctionPass(name, f"test codegen pass {name}", run)


def render(graph: Graph, ctx: PassContext) -> None:
    """The lead's renderer over the final kernel program; the artifacts the Inspector reads."""
    r = render_program(ctx.artifacts["kernel_ir"])
    ctx.artifacts["c_source"] = r.source
    ctx.artifacts["source_map"] = r.source_map
    ctx.artifacts["kernel_lines"] = r.kernel_lines
    ctx.artifacts["line_paths"] = r.line_paths


def codegen_passes() -> list:
    return [
        ScheduleKernels(),
        FunctionPass("lower", "toy lowering to the kernel IR", toy_lower),
        rule_pass("split", [("split_half", split_rule)]),
        rule_pass("unroll", [("unroll_small", unroll_rule)]),
        rule_pass("parallel", [("parallel_outer", parallel_rule)]),
        FunctionPass("memory_plan", "reads the kernel program, changes nothing", lambda g, ctx: None),
        FunctionPass("render", "render the kernel program to C", render),
    ]


def toy_codegen_passes() -> list:
    """The toy lowering and its rule passes, to append to the compiler's default pipeline: the real
    program and its C are untouched, the trace gains codegen passes over a kernel program."""
    return [
        FunctionPass("toy_lower", "toy lowering of the schedule to the kernel IR", toy_lower),
        rule_pass("toy_split", [("split_half", split_rule)]),
        rule_pass("toy_unroll", [("unroll_small", unroll_rule)]),
        rule_pass("toy_parallel", [("parallel_outer", parallel_rule)]),
    ]


def kernel_pipeline(graph_passes: list | None = None, **kw) -> PassManager:  # noqa: ANN003
    return PassManager([*(graph_passes or []), *codegen_passes()], **kw)
