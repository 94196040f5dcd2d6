"""Queries over the kernel-IR program of a compiled action (tests assert on the IR, not on C text)."""

from __future__ import annotations

from caten_lab.codegen import kir as K
from caten_lab.codegen.kir_walk import exprs_of, walk


def nodes(program: K.Program, fn: str | None = None) -> list:
    """Every statement and expression node of function ``fn`` (all functions when None)."""
    out: list = []
    for f in program.functions:
        if fn is None or f.name == fn:
            for s in walk(f.body):
                out.append(s)
                out.extend(exprs_of(s))
    return out


def calls(program: K.Program, name: str, fn: str | None = None) -> list[K.Call]:
    """Calls of helper/function ``name`` (a prefix when it ends with ``_``)."""
    match = (lambda n: n.startswith(name)) if name.endswith("_") else (lambda n: n == name)
    return [x for x in nodes(program, fn) if isinstance(x, K.Call) and match(x.fn)]


def of_type(program: K.Program, tp: type, fn: str | None = None) -> list:
    return [x for x in nodes(program, fn) if isinstance(x, tp)]


def declared(program: K.Program, fn: str | None = None) -> set[str]:
    return {d.var for d in of_type(program, K.Decl, fn)}
