"""Names in kernel-IR statements: what a statement reads, writes and declares, renaming, and the two
load facts the dot-product passes decide by (element widths, contiguous float16 runs).

Row blocking (:mod:`caten_lab.codegen.rowblock`) copies statements per row and per output feature
and renames what each copy declares; the lane form (:mod:`caten_lab.codegen.lanes`) and row
blocking both turn a run of float16 loads ``w[offset + r]`` into one ``cl_h2f_n`` conversion. All of
it is read from the typed nodes: no C text is involved.
"""

from __future__ import annotations

from collections.abc import Mapping

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import (
    Addr,
    Alu,
    Assign,
    Call,
    Cast,
    Check,
    Const,
    Decl,
    Eval,
    Expr,
    For,
    Function,
    If,
    Load,
    Parallel,
    Return,
    Stmt,
    Store,
    Var,
    While,
)
from caten_lab.codegen.kir_walk import walk

I64 = DType.int64


def _collect(e: Expr | None, out: set[str]) -> None:
    """Add the variables and buffers ``e`` reads to ``out`` (a direct walk: this runs on every
    statement a pass looks at, so it avoids the generic field reflection of ``exprs_of``)."""
    while e is not None:
        if isinstance(e, Var):
            out.add(e.name)
            return
        if isinstance(e, Alu | Call):
            for a in e.args:
                _collect(a, out)
            return
        if isinstance(e, Load):
            out.add(e.buf)
            if e.check is not None:
                _collect(e.check.size, out)
            e = e.index
        elif isinstance(e, Cast):
            e = e.x
        elif isinstance(e, Addr):
            out.add(e.buf)
            e = e.index
        else:  # Const
            return


def _own_exprs(s: Stmt) -> tuple[Expr | None, ...]:
    if isinstance(s, Decl):
        return (s.init, s.size)
    if isinstance(s, Assign):
        return (s.value,)
    if isinstance(s, Store):
        return (s.index, s.value, s.check.size if s.check is not None else None)
    if isinstance(s, For):
        return (s.start, s.stop, s.step, s.parallel.cond if s.parallel is not None else None)
    if isinstance(s, If | While):
        return (s.cond,)
    if isinstance(s, Eval | Return):
        return (s.value,)
    return ()


def expr_names(e: Expr | Stmt) -> set[str]:
    """Variables and buffers an expression (or a statement's own expressions) reads."""
    out: set[str] = set()
    for x in ((e,) if isinstance(e, Expr) else _own_exprs(e)):
        _collect(x, out)
    return out


def used_names(s: Stmt) -> set[str]:
    """Every variable or buffer ``s`` (or a statement inside it) reads or assigns, and the
    accumulators its loops reduce into."""
    out: set[str] = set()
    for x in walk((s,)):
        for e in _own_exprs(x):
            _collect(e, out)
        if isinstance(x, Assign):
            out.add(x.var)
        elif isinstance(x, Store):
            out.add(x.buf)
        elif isinstance(x, For):
            out.update(x.reduction)
    return out


def declared_names(s: Stmt) -> set[str]:
    """Names declared by ``s`` or anywhere inside it."""
    return {x.var for x in walk((s,)) if isinstance(x, Decl)}


def bound_names(s: Stmt) -> set[str]:
    """Names declared or bound as loop variables by ``s`` or anywhere inside it."""
    return {x.var for x in walk((s,)) if isinstance(x, Decl | For)}


def names_in(fn: Function) -> set[str]:
    """Every name a function binds: its parameters, declarations and loop variables (a valid program
    reads nothing else, so a new name outside this set clashes with nothing)."""
    out = {p.name for p in fn.params}
    for x in walk(fn.body):
        if isinstance(x, Decl | For):
            out.add(x.var)
    return out


def target(s: Stmt) -> str | None:
    """The scalar a declaration or assignment writes (None for anything else)."""
    return s.var if isinstance(s, Decl | Assign) else None


# ---------------------------------------------------------------------------------------- renaming


def rename_expr(e: Expr, names: Mapping[str, str]) -> Expr:
    """``e`` with every variable and buffer in ``names`` renamed (shared when nothing in it is)."""
    if not names:
        return e
    return _ren(e, names)


def _ren(e: Expr, names: Mapping[str, str]) -> Expr:
    # direct constructors, not dataclasses.replace: this runs on every expression row blocking copies
    if isinstance(e, Var):
        n = names.get(e.name)
        return e if n is None else Var(n, e.dtype, e.origin)
    if isinstance(e, Alu | Call):
        args = tuple(_ren(a, names) for a in e.args)
        if all(a is b for a, b in zip(args, e.args)):
            return e
        return Alu(e.op, args, e.dtype, e.origin) if isinstance(e, Alu) else Call(e.fn, args, e.dtype, e.origin)
    if isinstance(e, Load):
        i = _ren(e.index, names)
        c = e.check if e.check is None else Check(_ren(e.check.size, names), e.check.tag)
        buf = names.get(e.buf, e.buf)
        if i is e.index and c == e.check and buf == e.buf:
            return e
        return Load(buf, i, e.dtype, c, e.origin)
    if isinstance(e, Cast):
        x = _ren(e.x, names)
        return e if x is e.x else Cast(x, e.dtype, e.origin)
    if isinstance(e, Addr):
        i = e.index if e.index is None else _ren(e.index, names)
        buf = names.get(e.buf, e.buf)
        return e if i is e.index and buf == e.buf else Addr(buf, i, e.dtype, e.origin)
    return e  # Const


