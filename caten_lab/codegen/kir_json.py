"""Kernel-IR programs as plain JSON data (the artifact cache's format) and back.

Every node is a frozen dataclass of :mod:`caten_lab.codegen.kir`; it is written as
``{"k": class name, field: value, ...}`` with tuples as lists, dtypes as ``{"d": name}``, floats as
``{"f": repr}`` (NaN and infinities included) and empty origins left out. :func:`program_from_json`
rebuilds a program equal (``==``, origins included) to the one written. Unknown node kinds raise
ValueError (the cache then discards the entry).
"""

from __future__ import annotations

from dataclasses import fields, is_dataclass
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir

NODES: dict[str, type] = {c.__name__: c for c in (
    kir.Origin, kir.Const, kir.Var, kir.Check, kir.Load, kir.Alu, kir.Cast, kir.Call, kir.Addr, kir.Decl, kir.Assign,
    kir.Store, kir.Parallel, kir.For, kir.If, kir.While, kir.Break, kir.Continue, kir.Return, kir.Eval, kir.Label,
    kir.Goto, kir.Comment, kir.Param, kir.Function, kir.KernelCall, kir.Program)}


def to_data(x: Any) -> Any:
    if x is None or isinstance(x, bool | int | str):
        return x
    if isinstance(x, float):
        return {"f": repr(x)}
    if isinstance(x, DType):
        return {"d": x.value}
    if isinstance(x, tuple | list):
        return [to_data(v) for v in x]
    if is_dataclass(x) and type(x).__name__ in NODES:
        out: dict[str, Any] = {"k": type(x).__name__}
        for f in fields(x):
            v = getattr(x, f.name)
            if f.name == "origin" and not v:
                continue
            out[f.name] = to_data(v)
        return out
    raise TypeError(f"kernel IR: cannot encode {type(x).__name__} as JSON")


def from_data(d: Any) -> Any:
    if d is None or isinstance(d, bool | int | str):
        return d
    if isinstance(d, list):
        return tuple(from_data(v) for v in d)
    if isinstance(d, dict):
        if "f" in d and len(d) == 1:
            return float(d["f"])
        if "d" in d and len(d) == 1:
            return DType(d["d"])
        cls = NODES.get(d.get("k", ""))
        if cls is None:
            raise ValueError(f"kernel IR: unknown node kind {d.get('k')!r}")
        return cls(**{k: from_data(v) for k, v in d.items() if k != "k"})
    raise ValueError(f"kernel IR: cannot decode {type(d).__name__}")


def program_to_json(p: kir.Program) -> dict:
    return to_data(p)


def program_from_json(d: dict) -> kir.Program:
    p = from_data(d)
    if not isinstance(p, kir.Program):
        raise ValueError("kernel IR: not a program")
    return p


class DeferredProgram:
    """A cached kernel program decoded when first used: a warm compile needs only each function's
    ``checks`` and ``kernel_names`` (:func:`function_meta`), not the ~50,000 nodes of GPT-2's program.
    Attribute access and ``==`` decode it and act on the :class:`~caten_lab.codegen.kir.Program`."""

    __slots__ = ("_data", "_meta", "_program")

    def __init__(self, data: dict) -> None:
        if not isinstance(data, dict) or data.get("k") != "Program" or not isinstance(data.get("functions"), list):
            raise ValueError("kernel IR: not a program")
        self._data = data
        self._program: kir.Program | None = None
        try:  # read now, so a malformed entry is refused by the cache (ValueError), not met later
            self._meta = self._read_meta()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"kernel IR: malformed function table ({type(exc).__name__}: {exc})") from None

    def program(self) -> kir.Program:
        if self._program is None:
            self._program = program_from_json(self._data)
        return self._program

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # own slots not set yet (copy, pickle): never recurse through program()
            raise AttributeError(name)
        return getattr(self.program(), name)

    def __eq__(self, other: object) -> bool:
        other = other.program() if isinstance(other, DeferredProgram) else other
        return self.program() == other

    __hash__ = None  # type: ignore[assignment]

    def meta(self) -> dict[str, dict[str, Any]]:
        return self._meta

    def _read_meta(self) -> dict[str, dict[str, Any]]:
        out = {}
        for f in self._data["functions"]:
            m = {k: v for k, v in f.get("meta", ()) if k in ("checks", "kernel_names")}
            out[str(f["name"])] = {"checks": [int(c) for c in m.get("checks", ())],
                                   "kernel_names": [str(n) for n in m.get("kernel_names", ())]}
        return out


def function_meta(p: kir.Program | DeferredProgram) -> dict[str, dict[str, Any]]:
    """Function name -> ``{"checks": [...], "kernel_names": [...]}`` without decoding a deferred program."""
    if isinstance(p, DeferredProgram):
        return p.meta()
    return {f.name: {"checks": list(f.get("checks", ())), "kernel_names": list(f.get("kernel_names", ()))}
            for f in p.functions}
