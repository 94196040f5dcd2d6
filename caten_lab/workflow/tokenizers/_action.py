"""Where the tokenizers get ``@action`` from.

The tokenizer bodies are written in the action subset so they can be compiled. When the action
DSL (``caten_lab.workflow.action``) is importable they are real actions (checked, compilable);
otherwise they stay plain Python functions, which is the same interpreted semantics.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

try:  # the DSL owner's decorator, when present
    from caten_lab.workflow.action import action as _dsl_action
except ImportError:  # pragma: no cover - only while the DSL is absent
    _dsl_action = None

ACTIONS: dict[str, Any] = {}


def action(fn: Callable) -> Any:
    """Make ``fn`` an action (when the DSL exists) and register it by name for the compiled runner."""
    wrapped = _dsl_action(fn) if _dsl_action is not None else fn
    ACTIONS[fn.__name__] = wrapped
    return wrapped


def entry_args(name: str, values: dict[str, Any]) -> tuple:
    """Arguments of action ``name`` taken by parameter name from ``values`` (tables + buffers)."""
    params = list(inspect.signature(ACTIONS[name]).parameters)
    missing = [p for p in params if p not in values]
    if missing:
        raise KeyError(f"{name}: no value for parameter(s) {missing}")
    return tuple(values[p] for p in params)
