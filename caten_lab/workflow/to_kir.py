"""Lower an action (and every action it calls) from its typed CFG to kernel-IR functions.

Actions target the same kernel IR as tensor kernels (:mod:`caten_lab.codegen.kir`); the one C
renderer (:mod:`caten_lab.codegen.render`) prints them. The lowering follows how blocks nest in the
source (``ActionIR.structure``): a loop becomes ``WHILE true`` whose body first stops once an error is
recorded, then breaks when the condition fails, runs the body and ends with the latch (a for loop's
counter increment; a ``continue`` runs the latch first), with a flag for a loop ``else``; an if
becomes ``IF/ELSE``. A CFG without structure notes (built by hand) falls back to one ``Label`` per
block and ``Goto``. Every node carries ``Origin(file, line)`` of the user's Python line, from which
the C gets its ``#line`` directives.

Variables are split by type: ``x`` held as i32 and later as f64 are two locals ``v_x_i32`` and
``v_x_f64``; on a CFG edge whose target expects another type a conversion is emitted on that edge.
Run-time errors (division by zero always; out-of-bounds indices at safety >= 1, except indices
proven in range by ``bounds.py``; a failed heap allocation of a large Local) are recorded in
``err[0..3]`` (kind, Python line, value, bound) by the helpers of ``codegen/c/action.h``; loops and
callers stop as soon as ``err[0]`` is set.

Local arrays up to ``LOCAL_STACK_LIMIT`` bytes live on the C stack. Larger ones are calloc'd on every
call: the function becomes ``<name>__body`` (taking the buffers as extra parameters; every return
frees them) and a wrapper that allocates them as the arguments of its call, so every call (recursive
or on another thread) has its own buffers; a failed allocation is a run-time error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir as K
from caten_lab.errors import CompileError
from caten_lab.workflow import ir
from caten_lab.workflow.action_exprs import I64, ExprLowering, Unstructured, const
from caten_lab.workflow.infer import ERROR, MAYBE_UNDEF, Conflict, Env, reverse_postorder
from caten_lab.workflow.types import ArrayType, LocalType, ScalarType

ERR_INDEX, ERR_DIV0, ERR_MEMORY, ERR_COUNTER = 1, 2, 3, 4  # err[0] kinds (codegen/c/action.h)
LOCAL_STACK_LIMIT = 64 * 1024  # bytes of one Local array kept on the C stack
_ERRCHECK = "@errcheck"  # text of the placeholder Comment: `if (err[0]) return` where an error can be recorded


@dataclass
class LoweredActions:
    """The kernel-IR program of an action tree. ``entry`` is the exported function; ``functions`` maps
    action names to function names; ``externs`` are functions defined elsewhere (``host_<name>`` of
    host actions, defined by the export glue): only their prototypes are rendered."""

    program: K.Program
    entry: str
    functions: dict[str, str] = field(default_factory=dict)
    externs: tuple[K.Function, ...] = ()


class _FunctionLowering(ExprLowering):
    """One action to one kernel-IR function (two with heap Locals)."""

    # ------------------------------------------------------------------ statements
    def stmt(self, env: Env, s: ir.Stmt, out: list) -> None:
        tp = type(s)
        if tp is ir.Assign:
            value, t = self.rx(env, s.value)
            st = self.strong(t)
            out.append(K.Assign(self.var(s.target, st), self.cast(value, st), self.org))  # type: ignore[union-attr]
        elif tp is ir.Store:
            arr = env.get(s.array)  # type: ignore[union-attr]
            value, _ = self.rx(env, s.value)  # type: ignore[union-attr]
            buf, lin, checked = self.element_parts(env, s.array, s.indices, s.line)  # type: ignore[union-attr]
            value = self.cast(value, arr.dtype)  # type: ignore[union-attr]
            if not checked:
                out.append(K.Store(buf, lin, value, origin=self.org))
                return
            # a failed check stores nothing (the check gives 0 then: the caller's a[0] must stay as it was)
            self.decls.setdefault("cl_ix", K.Decl("cl_ix", I64, self.k(0, I64), origin=self.org))
            out.append(K.Assign("cl_ix", lin, self.org))
            ok = K.Alu("eq", (self.err_flag(), self.k(0, I64)), DType.bool, self.org)
            out.append(K.If(ok, (K.Store(buf, K.Var("cl_ix", I64, self.org), value, origin=self.org),), (), self.org))
        elif tp is ir.AllocLocal:
            c = self.var(s.target, s.type)  # type: ignore[union-attr]
            dt, n, line = self.locals[c]
            if line == 0:
                self.locals[c] = (dt, n, s.line)  # a failed heap allocation names this line
            zero = K.Store(c, K.Var("cl_z", I64, self.org), self.k(0, dt), origin=self.org)
            count = int(math.prod(s.type.dims))  # type: ignore[union-attr]
            out.append(K.For("cl_z", self.k(0, I64), self.k(count, I64), self.k(1, I64), (zero,), "fill", origin=self.org))
        else:
            value, _ = self.rx(env, s.value)  # type: ignore[union-attr]
            out.append(K.Eval(value, self.org))

    def block_stmts(self, env: Env, block: ir.Block, out: list) -> None:
        for st in block.stmts:
            self.at(st.line)
            self.stmt(env, st, out)
            self.checker.stmt(env, st)
        self.at(block.term.line)  # type: ignore[union-attr]

    def ret(self, env: Env, t: ir.Return) -> K.Return:
        if t.value is None or self.info.returns is None:
            return K.Return(None, self.org)
        value, _ = self.rx(env, t.value)
        return K.Return(self.cast(value, self.info.returns), self.org)

    def edge(self, env: Env, target: int) -> list[K.Stmt]:
        """Conversions for variables whose type at the target's entry differs from here."""
        out: list[K.Stmt] = []
        for name, want in self.info.entry[target].items():  # type: ignore[union-attr]
            if want is MAYBE_UNDEF or want is ERROR or isinstance(want, Conflict | ArrayType | LocalType):
                continue
            have = env.get(name)
            if have is not want and isinstance(have, ScalarType):
                src = K.Var(self.var(name, have), have.dtype, self.org)
                out.append(K.Assign(self.var(name, want), self.cast(src, want), self.org))
        return out

    # ------------------------------------------------------------------ structured lowering
    def structured(self) -> list[K.Stmt]:
        """Statements following the source's nesting (ir.ActionIR.structure)."""
        if self.ir.structure is None:
            raise Unstructured("no structure recorded")
        out: list[K.Stmt] = []
        self.seq(self.ir.structure, None, out, [])
        return out

    def seq(self, items: list, follow: int | None, out: list, loops: list[tuple]) -> None:
        """Lower a structure sequence; ``follow`` is the block reached when it ends normally."""
        entry = self.info.entry
        k = 0
        while k < len(items):
            item = items[k]
            nxt = items[k + 1] if k + 1 < len(items) else None
            if isinstance(item, int):
                if entry[item] is None:  # unreachable (code after return/break/continue)
                    k += 2 if isinstance(nxt, ir.SIf) and nxt.cond_block == item else 1
                    continue
                block = self.ir.blocks[item]
                env = Env(entry[item])  # type: ignore[arg-type]
                self.block_stmts(env, block, out)
                t = block.term
                if isinstance(t, ir.Return):
                    out.append(self.ret(env, t))
                elif isinstance(t, ir.Branch):
                    if not (isinstance(nxt, ir.SIf) and nxt.cond_block == item):
                        raise Unstructured(f"branch of block {item} is not an if")
                    self.if_else(env, t, nxt, out, loops)
                    k += 1
                else:
                    assert isinstance(t, ir.Jump)
                    natural = _first_block(nxt) if nxt is not None else follow
                    self.jump(env, t.target, natural, out, loops)
            elif isinstance(item, ir.SLoop) and entry[item.header] is not None:
                self.loop(item, out, loops)
            k += 1

    def jump(self, env: Env, target: int, natural: int | None, out: list, loops: list) -> None:
        out.extend(self.edge(env, target))
        if target == natural:
            return
        if loops and target == loops[-1][0]:
            out.extend(loops[-1][3])  # the latch (a for loop's increment), then the next iteration
            out.append(K.Continue(self.org))
        elif loops and target == loops[-1][1]:
            if loops[-1][2]:
                out.append(K.Assign(loops[-1][2], self.k(True, DType.bool), self.org))
            out.append(K.Break(self.org))
        else:
            raise Unstructured(f"jump to block {target} has no structured form")

    def if_else(self, env: Env, t: ir.Branch, note: ir.SIf, out: list, loops: list) -> None:
        cond, _ = self.rx(env, t.cond)
        org = self.org
        then = self.edge(env, t.if_true)
        self.seq(note.then, note.merge, then, loops)
        orelse = self.edge(env, t.if_false)
        if note.orelse:
            self.seq(note.orelse, note.merge, orelse, loops)
        out.append(K.If(cond, tuple(then), tuple(orelse), org))

    def loop(self, note: ir.SLoop, out: list, loops: list) -> None:
        entry = self.info.entry
        header = self.ir.blocks[note.header]
        t = header.term
        if header.stmts or not isinstance(t, ir.Branch) or t.if_true != _first_block(note.body[0]):
            raise Unstructured("unexpected loop header")
        flag = None
        if note.orelse:
            flag = f"brk_{note.header}"
            self.decls[flag] = K.Decl(flag, DType.bool, self.k(False, DType.bool), origin=self.org)
            out.append(K.Assign(flag, self.k(False, DType.bool), self.org))
        latch: tuple[K.Stmt, ...] = ()
        if note.latch is not None and entry[note.latch] is not None:
            lenv = Env(entry[note.latch])  # type: ignore[arg-type]
            parts: list[K.Stmt] = []
            self.block_stmts(lenv, self.ir.blocks[note.latch], parts)
            parts.extend(self.edge(lenv, note.header))
            latch = tuple(parts)
        self.at(t.line)
        henv = Env(entry[note.header])  # type: ignore[arg-type]
        fact = self.range_facts.get(note.header)
        if fact is not None and fact.array is not None and self.strong(henv.get(fact.counter)).dtype != I64:
            stop = self.cast(K.Var(self.var(fact.stop, henv.get(fact.stop)), self.strong(henv.get(fact.stop)).dtype,
                                   self.org), I64)
            fits = self.helper("cl_act_fits_i32", (stop, self.k(t.line, I64), self.err()), DType.bool)
            out.append(K.If(fits, (self.fail(),), (), self.org))
        body: list[K.Stmt] = [K.Comment(_ERRCHECK, self.org)]
        cond, _ = self.rx(henv, t.cond)
        org = self.org
        stop_loop = K.Alu("not", (self.cast(cond, DType.bool),), DType.bool, org)
        body.append(K.If(stop_loop, (*self.edge(henv, t.if_false), K.Break(org)), (), org))
        body.extend(self.edge(henv, t.if_true))
        inner = [*loops, (note.latch if note.latch is not None else note.header, note.exit, flag, latch)]
        if fact is not None:
            self.active[fact.var] = fact
        self.seq(note.body, note.latch if note.latch is not None else note.header, body, inner)
        if fact is not None:
            del self.active[fact.var]
        body.extend(latch)
        out.append(K.While(const(True, DType.bool, org), tuple(body), org))
        if note.orelse:
            orelse: list[K.Stmt] = []
            self.seq(note.orelse, note.exit, orelse, loops)
            out.append(K.If(K.Alu("not", (K.Var(flag, DType.bool, org),), DType.bool, org), tuple(orelse), (), org))

    # ------------------------------------------------------------------ labels and gotos
    def unstructured(self) -> list[K.Stmt]:
        """One label per block, ``Goto`` between them (CFGs without structure notes)."""
        blocks, entry = self.ir.blocks, self.info.entry
        order = reverse_postorder(blocks)
        pos = {b: i for i, b in enumerate(order)}
        out: list[K.Stmt] = []
        for i, b in enumerate(order):
            block = blocks[b]
            self.at(block.stmts[0].line if block.stmts else block.term.line)  # type: ignore[union-attr]
            out.append(K.Label(f"b{b}", self.org))
            env = Env(entry[b])  # type: ignore[arg-type]
            self.block_stmts(env, block, out)
            t = block.term
            nxt = order[i + 1] if i + 1 < len(order) else None
            if isinstance(t, ir.Jump):
                out.extend(self.edge(env, t.target))
                if pos[t.target] <= i:  # a back edge: stop looping once an error is recorded
                    out.append(K.Comment(_ERRCHECK, self.org))
                if t.target != nxt or pos[t.target] <= i:
                    out.append(K.Goto(f"b{t.target}", self.org))
            elif isinstance(t, ir.Branch):
                cond, _ = self.rx(env, t.cond)
                org = self.org
                back = pos[t.if_true] <= i or pos[t.if_false] <= i
                check = (K.Comment(_ERRCHECK, org),) if back else ()
                et, ef = self.edge(env, t.if_true), self.edge(env, t.if_false)
                out.append(K.If(cond, (*et, *check, K.Goto(f"b{t.if_true}", org)), (), org))
                if ef or back or t.if_false != nxt:
                    out.extend((*ef, *check, K.Goto(f"b{t.if_false}", org)))
            else:
                assert isinstance(t, ir.Return)
                out.append(self.ret(env, t))
        return out

    # ------------------------------------------------------------------ the function
    def function(self, name: str, linkage: str) -> list[K.Function]:
        """The kernel-IR function(s) of this action: structured if possible, else labels and gotos."""
        params = self.params()  # declares the parameters' variables first
        try:
            body = self.structured()
        except Unstructured:
            self.reset()
            params = self.params()
            body = self.unstructured()
        can_fail = self.can_fail

        def resolve(s: K.Stmt) -> tuple | None:
            if type(s) is not K.Comment or s.text != _ERRCHECK:
                return None
            return (self.errcheck(s.origin),) if can_fail else ()

        stmts = _map_stmts(tuple(body), resolve)
        heap = [(c, dt, n, line) for c, (dt, n, line) in self.locals.items() if n * dt.itemsize > LOCAL_STACK_LIMIT]
        on_heap = {h[0] for h in heap}
        org = self.fn_origin
        stack = [K.Decl(c, dt, size=const(n, I64, org), origin=org)
                 for c, (dt, n, _) in self.locals.items() if c not in on_heap]
        decls = (*self.decls.values(), *stack)
        ret = None if self.info.returns is None else self.info.returns.dtype
        if not heap:
            return [K.Function(name, params, (*decls, *stmts), ret, linkage, origin=self.fn_origin)]
        return self.heap_functions(name, linkage, params, decls, stmts, heap)

    def heap_functions(self, name: str, linkage: str, params: tuple, decls: tuple, stmts: tuple,
                       heap: list) -> list[K.Function]:
        """``<name>__body`` taking the heap Locals as parameters (freeing them at every return) and the
        wrapper ``<name>`` that allocates them in its call."""
        org = self.fn_origin
        ret = None if self.info.returns is None else self.info.returns.dtype
        frees = tuple(K.Eval(K.Call("cl_act_free", (K.Var(c, dt, org),), DType.int32, org), org)
                      for c, dt, _, _ in heap)

        def freeing(s: K.Stmt) -> tuple | None:
            if not isinstance(s, K.Return):
                return None
            if s.value is None:
                return (*frees, s)
            return (K.Assign("cl_rv", s.value, s.origin), *frees, K.Return(K.Var("cl_rv", ret, s.origin), s.origin))

        body = _map_stmts(stmts, freeing)
        null = [K.Call("cl_act_is_null", (K.Var(c, dt, org),), DType.bool, org) for c, dt, _, _ in heap]
        any_null = null[0]
        for x in null[1:]:
            any_null = K.Alu("lor", (any_null, x), DType.bool, org)
        rv = (K.Decl("cl_rv", ret, const(0, ret, org), origin=org),) if ret is not None else ()
        guard = K.If(any_null, (*frees, self.fail(org)), (), org)
        extra = tuple(K.Param(c, dt, pointer=True) for c, dt, _, _ in heap)
        inner = K.Function(f"{name}__body", (*params, *extra), (*rv, *decls, guard, *body), ret, "static", origin=org)
        args = [K.Addr(p.name, None, p.dtype, org) if p.pointer else K.Var(p.name, p.dtype, org) for p in params]
        for _c, dt, n, line in heap:
            size = (const(n, I64, org), const(dt.itemsize, I64, org), const(line or self.ir.firstline, I64, org))
            args.append(K.Call("cl_act_alloc_local", (*size, K.Addr("err", None, I64, org)), dt, org))
        call = K.Call(inner.name, tuple(args), ret or DType.int32, org)
        wrap = (K.Eval(call, org), K.Return(None, org)) if ret is None else (K.Return(call, org),)
        return [inner, K.Function(name, params, wrap, ret, linkage, origin=org)]

    def host_function(self, name: str, linkage: str) -> tuple[K.Function, K.Function]:
        """A host action: its body calls ``host_<name>`` (defined by the export glue) with its parameters."""
        params = self.params()
        org = self.fn_origin
        ret = None if self.info.returns is None else self.info.returns.dtype
        args = tuple(K.Addr(p.name, None, p.dtype, org) if p.pointer else K.Var(p.name, p.dtype, org) for p in params)
        extern = K.Function(f"host_{self.ir.name}", params, (), ret, "export", origin=org)
        call = K.Call(extern.name, args, ret or DType.int32, org)
        body = (K.Eval(call, org), K.Return(None, org)) if ret is None else (K.Return(call, org),)
        return K.Function(name, params, body, ret, linkage, origin=org), extern


