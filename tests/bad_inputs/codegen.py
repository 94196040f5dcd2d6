"""Bad inputs: codegen pass options and pipelines. See tests/bad_inputs/__init__.py for the case format."""

from __future__ import annotations

import numpy as np

from bad_inputs import Case
from caten_lab.air import Graph
from caten_lab.errors import CompileError


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
    from caten_lab.codegen.rowblock import RowBlockOptions

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