def _opt(e: Expr | None, names: Mapping[str, str]) -> Expr | None:
    return None if e is None else _ren(e, names)


def rename(s: Stmt, names: Mapping[str, str]) -> Stmt:
    """A copy of ``s`` with every name in ``names`` renamed: reads, assignments, declarations, loop
    variables and reduction accumulators (origins are kept)."""
    if not names:
        return s
    n = names.get
    if isinstance(s, Decl):
        return Decl(n(s.var, s.var), s.dtype, _opt(s.init, names), s.const, _opt(s.size, names), s.origin)
    if isinstance(s, Assign):
        return Assign(n(s.var, s.var), _ren(s.value, names), s.origin)
    if isinstance(s, Store):
        c = s.check if s.check is None else Check(_ren(s.check.size, names), s.check.tag)
        return Store(n(s.buf, s.buf), _ren(s.index, names), _ren(s.value, names), c, s.origin)
    if isinstance(s, For):
        par = s.parallel if s.parallel is None else Parallel(s.parallel.collapse, _opt(s.parallel.cond, names))
        return For(n(s.var, s.var), _ren(s.start, names), _ren(s.stop, names), _ren(s.step, names),
                   tuple(rename(x, names) for x in s.body), s.role, par, s.simd, tuple(n(a, a) for a in s.reduction),
                   s.unroll, s.origin)
    if isinstance(s, If):
        return If(_ren(s.cond, names), tuple(rename(x, names) for x in s.then),
                  tuple(rename(x, names) for x in s.orelse), s.origin)
    if isinstance(s, While):
        return While(_ren(s.cond, names), tuple(rename(x, names) for x in s.body), s.origin)
    if isinstance(s, Eval):
        return Eval(_ren(s.value, names), s.origin)
    if isinstance(s, Return):
        return Return(_opt(s.value, names), s.origin)
    return s  # Break, Continue, Label, Goto, Comment: no names


# ------------------------------------------------------------------------------------ load facts


def load_widths(fn: Function, s: Stmt, nested: bool = True) -> list[int]:
    """Element bytes of every pointer parameter ``s`` (and what is inside it, when ``nested``) names:
    the buffers it loads from (a scalar parameter has no pointer; sym/err are read only by index)."""
    read: set[str] = set()
    for x in (walk((s,)) if nested else (s,)):
        for e in _own_exprs(x):
            _collect(e, read)
    out = []
    for name in sorted(read):
        p = fn.param(name)
        if p is not None and p.pointer:
            out.append(p.dtype.itemsize)
    return out


def add_terms(e: Expr) -> list[Expr]:
    """The terms of a (nested) integer sum."""
    if isinstance(e, Alu) and e.op == "add" and len(e.args) == 2:
        return add_terms(e.args[0]) + add_terms(e.args[1])
    return [e]


def sum_of(terms: list[Expr]) -> Expr:
    """The left-nested sum of ``terms`` (0 when empty)."""
    if not terms:
        return Const(0, I64)
    out = terms[0]
    for t in terms[1:]:
        out = Alu("add", (out, t), I64)
    return out


def f16_run(e: Expr | None, var: str, fn: Function) -> tuple[str, Expr] | None:
    """``(buffer, offset)`` when ``e`` is exactly an unchecked load ``buffer[offset + var]`` of a float16
    parameter, unit stride in ``var`` and ``offset`` free of it: a run of such loads over ``var`` can
    be converted at once by ``cl_h2f_n`` (the hardware conversion)."""
    if not isinstance(e, Load) or e.check is not None:
        return None
    p = fn.param(e.buf)
    if p is None or not p.pointer or p.dtype != DType.float16:
        return None
    terms = add_terms(e.index)
    hits = [i for i, t in enumerate(terms) if isinstance(t, Var) and t.name == var]
    if len(hits) != 1:
        return None
    rest = terms[:hits[0]] + terms[hits[0] + 1:]
    if any(var in expr_names(t) for t in rest):
        return None
    return e.buf, sum_of(rest)


def h2f_call(buf: str, offset: Expr, dest: str, n: Expr) -> Eval:
    """``cl_h2f_n(&buf[offset], dest, n)``: ``n`` float16 values from ``buf[offset...]`` into the float
    array ``dest`` (see runtime.h)."""
    args = (Addr(buf, offset, DType.float16), Var(dest, DType.float32), n)
    return Eval(Call("cl_h2f_n", args, DType.float32))  # (void: typed by what it writes)
