"""Graph passes and the machinery to run, edit and trace a pipeline of them.

Scheduling, lowering and rendering passes live in their own modules (``caten_lab.passes.schedule``, ...).
"""

from caten_lab.passes.base import FunctionPass, Pass, PassContext, RewritePass, graph_pass
from caten_lab.passes.const_fold import const_fold_pass
from caten_lab.passes.cse import cse_pass
from caten_lab.passes.dce import dce_pass
from caten_lab.passes.fold_views import fold_views_pass
from caten_lab.passes.graph_pipeline import graph_passes, graph_pipeline
from caten_lab.passes.manager import PassManager, PassResult
from caten_lab.passes.simplify import simplify_pass
from caten_lab.passes.trace import PassRecord, PassTrace
from caten_lab.passes.typecheck import typecheck_pass

__all__ = [
    "FunctionPass", "Pass", "PassContext", "RewritePass", "graph_pass", "PassManager", "PassResult",
    "PassRecord", "PassTrace", "graph_passes", "graph_pipeline", "typecheck_pass", "fold_views_pass",
    "const_fold_pass", "simplify_pass", "cse_pass", "dce_pass",
]
