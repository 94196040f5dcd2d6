"""One parallel region per program run: kernels written for a persistent team of threads.

With several threads, ``caten_run`` runs the whole call table once on every thread of a team
(``codegen/c/team.h``, ``team.c``): one wake-up per run, where an OpenMP ``parallel for`` per kernel woke
the sleeping threads once per kernel (dozens of times per decode step). Each thread calls every kernel,
so a kernel says what each thread does. :func:`team_function` rewrites a kernel function so:

- a parallel loop (``For.parallel``, decided by the ``parallel`` pass) runs in chunks of its iterations
  that the threads claim: ``WHILE cl_team_chunk(n, cond, r)``: the loop over iterations ``[r[0], r[1])``
  (its role and step kept; ``n`` is its trip count, times those of the loops it collapses, whose variables
  a flat loop recovers from its index).
  Claimed, not assigned: a thread whose core is busy with another process leaves its share to the
  others. Below the work threshold (``cond`` false) the loop is one chunk;
- a statement outside parallel loops that writes memory other threads may read (a store to a buffer,
  a helper call given the address of a writable buffer) runs on one thread (``IF cl_team_single()``:
  the first to get there); statements that only compute locals run on every thread (their values are
  per thread), and a statement holding a parallel loop runs on every thread (each does its share);
- a barrier (``cl_team_barrier()``) follows each team loop and each first-thread-only statement that
  something else of the function runs after (a later statement, or the next iteration of an enclosing
  loop), as OpenMP's implicit barrier at the end of a ``parallel for`` did. The entry puts a barrier
  between kernels (codegen/render.py).

Iteration partition, loop bodies and arithmetic are unchanged: a team run computes the same values
as the OpenMP one.
"""

from __future__ import annotations

from dataclasses import replace

from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir import (
    BODIES,
    Addr,
    Alu,
    Assign,
    Call,
    Const,
    Decl,
    Eval,
    Expr,
    For,
    Function,
    If,
    Load,
    Program,
    Stmt,
    Store,
    Var,
    While,
)
from caten_lab.codegen.kir_rewrite import replace_function
from caten_lab.codegen.kir_walk import exprs_of, int_value, walk

I64 = DType.int64
BARRIER = "cl_team_barrier"
CHUNK = "cl_team_chunk"


def _i64(op: str, a: Expr, b: Expr) -> Expr:
    return Alu(op, (a, b), I64)


