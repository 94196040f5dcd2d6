"""Runtime behaviour: safety levels, the disk cache under concurrency, compiler failures, config,
tracing artifacts, and the numpy backend behind the same call."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from air_patterns import inp, rand_inputs, softmax

from caten_lab.air import Graph, Sym
from caten_lab.air.entry_checks import EntryChecks
from caten_lab.codegen.passes import RenderC
from caten_lab.compiler import compile, default_pipeline, run
from caten_lab.config import config, settings
from caten_lab.errors import CatenError, CompileError, RuntimeCheckError, ShapeError, SymbolError

REPO = Path(__file__).resolve().parents[2]


def oob_graph() -> Graph:
    """Reads x[pos : pos + 4] of an 8-element buffer: out of bounds once pos > 4."""
    g = Graph()
    x = inp(g, "x", (8,))
    v = g.insert("view", [x], shape=(4,), strides=(1,), offset=Sym("pos"))
    g.mark_output(g.insert("mul", [v, 2.0]))
    return g


def test_out_of_bounds_at_safety_2_raises_and_process_survives() -> None:
    prog = compile(oob_graph(), safety=2)
    x = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(prog({"x": x}, {"pos": 4})[0], 2 * x[4:8])
    with pytest.raises(SymbolError, match="pos <= 4"):  # the entry check sees it first
        prog({"x": x}, {"pos": 6})
    prog.entry = EntryChecks([])  # without it (a condition the entry cannot see), the kernel's own check
    with pytest.raises(RuntimeCheckError) as ei:
        prog({"x": x}, {"pos": 6})
    msg = str(ei.value)
    assert "out-of-bounds" in msg and "kernel k0" in msg and "AIR node" in msg and "view" in msg
    # the process and the program are still fine
    np.testing.assert_array_equal(prog({"x": x}, {"pos": 1})[0], 2 * x[1:5])


def test_safety_levels_change_the_generated_code() -> None:
    src0 = compile(oob_graph(), safety=0).c_source
    src2 = compile(oob_graph(), safety=2).c_source
    assert "CK(" not in src0.split("PRELUDE_END")[-1].split("/* k0")[-1]
    assert "CK(" in src2.split("/* k0")[-1]


def test_out_of_bounds_in_a_subprocess_does_not_crash() -> None:
    """A wild offset (far outside the buffer) raises at entry at safety 1 and 2, and in the kernel at safety 2."""
    code = textwrap.dedent(
        """
        import numpy as np
        from caten_lab.air import Graph, Sym
        from caten_lab.compiler import compile
        from caten_lab.air.entry_checks import EntryChecks
        from caten_lab.errors import RuntimeCheckError, SymbolError
        g = Graph()
        x = g.insert("allocate", [], shape=(8,), dtype="float32", name="x")
        v = g.insert("view", [x], shape=(4,), strides=(1,), offset=Sym("pos"))
        g.mark_output(g.insert("mul", [v, 2.0]))
        for safety in (1, 2):
            p = compile(g, safety=safety)
            try:
                p({"x": np.zeros(8, np.float32)}, {"pos": 10**12})
            except SymbolError:
                print("caught at entry", safety)
        p.entry = EntryChecks([])
        try:
            p({"x": np.zeros(8, np.float32)}, {"pos": 10**12})
        except RuntimeCheckError:
            print("caught in the kernel")
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["caught at entry 1", "caught at entry 2", "caught in the kernel"], r.stdout


