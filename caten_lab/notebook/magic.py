"""``%%caten``: run a cell of ordinary Python, compile its result with tracing on, show the Inspector.

The cell's last expression (or the variable named by ``-o/--out``) is compiled: caten tensors
(one, or a list/tuple/dict of them), an AIR ``Graph``, or something already compiled (a Program,
a PassTrace) which is only shown. Compiles are cached, keyed by the cell, the options, the graph's
structure and the versions involved (as ``%%cython`` does); ``--force`` bypasses the cache.

Errors are short: the cell line, the failing pass, the C lines for C compiler errors. ``--debug``
shows the full Python traceback instead.
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import linecache
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from caten_lab.air.graph import Graph
from caten_lab.errors import CatenError, notebook_cell_name
from caten_lab.notebook import compile_bridge
from caten_lab.notebook.summary import output_names, result_summary
from caten_lab.type_words import a_type
from caten_lab.version import __version__

PANES = ("graph", "profile", "c", "result")

_cell_ids = itertools.count(1)


@dataclass
class CatenResult:
    """What one ``%%caten`` run produced; also stored in the user namespace as ``_caten``."""

    graph: Graph | None
    inputs: dict[str, np.ndarray]
    program: Any
    trace: Any
    outputs: list[np.ndarray] | None = None
    run_s: float | None = None
    cached: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    inspector: Any = None
    profile: list[dict] | None = None  # Program.profile rows (--profile): time per kernel call

    def show(self) -> Any:
        """The static HTML report (renders without widgets: nbconvert, GitHub)."""
        from caten_lab.notebook.static_html import show

        return show(self)


class CatenCellError(CatenError):
    """A %%caten failure shown as a few lines (no Python frames); the cause is chained."""

    def __init__(self, lines: list[str], *, trace: Any = None) -> None:
        self.lines = lines
        self.trace = trace
        super().__init__("\n".join(lines))

    def _render_traceback_(self) -> list[str]:
        red, reset = "\x1b[31m", "\x1b[0m"
        return [f"{red}{self.lines[0]}{reset}", *self.lines[1:]]


# ---- the magic ---------------------------------------------------------------------------------


@magics_class
class CatenMagics(Magics):
    """The ``%%caten`` cell magic (state: the compile cache)."""

    def __init__(self, shell: Any = None) -> None:
        super().__init__(shell)
        self._cache: dict[str, Any] = {}

    @magic_arguments("%caten")  # the usage line says %%caten: IPython prefixes one % to this name
    @argument(
        "-o",
        "--out",
        default=None,
        metavar="NAME",
        help="compile the variable NAME (default: the cell's last expression, which is also stored in NAME)",
    )
    @argument(
        "--passes",
        default=None,
        metavar="P1,P2",
        help="keep only these graph passes of the default pipeline (code generation passes always run)",
    )
    @argument("--skip", default=None, metavar="P1,P2", help="drop these passes from the pipeline")
    @argument("--pipeline", default=None, metavar="VAR", help="a variable holding a PassManager to use")
    @argument("--backend", default=None, choices=["c", "numpy"], help="code generator backend")
    @argument(
        "--safety", default=None, type=int, choices=[0, 1, 2], help="runtime checks (2: bounds-checked)"
    )
    @argument("--symbols", default=None, metavar="S=N,...", help="values of symbolic dims for the run")
    @argument(
        "--inputs", default=None, metavar="VAR", help="a dict of arrays to bind when compiling a bare Graph"
    )
    @argument("--no-run", action="store_true", help="compile and inspect, do not run")
    @argument("--check", action="store_true", help="compare the outputs with the NumPy interpreter")
    @argument(
        "--profile",
        action="store_true",
        help="time every kernel call once more (Program.profile): codegen passes show the time per call",
    )
    @argument("--panes", default=None, metavar="LIST", help="panes to show: graph,profile,c,result")
    @argument("--static", action="store_true", help="show a static HTML report instead of the widget")
    @argument("--force", action="store_true", help="recompile, bypassing the cache")
    @argument("--debug", action="store_true", help="show full Python tracebacks on errors")
    @cell_magic
    def caten(self, line: str, cell: str) -> None:
        """Compile the cell's result with tracing and show the Inspector. See ``%%caten?``."""
        args = _parse_options(self.caten, line)
        panes = _parse_panes(args.panes)
        symbols = _parse_symbols(args.symbols)
        try:
            result = self._run(args, line, cell, symbols)
        except CatenCellError as err:
            self.shell.user_ns["_caten_error"] = err
            if args.debug and err.__cause__ is not None:
                raise err.__cause__ from None
            raise
        self.shell.user_ns["_caten"] = result
        title = _title(result)
        from IPython.display import HTML, display

        if args.static:
            from caten_lab.notebook.static_html import show

            display(HTML(show(result, title=title).html))
            return None
        from caten_lab.notebook.inspector import Inspector

        insp = Inspector(
            result, result=_result_block(result, args), panes=panes, title=title, profile=result.profile
        )
        result.inspector = insp
        display(insp)
        return None

    # ---- steps ---------------------------------------------------------------------------
    def _run(self, args: Any, line: str, cell: str, symbols: dict[str, int]) -> CatenResult:
        ns = self.shell.user_ns
        filename, cell = _cell_source(self.shell, line, cell)  # from here on `cell` is the editor's text
        value = _exec_cell(cell, filename, ns, args.out, debug=args.debug)
        if hasattr(value, "records") and hasattr(value, "graph_at"):  # a PassTrace: show only
            return CatenResult(None, {}, None, value, options=vars(args))
        if hasattr(value, "trace") and (
            hasattr(value, "c_source") or hasattr(value, "schedule")
        ):  # a Program
            return CatenResult(None, {}, value, value.trace, options=vars(args))
        graph, inputs = _to_graph(value, ns, args.inputs)
        pipeline = self._pipeline(args, ns)
        key = _cache_key(cell.partition("\n")[2], line, graph)
        cached = key in self._cache and not args.force
        if cached:
            program = self._cache[key]
        else:
            program = _compile(graph, pipeline, args, filename, cell)
            self._cache[key] = program
        trace = getattr(program, "trace", None)
        if trace is None:  # the numpy backend runs no passes: show an empty trace (results only)
            from caten_lab.passes.trace import PassTrace

            trace = PassTrace([])
        res = CatenResult(graph, inputs, program, trace, cached=cached, options=vars(args))
        _check_symbol_names(symbols, getattr(program, "symbols", None))
        if not args.no_run:
            res.outputs, res.run_s = _execute(program, inputs, symbols, filename, cell, args.debug)
        if args.profile:
            if args.no_run or getattr(program, "backend", None) != "c" or not hasattr(program, "profile"):
                raise UsageError(
                    "--profile times the compiled kernels: it needs the C backend and a run "
                    "(drop --no-run / --backend numpy)"
                )
            res.profile = _execute_profile(program, inputs, symbols, filename, cell, args.debug)
        return res

    def _pipeline(self, args: Any, ns: dict[str, Any]) -> Any:
        if args.pipeline:
            if args.pipeline not in ns:
                raise UsageError(f"--pipeline {args.pipeline}: no such variable in the notebook")
            pm = ns[args.pipeline]
            if isinstance(pm, (list, tuple)):
                from caten_lab.passes import PassManager

                pm = PassManager(list(pm))
            if not hasattr(pm, "run") or not hasattr(pm, "names"):
                raise UsageError(f"--pipeline {args.pipeline}: expected a PassManager or a list of passes")
            pm = pm.copy() if hasattr(pm, "copy") else pm
        elif args.passes or args.skip:
            pm = compile_bridge.default_pipeline()
        else:
            return None
        names = list(pm.names())
        if args.passes:
            keep = [p.strip() for p in args.passes.split(",") if p.strip()]
            unknown = [p for p in keep if p not in names]
            if unknown:
                raise UsageError(
                    f"--passes: unknown pass(es) {', '.join(unknown)}; available: {', '.join(names)}"
                )
            required = compile_bridge.codegen_pass_names()  # the backend cannot produce code without these
            for n in names:
                if n not in keep and n not in required:
                    pm.remove(n)
        if args.skip:
            drop = [p.strip() for p in args.skip.split(",") if p.strip()]
            unknown = [p for p in drop if p not in names]
            if unknown:
                raise UsageError(
                    f"--skip: unknown pass(es) {', '.join(unknown)}; available: {', '.join(names)}"
                )
            for n in drop:
                if n in pm.names():
                    pm.remove(n)
        return pm


