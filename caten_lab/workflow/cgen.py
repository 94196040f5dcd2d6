"""Render an action (and every action it calls) to C, from its typed CFG.

Why not the kernel loop IR (caten_lab/codegen/loopir.py)? Its loops are counted ``for`` loops with
IF/ELSE bodies over C-string expressions; actions also have ``while``, ``break``, ``continue``, early
``return``, loop ``else`` clauses and variables whose numeric type changes along a path. So the C is
rendered here, structured: the lowering records how blocks nest (``ActionIR.structure``), loops
become ``for (;; <latch>) { if (!cond) break; ... }`` with C ``break``/``continue`` (a flag for loop
``else``), ifs become ``if/else``. A CFG without structure notes (built by hand) falls back to one
label per block with ``goto``. ``#line`` directives point C diagnostics at the user's Python lines.

Variables are split by type: ``x`` held as i32 and later as f64 are two C locals ``v_x_i32`` and
``v_x_f64``; on a CFG edge whose target expects another type a conversion is emitted on that edge.
Run-time errors (division by zero always; out-of-bounds indices at safety >= 1, except indices
proven in range by ``bounds.py``; a failed heap allocation of a large Local) are recorded in
``err[0..3]`` (kind, Python line, value, bound); loops and callers stop as soon as ``err[0]`` is set.

Local arrays up to ``LOCAL_STACK_LIMIT`` bytes live on the C stack. Larger ones are calloc'd on every
call and freed when it returns: the function is split into ``<name>__body`` (the rendered code,
taking the buffers as extra parameters) and a wrapper that allocates, calls and frees. Every call
(recursive or on another thread) has its own buffers; a failed allocation is a run-time error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from importlib import resources

from caten_lab.errors import CompileError
from caten_lab.workflow import ir
from caten_lab.workflow.bounds import RangeFact, const_in_range, proves, range_facts
from caten_lab.workflow.infer import (
    ERROR,
    MAYBE_UNDEF,
    VOID,
    WEAK_INT,
    Checker,
    Conflict,
    Env,
    is_float,
    join_numeric,
    reverse_postorder,
    strengthen,
)
from caten_lab.workflow.types import ArrayType, LocalType, ScalarType, boolean, f32, f64, i32, i64, u8

ERR_INDEX, ERR_DIV0, ERR_MEMORY, ERR_COUNTER = 1, 2, 3, 4  # err[0] kinds (c/action_prelude.h)
_ERRCHECK = "@ERRCHECK@"
# calls that can record an error: a function containing one stops its loops once err[0] is set
_ERROR_TOKENS = ("aw_ck(", "aw_div_", "aw_fdiv_", "aw_mod_", "aw_fits_i32(", "act_", "caten_action_")
LOCAL_STACK_LIMIT = 64 * 1024  # bytes of one Local array kept on the C stack

PRELUDE = (resources.files("caten_lab.workflow") / "c" / "action_prelude.h").read_text(encoding="utf-8")


def _int_helpers(c: str, name: str, unsigned: bool) -> str:
    if unsigned:
        fd = f"return ({c})(a / b);"
        md = f"return ({c})(a % b);"
    else:  # Python floor semantics; b == -1 avoids the INT_MIN / -1 trap
        fd = (
            f"if (b == -1) return ({c})(0 - (uint64_t)a); {c} q = ({c})(a / b); "
            f"return (q * b != a && ((a < 0) != (b < 0))) ? ({c})(q - 1) : q;"
        )
        md = (
            f"if (b == -1) return 0; {c} r = ({c})(a % b); "
            f"return (r != 0 && ((r < 0) != (b < 0))) ? ({c})(r + b) : r;"
        )
    return (
        f"static inline {c} aw_fdiv_{name}({c} a, {c} b, int64_t line, int64_t *err) "
        f"{{ if (aw_zero(b == 0, line, err)) return 0; {fd} }}\n"
        f"static inline {c} aw_mod_{name}({c} a, {c} b, int64_t line, int64_t *err) "
        f"{{ if (aw_zero(b == 0, line, err)) return 0; {md} }}\n"
        f"static inline double aw_div_{name}({c} a, {c} b, int64_t line, int64_t *err) "
        f"{{ if (aw_zero(b == 0, line, err)) return 0; return (double)a / (double)b; }}\n"
        f"static inline {c} aw_min_{name}({c} a, {c} b) {{ return b < a ? b : a; }}\n"
        f"static inline {c} aw_max_{name}({c} a, {c} b) {{ return b > a ? b : a; }}\n"
        f"static inline {c} aw_abs_{name}({c} a) {{ return a < 0 ? ({c})(0 - a) : a; }}\n"
    )


def _float_helpers(c: str, name: str, suffix: str) -> str:
    return (
        f"static inline {c} aw_div_{name}({c} a, {c} b, int64_t line, int64_t *err) "
        f"{{ if (aw_zero(b == 0, line, err)) return 0; return a / b; }}\n"
        f"static inline {c} aw_fdiv_{name}({c} a, {c} b, int64_t line, int64_t *err) "
        f"{{ if (aw_zero(b == 0, line, err)) return 0; return floor{suffix}(a / b); }}\n"
        f"static inline {c} aw_mod_{name}({c} a, {c} b, int64_t line, int64_t *err) {{ "
        f"if (aw_zero(b == 0, line, err)) return 0; {c} r = fmod{suffix}(a, b); "
        f"if (r != 0 && ((r < 0) != (b < 0))) r += b; return r; }}\n"
        f"static inline {c} aw_min_{name}({c} a, {c} b) {{ return b < a ? b : a; }}\n"
        f"static inline {c} aw_max_{name}({c} a, {c} b) {{ return b > a ? b : a; }}\n"
        f"static inline {c} aw_abs_{name}({c} a) {{ return fabs{suffix}(a); }}\n"
    )


HELPERS = (
    PRELUDE
    + _int_helpers("int32_t", "i32", False)
    + _int_helpers("int64_t", "i64", False)
    + _int_helpers("uint8_t", "u8", True)
    + _float_helpers("float", "f32", "f")
    + _float_helpers("double", "f64", "")
)


@dataclass
class RenderedActions:
    """C source of an action and its callees; ``entry`` is the exported function's name."""

    source: str
    entry: str
    cdef: str
    functions: dict[str, str] = field(default_factory=dict)  # action name -> C function name


