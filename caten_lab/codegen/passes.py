"""The codegen passes of the default pipeline: lower (kernels -> kernel IR), the loop passes over the
kernel IR (collapse, hoist, simd, transpose_tiles, parallel, qgemm, unroll, row_jam, rowblock, lanes, unnest_parallel,
team),
render (-> C).

Each reads ``ctx.artifacts['kernel_ir']`` (a :class:`~caten_lab.codegen.kir.Program`) and writes the
new program back; the graph is left untouched. Loop passes are rule tables applied by
:func:`~caten_lab.codegen.kir_rewrite.apply_rules`, each firing recorded in ``ctx.rewrites`` while
tracing. A pass's options are constructor arguments (``options``: what the compile cache keys on),
merged over ``ctx.options`` (``safety``, ``threads``) at run time.
"""

from __future__ import annotations

from typing import Any

from caten_lab.air.graph import Graph
from caten_lab.codegen.collapse import COLLAPSE_RULES
from caten_lab.codegen.hoist import HOIST_MAX, HOIST_RULES
from caten_lab.codegen.kir import Program
from caten_lab.codegen.kir_rewrite import apply_rules
from caten_lab.codegen.lanes import Lanes
from caten_lab.codegen.loop_opts import SIMD_RULES, UNROLL_MAX, UNROLL_RULES
from caten_lab.codegen.lower import LowerOptions
from caten_lab.codegen.lower_program import build_program, kernel_nodes
from caten_lab.codegen.parallel import PARALLEL_RULES, PARALLEL_WORK, UNNEST_RULES
from caten_lab.codegen.qgemm_tiles import QGEMM_RULES
from caten_lab.codegen.render import render_program
from caten_lab.codegen.row_jam import JAM_ROWS, ROW_JAM_RULES
from caten_lab.codegen.rowblock import RowBlock
from caten_lab.codegen.sgemm_tiles import SGEMM_RULES
from caten_lab.codegen.team import team_program
from caten_lab.codegen.tile_order import TILE_ORDER_RULES
from caten_lab.codegen.transpose_tiles import TRANSPOSE_RULES, TRANSPOSE_TILE
from caten_lab.errors import CompileError
from caten_lab.passes.base import PassContext
from caten_lab.passes.memory_plan import PlanMemory
from caten_lab.passes.schedule import Schedule, ScheduleKernels

ENTRY = "caten_run"


