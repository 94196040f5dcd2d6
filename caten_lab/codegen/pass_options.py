"""Options of a codegen pass as a frozen dataclass: built from keyword arguments, checked, and turned
into the plain dict the compile-cache key is made of (``pass.options``)."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any, TypeVar

from caten_lab.errors import CompileError

T = TypeVar("T")


def check_options(opts: object) -> None:
    """Every ``bool`` field must be a bool and every ``int`` field a positive int."""
    for f in fields(opts):  # type: ignore[arg-type]
        v = getattr(opts, f.name)
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        name = f"{type(opts).__name__}.{f.name}"
        if kind == "bool" and not isinstance(v, bool):
            raise CompileError(f"{name} must be True or False, got {v!r}", hint=f"the defaults: {type(opts)()!r}")
        if kind == "int" and (not isinstance(v, int) or isinstance(v, bool) or v < 1):
            raise CompileError(f"{name} must be a positive int, got {v!r}",
                               hint=f"the defaults: {type(opts)()!r}")


def options_from(cls: type[T], base: T | None, kw: dict[str, Any], pass_name: str) -> T:
    """``base`` (or the defaults) with the keyword overrides ``kw``; an unknown name is a CompileError."""
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    for k in kw:
        if k not in known:
            raise CompileError(f"unknown option {k!r} of the {pass_name!r} pass", hint=f"its options: {', '.join(known)}")
    return replace(base if base is not None else cls(), **kw)  # type: ignore[type-var]
