"""The Pass protocol (a named, described graph transformation) and the helpers to write one quickly."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from caten_lab.air.graph import Graph
from caten_lab.air.rewriter import Rewrite, Rewriter, Rule
from caten_lab.passes.values import REWRITING


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


class FunctionPass:
    """A pass made from a plain function ``fn(graph, ctx) -> Graph | None`` (None: changed in place).

    This is how a user writes a pass in a notebook cell without defining a class.
    """

    __slots__ = ("name", "description", "fn")

    def __init__(self, name: str, description: str, fn: Callable[[Graph, PassContext], Graph | None]) -> None:
        self.name = name
        self.description = description
        self.fn = fn

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        out = self.fn(graph, ctx)
        return graph if out is None else out

    def __repr__(self) -> str:
        return f"<pass {self.name}: {self.description}>"


def graph_pass(
    name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], FunctionPass]:
    """Decorator turning ``def f(graph, ctx)`` into a :class:`FunctionPass`.

    ``name`` defaults to the function name, ``description`` to the first line of its docstring.
    """

    def deco(fn: Callable[[Graph, PassContext], Graph | None]) -> FunctionPass:
        doc = (fn.__doc__ or "").strip().splitlines()
        return FunctionPass(name or fn.__name__, description or (doc[0] if doc else fn.__name__), fn)

    return deco


class RewritePass:
    """A pass that applies rewrite rules to a fixed point, recording each rewrite when tracing."""

    __slots__ = ("name", "description", "rules", "_rewriter", "sort")

    def __init__(self, name: str, description: str, rules: Iterable[Rule], *, sort: bool = False) -> None:
        self.name = name
        self.description = description
        self.rules = list(rules)
        self._rewriter = Rewriter(self.rules, name=name)
        self.sort = sort  # re-sort afterwards (new nodes are appended at the end; dce sorts once for all)

    def run(self, graph: Graph, ctx: PassContext) -> Graph:
        token = REWRITING.set(graph)  # lets node-level guards of the rules see operand producers
        try:
            applied = self._rewriter.run(graph, record=ctx.rewrites)
        finally:
            REWRITING.reset(token)
        if applied and self.sort:
            graph.sort()
        return graph

    def __repr__(self) -> str:
        return f"<pass {self.name}: {self.description} ({len(self.rules)} rules)>"
