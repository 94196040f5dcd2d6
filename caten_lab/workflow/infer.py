"""Type inference over an action's CFG, keeping variable types only at basic-block entries.

State is one ``dict var -> type`` per block entry (memory O(blocks x variables)); the types inside a
block are recovered by a linear scan from its entry state, through a small overlay dict of the names
the block assigns. Joins happen at merges, and a worklist ordered by reverse postorder runs loops to
a fixed point. Acyclic CFGs are typed in one pass (each block's entry is final when it is reached);
CFGs with loops run the fixed point quietly, then one checking scan reports the first error.

Typing rules (documented in the README):
- numeric ranks: boolean < u8 < i32 < i64 (integers), f32 < f64 (floats); int with float gives the float.
- a binary op or a merge of two numeric types gives the higher one (the "join"); arithmetic on
  boolean promotes it to i32; ``/`` always gives a float (f64 unless an operand is f32).
- int literals are weak (they take the other operand's type; alone they are i32, or i64 if they do
  not fit), float literals are weak floats (f32 next to f32, else f64).
- a variable may change numeric type along a path; at a merge its types join. Array vs scalar, or
  arrays of different dtype/shape, do not join: reading such a variable afterwards is an error.
- a name assigned on some paths only is "possibly undefined" after the merge; reading it is an error.
- ``and``/``or`` need boolean operands; ``if``/``while`` conditions may be boolean or numeric (!= 0).
- stores and arguments convert implicitly int->int (any width), int->float and float->float;
  float->int and anything->boolean need an explicit cast.
"""

from __future__ import annotations

import contextlib
import heapq
from array import array
from dataclasses import dataclass, field

from caten_lab.errors import CatenError
from caten_lab.workflow import ir
from caten_lab.workflow.types import ArrayType, LocalType, ScalarType, boolean, f32, f64, i32, i64, u8


class _Marker:
    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


WEAK_INT = _Marker("int-literal")
WEAK_FLOAT = _Marker("float-literal")
MAYBE_UNDEF = _Marker("possibly-undefined")
ERROR = _Marker("error")  # quiet-phase placeholder; joins like bottom
VOID = _Marker("None")
_MISSING = _Marker("missing")


@dataclass(frozen=True, slots=True)
class Conflict:
    """Two types that met at a merge and do not join."""

    a: object
    b: object

    def __repr__(self) -> str:
        return f"conflict({self.a!r} | {self.b!r})"


Type = object  # ScalarType | ArrayType | LocalType | Conflict | markers

# Keyed by id(): the scalar types are module singletons, and hashing a frozen dataclass on every lookup
# would dominate the scan of long actions.
_RANK = {id(t): r for t, r in ((boolean, 0), (u8, 1), (i32, 2), (i64, 3), (f32, 4), (f64, 5))}
_INT_IDS = frozenset(id(t) for t in (boolean, u8, i32, i64))


class ActionTypeError(CatenError):
    """A type error in an @action (mismatch, undefined or possibly-undefined variable, bad return)."""

    def __init__(self, kind: str, message: str, *, where: str | None = None, hint: str | None = None) -> None:
        self.kind = kind
        super().__init__(message, where=where, hint=hint)


class _Quiet(Exception):
    """Raised instead of ActionTypeError while the fixed point is still running."""


def is_numeric(t: Type) -> bool:
    return id(t) in _RANK or t is WEAK_INT or t is WEAK_FLOAT


def is_int(t: Type) -> bool:
    return id(t) in _INT_IDS or t is WEAK_INT


def is_float(t: Type) -> bool:
    return t is f32 or t is f64 or t is WEAK_FLOAT


def strengthen(t: Type) -> Type:
    if t is WEAK_INT:
        return i32
    if t is WEAK_FLOAT:
        return f64
    return t


def join_numeric(a: Type, b: Type) -> Type:
    """The result type of a binary op or merge between two numeric types."""
    if a is b:
        return a
    if a is WEAK_INT:
        return b
    if b is WEAK_INT:
        return a
    if a is WEAK_FLOAT:
        return b if is_float(b) else f64
    if b is WEAK_FLOAT:
        return a if is_float(a) else f64
    fa, fb = is_float(a), is_float(b)
    if fa != fb:
        return a if fa else b
    return a if _RANK[id(a)] >= _RANK[id(b)] else b


