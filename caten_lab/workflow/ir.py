"""The action IR: a control-flow graph of basic blocks holding simple statements.

An @action's body is lowered into ``ActionIR``: blocks of straight-line statements ending in one
terminator (jump, branch or return). Expressions are small trees without control flow (``and``/``or``
short-circuit like C's ``&&``/``||``). Type inference and the C renderer both walk this IR; every
node carries the source line it came from so errors can point at the user's file:line.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass, field

from caten_lab.errors import where as user_where
from caten_lab.workflow.types import ArrayType, LocalType, ScalarType

# ----------------------------------------------------------------------------------------- expressions


@dataclass(slots=True)
class Const:
    """A literal: Python int, float or bool."""

    value: int | float | bool
    line: int = 0


@dataclass(slots=True)
class Name:
    """A read of a local variable (or parameter)."""

    id: str
    line: int = 0


@dataclass(slots=True)
class Unary:
    """``-x``, ``~x``, ``not x``, ``+x``: op is one of ``neg inv not pos``."""

    op: str
    operand: Expr
    line: int = 0


@dataclass(slots=True)
class Binary:
    """Arithmetic and bit ops: op is a Python operator symbol (``+ - * / // % & | ^ << >>``)."""

    op: str
    left: Expr
    right: Expr
    line: int = 0


@dataclass(slots=True)
class Compare:
    """One comparison (chains are split into ``and`` of comparisons): op in ``< <= > >= == !=``."""

    op: str
    left: Expr
    right: Expr
    line: int = 0


@dataclass(slots=True)
class Logic:
    """Short-circuit ``and`` / ``or`` of boolean operands."""

    op: str
    values: list[Expr]
    line: int = 0


@dataclass(slots=True)
class IfExp:
    """``a if cond else b``."""

    cond: Expr
    then: Expr
    orelse: Expr
    line: int = 0


@dataclass(slots=True)
class Index:
    """``a[i]`` / ``a[i, j]``: an element read of an array variable."""

    array: str
    indices: list[Expr]
    line: int = 0


@dataclass(slots=True)
class Dim:
    """``len(a)`` (axis 0) or ``a.shape[k]``: an array dimension, bound at call time."""

    array: str
    axis: int
    line: int = 0


@dataclass(slots=True)
class Cast:
    """``i32(x)``, ``f64(x)``, ...: an explicit conversion."""

    to: ScalarType
    operand: Expr
    line: int = 0


@dataclass(slots=True)
class Builtin:
    """``min(a, b, ...)``, ``max(a, b, ...)``, ``abs(x)``."""

    name: str
    args: list[Expr]
    line: int = 0


@dataclass(slots=True)
class Call:
    """A call to another action; ``callee`` is the Action object, resolved when lowering."""

    callee: object
    args: list[Expr]
    line: int = 0


Expr = Const | Name | Unary | Binary | Compare | Logic | IfExp | Index | Dim | Cast | Builtin | Call

# ------------------------------------------------------------------------------------------ statements


@dataclass(slots=True)
class Assign:
    """``target = value`` for a scalar variable."""

    target: str
    value: Expr
    line: int = 0


@dataclass(slots=True)
class Store:
    """``array[indices] = value``."""

    array: str
    indices: list[Expr]
    value: Expr
    line: int = 0


@dataclass(slots=True)
class AllocLocal:
    """``target = Local(dtype, dims)``: a fresh zero-filled fixed-size array."""

    target: str
    type: LocalType
    line: int = 0


@dataclass(slots=True)
class Eval:
    """An expression evaluated for its side effects (a call to an action)."""

    value: Expr
    line: int = 0


Stmt = Assign | Store | AllocLocal | Eval

# ----------------------------------------------------------------------------------------- terminators


@dataclass(slots=True)
class Jump:
    target: int
    line: int = 0


@dataclass(slots=True)
class Branch:
    cond: Expr
    if_true: int
    if_false: int
    line: int = 0


@dataclass(slots=True)
class Return:
    value: Expr | None
    line: int = 0
    implicit: bool = False  # falling off the end of the function


Terminator = Jump | Branch | Return


@dataclass(slots=True)
class Block:
    """A basic block: straight-line statements, then exactly one terminator."""

    id: int
    stmts: list[Stmt] = field(default_factory=list)
    term: Terminator | None = None

    def successors(self) -> tuple[int, ...]:
        t = self.term
        if isinstance(t, Jump):
            return (t.target,)
        if isinstance(t, Branch):
            return (t.if_true, t.if_false)
        return ()


ParamType = ScalarType | ArrayType


@dataclass(slots=True)
class SIf:
    """Structure note: the branch ending block ``cond_block`` is an if/else whose arms are the
    sequences ``then`` / ``orelse`` (block ids and nested notes), meeting again at block ``merge``."""

    cond_block: int
    then: list
    orelse: list
    merge: int


@dataclass(slots=True)
class SLoop:
    """Structure note: a loop whose header block branches into ``body`` or out (to ``orelse``, then
    ``exit``). ``latch`` is the block a for loop's ``continue`` goes to (the counter increment)."""

    header: int
    body: list
    orelse: list
    exit: int
    latch: int | None = None


@dataclass(slots=True)
class ActionIR:
    """One action as a CFG; block 0 is the entry. ``returns`` is None for ``-> None`` / no value,
    or ``INFER`` when the annotation is missing (then inferred from the return statements)."""

    name: str
    params: list[tuple[str, ParamType]]
    returns: ScalarType | None | str
    blocks: list[Block]
    file: str = "<unknown>"
    firstline: int = 0
    # How the blocks nest in the source (a sequence of block ids, SIf and SLoop notes), recorded by
    # the lowering so the C renderer can emit structured loops; None for CFGs built by hand.
    structure: list | None = None

    def where(self, line: int) -> str:
        """``file:line`` plus the source line text, for error messages."""
        return source_where(self.file, line)

    def n_statements(self) -> int:
        return sum(len(b.stmts) + 1 for b in self.blocks)

    def dump(self) -> str:
        """A readable listing of the CFG (for notebooks and debugging)."""
        out = [f"action {self.name}({', '.join(f'{n}: {t}' for n, t in self.params)}) -> {self.returns}"]
        for b in self.blocks:
            out.append(f"  b{b.id}:")
            out.extend(f"    {format_stmt(s)}" for s in b.stmts)
            out.append(f"    {format_term(b.term)}")
        return "\n".join(out)


INFER = "infer"


def source_where(file: str, line: int) -> str:
    """``file:line: <source text>`` so an error shows exactly which user line is at fault."""
    text = linecache.getline(file, line).strip() if line else ""
    loc = user_where(file, line)
    return f"{loc}: {text}" if text else loc


# ------------------------------------------------------------------------------------------- printing


def format_expr(e: Expr) -> str:
    if isinstance(e, Const):
        return repr(e.value)
    if isinstance(e, Name):
        return e.id
    if isinstance(e, Unary):
        sym = {"neg": "-", "inv": "~", "not": "not ", "pos": "+"}[e.op]
        return f"({sym}{format_expr(e.operand)})"
    if isinstance(e, Binary | Compare):
        return f"({format_expr(e.left)} {e.op} {format_expr(e.right)})"
    if isinstance(e, Logic):
        return "(" + f" {e.op} ".join(format_expr(v) for v in e.values) + ")"
    if isinstance(e, IfExp):
        return f"({format_expr(e.then)} if {format_expr(e.cond)} else {format_expr(e.orelse)})"
    if isinstance(e, Index):
        return f"{e.array}[{', '.join(format_expr(i) for i in e.indices)}]"
    if isinstance(e, Dim):
        return f"{e.array}.shape[{e.axis}]"
    if isinstance(e, Cast):
        return f"{e.to.name}({format_expr(e.operand)})"
    if isinstance(e, Builtin):
        return f"{e.name}({', '.join(format_expr(a) for a in e.args)})"
    if isinstance(e, Call):
        return f"{getattr(e.callee, '__name__', '?')}({', '.join(format_expr(a) for a in e.args)})"
    raise TypeError(e)


def format_stmt(s: Stmt) -> str:
    if isinstance(s, Assign):
        return f"{s.target} = {format_expr(s.value)}"
    if isinstance(s, Store):
        return f"{s.array}[{', '.join(format_expr(i) for i in s.indices)}] = {format_expr(s.value)}"
    if isinstance(s, AllocLocal):
        return f"{s.target} = Local({s.type.dtype}, {s.type.dims})"
    return format_expr(s.value)


def format_term(t: Terminator | None) -> str:
    if isinstance(t, Jump):
        return f"jump b{t.target}"
    if isinstance(t, Branch):
        return f"branch {format_expr(t.cond)} ? b{t.if_true} : b{t.if_false}"
    if isinstance(t, Return):
        return "return" + ("" if t.value is None else f" {format_expr(t.value)}")
    return "<no terminator>"
