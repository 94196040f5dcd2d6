"""The top-level compile API: AIR graph -> traced passes -> kernels -> kernel IR -> C -> cc -> cffi.

``compile(graph)`` returns a :class:`Program`; calling it with ``{name: array}`` (and symbol values)
returns the outputs. ``backend="numpy"`` runs the reference interpreter behind the same call.
Outputs that are ``store`` chains onto a named input (a state such as a KV cache) are written in
place into the caller's array. ``run(graph, inputs)`` compiles once per structure (in-memory cache).
"""

from __future__ import annotations

import contextlib
import gc
import operator
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.entry_checks import EntryChecks, entry_checks
from caten_lab.air.graph import Graph, state_outputs
from caten_lab.air.interpreter import interpret
from caten_lab.air.serialize import decode_value, encode_value
from caten_lab.air.symbolic import Expr, evaluate
from caten_lab.codegen.kir_json import function_meta
from caten_lab.codegen.passes import pipeline_options
from caten_lab.config import BACKENDS, config
from caten_lab.errors import CatenError, RuntimeCheckError, ShapeError, SymbolError
from caten_lab.passes.base import PassContext
from caten_lab.passes.memory_plan import MemoryPlan
from caten_lab.passes.schedule import Schedule, graph_symbols
from caten_lab.runtime.fastcall import FastCall, collect_outputs
from caten_lab.type_words import a_type

_SHAPE = operator.attrgetter("shape")

__all__ = ["compile", "run", "Program", "default_pipeline", "clear_cache", "lower_to_c"]


def default_pipeline() -> Any:
    """Graph passes (typecheck, fold_views, const_fold, simplify, cse, transpose_operands, transpose_matmul, dce)
    + schedule, lower, the loop
    passes (collapse, hoist, simd, transpose_tiles, parallel, qgemm, unroll, row_jam, sgemm, tile_order, rowblock, lanes,
    unnest_parallel, team), memory_plan, render. Returns an editable PassManager."""
    from caten_lab.codegen.passes import codegen_passes
    from caten_lab.passes.manager import PassManager

    try:
        from caten_lab.passes.graph_pipeline import graph_passes

        gp = list(graph_passes())
    except ImportError:  # pragma: no cover - graph passes are optional
        gp = []
    return PassManager([*gp, *codegen_passes()])


def _single_symbol(d: object) -> str | None:
    if isinstance(d, Expr) and len(d.terms) == 1:
        m, c = d.terms[0]
        if c == 1 and len(m) == 1 and isinstance(m[0], str):
            return m[0]
    return None


def symbol_sources(shapes: Mapping[str, tuple]) -> list[tuple[str, int, int, str]]:
    """(input, rank, axis, symbol) for every input dimension that is a bare symbol."""
    return [(buf, len(shape), k, s) for buf, shape in shapes.items() for k, d in enumerate(shape)
            if (s := _single_symbol(d)) is not None]


ERR_INDEX, ERR_DIV0, ERR_RANGE = 1, 2, 3  # err[0] of a run: codegen/c/runtime.h (CK), codegen/c/int_div.h,
# codegen/c/index_check.h
SYMBOL_MAX = 2**62 - 1  # symbols are int64 in the generated C; this leaves room for index arithmetic

# err[0] of a failed run -> (message, hint) of its RuntimeCheckError
_CHECK_MESSAGES = {
    ERR_INDEX: ("out-of-bounds access in kernel {kernel}: index {index} outside a buffer of {size} elements{node}",
                "a view/store reaches outside its buffer for these symbol values; the program was stopped"),
    ERR_DIV0: ("integer division by zero in kernel {kernel}{node}",
               "an integer // or % on a tensor has a zero divisor: replace the zeros before dividing; "
               "the program was stopped"),
    ERR_RANGE: ("index {index} out of range for an axis of {size} in kernel {kernel}{node}",
                "a gather/x[ids]/embedding index must lie in [0, size): fix or clip the ids; the program was stopped"),
}