# ---- helpers -----------------------------------------------------------------------------------


def _parse_panes(text: str | None) -> list[str]:
    if not text:
        return list(PANES)
    panes = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in panes if p not in PANES]
    if bad or not panes:
        raise UsageError(
            f"--panes: unknown pane(s) {', '.join(bad) or '(none given)'}; choose from {','.join(PANES)}"
        )
    return panes


def _parse_options(magic: Any, line: str) -> Any:
    """``parse_argstring`` with shlex's errors (an unbalanced quote) as a one-line UsageError."""
    try:
        return parse_argstring(magic, line)
    except ValueError as exc:  # shlex: "No closing quotation", "No escaped character"
        raise UsageError(f"%%caten: cannot split the options {line.strip()!r}: {exc}") from None


def _parse_symbols(text: str | None) -> dict[str, int]:
    out: dict[str, int] = {}
    if not text:
        return out
    for part in text.split(","):
        name, eq, val = part.partition("=")
        name, val = name.strip(), val.strip()
        try:
            value = int(val, 10) if val.isascii() else None
        except ValueError:
            value = None
        if not eq or not name.isidentifier() or value is None:
            raise UsageError(f"--symbols: expected NAME=INT[,NAME=INT...], got {part.strip()!r}")
        if value < 0:
            raise UsageError(f"--symbols: {name} = {value}: symbol values must be non-negative")
        if name in out:
            raise UsageError(f"--symbols: {name} is given twice")
        out[name] = value
    return out