def join_var(a: Type, b: Type) -> Type:
    """Join of two variable types at a merge point."""
    if a is b or a == b:
        return a
    if a is MAYBE_UNDEF or b is MAYBE_UNDEF:
        return MAYBE_UNDEF
    if a is ERROR:
        return b
    if b is ERROR:
        return a
    if isinstance(a, Conflict):
        return a
    if isinstance(b, Conflict):
        return b
    if id(a) in _RANK and id(b) in _RANK:
        return join_numeric(a, b)
    return Conflict(a, b)


def assignable(src: Type, dst: ScalarType) -> bool:
    """May a value of type ``src`` be stored into / passed as ``dst`` without a cast?"""
    if dst is boolean:
        return src is boolean
    if is_float(dst):
        return is_numeric(src)
    return is_int(src)


def _arith(t: Type) -> Type:
    return i32 if t is boolean else t


def _show(t: Type) -> str:
    return repr(t)


@dataclass(slots=True)
class TypeInfo:
    """Inference result: the entry state of every reachable block and the return type."""

    entry: list[dict[str, Type] | None]
    returns: ScalarType | None
    iterations: int = 0
    var_types: dict[str, set] = field(default_factory=dict)

    def at_entry(self, block: int) -> dict[str, Type] | None:
        return self.entry[block]


class Env:
    """Variable types inside a block: the block-entry state plus an overlay of this block's assignments."""

    __slots__ = ("entry", "local")

    def __init__(self, entry: dict[str, Type]) -> None:
        self.entry = entry
        self.local: dict[str, Type] = {}

    def get(self, name: str) -> Type:
        t = self.local.get(name, _MISSING)
        if t is _MISSING:
            t = self.entry.get(name, _MISSING)
        return t

    def out(self) -> dict[str, Type]:
        return self.entry | self.local if self.local else self.entry  # states are never mutated in place


_IN_PROGRESS: set[int] = set()


def callee_signature(callee: object, action: ir.ActionIR, line: int) -> tuple[list, Type]:
    """Parameter list and return type of a called action (inferring its return type if unannotated)."""
    cir: ir.ActionIR = callee.ir  # type: ignore[attr-defined]
    ret = cir.returns
    if ret == ir.INFER:
        if id(callee) in _IN_PROGRESS:
            raise ActionTypeError(
                "mismatch",
                f"recursive call to {cir.name}: annotate its return type",
                where=action.where(line),
                hint=f"def {cir.name}(...) -> i32:",
            )
        ret = callee.types.returns  # type: ignore[attr-defined]
    return cir.params, (VOID if ret is None else ret)