def bind_symbols(
    names: list[str], shapes: Mapping[str, tuple], inputs: Mapping[str, Any], symbols: Mapping[str, int] | None,
    sources: list[tuple[str, int, int, str]] | None = None,
) -> dict[str, int]:
    """Symbol values: those given, plus any read off an input whose dimension is a bare symbol."""
    out: dict[str, int] = {}
    if symbols and all(s in symbols for s in names) and all(
            type(v) is int and 0 <= v <= SYMBOL_MAX for v in symbols.values()):
        return dict(symbols)
    for k, v in (symbols or {}).items():
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise SymbolError(f"symbol {k!r} must be bound to a non-negative int, got {v!r}")
        if v > SYMBOL_MAX:
            raise SymbolError(f"symbol {k!r} is bound to {v}, larger than the compiled code's limit {SYMBOL_MAX}",
                              hint="symbols are 64-bit integers in the generated C")
        out[k] = int(v)
    for buf, rank, k, s in (sources if sources is not None else symbol_sources(shapes)):
        if s in out:
            continue
        arr = inputs.get(buf)
        if arr is None:
            continue
        ash = np.shape(arr)
        if len(ash) == rank:
            out[s] = int(ash[k])
    if symbols and all(s in out for s in names):
        return out
    missing = [s for s in names if s not in out]
    if missing:
        raise SymbolError(
            f"symbol(s) {', '.join(repr(s) for s in missing)} are not bound",
            hint=f"pass symbols={{{', '.join(f'{s!r}: <int>' for s in missing)}}}",
        )
    return out


