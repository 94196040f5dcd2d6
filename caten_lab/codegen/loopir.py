"""The loop IR: what a kernel becomes before it is C. Statements nest (a For holds its body) and each
carries the AIR node ids it came from, so the C renderer can write a source map line by line.

Expressions are kept as C-syntax strings built by the lowering (index arithmetic goes through
``air.symbolic``, so symbolic sizes stay symbolic: symbols are ``int64_t`` parameters).
:meth:`LoopProgram.text` prints the IR in the FOR/ENDFOR, IF/ELSE/ENDIF, FUNCALL form.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Stmt:
    nodes: tuple[int, ...] = ()


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


@dataclass
class Param:
    name: str
    ctype: str
    pointer: bool = True
    const: bool = False
    buffer: str | None = None  # canonical role in the kernel (p0 = output)


@dataclass
class Function:
    name: str
    params: list[Param]
    body: list[Stmt]
    key: str = ""
    kernel_names: list[str] = field(default_factory=list)  # every scheduled kernel using this function
    checks: list[int] = field(default_factory=list)  # check tag -> position of the AIR node in the kernel
    work: object = 1  # estimated element operations per call (int or symbolic), for the parallel decision


@dataclass
class LoopProgram:
    functions: list[Function]
    entry: Function
    symbols: list[str]
    buffers: list[str]  # the entry's buffer argument order

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
