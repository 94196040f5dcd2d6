"""One error type for everything caten_lab rejects, so users can catch it in one place."""

from __future__ import annotations


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
