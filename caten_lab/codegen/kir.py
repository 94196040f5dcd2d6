"""The kernel IR: one typed IR below AIR for tensor kernels, actions and the exported library.

Nodes are frozen, slotted dataclasses, so a program is a value: passes build new programs (sharing
every statement they did not touch), snapshots cost nothing, and ``==`` is structural equality.
Every node carries an :class:`Origin` (the AIR node ids it came from, or an action's file:line);
origins do not take part in equality.

Expressions carry their element type (:class:`~caten_lab.air.dtypes.DType`, the one dtype system of
the project). A float16 buffer holds ``float16`` elements, but a :class:`Load` of it has type
``float32``: half values are computed as float and converted back by the :class:`Store`.

Ops of :class:`Alu` are named as in ``air/ops.py`` (``add mul neg recip idiv mod max exp2 log2 sin
sqrt and or xor not lt ne where``) plus what index arithmetic and actions need (``sub div floordiv
floormod min abs shl shr le gt ge eq land lor``). The C renderer is a table over these names
(:mod:`caten_lab.codegen.render`); the printer here is the readable FOR/IF form the Inspector shows;
:func:`validate` checks types and scopes (the trace runs it after every codegen pass in tests).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from caten_lab.air.dtypes import DType

COMPARE = frozenset({"lt", "ne", "le", "gt", "ge", "eq"})
UNARY = frozenset({"neg", "not", "recip", "exp2", "log2", "sin", "sqrt", "abs"})
BINARY = frozenset({"add", "sub", "mul", "div", "idiv", "mod", "floordiv", "floormod", "max", "min", "and", "or",
                    "xor", "shl", "shr", "land", "lor"}) | COMPARE
TERNARY = frozenset({"where"})
ALU_OPS = UNARY | BINARY | TERNARY

# ---------------------------------------------------------------------------------------- origins


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a node came from: AIR node ids (tensor kernels) or ``file:line`` (actions)."""

    nodes: tuple[int, ...] = ()
    file: str = ""
    line: int = 0

    def __bool__(self) -> bool:
        return bool(self.nodes or self.line)

    def label(self) -> str:
        if self.line:
            return f"{self.file}:{self.line}"
        return ",".join(f"%{n}" for n in self.nodes)


NO_ORIGIN = Origin()


def _origin() -> Any:
    return field(default=NO_ORIGIN, compare=False, repr=False)


# ------------------------------------------------------------------------------------ expressions


class Expr:
    """Base of expression nodes (each has ``dtype`` and ``origin``)."""

    __slots__ = ()
    dtype: DType
    origin: Origin


@dataclass(frozen=True, slots=True)
class Const(Expr):
    value: int | float | bool
    dtype: DType
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Var(Expr):
    name: str
    dtype: DType
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Check:
    """A bounds check on an index: ``0 <= index < size``, else error ``tag`` (the renderer's CK)."""

    size: Expr
    tag: int


@dataclass(frozen=True, slots=True)
class Load(Expr):
    """``buf[index]``; ``buf`` names a pointer parameter or a local array. ``check`` guards the index."""

    buf: str
    index: Expr
    dtype: DType
    check: Check | None = None
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Alu(Expr):
    op: str
    args: tuple[Expr, ...]
    dtype: DType
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Cast(Expr):
    x: Expr
    dtype: DType
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Call(Expr):
    """A call of a runtime helper (``cl_h2f``, ``cl_idiv_ck_int64``, ...) or of another function."""

    fn: str
    args: tuple[Expr, ...]
    dtype: DType
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Addr(Expr):
    """``&buf[index]`` (``index`` None: the pointer itself), typed by the buffer's element type."""

    buf: str
    index: Expr | None
    dtype: DType
    origin: Origin = _origin()


# ------------------------------------------------------------------------------------- statements


class Stmt:
    __slots__ = ()
    origin: Origin


@dataclass(frozen=True, slots=True)
class Decl(Stmt):
    """Declare ``var`` (``const`` when never reassigned). ``size`` makes it a local array of that many
    elements (``init`` then fills every element, or is None)."""

    var: str
    dtype: DType
    init: Expr | None = None
    const: bool = False
    size: Expr | None = None
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Assign(Stmt):
    var: str
    value: Expr
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    """``buf[index] = value`` (converted to the buffer's element type)."""

    buf: str
    index: Expr
    value: Expr
    check: Check | None = None
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Parallel:
    """How a ``for`` is split across threads: ``collapse`` perfectly nested loops, run in parallel only
    when ``cond`` holds (a work threshold over symbolic sizes), static schedule."""

    collapse: int = 1
    cond: Expr | None = None


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """``for (var = start; var < stop; var += step)``. ``role`` is what lowering made it for (``loop``
    ``stage`` ``tile`` ``vector`` ``collapsed`` ``rows`` ``lanes``...); ``parallel``, ``simd`` (vectorize
    the iterations; ``reduction`` names ``+`` accumulators) and ``unroll`` are decided by passes."""

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: tuple[Stmt, ...]
    role: str = "loop"
    parallel: Parallel | None = None
    simd: bool = False
    reduction: tuple[str, ...] = ()
    unroll: int = 0
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class If(Stmt):
    cond: Expr
    then: tuple[Stmt, ...]
    orelse: tuple[Stmt, ...] = ()
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class While(Stmt):
    cond: Expr
    body: tuple[Stmt, ...]
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Break(Stmt):
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Continue(Stmt):
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Return(Stmt):
    value: Expr | None = None
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Eval(Stmt):
    """An expression evaluated for its effect (a call)."""

    value: Expr
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Label(Stmt):
    """A jump target (actions whose CFG has no structure note fall back to labels and gotos)."""

    name: str
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Goto(Stmt):
    name: str
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Comment(Stmt):
    text: str
    origin: Origin = _origin()