@dataclass
class Program:
    """A compiled program. Call it: ``prog({"x": x}, {"seq": 7}) -> [outputs...]``."""

    graph: Graph | None  # None: loaded by its interface (load_program)
    backend: str
    safety: int
    # the graph after the graph passes (kernel node ids refer to it). A factory default leaves no class attribute,
    # so one that load_program left undecoded reaches __getattr__
    compiled_graph: Graph | None = field(default_factory=lambda: None)
    schedule: Schedule | None = None
    memory_plan: MemoryPlan | None = None
    trace: Any = None
    c_source: str | None = None
    source_map: list[list[int]] | None = None
    kernel_lines: dict[str, tuple[int, int]] | None = None
    kernel_ir: Any = None  # the kernel-IR Program (caten_lab.codegen.kir) the C was rendered from
    compile_s: float = 0.0
    cc_s: float = 0.0
    flags: tuple[str, ...] = ()
    library_path: str | None = None
    cached: bool = False
    artifacts: dict[str, Any] = field(default_factory=dict)
    # when the compile and the last profile ran (time.time() epochs and their parts, seconds): the
    # Inspector's Profile pane lays these out on the cell's timeline
    timings: dict[str, float] = field(default_factory=dict)
    artifact_key: str | None = None  # the compile-cache entry it came from or went to (default pipeline only)
    interface: dict | None = None  # instead of ``graph``: what calls need of it (:meth:`interface_json`)
    _lib: Any = None
    _checks: dict[int, tuple[str, list[int], list[int]]] = field(default_factory=dict)
    _lock: Any = field(default_factory=threading.Lock)  # one run at a time: calls share the workspace

    def __post_init__(self) -> None:
        if self.graph is None:  # loaded by its interface (load_program): no graph at hand
            self._from_interface(self.interface or {})
            return
        self.symbols = graph_symbols(self.graph)
        self.input_shapes = {n.attrs.name: (n.shape, n.dtype) for n in self.graph.inputs()}
        self.state_writes = state_outputs(self.graph)
        self._tables()
        self.entry: EntryChecks = entry_checks(self.graph, self.compiled_graph)

    def _tables(self) -> None:
        self._shape_only = {k: v[0] for k, v in self.input_shapes.items()}
        self._sym_sources = symbol_sources(self._shape_only)
        self._static_shapes = {k: tuple(s) for k, s in self._shape_only.items() if all(type(d) is int for d in s)}
        # (name, shape when static else None, declared shape): the per-call shape check walks this table
        self._input_table = [(k, self._static_shapes.get(k), tuple(s)) for k, s in self._shape_only.items()]
        self._input_names = tuple(self._shape_only)
        self._want_shapes = tuple(w for _, w, _ in self._input_table)  # None where symbolic
        self._symbolic_shapes = [(i, shape) for i, (_, w, shape) in enumerate(self._input_table) if w is None]

    def interface_json(self) -> dict:
        """What a call needs of the graph, as JSON data: the inputs (name, shape, dtype), the symbols, the
        outputs that update inputs in place, the entry checks. :func:`load_program` builds a program from it
        and the compile cache, with no graph (a runner's warm start, models/warm_start.py)."""
        return {"inputs": [[k, encode_value(tuple(shape)), dt.value] for k, (shape, dt) in self.input_shapes.items()],
                "symbols": list(self.symbols), "state_writes": [[i, b] for i, b in self.state_writes.items()],
                "entry": self.entry.to_json()}

    def _from_interface(self, d: dict) -> None:
        self.symbols = [str(x) for x in d["symbols"]]
        self.input_shapes = {str(k): (tuple(decode_value(shape)), DType(dt)) for k, shape, dt in d["inputs"]}
        self.state_writes = {int(i): str(b) for i, b in d["state_writes"]}
        self._tables()
        self.entry = EntryChecks.from_json(d["entry"])

    def decode_later(self, loader: Callable[[], Graph]) -> None:
        """The compiled graph is ``loader()``, called when something first asks for it (load_program)."""
        self.__dict__.pop("compiled_graph", None)
        self.__dict__["_compiled_loader"] = loader

    def __getattr__(self, name: str) -> Any:  # only reached for a compiled graph not decoded yet
        load = self.__dict__.get("_compiled_loader") if name == "compiled_graph" else None
        if load is None:
            raise AttributeError(name)
        g = self.__dict__["compiled_graph"] = load()
        del self.__dict__["_compiled_loader"]
        return g

    # ---- running -------------------------------------------------------------------------
    def __call__(self, inputs: Mapping[str, Any] | None = None, symbols: Mapping[str, int] | None = None) -> list[np.ndarray]:
        inputs = dict(inputs or {})
        sym = self._enter(inputs, symbols)
        if self.backend == "numpy":
            return self._run_numpy(inputs, sym)
        with self._lock:
            return self._run_c(inputs, sym)

    def _enter(self, inputs: dict[str, Any], symbols: Mapping[str, int] | None) -> dict[str, int]:
        """The checks every call makes before any kernel runs; returns the symbol binding.

        Always: every input bound, symbols bound to non-negative 64-bit ints. At safety >= 1 (and on the
        NumPy backend): input shapes equal to the declared ones under the binding, no unknown input, and
        :attr:`entry` (every symbolic window inside its buffer, no negative dimension). O(inputs +
        distinct window conditions); the kernels' own index checks are safety 2."""
        if not all(map(inputs.__contains__, self._input_names)):
            missing = [n for n in self._input_names if n not in inputs]
            name = missing[0]
            shape, dtype = self.input_shapes[name]
            raise CatenError(
                f"input {name!r} is not bound" + (f" (nor {', '.join(map(repr, missing[1:]))})" if missing[1:] else ""),
                hint=f"pass {{{name!r}: <{dtype.value} array of shape {tuple(str(d) for d in shape)}>}}",
            )
        sym = bind_symbols(self.symbols, self._shape_only, inputs, symbols, self._sym_sources)
        if self.safety >= 1 or self.backend == "numpy":
            self._check_inputs(inputs, sym)
            self.entry.check(sym)
        return sym

    def _check_inputs(self, inputs: Mapping[str, Any], sym: Mapping[str, int]) -> None:
        """Every input's shape equals its declared shape under ``sym``, and no input is unknown. The common
        case (all NumPy arrays, all right) is one tuple compare built by C-level map calls."""
        want: Any = self._want_shapes
        if self._symbolic_shapes:
            want = list(want)
            for i, shape in self._symbolic_shapes:
                want[i] = tuple(evaluate(d, sym) for d in shape)
            want = tuple(want)
        try:
            ok = tuple(map(_SHAPE, map(inputs.__getitem__, self._input_names))) == want
        except (KeyError, AttributeError):  # an input missing, or not an array: the detailed loop says which
            ok = False
        if not ok:
            self._check_inputs_one_by_one(inputs, sym)
        if len(inputs) > len(self._input_table):
            unknown = set(inputs) - set(self.input_shapes)
            raise CatenError(f"unknown input(s) {sorted(unknown)}", hint=f"inputs of this program: {sorted(self.input_shapes)}")

    def _check_inputs_one_by_one(self, inputs: Mapping[str, Any], sym: Mapping[str, int]) -> None:
        for name, want, shape in self._input_table:
            a = inputs.get(name)
            if a is None:
                dtype = self.input_shapes[name][1]
                raise CatenError(
                    f"input {name!r} is not bound",
                    hint=f"pass {{{name!r}: <{dtype.value} array of shape {tuple(evaluate(d, sym) for d in shape)}>}}",
                )
            if want is None:
                want = tuple(evaluate(d, sym) for d in shape)
            got = a.shape if type(a) is np.ndarray else tuple(np.shape(a))
            if got != want:
                raise ShapeError(f"input {name!r}: expected shape {want}, got {tuple(got)}",
                                 hint="check the array or the symbol values")

    def _state_array(self, name: str, inputs: Mapping[str, Any]) -> np.ndarray:
        arr = inputs[name]
        dtype = self.input_shapes[name][1].np
        if not isinstance(arr, np.ndarray) or arr.dtype != dtype or not arr.flags.c_contiguous or not arr.flags.writeable:
            raise CatenError(
                f"state {name!r} is updated in place, so it must be a writable C-contiguous {dtype} NumPy array",
                hint="pass np.ascontiguousarray(x, dtype=...) and keep that array",
            )
        return arr

    def _run_numpy(self, inputs: dict[str, Any], sym: dict[str, int]) -> list[np.ndarray]:
        states = {name: self._state_array(name, inputs) for name in set(self.state_writes.values())}
        outs = list(interpret(self.graph, inputs, sym))  # type: ignore[arg-type]
        for i, name in self.state_writes.items():
            states[name][...] = outs[i]
            outs[i] = states[name]
        return outs

    def profile(self, inputs: Mapping[str, Any] | None = None, symbols: Mapping[str, int] | None = None,
                repeat: int = 1) -> list[dict]:
        """Run ``repeat`` times timing every kernel call; rows (kernel, function, calls, seconds, share,
        bytes, flops, node_ids), slowest first: ``seconds`` per run, ``bytes``/``flops`` per run as
        counted by :func:`caten_lab.passes.kernel_cost.kernel_cost`. State inputs are updated as by a
        normal call; :attr:`timings` gets ``profile_start``/``profile_end`` (epochs)."""
        if self.backend != "c" or self.schedule is None:
            raise CatenError("profile() needs the C backend", hint="compile(graph, backend='c')")
        t0 = time.time()
        inputs = dict(inputs or {})
        sym = self._enter(inputs, symbols)
        prof = np.zeros(max(1, len(self.schedule.kernels)), dtype=np.float64)
        with self._lock:
            for _ in range(repeat):
                self._run_c(inputs, sym, prof)
        t1 = time.time()
        total = float(prof.sum()) or 1.0
        rows = []
        for i, (k, (nbytes, flops)) in enumerate(zip(self.schedule.kernels, self.kernel_costs(sym))):
            rows.append({"kernel": k.name, "function": self._checks.get(i, ("",))[0], "calls": repeat,
                         "seconds": float(prof[i]) / repeat, "share": float(prof[i]) / total,
                         "bytes": nbytes, "flops": flops, "node_ids": list(k.node_ids)})
        self.timings.update(profile_start=t0, profile_end=t1, profile_repeat=float(repeat))
        return sorted(rows, key=lambda r: -r["seconds"])

    def kernel_costs(self, symbols: Mapping[str, int] | None = None) -> list[tuple[int, int]]:
        """``(bytes, flops)`` of one call of every scheduled kernel, in schedule order."""
        from caten_lab.passes.kernel_cost import kernel_cost

        if self.schedule is None:
            return []
        sym = dict(symbols or {})
        return [kernel_cost(k, self.schedule.buffers, sym) for k in self.schedule.kernels]

    def _run_c(self, inputs: dict[str, Any], sym: dict[str, int], prof: np.ndarray | None = None) -> list[np.ndarray]:
        """One call of the library through the hot path (runtime/fastcall.py: cached pointers, grow-only
        aligned workspace); with ``prof``, every kernel call's time is added to its slot."""
        assert self.schedule is not None and self._lib is not None
        fast = self.__dict__.get("_fast")
        if fast is None:
            fast = self.__dict__["_fast"] = FastCall(self)
        with fast.lock:
            self._lib.set_threads(config().threads)
            err, outs = fast.run(inputs, sym, self._state_array, prof)
            if err[0]:
                raise self._violation(err.copy())
            return collect_outputs(self, fast, inputs, outs)

    def _violation(self, err: np.ndarray) -> RuntimeCheckError:
        tag, index, size, call = (int(x) for x in err[1:5])
        assert self.schedule is not None
        k = self.schedule.kernels[call] if 0 <= call < len(self.schedule.kernels) else None
        node_id = None
        if k is not None:
            fn_checks = self._checks.get(call)
            if fn_checks is not None and 0 <= tag < len(fn_checks[2]):
                pos = fn_checks[2][tag]
                node_id = k.node_ids[pos] if 0 <= pos < len(k.node_ids) else None
        where = None
        what = ""
        g = self.compiled_graph if self.compiled_graph is not None else self.graph
        if node_id is not None and g.has_node(node_id):
            node = g.node(node_id)
            where = node.source
            what = f" (AIR node {node_id}: {node!r})"
        elif node_id is not None:
            what = f" (AIR node {node_id})"
        kname = k.name if k is not None else f"#{call}"
        text, hint = _CHECK_MESSAGES.get(int(err[0]), _CHECK_MESSAGES[ERR_INDEX])
        return RuntimeCheckError(text.format(kernel=kname, node=what, index=index, size=size), where=where, hint=hint)

    # ---- presentation --------------------------------------------------------------------
    def summary(self) -> str:
        if self.schedule is None:
            return f"<Program backend={self.backend}>"
        s = self.schedule
        return (f"<Program backend=c kernels={len(s.kernels)} unique={s.unique_kernels()} "
                f"compile_s={self.compile_s:.3f} cc_s={self.cc_s:.3f} cached={self.cached}>")

    __repr__ = summary


