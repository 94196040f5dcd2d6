"""Bad inputs: frontend (tensor ops). See tests/bad_inputs/__init__.py for the case format.

The silent-wrong-answer bugs of issue 13 (stores into derived tensors, min at the integer minimum,
argmax over NaN, dtypes of triu/tril/gather, clamp of NaN) are regular tests in
tests/frontend/test_fuzz_regressions.py; here are the inputs that must raise.
"""

from __future__ import annotations

import numpy as np

from bad_inputs import Case
from caten_lab.errors import ShapeError
from caten_lab.frontend import AxisError, DTypeError, SliceError, Tensor


def _x(shape: tuple = (2, 3), dtype: str = "float32") -> Tensor:
    return Tensor.from_numpy(np.arange(int(np.prod(shape))).reshape(shape).astype(dtype))


def setitem_wrong_shape() -> None:
    y = _x() * 1
    y[0] = _x((2, 2))


def setitem_value_of_higher_rank() -> None:
    y = _x() * 1
    y[0] = _x((2, 3))  # broadcasts with the (3,) window, but to (2, 3): it does not fit


def setitem_not_a_number() -> None:
    _x()[0] = "abc"


def setitem_list_value() -> None:
    _x()[0] = [1.0, 2.0, 3.0]


def setitem_into_view() -> None:
    _x().T[0] = 1.0


def setitem_out_of_range() -> None:
    _x()[5] = 1.0


def setitem_zero_step() -> None:
    _x()[::0] = 1.0


def setitem_tensor_index() -> None:
    _x()[Tensor.from_numpy(np.array([0, 1]))] = 1.0


def setitem_too_many_indices() -> None:
    _x()[0, 0, 0] = 1.0


def clamp_string_bound() -> None:
    _x().clamp(min="abc")


def clamp_list_bound() -> None:
    _x().clamp(0.0, [1.0, 2.0])


def clamp_no_bounds() -> None:
    _x().clamp()


def clamp_shape_mismatch() -> None:
    _x().clamp(min=_x((4,)))


def max_empty_axis() -> None:
    _x((0, 3)).max(0)


def min_empty_tensor() -> None:
    _x((2, 0), "int32").min()


def argmin_empty_axis() -> None:
    _x((3, 0)).argmin(1)


def argmax_axis_out_of_range() -> None:
    _x().argmax(2)


def gather_float_index() -> None:
    _x().gather(1, _x())


def gather_rank_mismatch() -> None:
    _x().gather(1, Tensor.from_numpy(np.zeros(3, np.int64)))


def triu_of_a_vector() -> None:
    _x((4,)).triu()


def floordiv_bool() -> None:
    _ = _x(dtype="bool") // _x(dtype="bool")


def from_numpy_int16() -> None:
    Tensor.from_numpy(np.zeros(3, np.int16))


def where_string_branch() -> None:
    (_x() > 1).where(_x(), "zero")


CASES: list[Case] = [
    ("frontend: setitem value shape", setitem_wrong_shape, ShapeError, ("setitem", "(2, 2) and (3,)", "broadcast")),
    ("frontend: setitem value rank", setitem_value_of_higher_rank, ShapeError, ("setitem", "does not fit the window")),
    ("frontend: setitem str value", setitem_not_a_number, DTypeError, ("setitem", "cannot assign a string")),
    ("frontend: setitem list value", setitem_list_value, DTypeError, ("setitem", "cannot assign a list")),
    ("frontend: setitem into a view", setitem_into_view, SliceError, ("cannot assign into a view",)),
    ("frontend: setitem index out of range", setitem_out_of_range, SliceError, ("index 5", "out of range")),
    ("frontend: setitem zero step", setitem_zero_step, SliceError, ("step cannot be zero",)),
    ("frontend: setitem tensor index", setitem_tensor_index, SliceError, ("indexing with a tensor",)),
    ("frontend: setitem too many indices", setitem_too_many_indices, SliceError, ("too many indices",)),
    ("frontend: clamp str bound", clamp_string_bound, DTypeError, ("clamp", "min must be a number", "'abc'")),
    ("frontend: clamp list bound", clamp_list_bound, DTypeError, ("clamp", "max must be a number", "list")),
    ("frontend: clamp without bounds", clamp_no_bounds, DTypeError, ("clamp", "give min, max or both")),
    ("frontend: clamp bound shape", clamp_shape_mismatch, ShapeError, ("cannot be broadcast",)),
    ("frontend: max of an empty axis", max_empty_axis, ShapeError, ("max", "axis 0", "empty")),
    ("frontend: min of an empty tensor", min_empty_tensor, ShapeError, ("min", "axis 1", "empty")),
    ("frontend: argmin of an empty axis", argmin_empty_axis, ShapeError, ("argmin", "empty")),
    ("frontend: argmax axis out of range", argmax_axis_out_of_range, AxisError, ("axis 2", "out of range")),
    ("frontend: gather float index", gather_float_index, DTypeError, ("gather", "integer tensor")),
    ("frontend: gather rank", gather_rank_mismatch, ShapeError, ("gather", "same rank")),
    ("frontend: triu of a vector", triu_of_a_vector, ShapeError, ("triu", "at least 2 axes")),
    ("frontend: floordiv of bools", floordiv_bool, DTypeError, ("floordiv", "bool")),
    ("frontend: from_numpy int16", from_numpy_int16, DTypeError, ("from_numpy", "unknown dtype", "int16")),
    ("frontend: where str branch", where_string_branch, DTypeError, ("where", "unsupported operand")),
]
