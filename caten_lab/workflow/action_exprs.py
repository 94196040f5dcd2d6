"""Action expressions to kernel-IR expressions (the expression half of :mod:`caten_lab.workflow.to_kir`).

Types come from the action's block-level inference (:class:`~caten_lab.workflow.infer.Checker`);
the kernel IR carries only :class:`~caten_lab.air.dtypes.DType` (``ScalarType.dtype``). Python
semantics that C lacks are calls of the helpers in ``codegen/c/action.h``: floor ``//`` and ``%``,
true division of integers, Python's ``min``/``max``/``abs``, checked indices (``cl_act_ck``, which
records the user's line in ``err``).
"""

from __future__ import annotations

import math

from caten_lab.air.dtypes import DType
from caten_lab.codegen import kir as K
from caten_lab.errors import CompileError
from caten_lab.workflow import ir
from caten_lab.workflow.bounds import RangeFact, const_in_range, proves, range_facts
from caten_lab.workflow.infer import Checker, Env, is_float, join_numeric, strengthen
from caten_lab.workflow.types import ArrayType, LocalType, ScalarType, boolean, i32, i64

I64 = DType.int64
_BINARY = {"+": "add", "-": "sub", "*": "mul", "&": "and", "|": "or", "^": "xor", "<<": "shl", ">>": "shr"}
_COMPARE = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}
# helpers and functions that can record an error: a function calling one stops its loops once err[0] is set
RECORDS = ("cl_act_ck", "cl_act_div_", "cl_act_fdiv_", "cl_act_mod_", "cl_act_fits_i32", "cl_act_alloc_local",
           "act_", "caten_action_", "host_")
_LIMITS = {DType.int32: (-(2**31), 2**31 - 1), DType.int64: (-(2**63), 2**63 - 1), DType.uint8: (0, 255)}


class Unstructured(Exception):
    """The CFG has no structure note for some edge: fall back to labels and gotos."""


def const(v: int | float | bool, dt: DType, origin: K.Origin = K.NO_ORIGIN) -> K.Const:
    return K.Const(v, dt, origin)


def dtype_of(t: object) -> DType:
    """The DType of an action type (weak literal types strengthened: an int literal is i32)."""
    st = strengthen(t)
    if not isinstance(st, ScalarType):
        raise CompileError(f"no scalar type for {t!r}")
    return st.dtype


def _retype(c: K.Const, dt: DType) -> K.Const | None:
    """A literal converted at compile time when that is exact (else None: a C conversion)."""
    v = c.value
    if isinstance(v, bool) or dt == DType.bool:
        return None
    if dt.is_float:
        return K.Const(float(v), dt, c.origin)
    lo_hi = _LIMITS.get(dt)
    if isinstance(v, int) and lo_hi is not None and lo_hi[0] <= v <= lo_hi[1]:
        return K.Const(v, dt, c.origin)
    return None