def lower_to_c(graph: Graph, *, safety: int = 1, trace: bool = False, pipeline: Any = None, threads: int = 1,
               copy: bool = True) -> Any:
    """Everything ``compile`` does before the C compiler: run the pipeline; returns the PassResult
    (C source in ``result.ctx.artifacts['c_source']``). The cyclic garbage collector is paused meanwhile:
    the compiler allocates many small objects and creates no cycles worth collecting."""
    pm = pipeline if pipeline is not None else default_pipeline()
    ctx = PassContext(options={"safety": safety, "threads": threads})
    was = gc.isenabled()
    gc.disable()
    try:
        return pm.run(graph.copy() if copy else graph, ctx, trace=trace)
    finally:
        if was:
            gc.enable()


def compile(  # noqa: A001 - the public name the contract asks for
    graph: Graph,
    *,
    backend: str | None = None,
    safety: int | None = None,
    trace: bool = False,
    pipeline: Any = None,
    force: bool = False,
) -> Program:
    """Compile ``graph``. ``backend``/``safety`` default to :func:`caten_lab.config.config`."""
    cfg = config()
    backend = backend or cfg.backend
    safety = cfg.safety if safety is None else safety
    if backend not in BACKENDS:
        raise CatenError(f"unknown backend {backend!r}", hint=f"use one of {', '.join(BACKENDS)}")
    if safety not in (0, 1, 2):
        raise CatenError(f"safety must be 0, 1 or 2, got {safety!r}")
    if not isinstance(graph, Graph):
        raise CatenError(f"compile() needs an AIR Graph, got {a_type(graph)}")
    if not graph.outputs:
        raise CatenError("the graph has no outputs", hint="mark_output(value) for every result you want back")
    t0 = time.perf_counter()
    started = time.time()
    if backend == "numpy":
        graph.verify()
        return Program(graph, "numpy", safety, compile_s=time.perf_counter() - t0)
    from caten_lab.runtime import artifact_cache
    from caten_lab.runtime.toolchain import toolchain

    tc = toolchain(cfg.cc, cfg.cache_dir)
    tracing = trace or cfg.trace
    key = cached = None
    if not tracing and pipeline is None:  # the default pipeline's result is a pure function of these
        key = artifact_cache.artifact_key(
            _structure_of(graph), safety=safety, threads=cfg.threads, cc=cfg.cc, flags=tuple(tc.flags),
            passes=_default_options(),
        )
    # a process compiling the same key into the same cache directory finishes first; then this one loads
    with artifact_cache.building(cfg.cache_dir, key) if key is not None else contextlib.nullcontext():
        cached = None if force or key is None else artifact_cache.load(cfg.cache_dir, key)
        if cached is not None:
            compiled_graph, arts = cached
            pass_trace = None
        else:
            res = lower_to_c(graph, safety=safety, trace=tracing, pipeline=pipeline, threads=cfg.threads)
            compiled_graph, arts, pass_trace = res.graph, res.ctx.artifacts, res.trace
            if key is not None:
                artifact_cache.store(cfg.cache_dir, key, (compiled_graph, arts))
        compile_s = time.perf_counter() - t0
        built = _library(arts, tc, force)
    prog = _program(graph, safety, arts, built, tc.flags, compiled_graph=compiled_graph, trace=pass_trace, key=key)
    prog.timings.update(compile_start=started, passes_s=compile_s)
    prog.compile_s = compile_s
    if cfg.debug >= 1:
        print(f"[caten] {prog.summary()}")
        if cfg.debug >= 2:
            print(f"[caten] library {built.path} (source {str(built.path)[:-3]}.c)")
    return prog