BODIES: dict[type, tuple[str, ...]] = {For: ("body",), If: ("then", "orelse"), While: ("body",)}

# --------------------------------------------------------------------------------------- functions


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter: a scalar, or a pointer to ``dtype`` elements (``const`` when only read)."""

    name: str
    dtype: DType
    pointer: bool = True
    const: bool = False
    buffer: str | None = None  # the AIR buffer name it is bound to (tensor kernels)
    restrict: bool = True  # no other pointer parameter aliases it (False: an action may get one array twice)


@dataclass(frozen=True, slots=True)
class Function:
    """A C function. ``returns`` None is ``void``. ``meta`` holds what passes read but never render
    (``work``: estimated element operations per call, an int64 kernel-IR expression; ``checks``: check tag -> kernel node position;
    ``key``: the schedule cache key; ``kernel_names``: every scheduled kernel it implements)."""

    name: str
    params: tuple[Param, ...]
    body: tuple[Stmt, ...]
    returns: DType | None = None
    linkage: str = "static"  # static | kernel (a tensor kernel: parallel-build linkage, noinline) | export
    meta: tuple[tuple[str, Any], ...] = ()
    origin: Origin = _origin()

    def get(self, key: str, default: Any = None) -> Any:
        for k, v in self.meta:
            if k == key:
                return v
        return default

    def with_meta(self, **kw: Any) -> Function:
        d = dict(self.meta)
        d.update(kw)
        return replace(self, meta=tuple(d.items()))

    def param(self, name: str) -> Param | None:
        for p in self.params:
            if p.name == name:
                return p
        return None


@dataclass(frozen=True, slots=True)
class KernelCall:
    """One row of the entry's call table: function ``fn`` on entry buffers ``buffers``."""

    fn: str
    buffers: tuple[int, ...]
    origin: Origin = _origin()


@dataclass(frozen=True, slots=True)
class Program:
    """Every function of one compiled unit, plus (for tensor programs) the entry's call table."""

    functions: tuple[Function, ...]
    calls: tuple[KernelCall, ...] = ()
    symbols: tuple[str, ...] = ()
    buffers: tuple[str, ...] = ()

    def function(self, name: str) -> Function:
        for f in self.functions:
            if f.name == name:
                return f
        raise KeyError(f"no function {name!r} in the kernel program")

    def with_functions(self, functions: list[Function] | tuple[Function, ...]) -> Program:
        return replace(self, functions=tuple(functions))

    def text(self, name: str | None = None) -> str:
        """The FOR/IF listing of every function (or of function ``name``)."""
        return program_listing(self, name).text()

    def listing(self, name: str | None = None) -> Listing:
        """:meth:`text` with a line -> (function, statement path) map (the Inspector links by it)."""
        return program_listing(self, name)


# -------------------------------------------------------------------------------------- listing

INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "idiv": "/", "mod": "%", "floordiv": "//",
         "floormod": "%%", "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>", "lt": "<", "ne": "!=",
         "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "land": "&&", "lor": "||"}


def expr_text(e: Expr) -> str:
    if isinstance(e, Const):
        if isinstance(e.value, bool):
            return "true" if e.value else "false"
        return repr(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Load):
        return f"{e.buf}[{expr_text(e.index)}]" + ("!" if e.check is not None else "")
    if isinstance(e, Alu):
        sym = INFIX.get(e.op)
        if sym is not None and len(e.args) == 2:
            return f"({expr_text(e.args[0])} {sym} {expr_text(e.args[1])})"
        if e.op == "neg":
            return f"-{expr_text(e.args[0])}"
        return f"{e.op}({', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, Cast):
        return f"{e.dtype.value}({expr_text(e.x)})"
    if isinstance(e, Call):
        return f"{e.fn}({', '.join(expr_text(a) for a in e.args)})"
    if isinstance(e, Addr):
        return f"&{e.buf}" + ("" if e.index is None else f"[{expr_text(e.index)}]")
    raise TypeError(f"not a kernel-IR expression: {e!r}")


