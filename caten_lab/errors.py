"""One error type for everything caten_lab rejects, so users can catch it in one place."""

from __future__ import annotations

import linecache
import os
import sys


class CatenError(Exception):
    """An error a user can act on: what was wrong, where, and what to do.

    ``where`` is usually the user's ``file:line``; ``hint`` says how to fix it.
    """

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None) -> None:
        self.message = message
        self.where = where
        self.hint = hint
        text = message
        if where:
            text += f"\n  at {where}"
        if hint:
            text += f"\n  hint: {hint}"
        super().__init__(text)


class AirError(CatenError):
    """A malformed AIR node or graph (bad op, attribute, operand, broken index)."""


class ShapeError(CatenError):
    """Operands whose shapes or dtypes do not fit together."""


class SymbolError(CatenError):
    """A symbolic dimension that is unbound, negative, or bound inconsistently."""


class CompileError(CatenError):
    """A pass, the C renderer or the C compiler failed."""


class RuntimeCheckError(CatenError):
    """Generated code detected a violation (e.g. an out-of-bounds index) at run time."""


def where(filename: str, lineno: int, *, basename: bool = False) -> str:
    """``file:line`` as the user reads it: code typed in a notebook cell is ``In[3]:5`` (the editor's
    line of that cell, as IPython's own tracebacks name it), a file is its path (``basename``: its name).

    IPython's compiler gives each cell a temporary file name (``/tmp/ipykernel_1/1634179865.py``) and
    maps it back to the cell's execution count; this reads that mapping when IPython is running. The
    cell's lines are also cached under the ``In[n]`` name, so ``linecache.getline("In[3]", 5)`` works.
    """
    name = notebook_cell_name(filename)
    if name is not None:
        return f"{name}:{lineno}"
    return f"{os.path.basename(filename) if basename else filename}:{lineno}"


def notebook_cell_name(filename: str) -> str | None:
    """``In[n]`` for code compiled from notebook cell ``n`` (None: not a cell, or no IPython running)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    format_name = getattr(getattr(shell, "compile", None), "format_code_name", None)
    if format_name is None:
        return None
    try:
        label = format_name(filename)
    except Exception:  # a foreign compiler object: no cell names
        return None
    if not label:
        return None
    name = str(label[1])
    lines = linecache.cache.get(filename)
    if lines is not None and linecache.cache.get(name) is not lines:
        linecache.cache[name] = lines  # the cell's lines under the name shown
    return name