def int_option(pass_name: str, option: str, value: object, lo: int, hi: int) -> int:
    """``value`` when it is an int in ``[lo, hi]``, else a CompileError naming the pass and the option."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise CompileError(f"codegen pass {pass_name!r}: option {option}={value!r} must be an int in [{lo}, {hi}]",
                           hint=f"construct the pass with {option}=<int between {lo} and {hi}>")
    return value


def kernel_program(ctx: PassContext, name: str) -> Program:
    prog = ctx.artifacts.get("kernel_ir")
    if prog is None:
        raise CompileError(f"codegen pass {name!r}: no kernel program in ctx.artifacts['kernel_ir']",
                           hint="run the 'lower' pass before the loop passes and 'render'")
    return prog


class LowerKernels:
    name = "lower"
    description = "lower each unique kernel to the kernel IR (views -> index expressions, reduce stages, tiled matmul)"

    def __init__(self, *, vector_tile: int = 32) -> None:
        # the tile is a local array of that many accumulators, and the tile loop's step
        self.options: dict[str, Any] = {"vector_tile": int_option(self.name, "vector_tile", vector_tile, 1, 1024)}

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        sched: Schedule | None = ctx.artifacts.get("schedule")
        if sched is None:
            raise CompileError("no schedule in ctx.artifacts", hint="run the 'schedule' pass before lowering")
        o = self.options
        opts = LowerOptions(int(ctx.options.get("safety", 1)), int(o["vector_tile"]))
        prog = build_program(sched, opts)
        ctx.artifacts["kernel_ir"] = prog
        ctx.artifacts["kernel_nodes"] = kernel_nodes(prog)
        return graph


class KernelRulePass:
    """A codegen pass made of a rule table over the kernel program."""

    name = "kernel_rules"
    description = "rules over the kernel IR"
    rules: tuple = ()

    def __init__(self, **options: Any) -> None:
        self.options: dict[str, Any] = options

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        prog = kernel_program(ctx, self.name)
        opts = {**ctx.options, **self.options}
        ctx.artifacts["kernel_ir"] = apply_rules(prog, self.rules, opts, ctx.rewrites)
        return graph

    def __repr__(self) -> str:
        return f"<pass {self.name}: {self.description} ({len(self.rules)} rules)>"


class CollapseLoops(KernelRulePass):
    name = "collapse"
    description = "one loop over every element for elementwise nests whose accesses are all contiguous"
    rules = COLLAPSE_RULES


class HoistOperands(KernelRulePass):
    name = "hoist"
    description = "compute the output-independent operand of a dot product once, before the output loop"
    rules = HOIST_RULES

    def __init__(self, *, hoist_max: int = HOIST_MAX) -> None:
        # each hoisted operand is a local (stack) array of up to hoist_max elements per thread: the
        # default is the most a kernel's worker threads can hold for every operand of a kernel
        super().__init__(hoist_max=int_option(self.name, "hoist_max", hoist_max, 0, HOIST_MAX))


class SimdLoops(KernelRulePass):
    name = "simd"
    description = "mark float sum loops 'simd reduction(+)' and the matmul tile's lane loops 'simd'"
    rules = SIMD_RULES


class TileTransposes(KernelRulePass):
    name = "transpose_tiles"
    description = "transposing copies walk square tiles (each cache line of the source read while in cache)"
    rules = TRANSPOSE_RULES

    def __init__(self, *, tile: int = TRANSPOSE_TILE) -> None:
        super().__init__(tile=int_option(self.name, "tile", tile, 2, 256))


class ParallelLoops(KernelRulePass):
    name = "parallel"
    description = "OpenMP parallel outer loops (collapsed where needed) behind a work threshold"
    rules = PARALLEL_RULES

    def __init__(self, *, parallel_work: int = PARALLEL_WORK) -> None:
        super().__init__(parallel_work=int_option(self.name, "parallel_work", parallel_work, 0, 1 << 62))


class QGemmTiles(KernelRulePass):
    name = "qgemm"
    description = "quantized matmuls over many rows in tiles: one helper call per (weight rows x activation rows) tile"
    rules = QGEMM_RULES

    def run(self, graph: Graph, ctx: PassContext) -> Graph:  # not into the original nest it keeps for short prompts
        prog = kernel_program(ctx, self.name)
        ctx.artifacts["kernel_ir"] = apply_rules(prog, self.rules, {**ctx.options, **self.options}, ctx.rewrites,
                                                 descend_into_new=False)
        return graph


class UnrollLoops(KernelRulePass):
    name = "unroll"
    description = "unroll innermost loops with a small constant trip count"
    rules = UNROLL_RULES

    def __init__(self, *, unroll_max: int = UNROLL_MAX) -> None:
        super().__init__(unroll_max=int_option(self.name, "unroll_max", unroll_max, 0, 64))


class JamRows(KernelRulePass):
    name = "row_jam"
    description = "vector-tile matmuls: several output rows share each load of the other operand (unroll-and-jam)"
    rules = ROW_JAM_RULES

    def __init__(self, *, rows: int = JAM_ROWS) -> None:
        super().__init__(rows=int_option(self.name, "rows", rows, 1, 16))

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        # not into what a jam produced: its fallback (the original nest, for a short symbolic row count)
        # would match again
        prog = kernel_program(ctx, self.name)
        opts = {**ctx.options, **self.options}
        ctx.artifacts["kernel_ir"] = apply_rules(prog, self.rules, opts, ctx.rewrites, descend_into_new=False)
        return graph


class SgemmTiles(KernelRulePass):
    name = "sgemm"
    description = "a jammed float32 matmul tile's reduction as one call of a register-tile helper (sgemm.h)"
    rules = SGEMM_RULES


class TileOrder(KernelRulePass):
    name = "tile_order"
    description = "a matmul whose whole other operand fits in L2: column tiles inside the row loops"
    rules = TILE_ORDER_RULES


class UnnestParallel(KernelRulePass):
    name = "unnest_parallel"
    description = "never a parallel loop inside another: choose one of them at run time"
    rules = UNNEST_RULES


class TeamLoops:
    name = "team"
    description = "one parallel region per run: parallel loops as each thread's share, shared writes on one thread, barriers"
    options: dict[str, Any] = {}

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        prog = kernel_program(ctx, self.name)
        if int(ctx.options.get("threads", 1)) > 1:
            ctx.artifacts["kernel_ir"] = team_program(prog, ctx.rewrites)
        return graph


class RenderC:
    name = "render"
    description = "render the kernel IR to one C file with a per-line source map"
    options: dict[str, Any] = {}

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        r = render_program(kernel_program(ctx, self.name), ENTRY)
        ctx.artifacts["c_source"] = r.source
        ctx.artifacts["source_map"] = r.source_map
        ctx.artifacts["kernel_lines"] = r.kernel_lines
        ctx.artifacts["function_lines"] = r.function_lines
        ctx.artifacts["c_units"] = r.units  # what a parallel build composes translation units from
        ctx.artifacts["line_paths"] = r.line_paths  # C line -> (function, kernel-IR statement path): the Inspector
        return graph


def codegen_passes() -> list:
    return [ScheduleKernels(), LowerKernels(), CollapseLoops(), HoistOperands(), SimdLoops(), TileTransposes(),
            ParallelLoops(), QGemmTiles(), UnrollLoops(),
            JamRows(), SgemmTiles(), TileOrder(), RowBlock(), Lanes(), UnnestParallel(), TeamLoops(), PlanMemory(), RenderC()]


def pipeline_options(passes: list) -> tuple:
    """(pass name, sorted options) of every pass: what a compile-cache key includes."""
    return tuple((p.name, tuple(sorted(getattr(p, "options", {}).items()))) for p in passes)