def loop_tags(s: For) -> str:
    tags = [f"[{s.role}]"]
    if s.parallel is not None:
        inner = [f"collapse={s.parallel.collapse}"] if s.parallel.collapse > 1 else []
        if s.parallel.cond is not None:
            inner.append(f"if {expr_text(s.parallel.cond)}")
        tags.append(f"parallel({', '.join(inner)})" if inner else "parallel")
    if s.simd:
        tags.append("simd" + (f" reduction(+:{','.join(s.reduction)})" if s.reduction else ""))
    if s.unroll:
        tags.append(f"unroll({s.unroll})")
    return " ".join(tags)


@dataclass
class Listing:
    """Lines of text plus, per line, the (function name, statement path) it prints (None for headers)."""

    lines: list[str]
    paths: list[tuple[str, tuple] | None]

    def text(self) -> str:
        return "\n".join(self.lines)

    def line_of(self, fn: str, path: tuple) -> int | None:
        """1-based line printing statement ``path`` of function ``fn``."""
        for i, p in enumerate(self.paths):
            if p == (fn, path):
                return i + 1
        return None


def function_listing(f: Function, out: Listing | None = None) -> Listing:
    out = out if out is not None else Listing([], [])
    params = ", ".join(f"{'const ' if p.const else ''}{p.dtype.value}{'*' if p.pointer else ''} {p.name}"
                       for p in f.params)
    ret = f" -> {f.returns.value}" if f.returns is not None else ""
    out.lines.append(f"FUNCTION {f.name}({params}){ret}")
    out.paths.append(None)
    _body(f.name, f.body, 1, (), "body", out)
    out.lines.append("ENDFUNCTION")
    out.paths.append(None)
    return out


def program_listing(p: Program, name: str | None = None) -> Listing:
    out = Listing([], [])
    for f in p.functions:
        if name is None or f.name == name:
            function_listing(f, out)
    if name is None and p.calls:
        out.lines.append("ENTRY")
        out.paths.append(None)
        for c in p.calls:
            out.lines.append(f"  CALL {c.fn}({', '.join(f'b{b}' for b in c.buffers)})")
            out.paths.append(None)
        out.lines.append("ENDENTRY")
        out.paths.append(None)
    return out


def _emit(out: Listing, depth: int, text: str, fn: str, path: tuple) -> None:
    out.lines.append("  " * depth + text)
    out.paths.append((fn, path))


def _body(fn: str, body: tuple[Stmt, ...], depth: int, prefix: tuple, field: str, out: Listing) -> None:
    for i, s in enumerate(body):
        path = (*prefix, (field, i))
        stmt_lines(fn, s, depth, path, out)


def stmt_lines(fn: str, s: Stmt, depth: int, path: tuple, out: Listing) -> None:
    if isinstance(s, For):
        step = "" if isinstance(s.step, Const) and s.step.value == 1 else f" step {expr_text(s.step)}"
        _emit(out, depth, f"FOR {s.var} in [{expr_text(s.start)}, {expr_text(s.stop)}){step} {loop_tags(s)}", fn, path)
        _body(fn, s.body, depth + 1, path, "body", out)
        _emit(out, depth, "ENDFOR", fn, path)
    elif isinstance(s, If):
        _emit(out, depth, f"IF {expr_text(s.cond)}", fn, path)
        _body(fn, s.then, depth + 1, path, "then", out)
        if s.orelse:
            _emit(out, depth, "ELSE", fn, path)
            _body(fn, s.orelse, depth + 1, path, "orelse", out)
        _emit(out, depth, "ENDIF", fn, path)
    elif isinstance(s, While):
        _emit(out, depth, f"WHILE {expr_text(s.cond)}", fn, path)
        _body(fn, s.body, depth + 1, path, "body", out)
        _emit(out, depth, "ENDWHILE", fn, path)
    else:
        _emit(out, depth, simple_text(s), fn, path)


def simple_text(s: Stmt) -> str:
    """One line for a statement without a body."""
    if isinstance(s, Decl):
        kw = "const " if s.const else ""
        if s.size is not None:
            init = "" if s.init is None else f" = {expr_text(s.init)}"
            return f"{kw}{s.dtype.value} {s.var}[{expr_text(s.size)}]{init}"
        return f"{kw}{s.dtype.value} {s.var}" + ("" if s.init is None else f" = {expr_text(s.init)}")
    if isinstance(s, Assign):
        return f"{s.var} = {expr_text(s.value)}"
    if isinstance(s, Store):
        return f"{s.buf}[{expr_text(s.index)}]{'!' if s.check is not None else ''} = {expr_text(s.value)}"
    if isinstance(s, Return):
        return "RETURN" + ("" if s.value is None else f" {expr_text(s.value)}")
    if isinstance(s, Eval):
        return expr_text(s.value)
    if isinstance(s, Break):
        return "BREAK"
    if isinstance(s, Continue):
        return "CONTINUE"
    if isinstance(s, Label):
        return f"{s.name}:"
    if isinstance(s, Goto):
        return f"GOTO {s.name}"
    if isinstance(s, Comment):
        return f"// {s.text}"
    raise TypeError(f"not a kernel-IR statement: {s!r}")
