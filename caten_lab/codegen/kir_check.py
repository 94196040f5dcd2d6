"""The kernel-IR validator: scopes, types and index types, checked after every codegen pass in tests.

It reports the first problem as a :class:`~caten_lab.errors.CompileError` naming the function, the
statement (as printed by the listing) and its origin, so a pass that breaks the IR is caught at the
pass, not as a C compiler error or a wrong number later.
"""

from __future__ import annotations

from dataclasses import fields

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import (
    ALU_OPS,
    BODIES,
    COMPARE,
    Addr,
    Alu,
    Assign,
    Call,
    Cast,
    Const,
    Decl,
    Expr,
    For,
    Function,
    Goto,
    Label,
    Load,
    Program,
    Stmt,
    Store,
    Var,
    simple_text,
)
from caten_lab.codegen.kir_walk import exprs_of
from caten_lab.errors import CompileError

INDEX = DType.int64
_SAME_TYPE = frozenset({"add", "sub", "mul", "div", "idiv", "mod", "floordiv", "floormod", "max", "min", "and", "or",
                        "xor"})


def validate(program: Program, helpers: frozenset[str] = frozenset()) -> None:
    """Raise CompileError at the first broken invariant: every variable defined before use in scope,
    loads and stores of known buffers with int64 indices, ALU operand types that agree, known ops."""
    names = {f.name for f in program.functions} | helpers
    for f in program.functions:
        _Checker(f, names).run()


class _Checker:
    def __init__(self, f: Function, functions: set[str] | frozenset[str]) -> None:
        self.f = f
        self.functions = functions
        self.buffers = {p.name: p.dtype for p in f.params if p.pointer}
        self.labels = {s.name for s in _all(f.body) if isinstance(s, Label)}

    def fail(self, msg: str, s: Stmt | None) -> None:
        where = f" at `{_line(s)}`" + (f" (from {s.origin.label()})" if s is not None and s.origin else "") \
            if s is not None else ""
        raise CompileError(f"kernel IR of {self.f.name}: {msg}{where}",
                           hint="the codegen pass that ran last produced this; trace.program_at(...) shows it")

    def run(self) -> None:
        scope = {p.name: p.dtype for p in self.f.params if not p.pointer}
        self.body(self.f.body, [scope])

    def body(self, body: tuple[Stmt, ...], scopes: list[dict]) -> None:
        scopes.append({})
        for s in body:
            self.stmt(s, scopes)
        scopes.pop()

    def lookup(self, name: str, scopes: list[dict]) -> DType | None:
        for sc in reversed(scopes):
            if name in sc:
                return sc[name]
        return None

    def stmt(self, s: Stmt, scopes: list[dict]) -> None:
        if isinstance(s, For):
            for e in (s.start, s.stop, s.step):
                self.expr(e, scopes, s, index=True)
            inner = [*scopes, {s.var: INDEX}]
            if s.parallel is not None and s.parallel.cond is not None:
                self.expr(s.parallel.cond, scopes, s)
            self.body(s.body, inner)
            return
        if isinstance(s, Decl):
            if s.init is not None:
                self.expr(s.init, scopes, s)
            if s.size is not None:
                self.expr(s.size, scopes, s, index=True)
            if s.var in scopes[-1]:
                self.fail(f"{s.var!r} is declared twice in one block", s)
            scopes[-1][s.var] = s.dtype
            if s.size is not None:
                self.buffers[s.var] = s.dtype
            return
        if isinstance(s, Assign):
            if self.lookup(s.var, scopes) is None:
                self.fail(f"assignment to undeclared {s.var!r}", s)
        elif isinstance(s, Store):
            if s.buf not in self.buffers:
                self.fail(f"store into unknown buffer {s.buf!r}", s)
            self.expr(s.index, scopes, s, index=True)
        elif isinstance(s, Goto) and s.name not in self.labels:
            self.fail(f"goto to undefined label {s.name!r}", s)
        for e in _own_exprs(s):
            self.expr(e, scopes, s)
        for f in BODIES.get(type(s), ()):
            self.body(getattr(s, f), scopes)

    def expr(self, e: Expr, scopes: list[dict], s: Stmt, index: bool = False) -> None:
        if index and e.dtype != INDEX:
            self.fail(f"index/bound expression has type {e.dtype.value}, not int64", s)
        for x in exprs_of(e):
            if isinstance(x, Var) and self.lookup(x.name, scopes) is None and x.name not in self.buffers:
                self.fail(f"{x.name!r} is used but not defined", s)
            elif isinstance(x, Load | Addr):
                if x.buf not in self.buffers:
                    self.fail(f"load of unknown buffer {x.buf!r}", s)
                if isinstance(x, Load) and x.index.dtype != INDEX:
                    self.fail(f"index of {x.buf} has type {x.index.dtype.value}, not int64", s)
            elif isinstance(x, Alu):
                self.alu(x, s)
            elif isinstance(x, Call) and x.fn not in self.functions and not x.fn.startswith("cl_"):
                self.fail(f"call of unknown function {x.fn!r}", s)
            elif isinstance(x, Cast | Const):
                continue

    def alu(self, x: Alu, s: Stmt) -> None:
        if x.op not in ALU_OPS:
            self.fail(f"unknown op {x.op!r}", s)
        if x.op in COMPARE and x.dtype != DType.bool:
            self.fail(f"comparison {x.op} typed {x.dtype.value}, not bool", s)
        if x.op == "where":
            if x.args[0].dtype != DType.bool or x.args[1].dtype != x.args[2].dtype:
                self.fail("where(cond, a, b) needs a bool condition and equal arm types", s)
        elif x.op in _SAME_TYPE and any(a.dtype != x.dtype for a in x.args):
            got = ", ".join(a.dtype.value for a in x.args)
            self.fail(f"{x.op} of ({got}) typed {x.dtype.value}: operand types must agree", s)


def _own_exprs(s: Stmt) -> list[Expr]:
    out = []
    for f in fields(s):
        v = getattr(s, f.name)
        if isinstance(v, Expr) and not (isinstance(s, Store) and f.name == "index"):
            out.append(v)
    return out


def _all(body: tuple[Stmt, ...]):  # noqa: ANN202
    for s in body:
        yield s
        for f in BODIES.get(type(s), ()):
            yield from _all(getattr(s, f))


def _line(s: Stmt | None) -> str:
    if s is None:
        return ""
    if type(s) in BODIES:
        return type(s).__name__.upper()
    return simple_text(s)