def _check_symbol_names(symbols: dict[str, int], known: Any) -> None:
    """Every ``--symbols`` name must be a symbol of the compiled program (``Program.symbols``)."""
    if not symbols or known is None:
        return
    unknown = [s for s in symbols if s not in known]
    if unknown:
        have = ", ".join(sorted(known)) or "none: its shapes are all static"
        raise UsageError(f"--symbols: unknown symbol(s) {', '.join(unknown)}; the program's symbols: {have}")


def _cell_source(shell: Any, line: str, body: str) -> tuple[str, str]:
    """(the file name the cell runs under, the cell as the editor shows it: the ``%%caten`` line is line 1).

    The name comes from IPython's compiler, as for any cell: tracebacks then say ``Cell In[3], line 5``
    and :func:`caten_lab.errors.where` names node sources, rules and errors ``In[3]:5``.
    """
    text = f"%%caten {line.strip()}".rstrip() + "\n" + body
    compiler = getattr(shell, "compile", None)
    number = _running_cell_number()
    if hasattr(compiler, "cache") and number is not None:
        return compiler.cache(text, number), text
    filename = f"<caten-cell-{next(_cell_ids)}>"
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    return filename, text


def _running_cell_number() -> int | None:
    """n of the ``In[n]`` running this magic: the innermost caller frame that is a notebook cell (the
    shell's ``execution_count`` may already be the next cell's: ipykernel counts up before running)."""
    frame = sys._getframe(1)
    while frame is not None:
        name = notebook_cell_name(frame.f_code.co_filename)
        if name is not None and name.startswith("In[") and name[3:-1].isdigit():
            return int(name[3:-1])
        frame = frame.f_back
    return None


def _cell_name(filename: str) -> str:
    return notebook_cell_name(filename) or filename


def _cell_line_text(cell: str, lineno: int) -> str:
    lines = cell.splitlines()
    return lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""


def _at_line(filename: str, cell: str, lineno: int) -> str:
    """``In[3], line 5: <text>``: the editor's line of the cell, named as IPython's tracebacks name it."""
    return f"{_cell_name(filename)}, line {lineno}: {_cell_line_text(cell, lineno)}"


def _where_in_cell(where: str | None, filename: str, cell: str) -> str | None:
    """``In[3]:5`` (or the cell's file name and line) -> ``In[3], line 5: <text>``; other places unchanged."""
    if not where:
        return None
    path, _, ln = where.rpartition(":")
    if path in (filename, _cell_name(filename)) and ln.isdigit():
        return _at_line(filename, cell, int(ln))
    return where


def _exec_cell(cell: str, filename: str, ns: dict[str, Any], out: str | None, *, debug: bool) -> Any:
    """Run the cell (its line 1 is the ``%%caten`` line); return its last expression's value (also bound
    to ``out``) or ``ns[out]``."""
    body = "\n" + cell.partition("\n")[2]  # line numbers stay the editor's: line 1 is the magic's line
    try:
        tree = ast.parse(body, filename=filename)
    except SyntaxError as exc:
        raise CatenCellError(
            [
                f"caten: syntax error at {_cell_name(filename)}, line {exc.lineno or 0}: {exc.msg}",
                f"  {(exc.text or '').rstrip()}",
            ]
        ) from exc
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    try:
        exec(compile(ast.Module(tree.body, type_ignores=[]), filename, "exec"), ns)
        value = eval(compile(ast.Expression(last.value), filename, "eval"), ns) if last is not None else None
    except Exception as exc:  # the user's own code failed
        raise _user_error(exc, filename, cell) from exc
    if last is not None:
        if out:
            ns[out] = value
        return value
    if out:
        if out not in ns:
            raise CatenCellError([f"caten: -o {out}: the cell did not define {out!r}"])
        return ns[out]
    raise CatenCellError(
        [
            "caten: nothing to compile: end the cell with an expression (the tensors to compile) "
            "or name a variable with -o NAME"
        ]
    )


