"""One parallel region per run (codegen/team.py, codegen/c/team.h, team.c): kernels written for a team of
threads that walks the whole call table, parallel loops split into chunks the threads claim, shared writes on
one thread, barriers where something runs after.

Asserted: the rewrite itself (no parallel loop left, chunked loops, guarded stores, barriers), bitwise the same
results as one thread on programs of every kernel shape (matmul tiles, softmax, a scatter-add gradient, a
quantized matmul, a serial kernel), errors found inside a kernel still reported, a fork()ed child still runs,
and two libraries' teams run at once."""

from __future__ import annotations

import multiprocessing as mp
import threading

import numpy as np
import pytest

import caten_lab.codegen.kir as k
from caten_lab.codegen.kir_walk import exprs_of, walk
from caten_lab.codegen.team import team_chunks, uses_team
from caten_lab.compiler import compile as compile_graph
from caten_lab.config import settings
from caten_lab.errors import RuntimeCheckError
from caten_lab.frontend import Sym, Tensor, build_graph, grad, placeholder
from caten_lab.nn import functional as F


def _programs():
    """(name, graph, inputs, symbols) covering the kernel shapes the team pass rewrites."""
    rng = np.random.default_rng(0)
    out = []
    x = placeholder((Sym("s"), 96), "float32", name="x")
    w = Tensor.from_numpy(rng.standard_normal((96, 130), dtype=np.float32), name="w")
    b = Tensor.from_numpy(rng.standard_normal((130,), dtype=np.float32), name="b")
    y = (x.exp() @ w + b).softmax(-1)
    g, arrays = build_graph([y, (x * x).sum(1)])
    for s in (1, 5, 37):
        out.append((f"matmul_softmax_s{s}", g, {**arrays, "x": rng.standard_normal((s, 96)).astype(np.float32)},
                    {"s": s}))
    emb = Tensor.from_numpy(rng.standard_normal((3000, 64)).astype(np.float32), name="emb", requires_grad=True)
    ids = placeholder((400,), "int64", name="ids")
    loss = (emb[ids] * emb[ids]).sum()
    (gw,) = grad([loss], [emb])
    g2, arrays2 = build_graph([gw, loss])
    out.append(("scatter_grad", g2, {**arrays2, "ids": rng.integers(0, 3000, 400)}, {}))
    z = placeholder((2000, 300), "float32", name="z")
    g3, arrays3 = build_graph([F.rms_norm(z, None) * z.exp() + z.max(1, keepdim=True)])
    out.append(("elementwise_rows", g3, {**arrays3, "z": rng.standard_normal((2000, 300)).astype(np.float32)}, {}))
    return out


PROGRAMS = _programs()


@pytest.mark.parametrize("name", [p[0] for p in PROGRAMS])
def test_team_runs_give_one_threads_bits(name):
    _, graph, inputs, symbols = next(p for p in PROGRAMS if p[0] == name)
    with settings(threads=1):
        one = compile_graph(graph, backend="c")
    with settings(threads=2):
        two = compile_graph(graph, backend="c")
    assert not uses_team(one.artifacts["kernel_ir"])
    assert uses_team(two.artifacts["kernel_ir"])
    want = one(inputs, symbols)
    for _ in range(3):  # chunks go to whichever thread claims them: every run must agree
        for a, b in zip(two(inputs, symbols), want):
            np.testing.assert_array_equal(a, b)


def test_the_rewrite_leaves_no_parallel_loop_and_guards_shared_writes():
    _, graph, inputs, symbols = PROGRAMS[1]
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    kir = prog.artifacts["kernel_ir"]
    stmts = [s for f in kir.functions for s in walk(f.body)]
    assert not any(isinstance(s, k.For) and s.parallel is not None for s in stmts)
    assert any(team_chunks(s) for s in stmts)
    assert "omp parallel" not in prog.c_source and "cl_team_run(cl_team_step" in prog.c_source
    for f in kir.functions:
        if f.linkage != "kernel" or any(team_chunks(s) for s in walk(f.body)):
            continue
        # a kernel without a parallel loop: every store to a buffer is inside IF cl_team_single()
        guarded = {id(x) for s in f.body if isinstance(s, k.If) for x in walk(s.then)}
        writes = [s for s in walk(f.body) if isinstance(s, k.Store) and s.buf.startswith("p")]
        assert writes and all(id(s) in guarded for s in writes), f.name
    # barriers only between things: never as a kernel's last statement (the entry puts one after each call)
    for f in kir.functions:
        last = f.body[-1]
        assert not (isinstance(last, k.Eval) and last.value.fn == "cl_team_barrier"), f.name


def test_a_kernel_error_stops_every_thread():
    emb = Tensor.from_numpy(np.zeros((50, 8), np.float32), name="emb")
    ids = placeholder((Sym("n"),), "int64", name="ids")
    graph, arrays = build_graph([emb[ids] * 2.0 + emb[ids]])
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    ok = prog({**arrays, "ids": np.arange(50) % 50}, {"n": 50})[0]
    assert ok.shape == (50, 8)
    with pytest.raises(RuntimeCheckError, match="out of range"):
        prog({**arrays, "ids": np.array([1, 2, 77, 3] * 10)}, {"n": 40})
    np.testing.assert_array_equal(prog({**arrays, "ids": np.arange(50) % 50}, {"n": 50})[0], ok)  # still fine


def _child(q):  # noqa: ANN001
    _, graph, inputs, symbols = PROGRAMS[2]
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    q.put([a.tolist() for a in prog(inputs, symbols)])


def test_a_forked_child_runs_its_own_team():
    """The parent's workers do not exist in a fork()ed child: its first run starts new ones (no hang)."""
    _, graph, inputs, symbols = PROGRAMS[2]
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    want = prog(inputs, symbols)  # the parent's team is up
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    got = q.get(timeout=120)
    p.join(timeout=60)
    assert p.exitcode == 0
    for a, b in zip(got, want):
        np.testing.assert_array_equal(np.asarray(a, dtype=b.dtype), b)


def test_two_libraries_run_their_teams_at_once():
    """Two programs called from two Python threads at once: each library has its own team (4 threads on 2
    cores), both results right."""
    progs = []
    for i in (2, 3):
        _, graph, inputs, symbols = PROGRAMS[i]
        with settings(threads=2):
            prog = compile_graph(graph, backend="c")
        progs.append((prog, inputs, symbols, prog(inputs, symbols)))
    failures: list = []

    def run(prog, inputs, symbols, want) -> None:  # noqa: ANN001
        for _ in range(5):
            for a, b in zip(prog(inputs, symbols), want):
                if not np.array_equal(a, b):
                    failures.append(a)

    ts = [threading.Thread(target=run, args=p) for p in progs]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not failures


def test_team_helpers_are_kernel_ir_calls():
    """What each thread does is in the kernel IR (the Inspector shows it), not hidden in the renderer."""
    _, graph, _, _ = next(p for p in PROGRAMS if p[0] == "scatter_grad")  # a parallel fill, a serial scatter
    with settings(threads=2):
        prog = compile_graph(graph, backend="c")
    calls = {e.fn for f in prog.artifacts["kernel_ir"].functions for s in walk(f.body) for e in exprs_of(s)
             if isinstance(e, k.Call)}
    assert {"cl_team_chunk", "cl_team_single", "cl_team_barrier"} <= calls
