"""Frontend error types: each is a CatenError (and the matching Python built-in, so idioms keep working)."""

from __future__ import annotations

from caten_lab.air.shapes import fmt_shape
from caten_lab.errors import CatenError, ShapeError, SymbolError

__all__ = [
    "CatenError",
    "ShapeError",
    "SymbolError",
    "AxisError",
    "DTypeError",
    "SliceError",
    "StateDictError",
    "fmt_shape",
]


class AxisError(ShapeError, IndexError):
    """An axis that is out of range for the tensor's rank, or repeated."""


class DTypeError(ShapeError, TypeError):
    """Operand dtypes that do not fit the op (e.g. a float tensor where an integer index is needed)."""


class SliceError(ShapeError, IndexError):
    """A bad index or slice: out of range, zero step, or an unsupported index kind."""


class StateDictError(CatenError, KeyError):
    """A state_dict with missing or unexpected keys, or a tensor of the wrong shape."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return Exception.__str__(self)
