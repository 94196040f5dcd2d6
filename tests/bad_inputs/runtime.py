"""Bad inputs: runtime. See tests/bad_inputs/__init__.py for the case format.

A compiled program's checked entry (caten_lab/air/entry_checks.py, Program._enter): symbol windows past
their buffer, negative dimensions, symbol values too large, argument buffers of the wrong shape, dtype
or layout; integer division by zero on both backends. Before issue 13 most of these corrupted the heap,
segfaulted or returned garbage.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from bad_inputs import Case
from caten_lab.air import Graph, Sym, dtypes
from caten_lab.compiler import compile
from caten_lab.errors import CatenError, RuntimeCheckError, ShapeError, SymbolError

ASSETS = Path(__file__).resolve().parents[2] / "assets" / "tiny_gpt2"


def _kv() -> tuple[Graph, dict]:
    """The README's KV-cache example over a 128-long cache."""
    from caten_lab.frontend import Tensor, build_graph, placeholder

    seq, pos = Sym("seq"), Sym("pos")
    cache_t = Tensor.from_numpy(np.zeros((1, 4, 128, 16), np.float32), name="cache")
    k = placeholder((1, 4, seq, 16), name="k")
    cache_t[:, :, pos:pos + seq] = k
    g, arrays = build_graph([cache_t[:, :, :pos + seq].sum(-1)])
    return g, {**arrays, "k": np.ones((1, 4, 3, 16), np.float32)}


def kv_window(pos: int, safety: int = 1, backend: str = "c"):  # noqa: ANN201
    def case() -> None:
        g, arrays = _kv()
        compile(g, safety=safety, backend=backend)(arrays, {"pos": pos, "seq": 3})
    return case


def kv_window_execute() -> None:
    from caten_lab.frontend import execute

    g, arrays = _kv()
    execute(g, arrays, {"pos": 126})


def kv_window_profile() -> None:
    g, arrays = _kv()
    compile(g, backend="c").profile(arrays, {"pos": 126, "seq": 3})


def symbol_too_large() -> None:
    g, arrays = _kv()
    compile(g)(arrays, {"pos": 2**64, "seq": 3})


@cache
def _runner():  # noqa: ANN202
    from caten_lab.models.gpt2 import GPT2Runner

    return GPT2Runner.from_pretrained(ASSETS)


def gpt2_program(seq: int, pos: int):  # noqa: ANN201
    def case() -> None:
        r = _runner()
        tokens = np.ones((1, seq), np.int64)
        r.program({**r.arrays, r.tokens_name: tokens}, {"seq": seq, "pos": pos})
    return case


def negative_slice(backend: str):  # noqa: ANN201
    def case() -> None:
        from caten_lab.frontend import build_graph, placeholder

        n = Sym("n")
        g, _ = build_graph([placeholder((n,), "float32", name="x")[2:n - 3] * 2])
        compile(g, backend=backend)({"x": np.arange(3, dtype=np.float32)})
    return case


def _lookup(kind: str, ids: list[int], backend: str, safety: int = 1):  # noqa: ANN202
    """x[ids], gather or embedding over a 5-row table with ids out of range (they returned 0 rows)."""
    def case() -> None:
        from caten_lab.frontend import Tensor, build_graph
        from caten_lab.nn import functional as F

        w = Tensor.from_numpy(np.arange(15, dtype=np.float32).reshape(5, 3), name="w")
        i = Tensor.from_numpy(np.array(ids, np.int64), name="ids")
        out = {"rows": lambda: w[i], "gather": lambda: w.gather(0, i.reshape(len(ids), 1)),
               "embedding": lambda: F.embedding(i, w)}[kind]()
        g, arrays = build_graph([out])
        compile(g, backend=backend, safety=safety)(arrays)
    return case


def gpt2_token_past_the_vocabulary() -> None:
    r = _runner()
    tokens = np.array([[1, 2, 10**6]], np.int64)
    r.program({**r.arrays, r.tokens_name: tokens}, {"seq": 3, "pos": 0})


def check_index_symbolic_size(backend: str):  # noqa: ANN201
    def case() -> None:
        g = Graph()
        x = g.insert("allocate", [], shape=(3,), dtype=dtypes.int32, name="x")
        g.mark_output(g.insert("check_index", [x], size=Sym("n")))
        compile(g, backend=backend)({"x": np.array([0, 4, 9], np.int32)}, {"n": 4})
    return case


def window_before_the_start() -> None:
    g = Graph()
    x = g.insert("allocate", [], shape=(8,), dtype=dtypes.float32, name="x")
    g.mark_output(g.insert("view", [x], shape=(4,), strides=(1,), offset=Sym("pos") - 3))
    compile(g)({"x": np.zeros(8, np.float32)}, {"pos": 1})


def window_over_a_symbolic_axis() -> None:
    from caten_lab.frontend import build_graph, placeholder

    g, _ = build_graph([placeholder((Sym("seq"),), "float32", name="y")[:3] * 2])
    compile(g)({"y": np.ones(2, np.float32)})