def load_program(key: str, interface: dict, *, safety: int | None = None) -> Program | None:
    """The C program of compile-cache entry ``key`` (:attr:`Program.artifact_key`) with ``interface`` (its
    :meth:`Program.interface_json`) standing in for the graph, or None when the entry or its library is gone
    (the caller compiles). Nothing is traced, hashed or lowered: a runner's warm start
    (models/warm_start.py). The compiled graph is decoded when something asks for it."""
    from caten_lab.runtime import artifact_cache
    from caten_lab.runtime.toolchain import toolchain

    cfg = config()
    safety = cfg.safety if safety is None else safety
    t0 = time.perf_counter()
    cached = artifact_cache.load(cfg.cache_dir, key, graph=False)
    if cached is None:
        return None
    loader, arts = cached
    tc = toolchain(cfg.cc, cfg.cache_dir)
    built = _library(arts, tc, False)
    prog = _program(None, safety, arts, built, tc.flags, key=key, interface=interface)
    prog.decode_later(loader)
    prog.compile_s = time.perf_counter() - t0
    return prog


def _library(arts: dict[str, Any], tc: Any, force: bool) -> Any:
    """The built (or cached and verified) library of a pipeline result; the renderer's units let a big source
    build in parallel; ``force`` discards a cached one."""
    from caten_lab.runtime.toolchain import build_library

    return build_library(arts["c_source"], tc, config().cache_dir, force=force, units=arts.get("c_units"))