def test_two_processes_compile_the_same_program_at_once(tmp_path: Path) -> None:
    code = textwrap.dedent(
        """
        import sys, numpy as np
        from caten_lab.air import Graph
        from caten_lab.compiler import compile
        g = Graph()
        x = g.insert("allocate", [], shape=(64, 64), dtype="float32", name="x")
        r = g.insert("reduce", [g.insert("exp2", [x])], op="add", axes=(1,))
        g.mark_output(g.insert("sqrt", [r]))
        p = compile(g)
        xs = np.ones((64, 64), np.float32)
        out = p({"x": xs})[0]
        assert np.allclose(out, np.sqrt(64 * 2.0)), out
        print("ok", p.cached, p.library_path)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "CATEN_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=REPO, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.startswith("ok")
    libs = sorted(tmp_path.glob("caten_*.so"))
    assert len(libs) == 1
    assert not list(tmp_path.glob(".tmp_*"))  # no half-written files left behind
    # a third process loads the cached library
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0 and "ok True" in r.stdout, r.stderr


def test_missing_compiler_is_a_compile_error_and_numpy_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    g = Graph()
    g.mark_output(softmax(g, inp(g, "x", (2, 3))))
    with pytest.raises(CompileError) as ei:
        compile(g, backend="c")
    assert "/nonexistent/cc" in str(ei.value) and "numpy" in str(ei.value)
    xs = rand_inputs(g)
    out = compile(g, backend="numpy")(xs)[0]
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)
    with settings(backend="numpy"):
        assert run(g, xs)[0].shape == (2, 3)


class _BreakC:
    """A pass that corrupts the generated C, to see how a C compiler failure is reported."""

    name = "break_c"
    description = "insert a syntax error into the C source"

    def run(self, graph, ctx):  # noqa: ANN001, ANN201
        src = ctx.artifacts["c_source"].split("\n")
        i = next(k for k, line in enumerate(src) if line.startswith("CL_KERNEL_LINKAGE __attribute__((noinline)) void kern"))
        src.insert(i + 1, "  this is not C;")
        ctx.artifacts["c_source"] = "\n".join(src)
        return graph


def test_c_compiler_error_shows_the_c_lines() -> None:
    g = Graph()
    g.mark_output(softmax(g, inp(g, "x", (2, 3))))
    pm = default_pipeline()
    pm.insert("render", _BreakC())
    with pytest.raises(CompileError) as ei:
        compile(g, pipeline=pm)
    msg = str(ei.value)
    assert "the C compiler failed" in msg and "offending generated C lines" in msg
    assert "this is not C;" in msg


def test_trace_records_every_pass_and_the_artifacts() -> None:
    g = Graph()
    g.mark_output(softmax(g, inp(g, "x", (4, 5))))
    prog = compile(g, trace=True)
    names = [r.name for r in prog.trace.records]
    assert names[names.index("schedule"):] == ["schedule", "lower", "collapse", "hoist", "simd", "transpose_tiles",
                                               "parallel", "qgemm", "unroll", "row_jam", "sgemm", "tile_order", "rowblock", "lanes",
                                               "unnest_parallel",
                                               "team", "memory_plan", "render"]
    lines = prog.c_source.split("\n")
    assert len(prog.source_map) == len(lines) - 1  # trailing newline
    first, last = prog.kernel_lines[prog.schedule.kernels[0].name]
    assert lines[first].startswith("CL_KERNEL_LINKAGE __attribute__((noinline)) void kern")
    body_ids = set().union(*(set(prog.source_map[i - 1]) for i in range(first, last + 1)))
    assert body_ids >= set(prog.schedule.kernels[0].node_ids)
    rec = prog.trace.records[names.index("memory_plan")]
    assert "memory_plan" in rec.artifacts
    assert isinstance(RenderC().description, str)


def test_numpy_backend_writes_state_in_place_too() -> None:
    g = Graph()
    c = inp(g, "c", (4,))
    g.mark_output(g.insert("store", [c, g.insert("mul", [inp(g, "x", (2,)), 3.0])], shape=(2,), strides=(1,), offset=1))
    for backend in ("numpy", "c"):
        arr = np.zeros(4, np.float32)
        out = compile(g, backend=backend)({"c": arr, "x": np.array([1, 2], np.float32)})[0]
        assert out is arr
        np.testing.assert_array_equal(arr, [0, 3, 6, 0])


def test_run_caches_compiled_programs() -> None:
    import caten_lab.compiler as cmod

    g = Graph()
    g.mark_output(softmax(g, inp(g, "x", (3, 3))))
    xs = rand_inputs(g)
    run(g, xs)
    n = len(cmod._CACHE)
    g2 = Graph()
    g2.mark_output(softmax(g2, inp(g2, "x", (3, 3))))  # same structure, new value ids
    run(g2, xs)
    assert len(cmod._CACHE) == n


def test_config_from_env_and_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CATEN_SAFETY", "2")
    monkeypatch.setenv("CATEN_THREADS", "1")
    monkeypatch.setenv("CATEN_BACKEND", "numpy")
    cfg = config()
    assert (cfg.safety, cfg.threads, cfg.backend) == (2, 1, "numpy")
    with settings(safety=0, backend="c") as inner:
        assert config().safety == 0 and inner.backend == "c"
        with settings(debug=3):
            assert config().safety == 0 and config().debug == 3
    assert config().safety == 2
    monkeypatch.setenv("CATEN_SAFETY", "lots")
    with pytest.raises(CatenError, match="CATEN_SAFETY"):
        config()


def test_input_errors_are_clear() -> None:
    g = Graph()
    n = Sym("n")
    g.mark_output(softmax(g, inp(g, "x", (n, 4))))
    prog = compile(g)
    with pytest.raises(CatenError, match="'x' is not bound"):
        prog({})
    with pytest.raises(ShapeError, match="expected shape"):
        prog({"x": np.zeros((3, 5), np.float32)})
    with pytest.raises(SymbolError, match="non-negative"):
        prog({"x": np.zeros((3, 4), np.float32)}, {"n": -1})
    g2 = Graph()
    g2.mark_output(g2.insert("view", [inp(g2, "y", (8,))], shape=(Sym("k"),), strides=(1,)))
    with pytest.raises(SymbolError, match="'k'"):
        compile(g2)({"y": np.zeros(8, np.float32)})


def test_concurrent_calls_from_threads_are_safe() -> None:
    from concurrent.futures import ThreadPoolExecutor

    g = Graph()
    n = Sym("n")
    g.mark_output(softmax(g, g.insert("mul", [inp(g, "x", (n, 16)), 2.0])))
    prog = compile(g)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((k, 16)).astype(np.float32) for k in (1, 2, 3, 4) * 8]

    def one(x):  # noqa: ANN001, ANN202
        e = np.exp(2 * x - (2 * x).max(axis=1, keepdims=True))
        return np.allclose(prog({"x": x})[0], e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)

    with ThreadPoolExecutor(4) as ex:
        assert all(ex.map(one, xs))


def test_an_output_that_is_an_updated_input_returns_its_old_value():
    """x[1:] = x[:-1] updates the named input in place; an output that is x itself (or simplifies to
    it) is the value before the update, as in the interpreter (found by the differential test)."""
    from caten_lab.air import interpret

    g = Graph()
    x = g.insert("allocate", [], shape=(3, 5), dtype="float32", name="x")
    shifted = g.insert("view", [x], shape=(2, 5), strides=(5, 1))
    g.mark_output(g.insert("store", [x, shifted], shape=(2, 5), strides=(5, 1), offset=5))
    g.mark_output(g.insert("and", [True, g.insert("ne", [x, 0.0])]))  # simplifies to a read of x
    g.mark_output(x)
    old = np.arange(15, dtype=np.float32).reshape(3, 5)
    new = old.copy()
    new[1:] = old[:-1]
    want = interpret(g, {"x": old.copy()})
    prog = compile(g, backend="c")
    for profile in (False, True):  # a plain call and a profiled one (both through runtime/fastcall.py)
        state = old.copy()
        if profile:
            prog.profile({"x": state}, repeat=1)
            state = old.copy()
            got = prog._run_c({"x": state}, {}, np.zeros(len(prog.schedule.kernels)))
        else:
            got = prog({"x": state})
        np.testing.assert_array_equal(got[0], new)
        np.testing.assert_array_equal(got[1], old != 0)
        np.testing.assert_array_equal(got[2], old)
        np.testing.assert_array_equal(state, new)  # the input itself is updated in place
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def test_profile_times_the_buffers_a_plain_call_uses():
    """Program.profile runs the library through the same hot path as a call (runtime/fastcall.py): the same
    aligned workspace slots, nothing allocated again, so memory-bound kernels are not timed with page
    faults a plain call never takes (their sum ran 1.5-2x the wall time of a call before), and the same
    results."""
    g = Graph()
    s = softmax(g, inp(g, "x", (64, 96)))  # read by two kernels: realized in a workspace slot
    g.mark_output(g.insert("reduce", [s], op="max", axes=(0,)))
    g.mark_output(g.insert("reduce", [g.insert("exp2", [s])], op="add", axes=(1,)))
    inputs = rand_inputs(g)
    prog = compile(g, backend="c")
    rows = prog.profile(inputs, repeat=2)  # first: it sets up the hot path's buffers itself
    assert len(rows) == len(prog.schedule.kernels) and all(r["seconds"] > 0 for r in rows)
    slots = [id(a) for a in prog._fast.slots]
    assert slots
    got = prog(inputs)
    assert [id(a) for a in prog._fast.slots] == slots  # the call found them in place
    want = compile(g, backend="c", force=True)(inputs)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_a_first_profile_maps_its_new_buffers_before_timing_and_keeps_the_results():
    """The first profiled call of a program allocates its workspace and outputs; their pages are touched
    before the kernels run (the OS maps a page at its first write: timed, that made a fresh training step's
    memory-bound kernels 5x slower than in a call). A 0-d output (a loss) included; the results unchanged."""
    g = Graph()
    s = softmax(g, inp(g, "x", (512, 1024)))
    g.mark_output(g.insert("reduce", [s], op="max", axes=(0,)))
    g.mark_output(g.insert("reduce", [g.insert("exp2", [s])], op="add", axes=(0, 1)))  # a scalar
    inputs = rand_inputs(g)
    prog = compile(g, backend="c")
    rows = prog.profile(inputs)
    assert len(rows) == len(prog.schedule.kernels)
    got = prog(inputs)
    want = compile(g, backend="c", force=True)(inputs)
    ref = compile(g, backend="numpy")(inputs)
    for a, b, r in zip(got, want, ref):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, r, rtol=1e-4)  # (a sum of 524,288 floats: the order differs from NumPy's)


def test_two_outputs_updating_the_same_input_each_keep_their_value():
    """Two independent stores into one named input (possible in AIR, not from Tensor code): each
    output has its own value, and the input ends with the last one, as in the interpreter."""
    from caten_lab.air import interpret

    g = Graph()
    x = g.insert("allocate", [], shape=(2, 3), dtype="float32", name="x")
    g.mark_output(g.insert("store", [x, g.insert("view", [x], shape=(1, 3), strides=(3, 1))], shape=(1, 3), strides=(3, 1), offset=3))
    g.mark_output(g.insert("store", [x, g.insert("view", [x], shape=(2, 3), strides=(-3, 1), offset=3)], shape=(2, 3), strides=(3, 1)))
    old = np.arange(6, dtype=np.float32).reshape(2, 3)
    ref_state = old.copy()
    want = interpret(g, {"x": old.copy()})
    ref_state[...] = want[1]
    state = old.copy()
    got = compile(g, backend="c")({"x": state})
    np.testing.assert_array_equal(got[0], np.array([[0, 1, 2], [0, 1, 2]], np.float32))
    np.testing.assert_array_equal(got[1], old[::-1])
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(state, ref_state)
