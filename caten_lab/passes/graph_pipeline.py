"""The default list of graph-level (AIR -> AIR) passes, in the order the compiler runs them.

typecheck first (catch a bad graph before anything depends on it), then view folding (broadcast
consts become consts, view chains collapse), constant folding, algebraic simplification, CSE
(after simplification has made equal things look equal), the transposed copies of matmul operands
that many output rows share (passes/transpose_operands.py), the matmuls computed transposed
(passes/transpose_matmul.py), and DCE last to sweep what the others left
unused.
"""

from __future__ import annotations

from caten_lab.passes.base import Pass
from caten_lab.passes.const_fold import const_fold_pass
from caten_lab.passes.cse import cse_pass
from caten_lab.passes.dce import dce_pass
from caten_lab.passes.fold_views import fold_views_pass
from caten_lab.passes.manager import PassManager
from caten_lab.passes.simplify import simplify_pass
from caten_lab.passes.transpose_matmul import transpose_matmul_pass
from caten_lab.passes.transpose_operands import transpose_operands_pass
from caten_lab.passes.typecheck import typecheck_pass


def graph_passes(*, fast_math: bool = False, typecheck: bool = True) -> list[Pass]:
    """Fresh instances of the default graph passes (edit the list freely)."""
    passes: list[Pass] = [typecheck_pass()] if typecheck else []
    passes += [
        fold_views_pass(),
        const_fold_pass(),
        simplify_pass(fast_math=fast_math),
        cse_pass(),
        transpose_operands_pass(),
        transpose_matmul_pass(),
        dce_pass(),
    ]
    return passes


def graph_pipeline(*, verify: bool = False, fast_math: bool = False) -> PassManager:
    """A PassManager over :func:`graph_passes`."""
    return PassManager(graph_passes(fast_math=fast_math), verify=verify)
