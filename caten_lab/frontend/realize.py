"""The single place where a frontend graph runs: ``execute(graph, inputs, symbols)``.

It runs the configured backend (``config().backend``: the compiled C program by default, or the
NumPy interpreter with ``CATEN_BACKEND=numpy`` / ``settings(backend="numpy")``). It also checks the
symbol bindings (inferring unbound ones from input shapes) and emulates in-place state: an output
that is a ``store`` chain rooted at ``allocate(name=X)`` is written back into ``inputs[X]``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

from caten_lab.air.entry_checks import EntryChecks, entry_checks
from caten_lab.air.graph import Graph, state_outputs
from caten_lab.air.interpreter import interpret
from caten_lab.air.symbolic import Expr, evaluate, symbols_of
from caten_lab.config import config
from caten_lab.errors import SymbolError


def bind_symbols(
    graph: Graph, inputs: Mapping[str, np.ndarray], symbols: Mapping[str, int]
) -> dict[str, int]:
    """Check ``symbols`` against the graph and the input shapes; infer symbols a shape pins down.

    Raises SymbolError naming the symbol for a negative, non-integer, inconsistent or missing binding.
    """
    bound: dict[str, int] = {}
    for k, v in symbols.items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise SymbolError(f"symbol {k!r} must be bound to an int, got {v!r}")
        if v < 0:
            raise SymbolError(f"symbol {k!r} is bound to {v}, but symbols must be non-negative")
        bound[k] = int(v)
    needed: set[str] = set()
    inputs_nodes = graph.inputs()
    for node in inputs_nodes:  # a bare Sym dimension of an input is pinned by the array's shape
        arr = inputs.get(node.attrs.name)
        if arr is None:
            continue
        shape = node.attrs.shape
        if len(shape) != np.ndim(arr):
            continue
        for d, n in zip(shape, np.shape(arr)):
            if (
                isinstance(d, Expr)
                and len(d.terms) == 1
                and d.terms[0][1] == 1
                and len(d.terms[0][0]) == 1
                and isinstance(d.terms[0][0][0], str)
            ):
                s = d.terms[0][0][0]
                if s in bound and bound[s] != n:
                    raise SymbolError(
                        f"symbol {s!r} is bound to {bound[s]}, but input {node.attrs.name!r} has size {n} "
                        f"on that axis (shape {np.shape(arr)})",
                        where=node.source,
                    )
                bound[s] = n
    for node in graph:
        for d in node.shape:
            if isinstance(d, Expr):
                needed |= symbols_of(d)
        if node.op in ("view", "store", "const"):
            a = node.attrs
            for d in (getattr(a, "offset", 0), getattr(a, "value", 0), *getattr(a, "strides", ())):
                if isinstance(d, Expr):
                    needed |= symbols_of(d)
    missing = sorted(needed - set(bound))
    if missing:
        raise SymbolError(
            f"symbol(s) {', '.join(repr(m) for m in missing)} are not bound",
            hint="pass them by name, e.g. " + ", ".join(f"{m}=8" for m in missing),
        )
    for node in inputs_nodes:
        arr = inputs.get(node.attrs.name)
        if arr is None:
            continue
        want = tuple(evaluate(d, bound) for d in node.attrs.shape)
        if tuple(np.shape(arr)) != want:
            syms = sorted(set().union(*(symbols_of(d) for d in node.attrs.shape)))
            raise SymbolError(
                f"input {node.attrs.name!r} has shape {np.shape(arr)}, but its declared shape "
                f"{tuple(str(d) for d in node.attrs.shape)} is {want} under "
                f"{ {s: bound[s] for s in syms} }",
                where=node.source,
            )
    _check_windows(graph, bound)
    return bound


_CHECKS: OrderedDict[int, tuple[Graph, int, EntryChecks]] = OrderedDict()


def _check_windows(graph: Graph, bound: Mapping[str, int]) -> None:
    """Every symbolic view/store must stay inside its operand for these symbol values, and no dimension may
    be negative: the conditions a compiled Program checks at entry (caten_lab/air/entry_checks.py), derived
    once per graph object and version."""
    hit = _CHECKS.get(id(graph))
    if hit is None or hit[0] is not graph or hit[1] != graph.version:
        hit = (graph, graph.version, entry_checks(graph))  # the strong reference keeps id() unique
        _CHECKS[id(graph)] = hit
        while len(_CHECKS) > 16:
            _CHECKS.popitem(last=False)
    else:
        _CHECKS.move_to_end(id(graph))
    hit[2].check(bound)


def execute(
    graph: Graph, inputs: Mapping[str, np.ndarray], symbols: Mapping[str, int] | None = None
) -> list[np.ndarray]:
    """Run ``graph`` on ``inputs`` with ``symbols``; returns the outputs in ``graph.outputs`` order.

    State outputs (store chains over a named input) are also written into ``inputs[name]`` in place.
    """
    bound = bind_symbols(graph, inputs, symbols or {})
    if config().backend == "c":
        from caten_lab.compiler import run  # compiled once per graph structure, then cached

        return run(graph, inputs, bound)  # writes state outputs into inputs[name] in place itself
    results = interpret(graph, inputs, bound)
    assert isinstance(results, list)
    for i, name in state_outputs(graph).items():
        dst = inputs.get(name)
        if isinstance(dst, np.ndarray) and dst.flags.writeable:
            dst[...] = results[i]
    return results
