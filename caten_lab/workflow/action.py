"""``@action``: a typed Python function that runs as Python (interpreted) or compiles to C.

The decorator lowers the function to the action IR at once (so constructs outside the subset fail
at definition time, pointing at the user's line). Type inference runs on first use. Calling the
action checks the arguments against the annotations (dtypes, ranks, fixed and symbolic dims) and
then runs the original Python function; ``.compile()`` gives a native callable with the same
signature.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from caten_lab.errors import CatenError, ShapeError
from caten_lab.type_words import a_type
from caten_lab.workflow import ir
from caten_lab.workflow.cgen import render_c
from caten_lab.workflow.infer import TypeInfo, infer
from caten_lab.workflow.lower import lower_function
from caten_lab.workflow.to_kir import lower_actions
from caten_lab.workflow.types import ArrayType, ScalarType, boolean, f64

_INT_RANGE = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1), "u8": (0, 255)}


class Action:
    """A function in the action subset. Call it like the original function."""

    _is_caten_action = True
    host_linked = False  # host actions (workflow/host.py) set this: their C body calls host_<name>

    def __init__(self, fn: Callable) -> None:
        self.fn = fn
        functools.update_wrapper(self, fn)
        self.ir: ir.ActionIR = lower_function(fn)
        self._types: TypeInfo | None = None
        self._compiled: Any = None

    # ------------------------------------------------------------------ analysis
    @property
    def types(self) -> TypeInfo:
        """Type inference result (computed once; raises ActionTypeError at the offending line)."""
        if self._types is None:
            self._types = infer(self.ir, owner=self)
        return self._types

    def check(self) -> Action:
        """Type-check now (instead of on first call); returns self."""
        _ = self.types
        return self

    @property
    def params(self) -> list[tuple[str, ir.ParamType]]:
        return self.ir.params

    @property
    def return_type(self) -> ScalarType | None:
        return self.types.returns

    def __repr__(self) -> str:
        sig = ", ".join(f"{n}: {t!r}" for n, t in self.ir.params)
        return f"<action {self.ir.name}({sig})>"

    # ------------------------------------------------------------------ calls
    def bind(self, args: tuple) -> dict[str, int]:
        """Check ``args`` against the annotations; returns the symbolic dims they bind."""
        params = self.ir.params
        if len(args) != len(params):
            raise CatenError(
                f"{self.ir.name} takes {len(params)} argument(s), got {len(args)}",
                where=self.ir.where(self.ir.firstline),
            )
        symbols: dict[str, int] = {}
        for value, (name, t) in zip(args, params):
            if isinstance(t, ArrayType):
                _check_array(self.ir.name, name, t, value, symbols)
            else:
                _check_scalar(self.ir.name, name, t, value)
        return symbols

    def __call__(self, *args: Any) -> Any:
        """Interpreted mode: check the arguments, then run the original Python function."""
        _ = self.types
        self.bind(args)
        # scalars take their declared type (an f32 argument is rounded to float32, as in compiled mode)
        args = tuple(a if _native_ok(t, a) else t(a) for a, (_, t) in zip(args, self.ir.params))
        return self.fn(*args)

    def compile(self, **options: Any) -> Callable[..., Any]:
        """A native (C) callable with the same signature; cached on the action."""
        if self._compiled is None or options:
            # imported here, not for a cycle: the native backend needs cffi and a C compiler, which
            # interpreted actions do not (tokenizers/compiled.py probes for it)
            from caten_lab.workflow.native import compile_action

            compiled = compile_action(self, **options)
            if options:
                return compiled
            self._compiled = compiled
        return self._compiled

    def kernel_ir(self, safety: int = 1) -> Any:
        """The kernel-IR program (:class:`caten_lab.codegen.kir.Program`) of this action and the actions
        it calls; ``.text()`` prints it."""
        return lower_actions(self, safety=safety).program

    def c_source(self) -> str:
        """The C code this action (and the actions it calls) compile to."""
        return render_c(self).source


def action(fn: Callable) -> Action:
    """Decorator: make ``fn`` an action (see the module docstring)."""
    return Action(fn)


def _native_ok(t: object, value: object) -> bool:
    """True when ``value`` can be passed to the Python body unconverted (arrays, exact Python types)."""
    if isinstance(t, ArrayType):
        return True
    tv = type(value)
    if t is boolean:
        return tv is bool
    if t is f64:
        return tv is float
    return tv is int and not t.is_float  # type: ignore[union-attr]


def _check_scalar(fname: str, pname: str, t: ScalarType, value: object) -> None:
    ok: bool
    if t is boolean:
        ok = isinstance(value, bool | np.bool_)
    elif t.is_float:
        ok = isinstance(value, int | float | np.integer | np.floating) and not isinstance(
            value, bool | np.bool_
        )
    else:
        ok = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
        if ok:
            lo, hi = _INT_RANGE[t.name]
            if not lo <= int(value) <= hi:  # type: ignore[arg-type]
                raise CatenError(f"{fname}: argument {pname!r} = {value} does not fit in {t.name}")
    if not ok:
        raise CatenError(
            f"{fname}: argument {pname!r} must be {t.name}, got {a_type(value)}"
            + ("" if value is None else f" {value!r}"),
            hint=f"convert it, e.g. {t.name}(x)",
        )


def _check_array(fname: str, pname: str, t: ArrayType, value: object, symbols: dict[str, int]) -> None:
    if not isinstance(value, np.ndarray):
        raise CatenError(
            f"{fname}: argument {pname!r} must be a NumPy array {t!r}, got {a_type(value)}"
        )
    if value.dtype != np.dtype(t.dtype.np_dtype):
        raise ShapeError(
            f"{fname}: argument {pname!r} must have dtype {t.dtype.np_dtype}, got {value.dtype}",
            hint=f"use a.astype(np.{t.dtype.np_dtype})",
        )
    if value.ndim != len(t.dims):
        raise ShapeError(
            f"{fname}: argument {pname!r} must have {len(t.dims)} dimension(s) {t.dims}, "
            f"got shape {value.shape}"
        )
    for axis, (d, n) in enumerate(zip(t.dims, value.shape)):
        if isinstance(d, int):
            if d != n:
                raise ShapeError(f"{fname}: argument {pname!r} axis {axis} must be {d}, got {n}")
        elif symbols.setdefault(d, n) != n:
            raise ShapeError(
                f"{fname}: symbolic dim {d!r} is {symbols[d]} from an earlier argument but "
                f"{pname!r} axis {axis} is {n}"
            )
