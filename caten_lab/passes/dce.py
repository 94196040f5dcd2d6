"""Dead-code elimination: drop every node the graph outputs do not depend on (O(N + E))."""

from __future__ import annotations

from caten_lab.air.graph import Graph
from caten_lab.air.rewriter import Rewrite
from caten_lab.passes.base import FunctionPass, PassContext


def eliminate_dead_code(g: Graph, record: list[Rewrite] | None = None) -> int:
    """Remove nodes unreachable from the outputs; recorded as one rewrite. Returns how many were removed."""
    dead: list[int] = []
    g.prune(dead)
    dead.sort()  # ids grow with creation: list them in roughly program order
    if dead and record is not None:
        record.append(
            Rewrite(
                rule=f"dce: remove {len(dead)} dead node(s)",
                location="dce.py",
                matched=list(dead),
                produced=[],
                replaced=None,
                removed=list(dead),
                version=g.version,
            )
        )
    return len(dead)


def _run(g: Graph, ctx: PassContext) -> Graph:
    eliminate_dead_code(g, ctx.rewrites)
    g.sort()  # rewrite passes append new nodes at the end: leave the graph in topological order
    return g


def dce_pass() -> FunctionPass:
    return FunctionPass("dce", "remove nodes the outputs do not depend on (and sort the rest)", _run)
