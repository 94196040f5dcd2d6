"""Bad inputs: codegen. See tests/bad_inputs/__init__.py for the case format.

The codegen passes over the kernel IR take their options as constructor arguments; an option out of
range (a zero tile width is a loop that never advances, a huge hoisting limit a stack array that
overflows a thread's stack) is refused when the pass is built. A loop pass or the renderer in a
pipeline without the lowering before it names the missing pass. The row-blocking and lane passes
(``RowBlock``, ``Lanes``) check their option dataclasses the same way, and name an unknown option.
"""

from __future__ import annotations

import numpy as np

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


def _matmul_graph() -> Graph:
    g = Graph()
    x = g.insert("allocate", [], shape=(3, 64), dtype="float32", name="x")
    w = g.insert("allocate", [], shape=(5, 64), dtype="float32", name="w")
    a3 = g.insert("view", [x], shape=(3, 5, 64), strides=(64, 0, 1))
    b3 = g.insert("view", [w], shape=(3, 5, 64), strides=(0, 64, 1))
    g.mark_output(g.insert("reduce", [g.insert("mul", [a3, b3])], op="add", axes=(2,)))
    return g


def rowblock_zero_rows() -> None:
    from caten_lab.codegen.rowblock import RowBlock

    RowBlock(rows=0)


def rowblock_tile_bytes_not_int() -> None:
    from caten_lab.codegen.rowblock import RowBlock

    RowBlock(tile_bytes="384k")


def rowblock_unknown_option() -> None:
    from caten_lab.codegen.rowblock import RowBlock

    RowBlock(tiles=4)


def rowblock_switch_not_bool() -> None:
    from caten_lab.codegen.rowblock_tiles import RowBlockOptions

    RowBlockOptions(lowbit_scratch="yes")


def lanes_fractional_width() -> None:
    from caten_lab.codegen.lanes import Lanes

    Lanes(vector_bytes=2.5)


def lanes_unknown_option() -> None:
    from caten_lab.codegen.lanes import Lanes

    Lanes(width=8)


def rowblock_before_lowering() -> None:
    """A pipeline with the tiling pass moved in front of the lowering that makes its input."""
    from caten_lab.compiler import compile, default_pipeline

    pm = default_pipeline()
    rb = pm.remove("rowblock")
    pm.insert("lower", rb, before=True)
    compile(_matmul_graph(), pipeline=pm)({"x": np.ones((3, 64), np.float32), "w": np.ones((5, 64), np.float32)})


def lanes_without_a_kernel_program() -> None:
    from caten_lab.codegen.lanes import Lanes
    from caten_lab.passes.base import PassContext

    Lanes().run(Graph(), PassContext())


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
    # rowblock / lanes (codegen/rowblock.py, codegen/lanes.py)
    ("codegen: rowblock rows=0", rowblock_zero_rows, CompileError, ("RowBlockOptions.rows", "positive int", "got 0")),
    ("codegen: rowblock tile_bytes text", rowblock_tile_bytes_not_int, CompileError,
     ("RowBlockOptions.tile_bytes", "positive int", "'384k'")),
    ("codegen: rowblock unknown option", rowblock_unknown_option, CompileError,
     ("unknown option 'tiles'", "'rowblock' pass", "tile_bytes")),
    ("codegen: rowblock switch not a bool", rowblock_switch_not_bool, CompileError,
     ("RowBlockOptions.lowbit_scratch", "True or False", "'yes'")),
    ("codegen: lanes vector_bytes 2.5", lanes_fractional_width, CompileError,
     ("LaneOptions.vector_bytes", "positive int", "2.5")),
    ("codegen: lanes unknown option", lanes_unknown_option, CompileError,
     ("unknown option 'width'", "'lanes' pass", "vector_bytes")),
    ("codegen: rowblock before lower", rowblock_before_lowering, CompileError,
     ("no kernel program", "kernel_ir", "'lower'")),
    ("codegen: lanes without kernel_ir", lanes_without_a_kernel_program, CompileError,
     ("no kernel program", "'lower'", "'lanes'")),
]
