"""Value ids: the names of the values AIR nodes write and read.

A value id is an ``int`` underneath, so the graph's indices are int-keyed dicts. Python hashes an
int to itself: ids handed out in sequence land in neighbouring hash-table slots and a pass walking
the graph touches memory in order. With ``str`` ids ("v123") every lookup hit a random slot, and
past ~10^5 values each one was a cache miss (graph queries grew as n^1.25 instead of n; see
``bench/air_scaling.py``).

It prints as ``v123`` and is never equal to a plain ``int``: a node's operands mix value ids and
literal scalars, and ``Value(1)`` must not be mistaken for the literal ``1``. (``1.0 == Value(1)``
is still True, because ``float.__eq__`` answers first: tell values from literals by class, with
:func:`is_value`, never by ``==``.)
"""

from __future__ import annotations

from typing import Any

from caten_lab.errors import AirError


class Value(int):
    """A value id (see the module docstring): an int that prints as ``v<N>``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "v" + int.__repr__(self)

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format("v" + int.__repr__(self), spec)

    def __eq__(self, other: object) -> bool:
        return other.__class__ is Value and int.__eq__(self, other)  # type: ignore[arg-type]

    def __ne__(self, other: object) -> bool:
        return other.__class__ is not Value or int.__ne__(self, other)  # type: ignore[arg-type]

    __hash__ = int.__hash__  # the C hash of int: defining __eq__ would otherwise drop it

    def __reduce__(self) -> tuple[Any, ...]:
        return (Value, (int(self),))

    @staticmethod
    def parse(text: str) -> Value:
        """``"v12"`` -> ``Value(12)``: for value ids typed by hand or read from JSON."""
        if text.__class__ is Value:
            return text  # type: ignore[return-value]
        if isinstance(text, str) and text[:1] == "v":
            digits = text[2:] if text[1:2] == "-" else text[1:]
            if digits.isascii() and digits.isdigit():
                return Value(int(text[1:]))
        raise AirError(
            f"{text!r} is not a value id",
            hint="value ids look like v12: the ones Graph.insert returns, or Node.out",
        )


def is_value(read: object) -> bool:
    """True for a value id, False for a literal scalar operand."""
    return read.__class__ is Value


def as_value(value: object) -> Value:
    """A value id from a Value or its printed form ``"v12"`` (what users type in a notebook)."""
    return value if value.__class__ is Value else Value.parse(value)  # type: ignore[arg-type, return-value]