class Checker:
    """Types expressions and statements of one action; shared by inference and the C renderer."""

    def __init__(self, action: ir.ActionIR) -> None:
        self.action = action
        self.quiet = False
        self.quiet_errors = 0
        self.block = 0
        self.returns: dict[int, tuple[Type, int]] = {}  # block id -> (returned type, line), last scan wins

    # -------------------------------------------------------------- errors
    def fail(self, kind: str, line: int, message: str, hint: str | None = None) -> Type:
        if self.quiet:
            self.quiet_errors += 1
            raise _Quiet
        raise ActionTypeError(kind, message, where=self.action.where(line), hint=hint)

    # -------------------------------------------------------------- expressions
    def var(self, env: Env, name: str, line: int) -> Type:
        t = env.get(name)
        if t is _MISSING:
            return self.fail(
                "undefined",
                line,
                f"variable {name!r} is used before it is assigned"
                if not name.startswith("__")
                else f"internal variable {name!r} undefined",
            )
        if t is MAYBE_UNDEF:
            return self.fail(
                "possibly-undefined",
                line,
                f"variable {name!r} is possibly undefined here: it is assigned on some paths only",
                hint=f"assign {name} before the if/loop",
            )
        if isinstance(t, Conflict):
            return self.fail(
                "mismatch",
                line,
                f"variable {name!r} has type {_show(t.a)} on one path and {_show(t.b)} on another",
                hint="give it one type on every path",
            )
        if t is ERROR:
            self.quiet_errors += 1
            raise _Quiet
        return t

    def array(self, env: Env, name: str, line: int) -> ArrayType | LocalType:
        t = self.var(env, name, line)
        if not isinstance(t, ArrayType | LocalType):
            return self.fail("mismatch", line, f"{name!r} is {_show(t)}, not an array")  # type: ignore[return-value]
        return t

    def scalar(self, env: Env, e: ir.Expr) -> Type:
        t = self.expr(env, e)
        if not is_numeric(t):
            what = "nothing (the action returns None)" if t is VOID else _show(t)
            return self.fail("mismatch", e.line, f"expected a number here, got {what}")
        return t

    def index_types(
        self, env: Env, arr: ArrayType | LocalType, name: str, idx: list[ir.Expr], line: int
    ) -> None:
        if len(idx) != len(arr.dims):
            self.fail(
                "mismatch", line, f"{name!r} has {len(arr.dims)} dimension(s) but is indexed with {len(idx)}"
            )
        for i in idx:
            t = self.scalar(env, i)
            if not is_int(t) or t is boolean:
                self.fail(
                    "mismatch",
                    i.line,
                    f"array index must be an integer, got {_show(t)}",
                    hint="cast with i32(x)",
                )

    def expr(self, env: Env, e: ir.Expr) -> Type:  # noqa: C901 - one dispatch over expression kinds
        tp = type(e)
        if tp is ir.Name:
            return self.var(env, e.id, e.line)  # type: ignore[union-attr]
        if tp is ir.Const:
            v = e.value  # type: ignore[union-attr]
            if isinstance(v, bool):
                return boolean
            if isinstance(v, int):
                return WEAK_INT if -(2**31) <= v < 2**31 else i64
            return WEAK_FLOAT
        if tp is ir.Binary:
            return self.binary(env, e)  # type: ignore[arg-type]
        if tp is ir.Compare:
            self.scalar(env, e.left)  # type: ignore[union-attr]
            self.scalar(env, e.right)  # type: ignore[union-attr]
            return boolean
        if tp is ir.Index:
            arr = self.array(env, e.array, e.line)  # type: ignore[union-attr]
            self.index_types(env, arr, e.array, e.indices, e.line)  # type: ignore[union-attr]
            return arr.dtype
        if tp is ir.Unary:
            t = self.scalar(env, e.operand)  # type: ignore[union-attr]
            op = e.op  # type: ignore[union-attr]
            if op == "not":
                return boolean
            if op == "inv" and not (is_int(t) and t is not boolean):
                return self.fail(
                    "mismatch",
                    e.line,
                    f"~ needs an integer operand, got {_show(t)}",
                    hint="use `not x` for booleans",
                )
            return _arith(t)
        if tp is ir.Logic:
            for v in e.values:  # type: ignore[union-attr]
                t = self.scalar(env, v)
                if t is not boolean:
                    self.fail(
                        "mismatch",
                        v.line,
                        f"`{e.op}` needs boolean operands, got {_show(t)}",  # type: ignore[union-attr]
                        hint="compare explicitly, e.g. `x != 0`",
                    )
            return boolean
        if tp is ir.Dim:
            arr = self.array(env, e.array, e.line)  # type: ignore[union-attr]
            if not 0 <= e.axis < len(arr.dims):  # type: ignore[union-attr]
                self.fail(
                    "mismatch",
                    e.line,
                    f"{e.array!r} has {len(arr.dims)} dimension(s); "  # type: ignore[union-attr]
                    f"axis {e.axis} does not exist",
                )  # type: ignore[union-attr]
            return i64
        if tp is ir.Cast:
            self.scalar(env, e.operand)  # type: ignore[union-attr]
            return e.to  # type: ignore[union-attr]
        if tp is ir.IfExp:
            self.scalar(env, e.cond)  # type: ignore[union-attr]
            return join_numeric(self.scalar(env, e.then), self.scalar(env, e.orelse))  # type: ignore[union-attr]
        if tp is ir.Builtin:
            ts = [self.scalar(env, a) for a in e.args]  # type: ignore[union-attr]
            t = ts[0]
            for u in ts[1:]:
                t = join_numeric(t, u)
            return _arith(t)
        if tp is ir.Call:
            return self.call(env, e)  # type: ignore[arg-type]
        raise TypeError(f"unknown expression {e!r}")

    def binary(self, env: Env, e: ir.Binary) -> Type:
        a, b = self.scalar(env, e.left), self.scalar(env, e.right)
        op = e.op
        if op in ("&", "|", "^"):
            if a is boolean and b is boolean:
                return boolean
            if not (is_int(a) and is_int(b)) or boolean in (a, b):
                return self.fail(
                    "mismatch",
                    e.line,
                    f"`{op}` needs two integers or two booleans, got {_show(a)} and {_show(b)}",
                )
            return join_numeric(a, b)
        if op in ("<<", ">>"):
            if not (is_int(a) and is_int(b)) or boolean in (a, b):
                return self.fail(
                    "mismatch", e.line, f"`{op}` needs integer operands, got {_show(a)} and {_show(b)}"
                )
            return join_numeric(a, b)
        t = join_numeric(_arith(a), _arith(b))
        if op == "/":
            if t is WEAK_FLOAT or t is WEAK_INT:
                return WEAK_FLOAT
            return t if is_float(t) else f64
        return t

    def call(self, env: Env, e: ir.Call) -> Type:
        callee = e.callee
        if not getattr(callee, "_is_caten_action", False):
            name = getattr(callee, "name", "?")
            try:
                callee = callee.namespace(name)  # type: ignore[attr-defined]
            except (KeyError, AttributeError):
                return self.fail("undefined", e.line, f"call to undefined name {name!r}")
            if not getattr(callee, "_is_caten_action", False):
                return self.fail(
                    "mismatch",
                    e.line,
                    f"call to {name!r} ({type(callee).__name__}): only other @action functions may be called",
                    hint="make the callee an @action",
                )
            e.callee = callee  # resolved once
        params, ret = callee_signature(callee, self.action, e.line)
        cname = callee.ir.name  # type: ignore[attr-defined]
        if len(e.args) != len(params):
            self.fail("mismatch", e.line, f"{cname} takes {len(params)} argument(s), got {len(e.args)}")
        for arg, (pname, ptype) in zip(e.args, params):
            if isinstance(ptype, ArrayType):
                if not isinstance(arg, ir.Name):
                    self.fail(
                        "mismatch", arg.line, f"argument {pname!r} of {cname} must be an array variable"
                    )
                at = self.array(env, arg.id, arg.line)  # type: ignore[union-attr]
                ok = (
                    at.dtype is ptype.dtype
                    and len(at.dims) == len(ptype.dims)
                    and all(
                        not (isinstance(x, int) and isinstance(y, int)) or x == y
                        for x, y in zip(at.dims, ptype.dims)
                    )
                )
                if not ok:
                    self.fail(
                        "mismatch",
                        arg.line,
                        f"argument {pname!r} of {cname} must be {ptype!r}, got {_show(at)}",
                    )
            else:
                t = self.scalar(env, arg)
                if not assignable(t, ptype):
                    self.fail(
                        "mismatch",
                        arg.line,
                        f"argument {pname!r} of {cname} is {ptype!r}; got {_show(t)}",
                        hint=f"cast with {ptype.name}(x)",
                    )
        return ret

    # -------------------------------------------------------------- statements
    def stmt(self, env: Env, s: ir.Stmt) -> None:
        tp = type(s)
        if tp is ir.Assign:
            try:
                t = self.expr(env, s.value)  # type: ignore[union-attr]
                if not is_numeric(t):
                    what = "nothing (the action returns None)" if t is VOID else _show(t)
                    self.fail(
                        "mismatch",
                        s.line,
                        f"cannot assign {what} to {s.target!r}",  # type: ignore[union-attr]
                        hint="arrays cannot be copied or aliased; scalars only",
                    )
                if s.target.startswith(("__it", "__stop", "__step")) and not is_int(t):  # type: ignore[union-attr]
                    self.fail(
                        "mismatch",
                        s.line,
                        f"range() arguments must be integers, got {_show(t)}",  # type: ignore[union-attr]
                        hint="cast with i32(x)",
                    )
                cur = env.get(s.target)  # type: ignore[union-attr]
                if isinstance(cur, ArrayType | LocalType):
                    self.fail(
                        "mismatch",
                        s.line,
                        f"{s.target!r} is an array ({_show(cur)}); it cannot be "  # type: ignore[union-attr]
                        "re-bound to a scalar",
                        hint="use another name",
                    )
                env.local[s.target] = strengthen(t)  # type: ignore[union-attr]
            except _Quiet:
                env.local[s.target] = ERROR  # type: ignore[union-attr]
        elif tp is ir.Store:
            arr = self.array(env, s.array, s.line)  # type: ignore[union-attr]
            self.index_types(env, arr, s.array, s.indices, s.line)  # type: ignore[union-attr]
            t = self.scalar(env, s.value)  # type: ignore[union-attr]
            if not assignable(t, arr.dtype):
                self.fail(
                    "mismatch",
                    s.line,
                    f"cannot store {_show(t)} into {s.array!r} of {arr.dtype!r}",  # type: ignore[union-attr]
                    hint=f"cast with {arr.dtype.name}(x)",
                )
        elif tp is ir.AllocLocal:
            cur = env.get(s.target)  # type: ignore[union-attr]
            if cur is not _MISSING and cur is not MAYBE_UNDEF and cur is not ERROR and cur != s.type:  # type: ignore[union-attr]
                self.fail(
                    "mismatch",
                    s.line,
                    f"{s.target!r} was {_show(cur)}; it cannot become "  # type: ignore[union-attr]
                    f"{_show(s.type)}",
                    hint="use another name",
                )  # type: ignore[union-attr]
            env.local[s.target] = s.type  # type: ignore[union-attr]
        else:
            self.expr(env, s.value)  # type: ignore[union-attr]

    def term(self, env: Env, t: ir.Terminator) -> None:
        if type(t) is ir.Branch:
            self.scalar(env, t.cond)
        elif type(t) is ir.Return:
            self.ret(env, t)

    def ret(self, env: Env, t: ir.Return) -> None:
        declared = self.action.returns
        if t.value is None:
            if declared not in (None, ir.INFER):
                if t.implicit:
                    self.fail(
                        "return",
                        t.line,
                        f"{self.action.name} may reach its end without returning a {_show(declared)}",
                        hint="add a return statement on every path",
                    )
                self.fail("return", t.line, f"{self.action.name} must return a {_show(declared)}")
            self.returns[self.block] = (VOID, t.line)
            return
        v = self.expr(env, t.value)
        if declared is None:
            self.fail("return", t.line, f"{self.action.name} is annotated -> None but returns a value")
        if not is_numeric(v):
            self.fail("return", t.line, f"an action returns a scalar, not {_show(v)}")
        if isinstance(declared, ScalarType) and not assignable(v, declared):
            self.fail(
                "return",
                t.line,
                f"{self.action.name} returns {_show(declared)}, but this returns {_show(v)}",
                hint=f"cast with {declared.name}(x)",
            )
        self.returns[self.block] = (strengthen(v), t.line)

    def scan(self, block: ir.Block, entry: dict[str, Type]) -> Env:
        """Linear scan of one block from its entry state; returns the env at its end."""
        env = Env(entry)
        self.block = block.id
        stmt = self.stmt
        for s in block.stmts:
            stmt(env, s)
        self.term(env, block.term)  # type: ignore[arg-type]
        return env