def _div(op: str, divisor: object, backend: str, safety: int):  # noqa: ANN202
    def case() -> None:
        from caten_lab.frontend import Tensor, build_graph

        a = Tensor.from_numpy(np.array([7, -7, 5, 9], np.int32), name="a")
        b = Tensor.from_numpy(np.array(divisor, np.int32), name="b") if isinstance(divisor, list) else divisor
        g, arrays = build_graph([a // b if op == "//" else a % b])
        compile(g, backend=backend, safety=safety)(arrays)
    return case


def _store_graph() -> Graph:
    g = Graph()
    c = g.insert("allocate", [], shape=(8,), dtype=dtypes.float32, name="c")
    y = g.insert("allocate", [], shape=(2,), dtype=dtypes.float32, name="y")
    g.mark_output(g.insert("store", [c, y], shape=(2,), strides=(1,), offset=Sym("pos")))
    return g


def store_call(c: object, y: object, pos: int = 0):  # noqa: ANN201
    def case() -> None:
        compile(_store_graph())({"c": c, "y": y}, {"pos": pos})
    return case


def _int_input(x: object):  # noqa: ANN202
    def case() -> None:
        g = Graph()
        v = g.insert("allocate", [], shape=(3,), dtype=dtypes.int32, name="x")
        g.mark_output(g.insert("add", [v, 1]))
        compile(g)({"x": x})
    return case


class _LyingShape:
    """Reports shape (3,) but converts to 100 elements."""

    shape = (3,)

    def __array__(self, dtype=None, copy=None):  # noqa: ANN001, ANN204
        return np.zeros(100, np.int32)


def huge_output() -> None:
    g = Graph()
    n = Sym("n")
    g.mark_output(g.insert("const", [], value=1.0, shape=(n, n), dtype=dtypes.float32))
    compile(g)({}, {"n": 2**31})


Y = np.ones(2, np.float32)
WINDOW = ("out of range", "pos + seq <= 128", "'cache'")
DIV0 = ("integer division by zero", "AIR node")

CASES: list[Case] = [
    *[(f"runtime: KV window past the cache, pos={p}, safety {s}", kv_window(p, s), SymbolError, WINDOW)
      for p in (126, 5000, 100000) for s in (1, 2)],
    ("runtime: KV window past the cache, numpy backend", kv_window(126, 1, "numpy"), SymbolError, WINDOW),
    ("runtime: KV window past the cache through execute", kv_window_execute, SymbolError, WINDOW),
    ("runtime: KV window past the cache through profile()", kv_window_profile, SymbolError, WINDOW),
    ("runtime: window before the buffer's start", window_before_the_start, SymbolError, ("'x'", "3 <= pos")),
    ("runtime: fixed window over a short symbolic axis", window_over_a_symbolic_axis, SymbolError,
     ("'y'", "3 <= seq")),
    ("runtime: symbol larger than int64", symbol_too_large, SymbolError, ("'pos'", "larger than")),
    ("runtime: GPT-2 runner.program past the context, pos=300", gpt2_program(3, 300), SymbolError,
     ("pos + seq <= 256", "'pos': 300")),
    ("runtime: GPT-2 runner.program with no tokens", gpt2_program(0, 5), SymbolError, ("1 <= seq",)),
    ("runtime: negative symbolic slice, C", negative_slice("c"), SymbolError, ("negative dimension n - 5", "5 <= n")),
    ("runtime: negative symbolic slice, numpy", negative_slice("numpy"), SymbolError,
     ("negative dimension n - 5", "5 <= n")),
    *[(f"runtime: integer {op} by zero, {backend}, safety {s}", _div(op, [2, 1, 0, 3], backend, s),
       RuntimeCheckError, DIV0 + (("in kernel",) if backend == "c" else ()))
      for op in ("//", "%") for backend in ("c", "numpy") for s in (1, 2)],
    ("runtime: integer // by a constant zero, C", _div("//", 0, "c", 1), RuntimeCheckError, DIV0),
    ("runtime: state too small", store_call(np.zeros(4, np.float32), Y), ShapeError,
     ("'c'", "expected shape (8,)")),
    ("runtime: input too small", store_call(np.zeros(8, np.float32), np.ones(1, np.float32)), ShapeError,
     ("'y'", "expected shape (2,)")),
    ("runtime: state not contiguous", store_call(np.zeros(16, np.float32)[::2], Y), CatenError,
     ("'c'", "C-contiguous")),
    ("runtime: state of the wrong dtype", store_call(np.zeros(8, np.int32), Y), CatenError, ("'c'", "float32")),
    ("runtime: state as a list", store_call([0.0] * 8, Y), CatenError, ("'c'", "in place")),
    ("runtime: store window past the state", store_call(np.zeros(8, np.float32), Y, 7), SymbolError,
     ("'c'", "pos <= 6")),
    ("runtime: float input to an int program", _int_input(np.array([1.5, 2.0, 3.0])), CatenError,
     ("'x' is float64", "int32", "change its values")),
    ("runtime: int64 input outside int32", _int_input(np.array([0, 1, 2**40])), CatenError,
     ("'x' holds values", "outside the program's int32")),
    ("runtime: input that is not an array", _int_input(["a", "b", "c"]), CatenError, ("'x'", "change its values")),
    ("runtime: object whose .shape differs from its array", _int_input(_LyingShape()), ShapeError,
     ("'x'", "expected shape (3,)", "after conversion")),
    ("runtime: output too large to allocate", huge_output, CatenError, ("cannot be allocated", "symbol values")),
    *[(f"runtime: {kind} with id {ids[-1]}, {backend}, safety {s}", _lookup(kind, ids, backend, s), RuntimeCheckError,
       (f"index {bad} out of range for an axis of 5", "check_index") + (("in kernel",) if backend == "c" else ()))
      for kind, ids, bad in (("rows", [0, 7], 7), ("rows", [1, -6], -1), ("gather", [2, -1], -1),
                             ("embedding", [4, 5], 5), ("embedding", [0, -2], -2))
      for backend, s in (("c", 1), ("c", 2), ("numpy", 1))],
    ("runtime: GPT-2 runner.program with a token id past the vocabulary", gpt2_token_past_the_vocabulary,
     RuntimeCheckError, ("index 1000000 out of range for an axis of 4096", "in kernel")),
    *[(f"runtime: check_index with a symbolic size, {b}", check_index_symbolic_size(b), RuntimeCheckError,
       ("index 4 out of range for an axis of 4",)) for b in ("c", "numpy")],
]