def _program(graph: Graph | None, safety: int, arts: dict[str, Any], built: Any, flags: tuple[str, ...], *,
             compiled_graph: Graph | None = None, trace: Any = None, key: str | None = None,
             interface: dict | None = None) -> Program:
    """The Program of a pipeline result and its built library (loaded here)."""
    from caten_lab.runtime.library import Library

    t_load = time.perf_counter()
    lib = Library(built.load_path or built.path)
    load_s = time.perf_counter() - t_load
    prog = Program(
        graph, "c", safety, compiled_graph=compiled_graph, schedule=arts["schedule"], memory_plan=arts.get("memory_plan"),
        trace=trace, c_source=arts["c_source"], source_map=arts["source_map"], kernel_lines=arts["kernel_lines"],
        kernel_ir=arts.get("kernel_ir"), cc_s=built.cc_s, flags=tuple(flags),
        library_path=str(built.path), cached=built.cached, artifacts=arts, artifact_key=key, interface=interface,
        _lib=lib,
    )
    prog.timings.update(cc_s=built.cc_s, load_s=load_s)
    meta = function_meta(arts["kernel_ir"])  # a cached program stays undecoded until it is looked at
    fn_checks = {name: m["checks"] for name, m in meta.items()}
    fn_of = {kn: name for name, m in meta.items() for kn in m["kernel_names"]}
    for i, k in enumerate(prog.schedule.kernels):  # type: ignore[union-attr]
        fname = fn_of.get(k.name, "")
        prog._checks[i] = (fname, k.node_ids, fn_checks.get(fname, []))
    prog.timings["compile_end"] = time.time()
    return prog


