"""Recorded, replayable rewrites of kernel-IR programs, and the rule driver codegen passes use.

A codegen pass is a table of rules. A rule looks at one statement list (a function body or a nested
body) at position ``i`` and either declines (returns None) or returns how many statements it
consumes and what replaces them: ``(n, new_statements)``. :func:`apply_rules` walks every function,
applies the rules and records each firing as a :class:`KRewrite` (rule name, function, path of the
body, position, the statements before and after). Replaying the first k rewrites on the program
before the pass (:func:`replay`) rebuilds the program at any step, which is how the Inspector steps
through a codegen pass. Because the IR is immutable, "before" and "after" share every untouched node.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from caten_lab.codegen.kir import BODIES, For, Function, Program, Stmt, While
from caten_lab.errors import where as user_where

Path = tuple[tuple[str, int], ...]  # (field, index) steps to a statement; () is the function body


@dataclass(frozen=True, slots=True)
class KRewrite:
    """One firing of a rule in function ``function``: the statement list ``field`` of the statement at
    ``path`` (``()`` and ``"body"``: the function body) had ``before`` at ``[index, index + len(before))``
    replaced by ``after``. A path is ``(field, index)`` steps from the function."""

    rule: str
    function: str
    path: Path
    field: str
    index: int
    before: tuple[Stmt, ...]
    after: tuple[Stmt, ...]
    location: str = ""

    def to_json(self) -> dict:
        return {"rule": self.rule, "function": self.function, "path": [list(p) for p in self.path],
                "field": self.field, "index": self.index, "before": len(self.before), "after": len(self.after),
                "location": self.location}

    def apply(self, program: Program) -> Program:
        """``program`` with this rewrite applied (how the trace replays it without importing codegen)."""
        return apply_one(program, self)


@dataclass
class RuleContext:
    """What a rule may read: the function being rewritten, the enclosing loops of the body it looks at
    (outermost first), the pass options, and the program."""

    function: Function
    loops: tuple[Stmt, ...]
    options: dict[str, Any]
    program: Program | None = None


Rule = Callable[[tuple[Stmt, ...], int, RuleContext], "tuple[int, Sequence[Stmt]] | None"]


def _location(fn: Callable) -> str:
    code = getattr(fn, "__code__", None)
    return user_where(code.co_filename, code.co_firstlineno) if code is not None else ""


def apply_rules(program: Program, rules: Sequence[tuple[str, Rule]], options: dict[str, Any] | None = None,
                record: list | None = None, *, descend_into_new: bool = True,
                functions: Callable[[Function], bool] | None = None) -> Program:
    """Apply ``rules`` (name, rule) once over every statement of every function, pre-order: at each
    position the first rule that fires wins; the walk goes on into the children of what it produced
    (unless ``descend_into_new`` is False), then after it. Firings go to ``record``."""
    opts = options or {}
    out = []
    changed = False
    for f in program.functions:
        if functions is not None and not functions(f):
            out.append(f)
            continue
        ctx = RuleContext(f, (), opts, program)
        body = _rewrite_body(f.body, (), "body", rules, ctx, record, descend_into_new)
        if body is not f.body:
            f = replace(f, body=body)
            changed = True
        out.append(f)
    return program.with_functions(out) if changed else program


def _rewrite_body(body: tuple[Stmt, ...], owner: Path, fld: str, rules, ctx: RuleContext, record,  # noqa: ANN001
                  descend: bool) -> tuple[Stmt, ...]:
    new: list[Stmt] = []
    i = 0
    changed = False
    while i < len(body):
        hit = None
        for name, rule in rules:
            got = rule(body, i, ctx)
            if got is not None:
                hit = (name, rule, got)
                break
        if hit is not None:
            name, rule, (n, repl) = hit
            if not 1 <= n <= len(body) - i:
                raise ValueError(f"rule {name!r} consumed {n} statements at position {i} of {len(body)}: "
                                 "a rule replaces at least one statement it was shown")
            repl = tuple(repl)
            before = body[i:i + n]
            if repl != before:
                if record is not None:
                    record.append(KRewrite(name, ctx.function.name, owner, fld, len(new), before, repl,
                                           _location(rule)))
                changed = True
                if descend:
                    repl = tuple(_descend(s, owner, fld, len(new) + k, rules, ctx, record, descend)
                                 for k, s in enumerate(repl))
                new.extend(repl)
                i += n
                continue
        s = _descend(body[i], owner, fld, len(new), rules, ctx, record, descend)
        changed = changed or s is not body[i]
        new.append(s)
        i += 1
    return tuple(new) if changed else body


def _descend(s: Stmt, owner: Path, fld: str, pos: int, rules, ctx: RuleContext, record,  # noqa: ANN001
             descend: bool) -> Stmt:
    subs = BODIES.get(type(s))
    if not subs:
        return s
    here = (*owner, (fld, pos))
    inner = RuleContext(ctx.function, (*ctx.loops, s), ctx.options, ctx.program) if isinstance(s, For | While) else ctx
    new = {f: _rewrite_body(getattr(s, f), here, f, rules, inner, record, descend) for f in subs}
    if all(new[f] is getattr(s, f) for f in subs):
        return s
    return replace(s, **new)


def stmt_at(fn: Function, path: Path) -> Any:
    """The statement a path names (``()`` is the function itself)."""
    owner: Any = fn
    for f, i in path:
        owner = getattr(owner, f)[i]
    return owner


def body_at(fn: Function, path: Path, fld: str = "body") -> tuple[Stmt, ...]:
    """The statement list ``fld`` of the statement at ``path`` (``()``, ``"body"``: the function body)."""
    return getattr(stmt_at(fn, path), fld)


def _set_body(fn: Function, path: Path, fld: str, new_body: tuple[Stmt, ...]) -> Function:
    def rebuild(owner: Any, steps: Path) -> Any:
        if not steps:
            return replace(owner, **{fld: new_body})
        (f, i), rest = steps[0], steps[1:]
        lst = getattr(owner, f)
        return replace(owner, **{f: (*lst[:i], rebuild(lst[i], rest), *lst[i + 1:])})

    return rebuild(fn, path)


def apply_one(program: Program, rw: KRewrite) -> Program:
    """``program`` with one recorded rewrite applied (the inverse of recording it)."""
    fn = program.function(rw.function)
    body = body_at(fn, rw.path, rw.field)
    got = body[rw.index:rw.index + len(rw.before)]
    if got != rw.before:
        raise ValueError(f"rewrite {rw.rule!r} does not apply: {rw.function} at {rw.path}.{rw.field}[{rw.index}]"
                         " differs from what was recorded")
    new_fn = _set_body(fn, rw.path, rw.field, (*body[:rw.index], *rw.after, *body[rw.index + len(rw.before):]))
    return program.with_functions([new_fn if f.name == rw.function else f for f in program.functions])


def replace_function(program: Program, rule: str, new: Function, record: list | None) -> Program:
    """Replace a whole function body (a rewrite a pass cannot express statement by statement)."""
    old = program.function(new.name)
    if record is not None and old.body != new.body:
        record.append(KRewrite(rule, new.name, (), "body", 0, old.body, new.body))
    return program.with_functions([new if f.name == new.name else f for f in program.functions])


def replay(program: Program, rewrites: Sequence[KRewrite]) -> Program:
    """The program after applying ``rewrites`` in order to ``program``."""
    for rw in rewrites:
        program = apply_one(program, rw)
    return program