def _map_stmts(body: tuple[K.Stmt, ...], fn: object) -> tuple[K.Stmt, ...]:
    """``body`` with each statement ``s`` replaced by the statements ``fn(s)`` (None keeps it), nested
    bodies included."""
    out: list[K.Stmt] = []
    for s in body:
        new = fn(s)  # type: ignore[operator]
        if new is not None:
            out.extend(new)
            continue
        fields = K.BODIES.get(type(s))
        if fields:
            s = replace(s, **{f: _map_stmts(getattr(s, f), fn) for f in fields})  # type: ignore[arg-type]
        out.append(s)
    return tuple(out)


def _first_block(item: object) -> int | None:
    if isinstance(item, int):
        return item
    if isinstance(item, ir.SLoop):
        return item.header
    return None


def entry_signature(act: object) -> K.Function:
    """The exported entry function of ``act`` without its body (its name, parameters and return type),
    without lowering any body: what glue code calling the entry needs."""
    low = _FunctionLowering(act, {}, 0)
    ret = None if low.info.returns is None else low.info.returns.dtype
    return K.Function(f"caten_action_{act.ir.name}", low.params(), (), ret, "export",  # type: ignore[attr-defined]
                      origin=low.fn_origin)


def lower_actions(act: object, safety: int = 1) -> LoweredActions:
    """The kernel-IR program of ``act`` and every action reachable through calls; the entry is exported."""
    names: dict[int, str] = {id(act): f"caten_action_{act.ir.name}"}  # type: ignore[attr-defined]
    done: set[int] = set()
    pending = [act]
    functions: list[K.Function] = []
    externs: list[K.Function] = []
    fmap: dict[str, str] = {}
    while pending:
        a = pending.pop()
        if id(a) in done:
            continue
        done.add(id(a))
        cname = names[id(a)]
        linkage = "export" if a is act else "static"
        low = _FunctionLowering(a, names, safety)
        if getattr(a, "host_linked", False):
            fn, extern = low.host_function(cname, linkage)
            functions.append(fn)
            externs.append(extern)
        else:
            functions.extend(low.function(cname, linkage))
        fmap[a.ir.name] = cname  # type: ignore[attr-defined]
        pending.extend(c for c in low.callees if id(c) not in done)
    if not functions:
        raise CompileError(f"nothing to compile for {act!r}")
    return LoweredActions(K.Program(tuple(functions)), names[id(act)], fmap, tuple(externs))