def _div(a: Expr, b: Expr) -> Expr:
    """``a / b`` of non-negative index values (a constant power of two: a shift)."""
    av, bv = int_value(a), int_value(b)
    if av is not None and bv:
        return Const(av // bv, I64)
    if bv == 1:
        return a
    if bv is not None and bv > 0 and bv & (bv - 1) == 0:
        return _i64("shr", a, Const(bv.bit_length() - 1, I64))
    return _i64("div", a, b)


def _fold(op: str, a: Expr, b: Expr) -> Expr:
    av, bv = int_value(a), int_value(b)
    if av is not None and bv is not None:
        return Const({"add": av + bv, "sub": av - bv, "mul": av * bv}[op], I64)
    if op in ("add", "sub") and bv == 0:
        return a
    if op == "add" and av == 0 or op == "mul" and av == 1:
        return b
    if op == "mul" and bv == 1:
        return a
    return _i64(op, a, b)


def _trip(s: For) -> Expr:
    """Iterations of loop ``s``: ``(stop - start + step - 1) / step``, folded where constant."""
    return _div(_fold("add", _fold("sub", s.stop, s.start), _fold("sub", s.step, Const(1, I64))), s.step)


def _at(s: For, t: Expr) -> Expr:
    """The value of ``s``'s variable at iteration ``t``."""
    return _fold("add", s.start, _fold("mul", t, s.step))


def team_loop(s: For) -> list[Stmt]:
    """``s`` (a parallel loop collapsing ``s.parallel.collapse`` perfectly nested loops) as the chunks of its
    iterations this thread claims."""
    assert s.parallel is not None
    nest = [s]
    while len(nest) < s.parallel.collapse:
        nest.append(nest[-1].body[0])  # type: ignore[arg-type]
    trips = [_trip(x) for x in nest]
    n = trips[0]
    for t in trips[1:]:
        n = _fold("mul", n, t)
    on = s.parallel.cond if s.parallel.cond is not None else Const(True, DType.bool)
    v = s.var
    o = s.origin
    r = f"{v}_r"
    lo, hi = Var(f"{v}_lo", I64), Var(f"{v}_hi", I64)
    head: list[Stmt] = [Decl(f"{v}_n", I64, n, const=True, origin=o), Decl(r, I64, size=Const(2, I64), origin=o)]
    claim = Alu("ne", (Call(CHUNK, (Var(f"{v}_n", I64), on, Addr(r, None, I64)), DType.int32),
                       Const(0, DType.int32)), DType.bool)
    bounds = [Decl(lo.name, I64, Load(r, Const(0, I64), I64), const=True, origin=o),
              Decl(hi.name, I64, Load(r, Const(1, I64), I64), const=True, origin=o)]
    if len(nest) == 1:  # iterations [lo, hi) of the loop itself: its role and step stay
        return [*head, While(claim, (*bounds, replace(s, start=_at(s, lo), stop=_at(s, hi), parallel=None)), origin=o)]
    # several loops collapsed: iteration counters set once per chunk (one division each), then carried
    # (no division per iteration)
    counters = [f"{x.var}_c" for x in nest]
    setup: list[Stmt] = []
    rest: Expr = lo
    for k in range(len(nest)):
        below = None
        for tr in trips[k + 1:]:
            below = tr if below is None else _fold("mul", below, tr)
        pos = rest if below is None else _div(rest, below)
        setup.append(Decl(counters[k], I64, pos, origin=o))
        if below is not None:
            rest = _fold("sub", rest, _fold("mul", Var(counters[k], I64), below))
    values = [Decl(x.var, I64, _at(x, Var(c, I64)), const=True, origin=x.origin) for x, c in zip(nest, counters)]
    loop = For(f"{v}_t", lo, hi, Const(1, I64), (*values, *nest[-1].body, *_carry(counters, trips, o)),
               role=s.role, origin=o)
    return [*head, While(claim, (*bounds, *setup, loop), origin=o)]


def _carry(counters: list[str], trips: list[Expr], o: object) -> tuple[Stmt, ...]:
    """Step the innermost counter (``counters`` outermost first); one that reaches its trip count wraps to 0
    and steps the next outer one."""
    out: tuple[Stmt, ...] = (Assign(counters[0], _i64("add", Var(counters[0], I64), Const(1, I64)), origin=o),)
    for k in range(1, len(counters)):
        wrap = If(Alu("ge", (Var(counters[k], I64), trips[k]), DType.bool),
                  (Assign(counters[k], Const(0, I64), origin=o), *out), origin=o)  # type: ignore[arg-type]
        out = (Assign(counters[k], _i64("add", Var(counters[k], I64), Const(1, I64)), origin=o), wrap)  # type: ignore[arg-type]
    return out


def _has_parallel(s: Stmt) -> bool:
    return any(isinstance(x, For) and x.parallel is not None for x in walk((s,)))


def _writes_shared(s: Stmt, writable: frozenset[str]) -> bool:
    """Whether ``s`` stores to a writable buffer parameter or hands one's address to a helper."""
    for x in walk((s,)):
        if isinstance(x, Store) and x.buf in writable:
            return True
        for e in exprs_of(x):
            if isinstance(e, Call) and any(isinstance(a, Addr) and a.buf in writable for a in e.args):
                return True
    return False


def _barrier(origin: object) -> Eval:
    return Eval(Call(BARRIER, (), DType.int32), origin=origin)  # type: ignore[arg-type]


def _team_body(body: tuple[Stmt, ...], writable: frozenset[str], tail: bool) -> tuple[Stmt, ...]:
    """``body`` for a team; ``tail``: something of the function runs after it (a barrier must then follow
    its last team loop or first-thread-only statement)."""
    out: list[Stmt] = []
    main: list[Stmt] = []  # consecutive first-thread-only statements, guarded together

    def flush(more: bool) -> None:
        if main:
            out.append(If(Call("cl_team_single", (), DType.bool), tuple(main), origin=main[0].origin))
            if more:
                out.append(_barrier(main[0].origin))
            main.clear()

    for i, s in enumerate(body):
        more = i < len(body) - 1 or tail
        if isinstance(s, For) and s.parallel is not None:
            flush(True)
            out.extend(team_loop(s))
            if more:
                out.append(_barrier(s.origin))
        elif _has_parallel(s):
            flush(True)
            inner = tail or i < len(body) - 1
            subs = {f: _team_body(getattr(s, f), writable, inner or isinstance(s, For)) for f in BODIES[type(s)]}
            out.append(replace(s, **subs))
        elif _writes_shared(s, writable):
            main.append(s)
        else:
            flush(True)
            out.append(s)
    flush(tail)
    return tuple(out)


def team_function(fn: Function) -> Function:
    """Kernel ``fn`` as every thread of a team runs it (see the module docstring). A kernel without a
    parallel loop runs on the first thread (every statement that writes is guarded)."""
    writable = frozenset(p.name for p in fn.params if p.pointer and not p.const and p.name != "err")
    return replace(fn, body=_team_body(fn.body, writable, False))


def team_program(program: Program, record: list | None = None) -> Program:
    """Every kernel function of ``program`` written for the team, when one of them has a parallel loop (else
    nothing runs in parallel and the program stays as it is: the entry then walks its table alone)."""
    kernels = [f for f in program.functions if f.linkage == "kernel"]
    if not any(_has_parallel(s) for f in kernels for s in f.body):
        return program
    for f in kernels:
        new = team_function(f)
        if new.body != f.body:
            program = replace_function(program, "team", new, record)
    return program


def team_chunks(s: Stmt) -> bool:
    """Whether ``s`` is a loop's chunks claimed by the threads of a team (``WHILE cl_team_chunk(...)``)."""
    return isinstance(s, While) and isinstance(s.cond, Alu) and isinstance(s.cond.args[0], Call) \
        and s.cond.args[0].fn == CHUNK


def uses_team(program: Program) -> bool:
    """Whether ``program``'s kernels are written for a team (the entry then runs its table on one)."""
    return any(team_chunks(s) for f in program.functions for s in walk(f.body))