class ExprLowering:
    """Per-function state (variable names, declarations, Locals, callees) and the expression lowering."""

    def __init__(self, act: object, names: dict[int, str], safety: int) -> None:
        self.act = act
        self.ir: ir.ActionIR = act.ir  # type: ignore[attr-defined]
        self.info = act.types  # type: ignore[attr-defined]
        self.names = names
        self.safety = safety
        self.param_types = dict(self.ir.params)
        self.range_facts = range_facts(self.ir) if safety >= 1 else {}
        self.fn_origin = K.Origin(file=self.ir.file, line=self.ir.firstline)
        self._origins: dict[int, K.Origin] = {}
        # actions called (named in ``names`` when first seen): kept across reset(), since a second attempt
        # finds their names taken and would not list them again
        self.callees: list[object] = []
        self.reset()

    def reset(self) -> None:
        self.checker = Checker(self.ir)
        self.decls: dict[str, K.Decl] = {}  # variable -> its declaration (at the top of the function)
        self.locals: dict[str, tuple[DType, int, int]] = {}  # Local -> (dtype, elements, line of Local())
        self.active: dict[str, RangeFact] = {}  # loop variable -> the fact of the loop being lowered
        self.org = self.fn_origin
        self.can_fail = False  # set by a call that can record an error

    def at(self, line: int) -> None:
        """Nodes built from now on come from Python line ``line``."""
        if line:
            o = self._origins.get(line)
            if o is None:
                o = self._origins[line] = K.Origin(file=self.ir.file, line=line)
            self.org = o

    # ------------------------------------------------------------------ names
    def strong(self, t: object) -> ScalarType:
        return strengthen(t)  # type: ignore[return-value]

    def var(self, name: str, t: object) -> str:
        t = strengthen(t)
        if isinstance(t, ArrayType):
            return f"a_{name}"
        if isinstance(t, LocalType):
            c = f"l_{name}"
            n = int(math.prod(t.dims))
            old = self.locals.get(c)
            self.locals[c] = (t.dtype.dtype, max(n, old[1]) if old else n, old[2] if old else 0)
            return c
        # type names contain no '_', so "<prefix>_<name>_<type>" never collides across (name, type) pairs
        c = f"h_{name[2:]}_{t.name}" if name.startswith("__") else f"v_{name}_{t.name}"  # type: ignore[union-attr]
        if self.param_types.get(name) is not t:
            dt = t.dtype  # type: ignore[union-attr]
            self.decls.setdefault(c, K.Decl(c, dt, const(0, dt, self.fn_origin), origin=self.fn_origin))
        return c

    def dims(self, name: str, t: ArrayType | LocalType) -> list[K.Expr]:
        if isinstance(t, LocalType):
            return [self.k(d, I64) for d in t.dims]
        return [self.k(d, I64) if isinstance(d, int) else K.Var(f"a_{name}_d{k}", I64, self.org)
                for k, d in enumerate(t.dims)]

    def params(self) -> tuple[K.Param, ...]:
        """The function's parameters: each array as a pointer plus its dims, scalars, ``err`` last.
        Array pointers are not ``restrict``: a caller may pass one array twice."""
        out = []
        for name, t in self.ir.params:
            if isinstance(t, ArrayType):
                out.append(K.Param(f"a_{name}", t.dtype.dtype, pointer=True, restrict=False))
                out.extend(K.Param(f"a_{name}_d{k}", I64, pointer=False) for k in range(len(t.dims)))
            else:
                out.append(K.Param(self.var(name, t), t.dtype, pointer=False))
        out.append(K.Param("err", I64, pointer=True, restrict=False))
        return tuple(out)

    # ------------------------------------------------------------------ helpers
    def k(self, v: int | float | bool, dt: DType) -> K.Const:
        """A literal from the current line."""
        return K.Const(v, dt, self.org)

    def err(self) -> K.Addr:
        """The error record every action function takes last."""
        return K.Addr("err", None, I64, self.org)

    def cast(self, e: K.Expr, to: ScalarType | DType) -> K.Expr:
        dt = to if isinstance(to, DType) else strengthen(to).dtype  # type: ignore[union-attr]
        if e.dtype == dt:
            return e
        if isinstance(e, K.Const):
            c = _retype(e, dt)
            if c is not None:
                return c
        return K.Cast(e, dt, self.org)

    def err_flag(self) -> K.Expr:
        return K.Load("err", self.k(0, I64), I64, origin=self.org)

    def fail(self, org: K.Origin | None = None) -> K.Return:
        ret, org = self.info.returns, org or self.org
        return K.Return(None if ret is None else const(0, ret.dtype, org), org)

    def errcheck(self, org: K.Origin) -> K.If:
        """``if (err[0]) return``: stop once an error is recorded."""
        flag = K.Load("err", const(0, I64, org), I64, origin=org)
        return K.If(K.Alu("ne", (flag, const(0, I64, org)), DType.bool, org), (self.fail(org),), (), org)

    def helper(self, fn: str, args: tuple, dt: DType) -> K.Call:
        if fn.startswith(RECORDS):
            self.can_fail = True
        return K.Call(fn, args, dt, self.org)

    # ------------------------------------------------------------------ expressions
    def rx(self, env: Env, e: ir.Expr) -> tuple[K.Expr, object]:  # noqa: C901 - one dispatch over expression kinds
        t = self.checker.expr(env, e)
        tp = type(e)
        org = self.org
        if tp is ir.Const:
            v = e.value  # type: ignore[union-attr]
            return K.Const(v, DType.bool if isinstance(v, bool) else dtype_of(t), org), t
        if tp is ir.Name:
            return K.Var(self.var(e.id, t), dtype_of(t), org), t  # type: ignore[union-attr]
        if tp is ir.Binary:
            return self.binary(env, e, t), t  # type: ignore[arg-type]
        if tp is ir.Compare:
            (a, ta), (b, tb) = self.rx(env, e.left), self.rx(env, e.right)  # type: ignore[union-attr]
            j = strengthen(join_numeric(_arith(ta), _arith(tb)))
            if not is_float(j):  # integers compare exactly in i64 (`data[i] < 300` with u8 data)
                j = i64
            return K.Alu(_COMPARE[e.op], (self.cast(a, j), self.cast(b, j)), DType.bool, org), t  # type: ignore[union-attr]
        if tp is ir.Logic:
            parts = [self.cast(self.rx(env, v)[0], DType.bool) for v in e.values]  # type: ignore[union-attr]
            x = parts[0]
            for p in parts[1:]:
                x = K.Alu("land" if e.op == "and" else "lor", (x, p), DType.bool, org)  # type: ignore[union-attr]
            return self.cast(x, dtype_of(t)), t
        if tp is ir.Unary:
            a, _ = self.rx(env, e.operand)  # type: ignore[union-attr]
            op = e.op  # type: ignore[union-attr]
            if op == "not":
                return K.Alu("not", (self.cast(a, DType.bool),), DType.bool, org), t
            st = strengthen(t)
            if op == "pos":
                return self.cast(a, st), t  # type: ignore[arg-type]
            return K.Alu("neg" if op == "neg" else "not", (self.cast(a, st),), dtype_of(t), org), t  # type: ignore[arg-type]
        if tp is ir.Index:
            buf, lin, _ = self.element_parts(env, e.array, e.indices, e.line)  # type: ignore[union-attr]
            return K.Load(buf, lin, dtype_of(t), origin=org), t
        if tp is ir.Dim:
            arr = env.get(e.array)  # type: ignore[union-attr]
            return self.dims(e.array, arr)[e.axis], t  # type: ignore[union-attr, arg-type]
        if tp is ir.Cast:
            a, _ = self.rx(env, e.operand)  # type: ignore[union-attr]
            return self.cast(a, e.to), t  # type: ignore[union-attr]
        if tp is ir.IfExp:
            c, _ = self.rx(env, e.cond)  # type: ignore[union-attr]
            (a, _), (b, _) = self.rx(env, e.then), self.rx(env, e.orelse)  # type: ignore[union-attr]
            dt = dtype_of(t)
            return K.Alu("where", (self.cast(c, DType.bool), self.cast(a, dt), self.cast(b, dt)), dt, org), t
        if tp is ir.Builtin:
            dt = dtype_of(t)
            args = [self.cast(self.rx(env, a)[0], dt) for a in e.args]  # type: ignore[union-attr]
            if e.name == "abs":  # type: ignore[union-attr]
                return self.helper(f"cl_act_abs_{dt.value}", (args[0],), dt), t
            x = args[0]
            for a in args[1:]:
                x = self.helper(f"cl_act_{e.name}_{dt.value}", (x, a), dt)  # type: ignore[union-attr]
            return x, t
        if tp is ir.Call:
            return self.call(env, e, t), t  # type: ignore[arg-type]
        raise CompileError(f"cannot lower {e!r}")

    def binary(self, env: Env, e: ir.Binary, t: object) -> K.Expr:
        (a, ta), (b, tb) = self.rx(env, e.left), self.rx(env, e.right)
        op, line = e.op, self.k(e.line, I64)
        st = strengthen(t)
        dt = st.dtype  # type: ignore[union-attr]
        if op == "/":
            j = strengthen(join_numeric(_arith(ta), _arith(tb)))
            if not is_float(j):  # true division of integers: a double
                q = self.helper(f"cl_act_div_{j.dtype.value}", (self.cast(a, j), self.cast(b, j), line, self.err()),  # type: ignore[union-attr]
                                DType.float64)
                return self.cast(q, dt)
            return self.helper(f"cl_act_div_{dt.value}", (self.cast(a, dt), self.cast(b, dt), line, self.err()), dt)
        if op in ("//", "%"):
            fn = "fdiv" if op == "//" else "mod"
            return self.helper(f"cl_act_{fn}_{dt.value}", (self.cast(a, dt), self.cast(b, dt), line, self.err()), dt)
        if op in ("<<", ">>"):
            return K.Alu(_BINARY[op], (self.cast(a, dt), self.cast(b, I64)), dt, self.org)
        return K.Alu(_BINARY[op], (self.cast(a, dt), self.cast(b, dt)), dt, self.org)

    def element_parts(self, env: Env, name: str, indices: list[ir.Expr], line: int) -> tuple[str, K.Expr, bool]:
        """The buffer and linear index of ``name[indices]`` (checked unless proven in range), and
        whether any axis is checked."""
        t = env.get(name)
        buf = self.var(name, t)
        dims = self.dims(name, t)  # type: ignore[arg-type]
        parts: list[K.Expr] = []
        checked = False
        tdims = t.dims  # type: ignore[union-attr]
        for k, ix in enumerate(indices):
            code = self.cast(self.rx(env, ix)[0], I64)
            if self.safety >= 1 and not self.in_range(ix, name, tdims, k):
                code = self.helper("cl_act_ck", (code, dims[k], self.k(line, I64), self.err()), I64)
                checked = True
            parts.append(code)
        lin = parts[0]
        for k in range(1, len(parts)):
            lin = K.Alu("add", (K.Alu("mul", (lin, dims[k]), I64, self.org), parts[k]), I64, self.org)
        return buf, lin, checked

    def in_range(self, ix: ir.Expr, array: str, dims: tuple, axis: int) -> bool:
        """An index proven in range at compile time (bounds.py): its run-time check is dropped."""
        if type(ix) is ir.Name:
            return proves(self.active.get(ix.id), array, dims, axis)  # type: ignore[union-attr]
        return const_in_range(ix, dims, axis)

    def call(self, env: Env, e: ir.Call, t: object) -> K.Expr:
        callee = e.callee
        if id(callee) not in self.names:
            self.callees.append(callee)
            self.names[id(callee)] = f"act_{callee.ir.name}_{len(self.names)}"  # type: ignore[attr-defined]
        args: list[K.Expr] = []
        for arg, (_, ptype) in zip(e.args, callee.ir.params):  # type: ignore[attr-defined]
            if isinstance(ptype, ArrayType):
                at = env.get(arg.id)  # type: ignore[union-attr]
                args.append(K.Addr(self.var(arg.id, at), None, at.dtype.dtype, self.org))  # type: ignore[union-attr]
                args.extend(self.dims(arg.id, at))  # type: ignore[union-attr, arg-type]
            else:
                args.append(self.cast(self.rx(env, arg)[0], ptype))
        args.append(self.err())
        st = strengthen(t)
        dt = st.dtype if isinstance(st, ScalarType) else DType.int32  # a void call: its value is never used
        return self.helper(self.names[id(callee)], tuple(args), dt)


def _arith(t: object) -> object:
    return i32 if t is boolean else t