def reverse_postorder(blocks: list[ir.Block]) -> list[int]:
    """Reachable block ids in reverse postorder (iterative DFS: CFGs may have millions of blocks)."""
    seen = bytearray(len(blocks))
    order: list[int] = []
    stack: list[tuple[int, int]] = [(0, 0)]
    seen[0] = 1
    while stack:
        b, i = stack[-1]
        succ = blocks[b].successors()
        if i < len(succ):
            stack[-1] = (b, i + 1)
            s = succ[i]
            if not seen[s]:
                seen[s] = 1
                stack.append((s, 0))
        else:
            stack.pop()
            order.append(b)
    order.reverse()
    return order


class StateInterner:
    """Hash-conses block-entry states: blocks whose entry maps are equal share one dict.

    Entry states are never mutated in place (a join that changes a state builds a new dict), so
    sharing is safe. Long generated actions have many blocks but few distinct states, so memory is
    O(blocks + distinct states x variables) instead of O(blocks x variables).
    """

    __slots__ = ("table",)

    def __init__(self) -> None:
        self.table: dict[int, list[dict[str, Type]]] = {}

    def __call__(self, state: dict[str, Type]) -> dict[str, Type]:
        key = hash(frozenset(zip(state, map(id, state.values()))))
        bucket = self.table.get(key)
        if bucket is None:
            self.table[key] = [state]
            return state
        for other in bucket:
            if other == state:
                return other
        bucket.append(state)
        return state