def _user_error(exc: BaseException, filename: str, cell: str) -> CatenCellError:
    lineno = None
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == filename:
            lineno = tb.tb_lineno
        tb = tb.tb_next
    where = getattr(exc, "where", None)
    loc = _where_in_cell(where, filename, cell) if where else None
    if loc is None and lineno is not None:
        loc = _at_line(filename, cell, lineno)
    msg = exc.message if isinstance(exc, CatenError) else str(exc)
    lines = [f"caten: {type(exc).__name__} in the cell" + (f" at {loc}" if loc else ""), f"  {msg}"]
    hint = getattr(exc, "hint", None)
    if hint:
        lines.append(f"  hint: {hint}")
    lines.append("  (run with --debug for the full traceback)")
    return CatenCellError(lines)


def _is_tensor(x: Any) -> bool:
    return type(x).__name__ == "Tensor" and type(x).__module__.startswith("caten_lab.frontend")


def _to_graph(value: Any, ns: dict[str, Any], inputs_var: str | None) -> tuple[Graph, dict[str, np.ndarray]]:
    if isinstance(value, Graph):
        inputs: dict[str, np.ndarray] = {}
        if inputs_var:
            if inputs_var not in ns or not isinstance(ns[inputs_var], dict):
                raise UsageError(f"--inputs {inputs_var}: expected a dict of arrays in the notebook")
            inputs = dict(ns[inputs_var])
        return value, inputs
    tensors: list[Any] | None = None
    if _is_tensor(value):
        tensors = [value]
    elif isinstance(value, (list, tuple)) and value and all(_is_tensor(t) for t in value):
        tensors = list(value)
    elif isinstance(value, dict) and value and all(_is_tensor(t) for t in value.values()):
        tensors = list(value.values())
    if tensors is None:
        raise CatenCellError(
            [
                f"caten: the cell's result is {a_type(value)}, which caten cannot compile",
                "  end the cell with caten tensors (one, or a list/tuple/dict of them), an AIR Graph, "
                "a compiled Program or a PassTrace",
            ]
        )
    from caten_lab.frontend import build_graph

    graph, arrays = build_graph(tensors)
    return graph, dict(arrays)


def _versions() -> tuple:
    return (__version__, np.__version__, sys.version_info[:3], sys.executable)


def _cache_key(cell: str, line: str, graph: Graph) -> str:
    opts = " ".join(t for t in line.split() if t != "--force")
    key = (cell, opts, graph.structural_hash(), _versions())
    return hashlib.sha1(repr(key).encode()).hexdigest()


def _compile(graph: Graph, pipeline: Any, args: Any, filename: str, cell: str) -> Any:
    try:
        return compile_bridge.compile_traced(
            graph, pipeline=pipeline, backend=args.backend, safety=args.safety, force=args.force
        )
    except CatenError as exc:
        raise _compile_error(exc, filename, cell) from exc
    except Exception as exc:  # an internal bug: still short, but say so
        lines = [
            f"caten: internal error while compiling: {type(exc).__name__}: {exc}",
            "  this is a caten_lab bug; rerun with --debug for the traceback and report it",
        ]
        raise CatenCellError(lines) from exc


_C_DIAG = re.compile(r":(\d+):(?:\d+:)?\s*(error|warning|fatal error)\b")


def _compile_error(exc: CatenError, filename: str, cell: str) -> CatenCellError:
    trace = getattr(exc, "trace", None)
    pass_name = getattr(exc, "pass_name", None)
    if pass_name is None and trace is not None:
        failed = next((r for r in getattr(trace, "records", []) if getattr(r, "error", None)), None)
        pass_name = failed.name if failed is not None else None
    head = "caten: compilation failed" + (f" in pass {pass_name!r}" if pass_name else "")
    lines = [head, f"  {exc.message}"]
    loc = _where_in_cell(exc.where, filename, cell)
    if loc:
        lines.append(f"  from {loc}")
    lines += _c_excerpt(exc, trace)
    if exc.hint:
        lines.append(f"  hint: {exc.hint}")
    lines.append(
        "  the partial trace is in _caten_error.trace (caten_lab.show(_caten_error) renders it); "
        "--debug shows the Python traceback"
    )
    return CatenCellError(lines, trace=trace)


