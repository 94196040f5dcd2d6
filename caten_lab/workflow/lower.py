"""Parse an @action's Python source and lower it to the action IR (a CFG of basic blocks).

Only the typed subset is accepted; anything else raises CatenError at the user's file:line with the
offending source line. ``for`` loops over ``range`` use hidden counters (``__itN``) so that assigning
to the loop variable inside the body does not change the iteration, as in Python.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import inspect
import linecache
import math
import textwrap
from collections.abc import Callable
from dataclasses import dataclass

from caten_lab.errors import CatenError
from caten_lab.errors import where as user_where
from caten_lab.type_words import a_type
from caten_lab.workflow import ir
from caten_lab.workflow.types import LOCAL_MAX_BYTES, ArrayType, Local, LocalType, ScalarType

_BINOPS: dict[type, str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
}
_CMPOPS: dict[type, str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
_UNARY: dict[type, str] = {ast.USub: "neg", ast.UAdd: "pos", ast.Invert: "inv", ast.Not: "not"}

# Constructs outside the subset, with the advice shown to the user.
_REJECTED: dict[type, str] = {
    ast.ClassDef: "class definitions",
    ast.FunctionDef: "nested function definitions (define another @action at module level)",
    ast.AsyncFunctionDef: "async functions",
    ast.Lambda: "lambdas (define another @action instead)",
    ast.ListComp: "list comprehensions (use a Local array and a for loop)",
    ast.SetComp: "set comprehensions",
    ast.DictComp: "dict comprehensions",
    ast.GeneratorExp: "generator expressions (use a for loop)",
    ast.Yield: "generators (yield)",
    ast.YieldFrom: "generators (yield from)",
    ast.Await: "await",
    ast.Try: "try/except (actions report errors through return values)",
    ast.With: "with statements",
    ast.AsyncWith: "async with",
    ast.AsyncFor: "async for",
    ast.Raise: "raise (return an error code instead)",
    ast.Assert: "assert (use if ... return an error code)",
    ast.Delete: "del",
    ast.Global: "global statements (actions may not mutate module globals)",
    ast.Nonlocal: "nonlocal statements",
    ast.Import: "imports inside an action",
    ast.ImportFrom: "imports inside an action",
    ast.JoinedStr: "f-strings (string operations are not in the action subset)",
    ast.List: "list displays (use Local(dtype, n))",
    ast.Tuple: "tuples (only `a, b = x, y` assignment is supported)",
    ast.Dict: "dict displays",
    ast.Set: "set displays",
    ast.NamedExpr: "the walrus operator :=",
    ast.Starred: "starred expressions",
    ast.Slice: "slices (index one element at a time)",
    ast.Match: "match statements (use if/elif)",
}
if hasattr(ast, "TryStar"):
    _REJECTED[ast.TryStar] = "try/except* "

_BUILTIN_FUNCS = {"min", "max", "abs"}


def _is_action(obj: object) -> bool:
    return bool(getattr(obj, "_is_caten_action", False))


@dataclass(slots=True)
class Deferred:
    """A callee name not yet bound when the action was decorated (e.g. defined further down the module);
    resolved to an action during type inference."""

    name: str
    namespace: Callable[[str], object]

    @property
    def __name__(self) -> str:  # mimics a function for printing
        return self.name


@functools.lru_cache(maxsize=8)
def _parse_module(file: str, text: str) -> ast.Module:
    return ast.parse(text, filename=file)


def _find_def(body: list[ast.stmt], name: str, first_line: int) -> ast.FunctionDef | None:
    """The ``def name`` whose first line (decorators included) is ``first_line`` (statements only)."""
    for st in body:
        if isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef) and st.name == name:
            start = min([d.lineno for d in st.decorator_list] + [st.lineno])
            if start == first_line:
                return st  # type: ignore[return-value]
        for field in ("body", "orelse", "finalbody", "handlers"):
            sub = getattr(st, field, None)
            if sub and (st.lineno <= first_line <= (st.end_lineno or st.lineno)):
                found = _find_def(sub, name, first_line)
                if found is not None:
                    return found
    return None


def source_of(fn: Callable) -> tuple[ast.FunctionDef, str, int]:
    """The function's AST, its file, and the offset to add to AST line numbers to get file lines.

    The whole file is parsed once with the C parser (cached) and the def is found by its first
    line: much faster than ``inspect.getsource`` (a pure-Python tokenizer) on long generated actions.
    """
    file = inspect.getsourcefile(fn) or fn.__code__.co_filename
    first = fn.__code__.co_firstlineno
    text = "".join(linecache.getlines(file))
    if text:
        with contextlib.suppress(SyntaxError, ValueError):
            node = _find_def(_parse_module(file, text).body, fn.__name__, first)
            if isinstance(node, ast.FunctionDef):
                return node, file, 0
    try:
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError) as e:
        raise CatenError(
            f"cannot read the source of {fn.__qualname__} for @action",
            where=user_where(file, first),
            hint="define actions in a file or a notebook cell (not via exec of a string)",
        ) from e
    tree = ast.parse(textwrap.dedent("".join(lines)))
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise CatenError("@action applies to plain `def` functions", where=user_where(file, start))
    return node, file, start - 1


def lower_function(fn: Callable) -> ir.ActionIR:
    """Build the action IR of ``fn`` (an undecorated Python function)."""
    node, file, offset = source_of(fn)
    return _Lowerer(fn, node, file, offset).run()


class _Lowerer:
    def __init__(self, fn: Callable, node: ast.FunctionDef, file: str, offset: int) -> None:
        self.fn = fn
        self.node = node
        self.file = file
        self.offset = offset
        self.blocks: list[ir.Block] = []
        self.cur: ir.Block = self._new_block()
        self.seq: list = [0]  # the structure sequence being filled (see ir.SIf / ir.SLoop)
        self.loops: list[tuple[int, int]] = []  # (continue target, break target)
        self.counter = 0
        self.locals: set[str] = set()
        self.local_arrays: set[str] = set()
        self.params: list[tuple[str, ir.ParamType]] = []
        self.closure = self._closure_namespace()

    # ------------------------------------------------------------------ helpers
    def line(self, node: ast.AST) -> int:
        return getattr(node, "lineno", self.node.lineno) + self.offset

    def error(self, node: ast.AST, message: str, hint: str | None = None) -> CatenError:
        return CatenError(message, where=ir.source_where(self.file, self.line(node)), hint=hint)

    def _new_block(self) -> ir.Block:
        b = ir.Block(len(self.blocks))
        self.blocks.append(b)
        return b

    def _terminate(self, term: ir.Terminator) -> None:
        self.cur.term = term
        self.cur = self._new_block()  # statements after a terminator land in an unreachable block
        self.seq.append(self.cur.id)

    def _enter(self, block: ir.Block, seq: list) -> list:
        """Make ``block`` current as the first block of the structure sequence ``seq``; returns the old one."""
        old = self.seq
        self.seq = seq
        seq.append(block.id)
        self.cur = block
        return old

    def _hidden(self, kind: str) -> str:
        self.counter += 1
        return f"__{kind}{self.counter}"

    def _closure_namespace(self) -> dict[str, object]:
        ns: dict[str, object] = {}
        code = self.fn.__code__
        for name, cell in zip(code.co_freevars, self.fn.__closure__ or ()):
            with contextlib.suppress(ValueError):  # a cell not filled yet
                ns[name] = cell.cell_contents
        return ns

    def lookup(self, name: str) -> object:
        """Value of a non-local name (closure, module globals, builtins) or raise KeyError."""
        if name in self.closure:
            return self.closure[name]
        g = self.fn.__globals__
        if name in g:
            return g[name]
        b = vars(builtins)
        if name in b:
            return b[name]
        raise KeyError(name)

    def eval_annotation(self, ann: ast.expr | None, what: str) -> object:
        if ann is None:
            return None
        try:
            code = compile(ast.Expression(ann), self.file, "eval")
            return eval(code, self.fn.__globals__, dict(self.closure))  # noqa: S307 - user's own annotation
        except Exception as e:  # noqa: BLE001 - any failure is a user annotation error
            raise self.error(
                ann,
                f"cannot evaluate the type annotation of {what}: {e}",
                hint="use i32, i64, u8, f32, f64, boolean or Array[dtype, dims]",
            ) from e

    # ------------------------------------------------------------------ entry
    def run(self) -> ir.ActionIR:
        fn_node = self.node
        a = fn_node.args
        if a.vararg or a.kwarg or a.kwonlyargs or a.defaults or a.kw_defaults:
            raise self.error(
                fn_node,
                "actions take plain positional parameters only (no *args, **kwargs, "
                "keyword-only parameters or defaults)",
            )
        for arg in a.posonlyargs + a.args:
            t = self.eval_annotation(arg.annotation, f"parameter {arg.arg!r}")
            if not isinstance(t, ScalarType | ArrayType):
                raise self.error(
                    arg,
                    f"parameter {arg.arg!r} needs a type annotation (a scalar type or Array[dtype, dims])",
                    hint="e.g. `def f(x: i32, a: Array[f32, ('n',)])`",
                )
            self.params.append((arg.arg, t))
            self.locals.add(arg.arg)
        ret: object
        if fn_node.returns is None:
            ret = ir.INFER
        else:
            ret = self.eval_annotation(fn_node.returns, "the return value")
            if not (ret is None or isinstance(ret, ScalarType)):
                raise self.error(fn_node.returns, "an action returns a scalar type or None")
        self._scan_names_and_rejects(fn_node.body)
        body = fn_node.body
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            body = body[1:]  # docstring
        self.suite(body)
        if self.cur.term is None:
            self.cur.term = ir.Return(
                None, line=self.line(fn_node.body[-1]) if fn_node.body else 0, implicit=True
            )
        return ir.ActionIR(
            fn_node.name, self.params, ret, self.blocks, self.file, self.offset + fn_node.lineno, self.seq
        )

    def _scan_names_and_rejects(self, body: list[ast.stmt]) -> None:
        """One walk: the first (in source order) construct never allowed, and the local names (Python
        scoping: a name assigned anywhere in the function is local everywhere in it)."""
        bad: list[ast.AST] = []
        stack: list[ast.AST] = list(body)
        rejected, name_t, store_t, tuple_t = _REJECTED, ast.Name, ast.Store, ast.Tuple
        iter_children = ast.iter_child_nodes
        while stack:
            n = stack.pop()
            tp = type(n)
            if tp is name_t:
                if type(n.ctx) is store_t:  # type: ignore[attr-defined]
                    if n.id.startswith("__"):  # type: ignore[attr-defined]
                        raise self.error(n, f"names starting with '__' are reserved in actions: {n.id!r}")  # type: ignore[attr-defined]
                    self.locals.add(n.id)  # type: ignore[attr-defined]
                continue
            if tp in rejected and tp is not tuple_t:
                bad.append(n)
            stack.extend(iter_children(n))
        if bad:
            n = min(bad, key=lambda n: (getattr(n, "lineno", 0), getattr(n, "col_offset", 0)))
            raise self.error(n, f"not supported in an @action: {_REJECTED[type(n)]}")

    # ------------------------------------------------------------------ statements
    def suite(self, stmts: list[ast.stmt]) -> None:
        for st in stmts:
            self.stmt(st)

    def stmt(self, st: ast.stmt) -> None:  # noqa: C901 - one dispatch over statement kinds
        if type(st) in _REJECTED:
            raise self.error(st, f"not supported in an @action: {_REJECTED[type(st)]}")
        line = self.line(st)
        if isinstance(st, ast.Pass):
            return
        if isinstance(st, ast.Assign):
            self.assign(st)
        elif isinstance(st, ast.AnnAssign):
            if st.value is None or not isinstance(st.target, ast.Name):
                raise self.error(st, "annotated assignment needs a plain variable and a value: `x: i32 = 0`")
            t = self.eval_annotation(st.annotation, f"variable {st.target.id!r}")
            if not isinstance(t, ScalarType):
                raise self.error(
                    st,
                    "a variable annotation must be a scalar type (i32, i64, u8, f32, f64, "
                    "boolean); use `buf = Local(dtype, n)` for arrays",
                )
            self.cur.stmts.append(ir.Assign(st.target.id, ir.Cast(t, self.expr(st.value), line), line))
        elif isinstance(st, ast.AugAssign):
            op = _BINOPS.get(type(st.op))
            if op is None:
                raise self.error(
                    st,
                    f"operator {type(st.op).__name__} is not supported in an @action",
                    hint="** and @ are not in the subset: write x * x",
                )
            value = self.expr(st.value)
            if isinstance(st.target, ast.Name):
                name = st.target.id
                self.cur.stmts.append(ir.Assign(name, ir.Binary(op, ir.Name(name, line), value, line), line))
            elif isinstance(st.target, ast.Subscript):
                arr, idx = self.subscript_target(st.target)
                read = ir.Index(arr, idx, line)
                self.cur.stmts.append(ir.Store(arr, list(idx), ir.Binary(op, read, value, line), line))
            else:
                raise self.error(st, "augmented assignment needs a variable or an array element")
        elif isinstance(st, ast.Expr):
            if isinstance(st.value, ast.Constant) and isinstance(st.value.value, str):
                return  # a string used as a comment
            if not isinstance(st.value, ast.Call):
                raise self.error(
                    st,
                    "an expression statement has no effect here; only calls to other actions may stand alone",
                )
            e = self.expr(st.value)
            if not isinstance(e, ir.Call):
                raise self.error(st, "only a call to another action may stand alone as a statement")
            self.cur.stmts.append(ir.Eval(e, line))
        elif isinstance(st, ast.If):
            self.if_stmt(st)
        elif isinstance(st, ast.While):
            self.while_stmt(st)
        elif isinstance(st, ast.For):
            self.for_stmt(st)
        elif isinstance(st, ast.Break):
            if not self.loops:
                raise self.error(st, "break outside a loop")
            self._terminate(ir.Jump(self.loops[-1][1], line))
        elif isinstance(st, ast.Continue):
            if not self.loops:
                raise self.error(st, "continue outside a loop")
            self._terminate(ir.Jump(self.loops[-1][0], line))
        elif isinstance(st, ast.Return):
            value = None if st.value is None else self.expr(st.value)
            self._terminate(ir.Return(value, line))
        else:
            raise self.error(st, f"{type(st).__name__} statements are not supported in an @action")

    def subscript_target(self, t: ast.Subscript) -> tuple[str, list[ir.Expr]]:
        if not isinstance(t.value, ast.Name):
            raise self.error(t, "only arrays held in variables can be indexed: `a[i] = x`")
        name = t.value.id
        if name not in self.locals:
            raise self.error(
                t,
                f"cannot assign into {name!r}: it is not a parameter or local of this action "
                "(actions may not mutate globals)",
                hint="pass the array as an Array parameter",
            )
        return name, self.indices(t.slice)

    def assign(self, st: ast.Assign) -> None:
        line = self.line(st)
        if len(st.targets) == 1 and isinstance(st.targets[0], ast.Tuple):
            self.tuple_assign(st.targets[0], st.value, st)
            return
        for t in st.targets:
            if not isinstance(t, ast.Name | ast.Subscript):
                raise self.error(
                    st,
                    f"cannot assign to {type(t).__name__}: assign to a variable, an array "
                    "element, or `a, b = x, y`",
                )
        local = self.local_alloc(st.value)
        if local is not None:
            if len(st.targets) != 1 or not isinstance(st.targets[0], ast.Name):
                raise self.error(
                    st, "a Local array must be assigned to one plain variable: `buf = Local(i32, 64)`"
                )
            self.cur.stmts.append(ir.AllocLocal(st.targets[0].id, local, line))
            return
        value = self.expr(st.value)
        if len(st.targets) > 1 and not isinstance(value, ir.Const | ir.Name):
            tmp = self._hidden("tmp")
            self.cur.stmts.append(ir.Assign(tmp, value, line))
            value = ir.Name(tmp, line)
        for t in st.targets:
            if isinstance(t, ast.Name):
                self.cur.stmts.append(ir.Assign(t.id, value, line))
            else:
                arr, idx = self.subscript_target(t)  # type: ignore[arg-type]
                self.cur.stmts.append(ir.Store(arr, idx, value, line))

    def tuple_assign(self, target: ast.Tuple, value: ast.expr, st: ast.stmt) -> None:
        line = self.line(st)
        if not isinstance(value, ast.Tuple) or len(value.elts) != len(target.elts):
            raise self.error(
                st, "tuple assignment needs a tuple of the same length on the right: `a, b = b, a`"
            )
        temps = []
        for v in value.elts:  # evaluate every right-hand side first, as Python does
            tmp = self._hidden("tmp")
            self.cur.stmts.append(ir.Assign(tmp, self.expr(v), line))
            temps.append(tmp)
        for t, tmp in zip(target.elts, temps):
            if isinstance(t, ast.Name):
                self.cur.stmts.append(ir.Assign(t.id, ir.Name(tmp, line), line))
            elif isinstance(t, ast.Subscript):
                arr, idx = self.subscript_target(t)
                self.cur.stmts.append(ir.Store(arr, idx, ir.Name(tmp, line), line))
            else:
                raise self.error(st, "tuple assignment targets must be variables or array elements")

    def local_alloc(self, value: ast.expr) -> LocalType | None:
        if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)):
            return None
        try:
            obj = self.lookup(value.func.id) if value.func.id not in self.locals else None
        except KeyError:
            return None
        if obj is not Local:  # the one Local of workflow.types
            return None
        if len(value.args) != 2 or value.keywords:
            raise self.error(value, "Local takes (dtype, dims): `Local(i32, 64)` or `Local(f32, (4, 4))`")
        dtype = self.eval_annotation(value.args[0], "the Local dtype")
        if not isinstance(dtype, ScalarType):
            raise self.error(value, "the first argument of Local must be a scalar type such as i32")
        dims = self.eval_annotation(value.args[1], "the Local dims")
        dims_t = (dims,) if isinstance(dims, int) else dims
        if (
            not isinstance(dims_t, tuple)
            or not dims_t
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims_t)
        ):
            raise self.error(
                value,
                "Local dims must be positive integer constants: `Local(i32, 64)`",
                hint="local arrays have a fixed size known when the action is compiled",
            )
        nbytes = math.prod(dims_t) * max(dtype.bits // 8, 1)
        if nbytes > LOCAL_MAX_BYTES:
            raise self.error(
                value,
                f"Local({dtype.name}, {dims}) needs {nbytes} bytes, more than the limit of "
                f"{LOCAL_MAX_BYTES} bytes (1 GiB) for one local array",
                hint="pass a large buffer as an Array parameter instead (allocated by the caller)",
            )
        return LocalType(dtype, tuple(dims_t))

    def if_stmt(self, st: ast.If) -> None:
        line = self.line(st)
        cond_block = self.cur
        cond = self.expr(st.test)
        then_b = self._new_block()
        else_b = self._new_block() if st.orelse else None
        after = self._new_block()
        cond_block.term = ir.Branch(cond, then_b.id, (else_b or after).id, line)
        then_seq: list = []
        else_seq: list = []
        parent = self._enter(then_b, then_seq)
        self.suite(st.body)
        self._goto(after)
        if else_b is not None:
            self._enter(else_b, else_seq)
            self.suite(st.orelse)
            self._goto(after)
        self.seq = parent
        parent.append(ir.SIf(cond_block.id, then_seq, else_seq, after.id))
        self._enter(after, parent)

    def _goto(self, block: ir.Block) -> None:
        if self.cur.term is None:
            self.cur.term = ir.Jump(block.id)

    def while_stmt(self, st: ast.While) -> None:
        line = self.line(st)
        header = self._new_block()
        self._goto(header)
        body, after = self._new_block(), self._new_block()
        else_b = self._new_block() if st.orelse else None
        header.term = ir.Branch(self.expr(st.test), body.id, (else_b or after).id, line)
        self._loop_bodies(st, header, body, None, else_b, after)

    def _loop_bodies(
        self,
        st: ast.While | ast.For,
        header: ir.Block,
        body: ir.Block,
        latch: ir.Block | None,
        else_b: ir.Block | None,
        after: ir.Block,
        counter: str | None = None,
    ) -> None:
        body_seq: list = []
        else_seq: list = []
        parent = self._enter(body, body_seq)
        if counter is not None:  # for loops: the loop variable takes the hidden counter's value
            line = self.line(st)
            body.stmts.append(ir.Assign(st.target.id, ir.Name(counter, line), line))  # type: ignore[union-attr]
        cont = (latch or header).id
        self.loops.append((cont, after.id))
        self.suite(st.body)
        self.loops.pop()
        self._goto(latch or header)
        if else_b is not None:
            self._enter(else_b, else_seq)
            self.suite(st.orelse)
            self._goto(after)
        self.seq = parent
        parent.append(ir.SLoop(header.id, body_seq, else_seq, after.id, latch.id if latch else None))
        self._enter(after, parent)

    def for_stmt(self, st: ast.For) -> None:
        line = self.line(st)
        if not isinstance(st.target, ast.Name):
            raise self.error(st, "a for loop variable must be a plain name: `for i in range(n)`")
        it = st.iter
        is_range = (
            isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name)
            and it.func.id == "range"
            and it.func.id not in self.locals
        )
        if not is_range:
            raise self.error(
                st,
                "actions loop only over range(...): `for i in range(n)`",
                hint="iterate over indices: `for i in range(len(a))`",
            )
        if it.keywords or not 1 <= len(it.args) <= 3:  # type: ignore[union-attr]
            raise self.error(st, "range takes 1 to 3 positional arguments")
        args = [self.expr(a) for a in it.args]  # type: ignore[union-attr]
        start, stop, step = (
            (ir.Const(0, line), args[0], ir.Const(1, line))
            if len(args) == 1
            else (args[0], args[1], args[2] if len(args) == 3 else ir.Const(1, line))
        )
        counter, stop_v = self._hidden("it"), self._hidden("stop")
        pre = self.cur.stmts
        pre.append(ir.Assign(counter, start, line))  # range's arguments are evaluated once, in order
        pre.append(ir.Assign(stop_v, stop, line))
        step_const = step.value if isinstance(step, ir.Const) and not isinstance(step.value, bool) else None
        if step_const is None:
            step_v = self._hidden("step")
            pre.append(ir.Assign(step_v, step, line))
            step_e: ir.Expr = ir.Name(step_v, line)
        else:
            if step_const == 0 or not isinstance(step_const, int):
                raise self.error(st, "range() step must be a nonzero integer")
            step_e = ir.Const(step_const, line)
        header = self._new_block()
        self._goto(header)
        c, s = ir.Name(counter, line), ir.Name(stop_v, line)
        if step_const is None:
            zero = ir.Const(0, line)
            cond: ir.Expr = ir.Logic(
                "or",
                [
                    ir.Logic("and", [ir.Compare(">", step_e, zero, line), ir.Compare("<", c, s, line)], line),
                    ir.Logic("and", [ir.Compare("<", step_e, zero, line), ir.Compare(">", c, s, line)], line),
                ],
                line,
            )
        else:
            cond = ir.Compare("<" if step_const > 0 else ">", c, s, line)
        body, latch, after = self._new_block(), self._new_block(), self._new_block()
        else_b = self._new_block() if st.orelse else None
        header.term = ir.Branch(cond, body.id, (else_b or after).id, line)
        latch.stmts.append(ir.Assign(counter, ir.Binary("+", ir.Name(counter, line), step_e, line), line))
        latch.term = ir.Jump(header.id, line)
        self._loop_bodies(st, header, body, latch, else_b, after, counter)

    # ------------------------------------------------------------------ expressions
    def indices(self, sl: ast.expr) -> list[ir.Expr]:
        elts = sl.elts if isinstance(sl, ast.Tuple) else [sl]
        for e in elts:
            if isinstance(e, ast.Slice):
                raise self.error(e, "slices are not supported in an @action; index one element at a time")
        return [self.expr(e) for e in elts]

    def expr(self, e: ast.expr) -> ir.Expr:  # noqa: C901 - one dispatch over expression kinds
        line = self.line(e)
        if isinstance(e, ast.Constant):
            v = e.value
            if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**63:
                raise self.error(e, f"integer literal {v} does not fit in i64")
            if isinstance(v, bool | int | float):
                return ir.Const(v, line)
            kind = "strings" if isinstance(v, str | bytes) else f"{type(v).__name__} constants"
            raise self.error(
                e,
                f"{kind} are not supported in an @action (string operations are not in the subset)",
                hint="work on u8 arrays of bytes instead",
            )
        if isinstance(e, ast.Name):
            return self.name(e)
        if isinstance(e, ast.BinOp):
            op = _BINOPS.get(type(e.op))
            if op is None:
                raise self.error(
                    e,
                    f"operator {type(e.op).__name__} is not supported in an @action",
                    hint="** and @ are not in the subset: write x * x",
                )
            return ir.Binary(op, self.expr(e.left), self.expr(e.right), line)
        if isinstance(e, ast.UnaryOp):
            return ir.Unary(_UNARY[type(e.op)], self.expr(e.operand), line)
        if isinstance(e, ast.BoolOp):
            return ir.Logic(
                "and" if isinstance(e.op, ast.And) else "or", [self.expr(v) for v in e.values], line
            )
        if isinstance(e, ast.Compare):
            parts: list[ir.Expr] = []
            left = self.expr(e.left)
            for op, right_node in zip(e.ops, e.comparators):
                sym = _CMPOPS.get(type(op))
                if sym is None:
                    raise self.error(
                        e,
                        f"comparison {type(op).__name__} is not supported in an @action (no `is` / `in`)",
                        hint="compare numbers with == != < <= > >=",
                    )
                right = self.expr(right_node)
                parts.append(ir.Compare(sym, left, right, line))
                left = right
            return parts[0] if len(parts) == 1 else ir.Logic("and", parts, line)
        if isinstance(e, ast.IfExp):
            return ir.IfExp(self.expr(e.test), self.expr(e.body), self.expr(e.orelse), line)
        if isinstance(e, ast.Subscript):
            return self.subscript(e)
        if isinstance(e, ast.Call):
            return self.call(e)
        if isinstance(e, ast.Attribute):
            raise self.error(
                e,
                f"attribute access `.{e.attr}` is not supported in an @action (only `a.shape[k]`)",
                hint="use len(a) or a.shape[k] for dimensions",
            )
        if type(e) in _REJECTED:
            raise self.error(e, f"not supported in an @action: {_REJECTED[type(e)]}")
        raise self.error(e, f"{type(e).__name__} expressions are not supported in an @action")

    def name(self, e: ast.Name) -> ir.Expr:
        line = self.line(e)
        if e.id in self.locals:
            return ir.Name(e.id, line)
        try:
            v = self.lookup(e.id)
        except KeyError:
            raise self.error(e, f"undefined name {e.id!r}") from None
        if isinstance(v, bool | int | float) and not isinstance(v, ScalarType):
            return ir.Const(v, line)  # a module-level constant, captured when the action is defined
        raise self.error(
            e,
            f"{e.id!r} is {a_type(v)}: actions may read only their parameters, "
            "locals and module-level int/float/bool constants",
            hint="pass arrays as Array parameters; call other actions directly",
        )

    def subscript(self, e: ast.Subscript) -> ir.Expr:
        line = self.line(e)
        v = e.value
        if isinstance(v, ast.Attribute) and v.attr == "shape" and isinstance(v.value, ast.Name):
            if not (isinstance(e.slice, ast.Constant) and isinstance(e.slice.value, int)):
                raise self.error(e, "a.shape[k] needs a constant integer k")
            return ir.Dim(self.array_name(v.value), e.slice.value, line)
        if not isinstance(v, ast.Name):
            raise self.error(e, "only arrays held in variables can be indexed: `a[i]`")
        return ir.Index(self.array_name(v), self.indices(e.slice), line)

    def array_name(self, n: ast.Name) -> str:
        if n.id not in self.locals:
            raise self.error(
                n,
                f"{n.id!r} is not a parameter or local of this action",
                hint="pass arrays as Array parameters (globals are not accessible)",
            )
        return n.id

    def call(self, e: ast.Call) -> ir.Expr:
        line = self.line(e)
        if not isinstance(e.func, ast.Name):
            what = ast.unparse(e.func)
            raise self.error(
                e,
                f"call to {what!r}: only other @action functions, casts (i32(x), ...) and "
                "min/max/abs/len may be called",
                hint="make the callee an @action",
            )
        if e.keywords or any(isinstance(a, ast.Starred) for a in e.args):
            raise self.error(e, "calls in an @action take positional arguments only")
        fname = e.func.id
        if fname in self.locals:
            raise self.error(e, f"{fname!r} is a local variable, not an action")
        try:
            callee = self.lookup(fname)
        except KeyError:
            return ir.Call(Deferred(fname, self.lookup), [self.expr(a) for a in e.args], line)
        if callee is len:
            if len(e.args) != 1 or not isinstance(e.args[0], ast.Name):
                raise self.error(e, "len takes one array variable: len(a)")
            return ir.Dim(self.array_name(e.args[0]), 0, line)
        if callee in (min, max, abs):
            n = len(e.args)
            if (callee is abs and n != 1) or (callee is not abs and n < 2):
                raise self.error(
                    e, f"{fname} takes {'one argument' if callee is abs else 'two or more arguments'}"
                )
            return ir.Builtin(callee.__name__, [self.expr(a) for a in e.args], line)
        if isinstance(callee, ScalarType):
            if len(e.args) != 1:
                raise self.error(e, f"the cast {fname}(x) takes one argument")
            return ir.Cast(callee, self.expr(e.args[0]), line)
        if callee in (int, float, bool):
            raise self.error(
                e, f"{fname}() is not a typed cast", hint="use i32(x)/i64(x), f32(x)/f64(x) or boolean(x)"
            )
        if _is_action(callee):
            return ir.Call(callee, [self.expr(a) for a in e.args], line)
        if callee is Local:
            raise self.error(e, "Local(...) must be assigned directly to a variable: `buf = Local(i32, 64)`")
        raise self.error(
            e,
            f"call to {fname!r} ({type(callee).__name__}): only other @action functions, casts "
            "(i32(x), ...) and min/max/abs/len may be called",
            hint="make the callee an @action",
        )