def c_type(t: ScalarType) -> str:
    return t.c_name


def _lit(v: int | float | bool, t: object) -> str:
    """A C literal of value ``v`` (its type ``t`` is the literal's inferred type)."""
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, float):
        if math.isnan(v):
            s = "NAN"
        elif math.isinf(v):
            s = "INFINITY" if v > 0 else "(-INFINITY)"
        else:
            s = repr(v)
        return f"((float){s})" if t is f32 else f"({s})"
    if -(2**31) <= v < 2**31:
        return f"({v})"
    return f"INT64_C({v})" if v >= 0 else f"(-INT64_C({-v}))"


def _cast(code: str, src: object, dst: object) -> str:
    """Convert rendered ``code`` of type ``src`` to scalar type ``dst``."""
    dst = strengthen(dst)
    if src is dst:
        return code
    if dst is boolean:
        return f"(({code}) != 0)"
    return f"(({dst.c_name}){code})"  # type: ignore[union-attr]


class _FunctionRenderer:
    def __init__(self, act: object, names: dict[int, str], safety: int) -> None:
        self.act = act
        self.ir: ir.ActionIR = act.ir  # type: ignore[attr-defined]
        self.info = act.types  # type: ignore[attr-defined]
        self.names = names
        self.safety = safety
        self.checker = Checker(self.ir)
        self.decls: dict[str, str] = {}  # C local name -> declaration
        self.param_types = dict(self.ir.params)
        self.callees: list[object] = []
        self.range_facts = range_facts(self.ir) if safety >= 1 else {}
        self.active: dict[str, RangeFact] = {}  # loop variable -> the fact of the loop being rendered
        self.local_sizes: dict[str, int] = {}  # C name of a Local -> elements to declare
        self.heap: dict[str, tuple[str, int]] = {}  # C name of a heap Local -> (C type, line)

    # ------------------------------------------------------------------ names
    def var(self, name: str, t: object) -> str:
        t = strengthen(t)
        if isinstance(t, ArrayType):
            return f"a_{name}"
        if isinstance(t, LocalType):
            c = f"l_{name}"
            n = max(int(math.prod(t.dims)), self.local_sizes.get(c, 0))
            self.local_sizes[c] = n
            if n * max(t.dtype.bits // 8, 1) > LOCAL_STACK_LIMIT:  # the C stack would overflow: heap
                self.decls.pop(c, None)
                line = self.heap[c][1] if c in self.heap else self.ir.firstline
                self.heap[c] = (t.dtype.c_name, line)
            else:
                self.decls[c] = f"{t.dtype.c_name} {c}[{n}];"
            return c
        # type names contain no '_', so "<prefix>_<name>_<type>" never collides across (name, type) pairs
        c = f"h_{name[2:]}_{t.name}" if name.startswith("__") else f"v_{name}_{t.name}"  # type: ignore[union-attr]
        if self.param_types.get(name) is not t:
            self.decls.setdefault(c, f"{t.c_name} {c} = 0;")  # type: ignore[union-attr]
        return c

    def dims(self, name: str, t: ArrayType | LocalType) -> list[str]:
        if isinstance(t, LocalType):
            return [str(d) for d in t.dims]
        return [str(d) if isinstance(d, int) else f"a_{name}_d{k}" for k, d in enumerate(t.dims)]

    # ------------------------------------------------------------------ expressions
    def rx(self, env: Env, e: ir.Expr) -> tuple[str, object]:  # noqa: C901 - one dispatch over expression kinds
        t = self.checker.expr(env, e)
        tp = type(e)
        if tp is ir.Const:
            return _lit(e.value, t), t  # type: ignore[union-attr]
        if tp is ir.Name:
            return self.var(e.id, t), t  # type: ignore[union-attr]
        if tp is ir.Binary:
            return self.binary(env, e, t), t  # type: ignore[arg-type]
        if tp is ir.Compare:
            (a, ta), (b, tb) = self.rx(env, e.left), self.rx(env, e.right)  # type: ignore[union-attr]
            j = strengthen(join_numeric(_arith(ta), _arith(tb)))
            if not is_float(j):  # integers compare exactly in i64 (`data[i] < 300` with u8 data)
                j = i64
            return f"({_cast(a, ta, j)} {e.op} {_cast(b, tb, j)})", t  # type: ignore[union-attr]
        if tp is ir.Logic:
            parts = [self.rx(env, v)[0] for v in e.values]  # type: ignore[union-attr]
            return "(" + (" && " if e.op == "and" else " || ").join(parts) + ")", t  # type: ignore[union-attr]
        if tp is ir.Unary:
            a, ta = self.rx(env, e.operand)  # type: ignore[union-attr]
            op = e.op  # type: ignore[union-attr]
            if op == "not":
                return f"(!({a}))", t
            st = strengthen(t)
            if op == "pos":
                return _cast(a, ta, st), t
            sym = "-" if op == "neg" else "~"
            return f"(({st.c_name})({sym}{_cast(a, ta, st)}))", t  # type: ignore[union-attr]
        if tp is ir.Index:
            return self.element(env, e.array, e.indices, e.line), t  # type: ignore[union-attr]
        if tp is ir.Dim:
            arr = env.get(e.array)  # type: ignore[union-attr]
            return f"((int64_t){self.dims(e.array, arr)[e.axis]})", t  # type: ignore[union-attr, arg-type]
        if tp is ir.Cast:
            a, ta = self.rx(env, e.operand)  # type: ignore[union-attr]
            return _cast(a, ta, e.to), t  # type: ignore[union-attr]
        if tp is ir.IfExp:
            c, _ = self.rx(env, e.cond)  # type: ignore[union-attr]
            (a, ta), (b, tb) = self.rx(env, e.then), self.rx(env, e.orelse)  # type: ignore[union-attr]
            st = strengthen(t)
            return f"(({c}) ? {_cast(a, ta, st)} : {_cast(b, tb, st)})", t
        if tp is ir.Builtin:
            st = strengthen(t)
            args = [_cast(*self.rx(env, a), st) for a in e.args]  # type: ignore[union-attr]
            if e.name == "abs":  # type: ignore[union-attr]
                return f"aw_abs_{st.name}({args[0]})", t  # type: ignore[union-attr]
            code = args[0]
            for a in args[1:]:
                code = f"aw_{e.name}_{st.name}({code}, {a})"  # type: ignore[union-attr]
            return code, t
        if tp is ir.Call:
            return self.call(env, e), t  # type: ignore[arg-type]
        raise CompileError(f"cannot render {e!r}")

    def binary(self, env: Env, e: ir.Binary, t: object) -> str:
        (a, ta), (b, tb) = self.rx(env, e.left), self.rx(env, e.right)
        op, line = e.op, e.line
        st = strengthen(t)
        if op == "/":
            j = strengthen(join_numeric(_arith(ta), _arith(tb)))
            if not is_float(j):
                return f"(({st.c_name})aw_div_{j.name}({_cast(a, ta, j)}, {_cast(b, tb, j)}, {line}, err))"  # type: ignore[union-attr]
            return f"aw_div_{st.name}({_cast(a, ta, st)}, {_cast(b, tb, st)}, {line}, err)"  # type: ignore[union-attr]
        if op in ("//", "%"):
            fn = "fdiv" if op == "//" else "mod"
            return f"aw_{fn}_{st.name}({_cast(a, ta, st)}, {_cast(b, tb, st)}, {line}, err)"  # type: ignore[union-attr]
        if op in ("<<", ">>"):
            return f"(({st.c_name})({_cast(a, ta, st)} {op} {_cast(b, tb, i64)}))"  # type: ignore[union-attr]
        if st is boolean:
            return f"({a} {op} {b})"
        return f"(({st.c_name})({_cast(a, ta, st)} {op} {_cast(b, tb, st)}))"  # type: ignore[union-attr]

    def element(self, env: Env, name: str, indices: list[ir.Expr], line: int) -> str:
        arr, lin = self.element_parts(env, name, indices, line)
        return f"{arr}[{lin}]"

    def element_parts(self, env: Env, name: str, indices: list[ir.Expr], line: int) -> tuple[str, str]:
        """The C array and linear index of ``name[indices]`` (checked unless proven in range)."""
        t = env.get(name)
        arr = self.var(name, t)
        dims = self.dims(name, t)  # type: ignore[arg-type]
        parts = []
        tdims = t.dims  # type: ignore[union-attr]
        for k, ix in enumerate(indices):
            code, ti = self.rx(env, ix)
            code = _cast(code, ti, i64)
            if self.safety >= 1 and not self.in_range(ix, name, tdims, k):
                code = f"aw_ck({code}, {dims[k]}, {line}, err)"
            parts.append(code)
        lin = parts[0]
        for k in range(1, len(parts)):
            lin = f"({lin} * (int64_t){dims[k]} + {parts[k]})"
        return arr, lin

    def in_range(self, ix: ir.Expr, array: str, dims: tuple, axis: int) -> bool:
        """An index proven in range at compile time (bounds.py): its run-time check is dropped."""
        if type(ix) is ir.Name:
            return proves(self.active.get(ix.id), array, dims, axis)  # type: ignore[union-attr]
        return const_in_range(ix, dims, axis)

    def call(self, env: Env, e: ir.Call) -> str:
        callee = e.callee
        if id(callee) not in self.names:
            self.callees.append(callee)
            self.names[id(callee)] = f"act_{callee.ir.name}_{len(self.names)}"  # type: ignore[attr-defined]
        args: list[str] = []
        for arg, (_, ptype) in zip(e.args, callee.ir.params):  # type: ignore[attr-defined]
            if isinstance(ptype, ArrayType):
                at = env.get(arg.id)  # type: ignore[union-attr]
                args.append(self.var(arg.id, at))  # type: ignore[union-attr]
                args.extend(f"(int64_t){d}" for d in self.dims(arg.id, at))  # type: ignore[union-attr, arg-type]
            else:
                code, ta = self.rx(env, arg)
                args.append(_cast(code, ta, ptype))
        args.append("err")
        return f"{self.names[id(callee)]}({', '.join(args)})"

    # ------------------------------------------------------------------ function
    def params(self) -> list[tuple[str, str]]:
        """(C declaration, C name) of each parameter, ``err`` last."""
        params = []
        for name, t in self.ir.params:
            if isinstance(t, ArrayType):
                params.append((f"{t.dtype.c_name} *a_{name}", f"a_{name}"))
                params.extend((f"int64_t a_{name}_d{k}", f"a_{name}_d{k}") for k in range(len(t.dims)))
            else:
                c = self.var(name, t)
                params.append((f"{t.c_name} {c}", c))
        params.append(("int64_t *err", "err"))
        return params

    def signature(self, cname: str, static: bool, extra: list[str] | None = None) -> str:
        params = [p for p, _ in self.params()] + (extra or [])
        ret = self.info.returns
        rt = "void" if ret is None else ret.c_name
        return f"{'static ' if static else ''}{rt} {cname}({', '.join(params)})"

    def assemble(self, cname: str, static: bool, body: list[str]) -> str:
        """The function's text around ``body``; with heap Locals, a body function and its wrapper."""
        fail_ret = "return;" if self.info.returns is None else "return 0;"
        heap = list(self.heap.items())
        extra = [f"{ct} *restrict {c}" for c, (ct, _) in heap]
        head = self.signature(f"{cname}__body" if heap else cname, static or bool(heap), extra)
        decls = ["  " + d for d in self.decls.values()]
        text = "\n".join([head + " {", *decls, "  (void)err;", *body, "}"])
        # loops stop once an error is recorded; only functions that can record one pay for the check
        body_text = "\n".join(body)
        if any(tok in body_text for tok in _ERROR_TOKENS):
            text = text.replace(_ERRCHECK, "if (err[0]) ")
        else:
            lines = [line for line in text.split("\n") if line.strip() != _ERRCHECK + fail_ret]
            text = "\n".join(lines).replace(" " + _ERRCHECK + fail_ret, "")
        if not heap:
            return text
        ret = self.info.returns
        wrap = [self.signature(cname, static) + " {"]
        for c, (ct, line) in heap:
            wrap.append(f"  {ct} *{c} = ({ct} *)aw_alloc_local({self.local_sizes[c]}, sizeof({ct}), {line}, err);")
        frees = " ".join(f"free({c});" for c, _ in heap)
        wrap.append(f"  if ({' || '.join('!' + c for c, _ in heap)}) {{ {frees} {fail_ret} }}")
        call = f"{cname}__body({', '.join([n for _, n in self.params()] + [c for c, _ in heap])})"
        if ret is None:
            wrap += [f"  {call};", f"  {frees}", "}"]
        else:
            wrap += [f"  {ret.c_name} r = {call};", f"  {frees}", "  return r;", "}"]
        return text + "\n\n" + "\n".join(wrap)

    # ------------------------------------------------------------------ structured rendering
    def render_structured(self, cname: str, static: bool) -> str:
        """C with for/if/else/break/continue following the source's nesting (ir.ActionIR.structure)."""
        if self.ir.structure is None:
            raise _Unstructured("no structure recorded")
        ret = self.info.returns
        self.fail_ret = "return;" if ret is None else "return 0;"
        self.out: list[str] = []
        self.last_line = -1
        self.seq(self.ir.structure, None, 1, [])
        return self.finish(cname, static, self.out)

    def emit(self, text: str, depth: int) -> None:
        self.out.append("  " * depth + text)

    def mark_line(self, line: int) -> None:
        if line and line != self.last_line:
            file = self.ir.file.replace("\\", "\\\\").replace('"', '\\"')
            self.out.append(f'#line {line} "{file}"')
            self.last_line = line

    def seq(
        self, items: list, follow: int | None, depth: int, loops: list[tuple[int, int, str | None]]
    ) -> None:
        """Render a structure sequence; ``follow`` is the block reached when it ends normally."""
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
                for st in block.stmts:
                    self.mark_line(st.line)
                    self.emit(self.stmt(env, st), depth)
                    self.checker.stmt(env, st)
                t = block.term
                self.mark_line(t.line)  # type: ignore[union-attr]
                if isinstance(t, ir.Return):
                    if t.value is None:
                        self.emit("return;", depth)
                    else:
                        code, tv = self.rx(env, t.value)
                        self.emit(f"return {_cast(code, tv, self.info.returns)};", depth)
                elif isinstance(t, ir.Branch):
                    if not (isinstance(nxt, ir.SIf) and nxt.cond_block == item):
                        raise _Unstructured(f"branch of block {item} is not an if")
                    self.if_else(env, t, nxt, depth, loops)
                    k += 1
                else:
                    assert isinstance(t, ir.Jump)
                    natural = _first_block(nxt) if nxt is not None else follow
                    self.jump(env, t.target, natural, depth, loops)
            elif isinstance(item, ir.SLoop):
                if entry[item.header] is not None:
                    self.loop(item, depth, loops)
            else:  # an if whose condition block is unreachable
                pass
            k += 1

    def jump(self, env: Env, target: int, natural: int | None, depth: int, loops: list) -> None:
        for c in self.edge(env, target):
            self.emit(c, depth)
        if target == natural:
            return
        if loops and target == loops[-1][0]:
            self.emit("continue;", depth)
        elif loops and target == loops[-1][1]:
            if loops[-1][2]:
                self.emit(f"{loops[-1][2]} = 1;", depth)
            self.emit("break;", depth)
        else:
            raise _Unstructured(f"jump to block {target} has no structured form")

    def if_else(self, env: Env, t: ir.Branch, note: ir.SIf, depth: int, loops: list) -> None:
        cond, _ = self.rx(env, t.cond)
        self.emit(f"if ({cond}) {{", depth + 0)
        for c in self.edge(env, t.if_true):
            self.emit(c, depth + 1)
        self.seq(note.then, note.merge, depth + 1, loops)
        conv_false = self.edge(env, t.if_false)
        if note.orelse or conv_false:
            self.emit("} else {", depth)
            for c in conv_false:
                self.emit(c, depth + 1)
            if note.orelse:
                self.seq(note.orelse, note.merge, depth + 1, loops)
        self.emit("}", depth)

    def loop(self, note: ir.SLoop, depth: int, loops: list) -> None:
        entry = self.info.entry
        header = self.ir.blocks[note.header]
        t = header.term
        if header.stmts or not isinstance(t, ir.Branch) or t.if_true != _first_block(note.body[0]):
            raise _Unstructured("unexpected loop header")
        flag = None
        if note.orelse:
            flag = f"brk_{note.header}"
            self.decls[flag] = f"int {flag} = 0;"
            self.emit(f"{flag} = 0;", depth)
        incr = ""
        if note.latch is not None:
            latch = self.ir.blocks[note.latch]
            if entry[note.latch] is not None:
                lenv = Env(entry[note.latch])  # type: ignore[arg-type]
                parts = []
                for st in latch.stmts:
                    parts.append(self.stmt(lenv, st).rstrip(";"))
                    self.checker.stmt(lenv, st)
                parts.extend(c.rstrip(";") for c in self.edge(lenv, note.header))
                incr = ", ".join(parts)
        self.mark_line(t.line)
        henv = Env(entry[note.header])  # type: ignore[arg-type]
        fact = self.range_facts.get(note.header)
        if fact is not None and fact.array is not None and strengthen(henv.get(fact.counter)) is not i64:
            stop_t = henv.get(fact.stop)
            self.emit(f"if (aw_fits_i32({_cast(self.var(fact.stop, stop_t), stop_t, i64)}, {t.line}, err)) {self.fail_ret}", depth)
        self.emit(f"for (;; {incr}) {{" if incr else "for (;;) {", depth)
        self.emit(f"{_ERRCHECK}{self.fail_ret}", depth + 1)
        cond, _ = self.rx(henv, t.cond)
        exit_conv = " ".join(self.edge(henv, t.if_false))
        self.emit(f"if (!({cond})) {{ {exit_conv}{' ' if exit_conv else ''}break; }}", depth + 1)
        for c in self.edge(henv, t.if_true):
            self.emit(c, depth + 1)
        inner = [*loops, (note.latch if note.latch is not None else note.header, note.exit, flag)]
        if fact is not None:
            self.active[fact.var] = fact
        self.seq(note.body, note.latch if note.latch is not None else note.header, depth + 1, inner)
        if fact is not None:
            del self.active[fact.var]
        self.emit("}", depth)
        if note.orelse:
            self.emit(f"if (!{flag}) {{", depth)
            self.seq(note.orelse, note.exit, depth + 1, loops)
            self.emit("}", depth)

    def finish(self, cname: str, static: bool, body: list[str]) -> str:
        return self.assemble(cname, static, body)

    def render(self, cname: str, static: bool) -> str:
        blocks = self.ir.blocks
        entry = self.info.entry
        order = reverse_postorder(blocks)
        pos = {b: i for i, b in enumerate(order)}
        ret = self.info.returns
        fail_ret = "return;" if ret is None else "return 0;"
        body: list[str] = []
        file = self.ir.file.replace("\\", "\\\\").replace('"', '\\"')
        last_line = -1
        for i, b in enumerate(order):
            block = blocks[b]
            body.append(f"b{b}:;")
            env = Env(entry[b])  # type: ignore[arg-type]
            for s in block.stmts:
                if s.line != last_line and s.line:
                    body.append(f'#line {s.line} "{file}"')
                    last_line = s.line
                body.append("  " + self.stmt(env, s))
                self.checker.stmt(env, s)
            t = block.term
            if t.line and t.line != last_line:  # type: ignore[union-attr]
                body.append(f'#line {t.line} "{file}"')  # type: ignore[union-attr]
                last_line = t.line  # type: ignore[union-attr]
            nxt = order[i + 1] if i + 1 < len(order) else None
            if isinstance(t, ir.Jump):
                body.extend("  " + c for c in self.edge(env, t.target))
                if pos[t.target] <= i:  # a back edge: stop looping once an error is recorded
                    body.append(f"  {_ERRCHECK}{fail_ret}")
                if t.target != nxt or pos[t.target] <= i:
                    body.append(f"  goto b{t.target};")
            elif isinstance(t, ir.Branch):
                cond, _ = self.rx(env, t.cond)
                et, ef = self.edge(env, t.if_true), self.edge(env, t.if_false)
                back = f" {_ERRCHECK}{fail_ret}" if pos[t.if_true] <= i or pos[t.if_false] <= i else ""
                body.append(f"  if ({cond}) {{{' '.join(['', *et])}{back} goto b{t.if_true}; }}")
                if ef or back or t.if_false != nxt:
                    body.append(
                        f"  {' '.join([*ef, ''])}{back.strip()}{' ' if back else ''}goto b{t.if_false};"
                    )
            else:
                assert isinstance(t, ir.Return)
                if ret is None:
                    body.append("  return;")
                else:
                    code, tv = self.rx(env, t.value)  # type: ignore[arg-type]
                    body.append(f"  return {_cast(code, tv, ret)};")
        return self.assemble(cname, static, body)

    def edge(self, env: Env, target: int) -> list[str]:
        """Conversions for variables whose type at the target's entry differs from here."""
        out = []
        for name, want in self.info.entry[target].items():  # type: ignore[union-attr]
            if want is MAYBE_UNDEF or want is ERROR or isinstance(want, Conflict | ArrayType | LocalType):
                continue
            have = env.get(name)
            if have is not want and isinstance(have, ScalarType):
                out.append(f"{self.var(name, want)} = {_cast(self.var(name, have), have, want)};")
        return out

    def stmt(self, env: Env, s: ir.Stmt) -> str:
        if type(s) is ir.Assign:
            code, t = self.rx(env, s.value)
            st = strengthen(t)
            return f"{self.var(s.target, st)} = {_cast(code, t, st)};"
        if type(s) is ir.Store:
            arr = env.get(s.array)
            code, t = self.rx(env, s.value)
            c_arr, lin = self.element_parts(env, s.array, s.indices, s.line)
            value = _cast(code, t, arr.dtype)  # type: ignore[union-attr]
            if "aw_ck(" not in lin:
                return f"{c_arr}[{lin}] = {value};"
            # a failed check stores nothing (aw_ck gives 0 then: the caller's a[0] must stay as it was)
            return f"{{ int64_t aw_ix = {lin}; if (__builtin_expect(!err[0], 1)) {c_arr}[aw_ix] = {value}; }}"
        if type(s) is ir.AllocLocal:
            c = self.var(s.target, s.type)
            if c in self.heap and self.heap[c][1] == self.ir.firstline:
                self.heap[c] = (self.heap[c][0], s.line)  # a failed allocation names this line
            return f"memset({c}, 0, sizeof({s.type.dtype.c_name}) * {int(math.prod(s.type.dims))});"
        code, _ = self.rx(env, s.value)  # type: ignore[union-attr]
        return f"(void){code};"


class _Unstructured(Exception):
    """The CFG has no structure note for some edge: fall back to labels and gotos."""


def _first_block(item: object) -> int | None:
    if isinstance(item, int):
        return item
    if isinstance(item, ir.SLoop):
        return item.header
    return None


def _arith(t: object) -> object:
    return i32 if t is boolean else t


def render_c(act: object, safety: int = 1) -> RenderedActions:
    """C for ``act`` and all actions reachable through calls; the entry is exported (non-static)."""
    names: dict[int, str] = {id(act): f"caten_action_{act.ir.name}"}  # type: ignore[attr-defined]
    done: set[int] = set()
    pending = [act]
    functions: list[str] = []
    protos: list[str] = []
    fmap: dict[str, str] = {}
    entry_sig = ""
    while pending:
        a = pending.pop()
        if id(a) in done:
            continue
        done.add(id(a))
        r = _FunctionRenderer(a, names, safety)
        cname = names[id(a)]
        is_entry = a is act
        try:
            text = r.render_structured(cname, static=not is_entry)
        except _Unstructured:
            r = _FunctionRenderer(a, names, safety)
            text = r.render(cname, static=not is_entry)
        functions.append(text)
        protos.append(r.signature(cname, static=not is_entry) + ";")
        if is_entry:
            entry_sig = r.signature(cname, static=False) + ";"
        fmap[a.ir.name] = cname  # type: ignore[attr-defined]
        pending.extend(c for c in r.callees if id(c) not in done)
    source = HELPERS + "\n" + "\n".join(protos) + "\n\n" + "\n\n".join(functions) + "\n"
    _ = (VOID, WEAK_INT, u8, f64)
    return RenderedActions(source, names[id(act)], entry_sig, fmap)
