"""The Pass protocol: a named, described graph transformation run by the PassManager."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from caten_lab.air.graph import Graph
from caten_lab.air.rewriter import Rewrite


@dataclass
class PassContext:
    """What a pass may read or record besides the graph.

    ``rewrites`` is a list while tracing (passes that use the rewriter pass it as ``record``) and
    None otherwise, so recording costs nothing when tracing is off. ``artifacts`` carries results
    later passes need (the schedule, the loop IR, the C source, ...), keyed by name.
    """

    tracing: bool = False
    rewrites: list[Rewrite] | None = None
    symbols: dict[str, int] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    artifacts: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@runtime_checkable
class Pass(Protocol):
    """A compiler pass. ``run`` may mutate and return ``graph`` or return a new graph."""

    name: str
    description: str

    def run(self, graph: Graph, ctx: PassContext) -> Graph: ...
