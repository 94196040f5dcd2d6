"""Workflows: typed @action functions (interpreted as Python or compiled to C) and their type system."""

from caten_lab.workflow.action import Action, action
from caten_lab.workflow.infer import ActionTypeError
from caten_lab.workflow.types import Array, Local, boolean, f32, f64, i32, i64, u8

__all__ = [
    "Action",
    "ActionTypeError",
    "Array",
    "Local",
    "action",
    "boolean",
    "f32",
    "f64",
    "i32",
    "i64",
    "u8",
]