@lru_cache(maxsize=1)
def _default_options() -> tuple:
    """The default pipeline's options, pass by pass (part of every compile-cache key)."""
    return pipeline_options(default_pipeline().passes)


_CACHE: OrderedDict[tuple, Program] = OrderedDict()
_CACHE_SIZE = 64


_HASHES: OrderedDict[int, tuple[Graph, int, str]] = OrderedDict()


def _structure_of(graph: Graph) -> str:
    """``graph.structural_hash()``, remembered per graph object and version: a decode loop calling
    ``run`` with the same graph every step hashes it once."""
    hit = _HASHES.get(id(graph))
    if hit is not None and hit[0] is graph and hit[1] == graph.version:
        return hit[2]
    h = graph.structural_hash()
    _HASHES[id(graph)] = (graph, graph.version, h)  # the strong reference keeps id() unique
    while len(_HASHES) > 16:
        _HASHES.popitem(last=False)
    return h


def clear_cache() -> None:
    _CACHE.clear()
    _HASHES.clear()


def run(
    graph: Graph, inputs: Mapping[str, Any] | None = None, symbols: Mapping[str, int] | None = None,
    backend: str | None = None,
) -> list[np.ndarray]:
    """Compile (once per graph structure and options) and run."""
    cfg = config()
    backend = backend or cfg.backend
    key = (_structure_of(graph), backend, cfg.safety, cfg.cc, cfg.threads, str(cfg.cache_dir), _default_options())
    prog = _CACHE.get(key)
    if prog is None:
        prog = compile(graph, backend=backend)
        _CACHE[key] = prog
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return prog(inputs or {}, symbols)
