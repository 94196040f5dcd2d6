"""JSON as the strict validator reads it (rules JSON and DUPLICATE_KEY), the same grammar as the C reader.

Python's ``json`` keeps the last of duplicate keys, accepts NaN/Infinity and nests until the
interpreter's recursion limit; here: strict UTF-8, RFC 8259 numbers only, nesting at most
``MAX_DEPTH``, and a duplicate key in any object is an error (checked after the syntax, as in C).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from caten_lab.formats.rules import FormatError

MAX_DEPTH = 64  # the C reader's bound: objects and arrays nested deeper are refused
_HUGE = 1 << 80  # an integer literal too long to convert stands for "far too large" (INTEGER rule)


def _parse_int(text: str) -> int:
    if len(text) <= 24:
        return int(text)
    return -_HUGE if text.startswith("-") else _HUGE


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _depth(value: Any) -> int:
    """The nesting depth of containers (a top-level object is 1), without recursion."""
    best, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            best = max(best, d)
            stack.extend((x, d + 1) for x in v.values())
        elif isinstance(v, list):
            best = max(best, d)
            stack.extend((x, d + 1) for x in v)
    return best


def loads_strict(raw: bytes, where: str, error: Callable[..., FormatError], what: str) -> dict:
    """The top-level JSON object of ``raw``; ``error(message, rule=...)`` builds the exception."""
    dups: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict:
        out = dict(items)
        if len(out) != len(items) and not dups:
            seen: set[str] = set()
            dups.append(next(k for k, _ in items if k in seen or seen.add(k)))  # type: ignore[func-returns-value]
        return out

    try:
        text = raw.decode("utf-8")
        value = json.loads(text, object_pairs_hook=pairs, parse_int=_parse_int, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise error(f"{where}: the {what} is not valid JSON ({type(exc).__name__}: {str(exc)[:120]})",
                    rule="JSON") from None
    if not isinstance(value, dict):
        raise error(f"{where}: the {what} is not a JSON object", rule="JSON")
    if _depth(value) > MAX_DEPTH:
        raise error(f"{where}: the {what} nests deeper than {MAX_DEPTH} levels", rule="JSON")
    if dups:
        raise error(f"{where}: the key {dups[0][:200]!r} appears twice in one object of the {what}",
                    rule="DUPLICATE_KEY", hint="a JSON reader would silently keep only one of them")
    return value
