"""The codegen passes of the default pipeline: lower (kernels -> loop IR), loop_opts, render (-> C).

They read ``ctx.artifacts['schedule']`` and leave the graph untouched; results go to
``ctx.artifacts`` under the contract's keys (``loop_ir``, ``c_source``, ``source_map``, ``kernel_lines``).
"""

from __future__ import annotations

from caten_lab.air.graph import Graph
from caten_lab.codegen.loop_opts import parallelize, unroll_small
from caten_lab.codegen.loopir import FunCall, Function, LoopProgram
from caten_lab.codegen.lower import lower_functions
from caten_lab.codegen.render_c import render_c
from caten_lab.errors import CompileError
from caten_lab.passes.base import PassContext
from caten_lab.passes.schedule import Schedule

ENTRY = "caten_run"


def build_loop_program(sched: Schedule, safety: int, threads: int = 1) -> tuple[LoopProgram, dict[str, list[int]]]:
    """Lower every unique kernel once and write the entry that calls every kernel in order."""
    funcs, fn_of = lower_functions(sched.kernels, sched.symbols, safety, threads)
    by_name = {f.name: f for f in funcs}
    buffers = list(sched.buffers)
    bidx = {b: i for i, b in enumerate(buffers)}
    calls = []
    kernel_nodes: dict[str, list[int]] = {}
    for ci, k in enumerate(sched.kernels):
        f = by_name[fn_of[k.name]]
        kernel_nodes.setdefault(f.name, list(k.node_ids))
        args = []
        for p, b in zip(f.params, k.params):
            args.append(f"({'const ' if p.const else ''}{p.ctype} *)b[{bidx[b]}]")
        args += ["sym", "err"]
        calls.append(FunCall(tuple(k.node_ids), f.name, args, check_error=safety >= 2, call_index=ci,
                             buffers=[bidx[b] for b in k.params]))
    entry = Function(ENTRY, [], calls)
    return LoopProgram(funcs, entry, sched.symbols, buffers), kernel_nodes


def _schedule(ctx: PassContext) -> Schedule:
    sched = ctx.artifacts.get("schedule")
    if sched is None:
        raise CompileError("no schedule in ctx.artifacts", hint="run the 'schedule' pass before lowering")
    return sched


class LowerKernels:
    name = "lower"
    description = "lower each unique kernel to loop IR (views -> index expressions, reduce stages, tiled matvec)"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        sched = _schedule(ctx)
        prog, kernel_nodes = build_loop_program(sched, int(ctx.options.get("safety", 1)), int(ctx.options.get("threads", 1)))
        ctx.artifacts["loop_ir"] = prog
        ctx.artifacts["kernel_nodes"] = kernel_nodes
        return graph


class LoopOpts:
    name = "loop_opts"
    description = "OpenMP parallel outer loops (collapsed where needed) and small unrolls"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        prog: LoopProgram = ctx.artifacts["loop_ir"]
        threads = int(ctx.options.get("threads", 1))
        par = sum(parallelize(f, threads) for f in prog.functions)
        unrolled = sum(unroll_small(f) for f in prog.functions)
        from caten_lab.codegen.rowblock import block_rows

        blocked = sum(block_rows(f) for f in prog.functions)  # prefill matmuls: register + cache tiles
        from caten_lab.codegen.lanes import split_lanes

        laned = sum(split_lanes(f) for f in prog.functions)  # short / low-bit dot products: lane partial sums
        from caten_lab.codegen.parallel import unnest_parallel

        for f in prog.functions:
            unnest_parallel(f)  # a parallel loop never sits inside another one (libgomp nested teams)
        ctx.artifacts["loop_opts"] = {"parallel_kernels": par, "unrolled_loops": unrolled, "row_blocked": blocked,
                                     "lane_split": laned}
        return graph


class RenderC:
    name = "render"
    description = "render loop IR to one C file with a per-line source map"

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        prog: LoopProgram = ctx.artifacts["loop_ir"]
        r = render_c(prog, ctx.artifacts.get("kernel_nodes", {}))
        ctx.artifacts["c_source"] = r.source
        ctx.artifacts["source_map"] = r.source_map
        ctx.artifacts["kernel_lines"] = r.kernel_lines
        ctx.artifacts["function_lines"] = r.function_lines
        return graph


def codegen_passes() -> list:
    from caten_lab.passes.memory_plan import PlanMemory
    from caten_lab.passes.schedule import ScheduleKernels

    return [ScheduleKernels(), LowerKernels(), LoopOpts(), PlanMemory(), RenderC()]