def _c_excerpt(exc: CatenError, trace: Any) -> list[str]:
    """The C lines a C compiler diagnostic points at (with one line of context)."""
    text = str(exc) + "\n" + str(getattr(exc, "stderr", "") or "")
    hits = sorted({int(m.group(1)) for m in _C_DIAG.finditer(text)})
    if not hits:
        return []
    c_source = getattr(exc, "c_source", None)
    if c_source is None and trace is not None:
        for rec in reversed(list(getattr(trace, "records", []))):
            arts = getattr(rec, "artifacts", None) or {}
            if "c_source" in arts:
                c_source = arts["c_source"]
                break
    if not c_source:
        return []
    src = c_source.splitlines()
    out = ["  C source:"]
    shown: set[int] = set()
    for ln in hits[:5]:
        for k in range(max(1, ln - 1), min(len(src), ln + 1) + 1):
            if k not in shown:
                shown.add(k)
                out.append(f"  {'>' if k == ln else ' '} {k:5d} | {src[k - 1]}")
    return out


def _execute(
    program: Any,
    inputs: dict[str, np.ndarray],
    symbols: dict[str, int],
    filename: str,
    cell: str,
    debug: bool,
) -> tuple[list[np.ndarray], float]:
    t0 = time.perf_counter()
    try:
        outs = program(inputs, symbols or None)
    except CatenError as exc:
        lines = [f"caten: running the compiled program failed: {type(exc).__name__}", f"  {exc.message}"]
        loc = _where_in_cell(exc.where, filename, cell)
        if loc:
            lines.append(f"  from {loc}")
        if exc.hint:
            lines.append(f"  hint: {exc.hint}")
        raise CatenCellError(lines) from exc
    except Exception as exc:
        raise CatenCellError(
            [
                f"caten: running the compiled program failed: {type(exc).__name__}: {exc}",
                "  rerun with --debug for the traceback",
            ]
        ) from exc
    return [np.asarray(o) for o in outs], time.perf_counter() - t0


def _execute_profile(
    program: Any,
    inputs: dict[str, np.ndarray],
    symbols: dict[str, int],
    filename: str,
    cell: str,
    debug: bool,
) -> list[dict]:
    """``program.profile`` once (rows: kernel, function, calls, seconds, share), errors as in a run."""
    rows: list[dict] = []

    def timed(feed: dict[str, np.ndarray], sym: dict[str, int] | None) -> list:
        rows.extend(program.profile(feed, sym))
        return []

    _execute(timed, inputs, symbols, filename, cell, debug)  # a failing run is reported as by a normal one
    return rows


def _result_block(res: CatenResult, args: Any) -> dict[str, Any] | None:
    if res.outputs is None:
        return None
    names = output_names(res.graph, len(res.outputs))
    mismatch = None
    note = f"backend {getattr(res.program, 'backend', '?')}"
    if args.check and res.graph is not None:
        ref = compile_bridge.reference_outputs(res.graph, res.inputs, _parse_symbols(args.symbols))
        bad = []
        for i, (a, b) in enumerate(zip(res.outputs, ref)):
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True):
                err = (
                    float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
                    if a.shape == b.shape
                    else None
                )
                bad.append(
                    f"output {i}: differs from the NumPy interpreter"
                    + (f" (max |err| {err:.3g})" if err else f" (shape {a.shape} vs {b.shape})")
                )
        mismatch = "\n".join(bad) or None
        note += " · matches the NumPy interpreter" if not bad else ""
    return result_summary(res.outputs, names, run_s=res.run_s, note=note, mismatch=mismatch)


def _title(res: CatenResult) -> str:
    n = len(getattr(res.trace, "records", []) or [])
    parts = [f"%%caten · {n} passes"]
    if res.graph is not None:
        parts.append(f"{len(res.graph)} nodes")
    if res.cached:
        parts.append("cached compile (--force recompiles)")
    return " · ".join(parts)


def load_ipython_extension(ipython: Any) -> None:
    """Register ``%%caten`` (called by ``%load_ext caten_lab``)."""
    ipython.register_magics(CatenMagics)


def unload_ipython_extension(ipython: Any) -> None:  # pragma: no cover - nothing to undo
    """Magics stay registered until the kernel restarts, as with other extensions."""
