"""Bad inputs: codegen. See tests/bad_inputs/__init__.py for the case format.

The codegen passes over the kernel IR take their options as constructor arguments; an option out of
range (a zero tile width is a loop that never advances, a huge hoisting limit a stack array that
overflows a thread's stack) is refused when the pass is built. A loop pass or the renderer in a
pipeline without the lowering before it names the missing pass.
"""

from __future__ import annotations

from bad_inputs import Case
from caten_lab.air import Graph, Sym, dtypes
from caten_lab.errors import CompileError


def _graph() -> Graph:
    g = Graph()
    x = g.insert("allocate", [], shape=(Sym("n"), 4), dtype=dtypes.float32, name="x")
    g.mark_output(g.insert("exp2", [x]))
    return g


def _pipeline(*names: str):  # noqa: ANN202
    def case() -> None:
        from caten_lab.codegen import passes
        from caten_lab.compiler import compile
        from caten_lab.passes.manager import PassManager
        from caten_lab.passes.schedule import ScheduleKernels

        made = {"parallel": passes.ParallelLoops, "simd": passes.SimdLoops, "render": passes.RenderC,
                "hoist": passes.HoistOperands}
        compile(_graph(), pipeline=PassManager([ScheduleKernels(), *(made[n]() for n in names)]))
    return case


def _option(cls: str, **kw: object):  # noqa: ANN202
    def case() -> None:
        from caten_lab.codegen import passes

        getattr(passes, cls)(**kw)
    return case


CASES: list[Case] = [
    ("codegen: loop pass before lowering", _pipeline("parallel", "render"), CompileError,
     ("'parallel'", "no kernel program", "run the 'lower' pass")),
    ("codegen: render before lowering", _pipeline("render"), CompileError, ("'render'", "no kernel program")),
    ("codegen: hoist before lowering", _pipeline("hoist", "simd", "render"), CompileError, ("'hoist'",)),
    ("codegen: zero matmul tile", _option("LowerKernels", vector_tile=0), CompileError,
     ("'lower'", "vector_tile=0", "[1, 1024]")),
    ("codegen: hoisting limit past the stack", _option("HoistOperands", hoist_max=10**7), CompileError,
     ("hoist_max=10000000", "[0, 16384]")),
    ("codegen: negative parallel threshold", _option("ParallelLoops", parallel_work=-1), CompileError,
     ("parallel_work=-1",)),
    ("codegen: unroll limit as text", _option("UnrollLoops", unroll_max="8"), CompileError, ("unroll_max='8'",)),
    ("codegen: unroll limit as bool", _option("UnrollLoops", unroll_max=True), CompileError, ("unroll_max=True",)),
]
