"""The loop IR: what a kernel becomes before it is C. Statements nest (a For holds its body) and each
carries the AIR node ids it came from, so the C renderer can write a source map line by line.

Expressions are kept as C-syntax strings built by the lowering (index arithmetic goes through
``air.symbolic``, so symbolic sizes stay symbolic: symbols are ``int64_t`` parameters).
:meth:`LoopProgram.text` prints the IR in the FOR/ENDFOR, IF/ELSE/ENDIF, FUNCALL form.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from caten_lab.air.serialize import decode_value, encode_value


@dataclass
class Stmt:
    nodes: tuple[int, ...] = ()

    def to_json(self) -> dict:
        """``{"stmt": class name, field: value, ...}``, nested bodies included (the artifact cache's format)."""
        out: dict[str, Any] = {"stmt": type(self).__name__}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = [s.to_json() for s in v] if f.name in _BODIES else list(v) if f.name == "nodes" else v
        return out

    @staticmethod
    def from_json(d: dict) -> Stmt:
        cls = STMTS[d["stmt"]]
        kw = {k: ([Stmt.from_json(s) for s in v] if k in _BODIES else tuple(v) if k == "nodes" else v)
              for k, v in d.items() if k != "stmt"}
        return cls(**kw)


@dataclass
class For(Stmt):
    var: str = ""
    start: str = "0"
    stop: str = "0"
    step: str = "1"
    body: list[Stmt] = field(default_factory=list)
    pragma: str | None = None
    role: str = "loop"  # loop | stage | tile | vector | collapsed


@dataclass
class If(Stmt):
    cond: str = ""
    then: list[Stmt] = field(default_factory=list)
    orelse: list[Stmt] = field(default_factory=list)


@dataclass
class Assign(Stmt):
    """``target = expr``; declares ``target`` when ``ctype`` is set. ``index`` makes it ``target[index]``."""

    target: str = ""
    expr: str = ""
    ctype: str | None = None
    index: str | None = None
    array: str | None = None  # declares ``ctype target[array]`` (expr ignored)


@dataclass
class FunCall(Stmt):
    name: str = ""
    args: list[str] = field(default_factory=list)
    check_error: bool = False
    call_index: int = 0
    buffers: list[int] = field(default_factory=list)  # entry buffer index of each pointer argument


@dataclass
class Comment(Stmt):
    text: str = ""


_BODIES = frozenset({"body", "then", "orelse"})
STMTS: dict[str, type[Stmt]] = {c.__name__: c for c in (For, If, Assign, FunCall, Comment)}


@dataclass
class Param:
    name: str
    ctype: str
    pointer: bool = True
    const: bool = False
    buffer: str | None = None  # canonical role in the kernel (p0 = output)

    def to_json(self) -> dict:
        return {"name": self.name, "ctype": self.ctype, "pointer": self.pointer, "const": self.const,
                "buffer": self.buffer}

    @classmethod
    def from_json(cls, d: dict) -> Param:
        return cls(**d)


@dataclass
class Function:
    name: str
    params: list[Param]
    body: list[Stmt]
    key: str = ""
    kernel_names: list[str] = field(default_factory=list)  # every scheduled kernel using this function
    checks: list[int] = field(default_factory=list)  # check tag -> position of the AIR node in the kernel
    work: object = 1  # estimated element operations per call (int or symbolic), for the parallel decision

    def to_json(self) -> dict:
        return {"name": self.name, "params": [p.to_json() for p in self.params],
                "body": [s.to_json() for s in self.body], "key": self.key, "kernel_names": list(self.kernel_names),
                "checks": list(self.checks), "work": encode_value(self.work)}

    @classmethod
    def from_json(cls, d: dict) -> Function:
        return cls(str(d["name"]), [Param.from_json(p) for p in d["params"]], [Stmt.from_json(s) for s in d["body"]],
                   str(d["key"]), [str(k) for k in d["kernel_names"]], [int(c) for c in d["checks"]],
                   decode_value(d["work"]))


@dataclass
class LoopProgram:
    functions: list[Function]
    entry: Function
    symbols: list[str]
    buffers: list[str]  # the entry's buffer argument order

    def to_json(self) -> dict:
        """JSON-ready data (the artifact cache's format); :meth:`from_json` rebuilds an equal program."""
        return {"functions": [f.to_json() for f in self.functions], "entry": self.entry.to_json(),
                "symbols": list(self.symbols), "buffers": list(self.buffers)}

    @classmethod
    def from_json(cls, d: dict) -> LoopProgram:
        return cls([Function.from_json(f) for f in d["functions"]], Function.from_json(d["entry"]),
                   [str(s) for s in d["symbols"]], [str(b) for b in d["buffers"]])

    def text(self) -> str:
        out: list[str] = []
        for f in [*self.functions, self.entry]:
            out.append(f"FUNCTION {f.name}({', '.join(p.name for p in f.params)})")
            _text(f.body, 1, out)
            out.append("ENDFUNCTION")
        return "\n".join(out)


def _text(body: list[Stmt], depth: int, out: list[str]) -> None:
    pad = "  " * depth
    for s in body:
        if isinstance(s, For):
            tag = f" [{s.role}]" + (f" #{s.pragma}" if s.pragma else "")
            out.append(f"{pad}FOR {s.var} in [{s.start}, {s.stop}){tag}")
            _text(s.body, depth + 1, out)
            out.append(f"{pad}ENDFOR")
        elif isinstance(s, If):
            out.append(f"{pad}IF {s.cond}")
            _text(s.then, depth + 1, out)
            if s.orelse:
                out.append(f"{pad}ELSE")
                _text(s.orelse, depth + 1, out)
            out.append(f"{pad}ENDIF")
        elif isinstance(s, Assign):
            if s.array:
                out.append(f"{pad}{s.ctype} {s.target}[{s.array}]")
            else:
                tgt = f"{s.target}[{s.index}]" if s.index is not None else s.target
                out.append(f"{pad}{tgt} = {s.expr}")
        elif isinstance(s, FunCall):
            out.append(f"{pad}FUNCALL {s.name}({', '.join(s.args)})")
        elif isinstance(s, Comment):
            out.append(f"{pad}// {s.text}")


def walk(body: list[Stmt]):  # noqa: ANN201 - generator of Stmt
    for s in body:
        yield s
        if isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)