def _join_into(entry: list, b: int, out: dict[str, Type], intern: StateInterner) -> bool:
    """Join ``out`` into the entry state of block ``b`` (copy-on-write); True if it changed."""
    cur = entry[b]
    if cur is None:
        entry[b] = intern(out)
        return True
    new: dict[str, Type] | None = None
    for k, t in out.items():
        old = cur.get(k, _MISSING)
        if old is t:
            continue
        j = MAYBE_UNDEF if old is _MISSING else join_var(old, t)
        if j is old or j == old:
            continue
        if new is None:
            new = dict(cur)
        new[k] = j
    if new is not None or len(cur) > len(out):
        for k, old in cur.items():
            if old is not MAYBE_UNDEF and k not in out:
                if new is None:
                    new = dict(cur)
                new[k] = MAYBE_UNDEF
    if new is None:
        return False
    entry[b] = intern(new)
    return True


def infer(action: ir.ActionIR, owner: object | None = None) -> TypeInfo:
    """Infer the types of ``action`` (see the module docstring for the rules). Raises ActionTypeError."""
    if owner is not None:
        _IN_PROGRESS.add(id(owner))
    try:
        return _infer(action)
    finally:
        if owner is not None:
            _IN_PROGRESS.discard(id(owner))


def _infer(action: ir.ActionIR) -> TypeInfo:
    blocks = action.blocks
    entry: list[dict[str, Type] | None] = [None] * len(blocks)
    intern = StateInterner()
    entry[0] = intern({name: t for name, t in action.params})
    order = reverse_postorder(blocks)
    pos = array("q", [-1]) * len(blocks)  # compact: no int object per block
    for i, b in enumerate(order):
        pos[b] = i
    acyclic = all(pos[s] > pos[b] for b in order for s in blocks[b].successors())
    checker = Checker(action)
    iterations = 0
    if acyclic:  # every block's entry is final when reached in reverse postorder: one checking pass
        for b in order:
            iterations += 1
            env = checker.scan(blocks[b], entry[b])  # type: ignore[arg-type]
            succ = blocks[b].successors()
            if succ:
                out = env.out()
                for s in succ:
                    _join_into(entry, s, out, intern)
    else:
        checker.quiet = True
        queued = bytearray(len(blocks))
        errored = bytearray(len(blocks))  # did the last scan of the block hit a (possibly transient) error?
        heap = [0]
        queued[0] = 1
        while heap:
            i = heapq.heappop(heap)
            b = order[i]
            queued[b] = 0
            iterations += 1
            before = checker.quiet_errors
            try:
                env = checker.scan(blocks[b], entry[b])  # type: ignore[arg-type]
            except _Quiet:
                env = _partial_env(checker, blocks[b], entry[b])  # type: ignore[arg-type]
                checker.quiet_errors += 1
            errored[b] = checker.quiet_errors != before
            out = env.out()
            for s in blocks[b].successors():
                if _join_into(entry, s, out, intern) and not queued[s]:
                    queued[s] = 1
                    heapq.heappush(heap, pos[s])
        # Every block's last scan saw its final entry state; only those that failed are re-scanned, now
        # reporting the error (in reverse postorder, so the first error along the flow is raised).
        checker.quiet = False
        for b in order:
            if errored[b]:
                with contextlib.suppress(_Quiet):  # reads a value broken by an error in another block
                    checker.scan(blocks[b], entry[b])  # type: ignore[arg-type]
    return TypeInfo(entry, _return_type(action, checker), iterations)


def _partial_env(checker: Checker, block: ir.Block, entry: dict[str, Type]) -> Env:
    """Quiet phase: scan statement by statement, skipping the ones that fail (their targets become ERROR)."""
    env = Env(entry)
    for s in block.stmts:
        try:
            checker.stmt(env, s)
        except _Quiet:
            if type(s) is ir.AllocLocal:
                env.local[s.target] = s.type
    return env


def _return_type(action: ir.ActionIR, checker: Checker) -> ScalarType | None:
    if action.returns != ir.INFER:
        return action.returns  # type: ignore[return-value]
    result: Type | None = None
    first_line = 0
    for t, line in sorted(checker.returns.values(), key=lambda r: r[1]):
        if result is None:
            result, first_line = t, line
        elif (result is VOID) != (t is VOID):
            raise ActionTypeError(
                "return",
                f"{action.name} returns a value on some paths and nothing on others (see line {first_line})",
                where=action.where(line),
                hint="annotate the return type and return a value on every path",
            )
        elif t is not VOID:
            result = join_numeric(result, t)
    return None if result is None or result is VOID else result  # type: ignore[return-value]
