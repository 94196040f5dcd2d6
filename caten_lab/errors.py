"""One error type for everything caten_lab rejects, so users can catch it in one place."""

from __future__ import annotations

import linecache
import os
import sys
from collections.abc import Callable
from typing import Any


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
    if filename in _on_disk:  # a file (a script, a module): never a cell
        return None
    format_name = _cell_namer()
    if format_name is None:
        return None
    try:
        label = format_name(filename)
    except Exception:  # a foreign compiler object: no cell names
        return None
    if not label:
        if os.path.isfile(filename):  # cells have names only (their source lives in linecache)
            _on_disk.add(filename)
        return None
    name = str(label[1])
    lines = linecache.cache.get(filename)
    if lines is not None and linecache.cache.get(name) is not lines:
        linecache.cache[name] = lines  # the cell's lines under the name shown
    return name


_on_disk: set[str] = set()
_namer: list = []  # the running IPython shell's code namer, once found (a kernel has one shell for life)


def _cell_namer() -> Callable[[str], Any] | None:
    """IPython's ``compile.format_code_name`` (None without a running shell). Looking the shell up
    costs microseconds (``user_source`` runs for every op), so a found one is kept."""
    if _namer:
        return _namer[0]
    module = sys.modules.get("IPython.core.interactiveshell")  # never imported here: only read if loaded
    shells = getattr(module, "InteractiveShell", None)
    if shells is None or not shells.initialized():
        return None
    namer = getattr(getattr(shells.instance(), "compile", None), "format_code_name", None)
    if namer is not None:
        _namer.append(namer)
    return namer
