"""The ``rowblock`` and ``lanes`` codegen passes on hand-built kernel-IR programs: where they fire,
what they build (read from the nodes, not from C), that their recorded rewrites replay, that the
validator accepts the result, and that the rendered, compiled kernels equal NumPy for every weight
format and row counts around the register tile."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import caten_lab.codegen.kir as k
from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir_check import validate
from caten_lab.codegen.kir_names import f16_run, rename
from caten_lab.codegen.kir_rewrite import replay
from caten_lab.codegen.kir_walk import alu, const, loads_of, var, walk
from caten_lab.codegen.lanes import LaneOptions, Lanes
from caten_lab.codegen.render import render_program
from caten_lab.codegen.rowblock import RowBlock
from caten_lab.codegen.rowblock_tiles import RowBlockOptions, register_tile
from caten_lab.errors import CompileError
from caten_lab.passes.base import PassContext
from caten_lab.runtime.library import Library
from caten_lab.runtime.toolchain import build_library, toolchain

F, I, H, Q = DType.float32, DType.int64, DType.float16, DType.int8
WDT = {"fp32": F, "fp16": H, "int8": Q}


def _ld(buf: str, index: k.Expr, dt: DType = F) -> k.Load:
    return k.Load(buf, index, dt)


def _matmul(fmt: str, K: int, N: int, *, hoist: bool, parallel: bool = True, seq: k.Expr | None = None) -> k.Program:
    """``p0[i, j] = relu(sum_r a(i, r) * w(j, r) + p4[j])`` for i < S_seq, with ``a = 2 * p1`` hoisted
    per row into a local array (``hoist``), and ``w`` = p2 as float32, float16 or int8 times a
    per-row scale p3 (the shapes lowering produces for a prefill matmul)."""
    i, j, r = var("i"), var("j"), var("r")
    rows = seq if seq is not None else var("S_seq")
    pre: list[k.Stmt] = []
    if hoist:
        h = var("h")
        pre = [k.Decl("hx", F, size=const(K)),
               k.For("h", const(0), const(K), const(1),
                     (k.Decl("x1", F, _ld("p1", alu("add", alu("mul", i, const(K)), h)), True),
                      k.Store("hx", h, alu("mul", var("x1", F), const(2.0, F)))), role="hoist")]
        a: k.Stmt = k.Decl("a", F, _ld("hx", r), True)
    else:
        a = k.Decl("a", F, alu("mul", _ld("p1", alu("add", alu("mul", const(K), i), r)), const(2.0, F)), True)
    widx = alu("add", alu("mul", const(K), j), r)
    red: list[k.Stmt] = [a]
    cols_pre: list[k.Stmt] = [k.Decl("acc", F, const(0.0, F))]
    if fmt == "int8":
        cols_pre.append(k.Decl("sc", F, _ld("p3", j), True))
        red += [k.Decl("w0", Q, _ld("p2", widx, Q), True), k.Decl("w1", F, k.Cast(var("w0", Q), F), True),
                k.Decl("w", F, alu("mul", var("w1", F), var("sc", F)), True)]
    elif fmt == "fp16":
        red += [k.Decl("w0", F, _ld("p2", widx), True), k.Decl("w", F, k.Cast(var("w0", F), F), True)]
    else:
        red += [k.Decl("w", F, _ld("p2", widx), True)]
    red += [k.Decl("m", F, alu("mul", var("a", F), var("w", F)), True),
            k.Assign("acc", alu("add", var("acc", F), var("m", F)))]
    loop_r = k.For("r", const(0), const(K), const(1), tuple(red), role="stage", simd=True, reduction=("acc",))
    out = alu("max", alu("add", var("acc", F), _ld("p4", j)), const(0.0, F))
    cols = k.For("j", const(0), const(N), const(1),
                 (*cols_pre, loop_r, k.Store("p0", alu("add", alu("mul", const(N), i), j), out)), role="loop")
    par = k.Parallel(1, alu("land", alu("ge", alu("mul", const(K * N), rows), const(32768)), alu("ge", rows, const(2))))
    loop_i = k.For("i", const(0), rows, const(1), (*pre, cols), role="loop", parallel=par if parallel else None,
                   origin=k.Origin((3,)))
    syms = (k.Decl("S_seq", I, _ld("sym", const(0), I), True),)
    params = (k.Param("p0", F), k.Param("p1", F, const=True), k.Param("p2", WDT[fmt], const=True),
              k.Param("p3", F, const=True), k.Param("p4", F, const=True), k.Param("sym", I, const=True),
              k.Param("err", I))
    fn = k.Function("kern0", params, (*syms, loop_i), linkage="kernel", meta=(("kernel_names", ("k0",)),))
    return k.Program((fn,), (k.KernelCall("kern0", (0, 1, 2, 3, 4)),), ("seq",), ("y", "x", "w", "s", "b"))


def _run_pass(p, prog: k.Program, tracing: bool = True):
    ctx = PassContext(tracing=tracing, rewrites=[] if tracing else None, artifacts={"kernel_ir": prog})
    p.run(None, ctx)
    return ctx.artifacts["kernel_ir"], ctx.rewrites


def _both(prog: k.Program, rb: RowBlock | None = None, ln: Lanes | None = None):
    mid, rw1 = _run_pass(rb or RowBlock(), prog)
    out, rw2 = _run_pass(ln or Lanes(), mid)
    return mid, out, rw1, rw2


def _compile(prog: k.Program, tmp_path) -> Library:
    """Render, build and load (the runtime keeps every loaded library: unloading one that started
    OpenMP threads is unsafe)."""
    built = build_library(render_program(prog).source, toolchain("cc", tmp_path), tmp_path)
    return Library(built.load_path or built.path)


def _weights(fmt: str, K: int, N: int, rng):
    w = rng.standard_normal((N, K)).astype(np.float32)
    s = (rng.random(N) + 0.5).astype(np.float32)
    if fmt == "fp16":
        return w.astype(np.float16), s, w.astype(np.float16).astype(np.float64)
    if fmt == "int8":
        q = rng.integers(-127, 128, (N, K)).astype(np.int8)
        return q, s, q.astype(np.float64) * s[:, None].astype(np.float64)
    return w, s, w.astype(np.float64)


def _check_runs(prog: k.Program, fmt: str, K: int, N: int, seqs, tmp_path) -> None:
    lib = _compile(prog, tmp_path)
    rng = np.random.default_rng(K * 7 + N)
    w, s, wref = _weights(fmt, K, N, rng)
    b = rng.standard_normal(N).astype(np.float32)
    for seq in seqs:
        x = rng.standard_normal((seq, K)).astype(np.float32)
        y = np.full((seq, N), np.nan, np.float32)
        err = lib.run([y, x, w, s, b], [seq])
        assert err[0] == 0
        want = np.maximum((2.0 * x.astype(np.float64)) @ wref.T + b, 0)
        bound = (2.0 * np.abs(x.astype(np.float64))) @ np.abs(wref).T + np.abs(b)
        assert np.all(np.abs(y - want) <= 1e-5 * bound + 1e-6), f"{fmt} K={K} N={N} seq={seq}"


# ------------------------------------------------------------------------------------------ rowblock


@pytest.mark.parametrize("fmt", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("hoist", [False, True])
def test_rowblock_tiles_equal_numpy(fmt, hoist, tmp_path):
    K, N = 37, 45  # odd: no multiple of the vector width, the register tile or the cache tile
    prog = _matmul(fmt, K, N, hoist=hoist)
    for o in (RowBlockOptions(), RowBlockOptions(tile_bytes=1), RowBlockOptions(tile_bytes=8 * K * 4)):
        mid, out, rw1, rw2 = _both(prog, RowBlock(o))
        assert [r.rule for r in rw1] == ["rowblock"]
        assert replay(prog, rw1) == mid and replay(mid, rw2) == out
        validate(out)
        top = mid.functions[0].body[1]
        assert isinstance(top, k.If) and top.orelse == (prog.functions[0].body[1],)  # decode: the original nest
        nr, nc = register_tile({"fp32": 4, "fp16": 2, "int8": 1}[fmt], K, o)
        assert top.cond == alu("ge", var("S_seq"), const(nr))
        tiles = top.then[0]
        assert tiles.role == "tile" and tiles.parallel == k.Parallel(2, alu("ge", alu("mul", const(K * N), var("S_seq")),
                                                                             const(32768)))
        inner = [s for s in walk(tiles.body) if isinstance(s, k.For) and s.reduction]
        assert len(inner) == 1 and len(inner[0].reduction) == nr * nc  # an accumulator per (row, feature) pair
        _check_runs(out, fmt, K, N, (1, 3, 4, 5, 7, 8, 9, 17, 40), tmp_path)


@pytest.mark.parametrize("fmt", ["fp16", "int8"])
def test_lowbit_weights_widen_once_per_column(fmt):
    K, N = 64, 19
    mid, _ = _run_pass(RowBlock(), _matmul(fmt, K, N, hoist=True))
    tiled = list(walk(mid.functions[0].body[1].then))
    bufs = [s for s in tiled if isinstance(s, k.Decl) and s.var.endswith("_w")]
    assert [(b.var, b.size) for b in bufs] == [("w_c0_w", const(K)), ("w_c1_w", const(K))]
    calls = [s.value for s in tiled if isinstance(s, k.Eval)]
    red = next(s for s in tiled if isinstance(s, k.For) and s.reduction)
    assert not any(isinstance(e, k.Load) and e.buf == "p2" for s in red.body for e in loads_of(s))  # float32 loads only
    if fmt == "fp16":  # the hardware conversion of each column's row: cl_h2f_n(&p2[K * j_c], w_c_w, K)
        assert [c.fn for c in calls] == ["cl_h2f_n", "cl_h2f_n"]
        assert calls[1].args[0] == k.Addr("p2", alu("mul", const(K), var("j_c1")), H)
    else:
        assert not calls


def test_one_thread_tiles_without_parallel_and_fixed_rows_stay():
    mid, rw = _run_pass(RowBlock(), _matmul("fp32", 37, 45, hoist=True, parallel=False))
    tiles = mid.functions[0].body[1].then[0]
    assert len(rw) == 1 and tiles.parallel is None
    fixed = _matmul("fp32", 37, 45, hoist=True, seq=const(12))  # a constant row count: nothing to block
    assert _run_pass(RowBlock(), fixed)[0] == fixed


def test_rowblock_can_be_switched_off_and_options_are_checked():
    prog = _matmul("fp32", 37, 45, hoist=True)
    assert _run_pass(RowBlock(enabled=False), prog) == (prog, [])
    with pytest.raises(CompileError, match="RowBlockOptions.rows must be a positive int"):
        RowBlock(rows=0)
    with pytest.raises(CompileError, match="no kernel program"):
        RowBlock().run(None, PassContext())


def test_register_tile_fits_the_accumulator_registers():
    o = RowBlockOptions()
    for wbytes in (1, 2, 4):
        nr, nc = register_tile(wbytes, None, o)
        assert nr * nc * (4 // wbytes) <= o.acc_regs and nr >= 4
    assert register_tile(1, 768, o) == (o.rows, o.cols)  # widened int8: the float32 tile


# --------------------------------------------------------------------------------------------- lanes


def _matvec(fmt: str, K: int, N: int) -> k.Program:
    """The decode form: one row (S_seq = 1 at run time, no row blocking) -> the lanes pass alone."""
    return _matmul(fmt, K, N, hoist=False, parallel=False)


@pytest.mark.parametrize("fmt,K,lanes", [("fp16", 64, 32), ("int8", 64, 64), ("int8", 40, 32), ("fp32", 64, 16),
                                         ("fp16", 300, 32)])
def test_lanes_split_and_equal_numpy(fmt, K, lanes, tmp_path):
    prog = _matvec(fmt, K, 23)
    out, rw = _run_pass(Lanes(), prog)
    assert [r.rule for r in rw] == ["lanes"] and replay(prog, rw) == out
    validate(out)
    arrs = [s for s in walk(out.functions[0].body) if isinstance(s, k.Decl) and s.var == "acc_l"]
    assert len(arrs) == 1 and arrs[0].size == const(lanes)
    convs = [s.value for s in walk(out.functions[0].body) if isinstance(s, k.Eval)]
    if fmt == "fp16":  # each lane block of the float16 row converted by one cl_h2f_n
        assert [c.fn for c in convs] == ["cl_h2f_n"]
        assert convs[0].args[0] == k.Addr("p2", alu("add", alu("mul", const(K), var("j")), var("acc_b")), H)
    tails = [s for s in walk(out.functions[0].body) if isinstance(s, k.For) and s.var == "r" and s.role == "stage"]
    assert len(tails) == (1 if K % lanes else 0)
    _check_runs(out, fmt, K, 23, (1, 2, 5), tmp_path)


def test_lanes_leave_long_fp32_rows_and_tiles_alone():
    long_row = _matvec("fp32", 768, 8)
    assert _run_pass(Lanes(), long_row)[0] == long_row  # vectorizes well as it is
    assert _run_pass(Lanes(short_k=1024), long_row)[1][0].rule == "lanes"  # options are arguments
    mid, _ = _run_pass(RowBlock(), _matmul("int8", 64, 19, hoist=True))
    after, rw = _run_pass(Lanes(), mid)  # only the decode branch (one accumulator) splits
    assert len(rw) == 1 and rw[0].path[1] == ("orelse", 0)
    assert _run_pass(Lanes(enabled=False), mid) == (mid, [])
    with pytest.raises(CompileError, match="LaneOptions.min_lanes"):
        LaneOptions(min_lanes=-1)


def test_lanes_symbolic_length_has_a_tail():
    prog = _matvec("int8", 64, 5)
    fn = prog.functions[0]
    loop = fn.body[1].body[-1].body[2]
    sym_loop = replace(loop, stop=var("S_seq"))
    fn2 = replace(fn, body=(fn.body[0], replace(fn.body[1], body=(replace(fn.body[1].body[-1], body=(
        *fn.body[1].body[-1].body[:2], sym_loop, fn.body[1].body[-1].body[3])),))))
    out, rw = _run_pass(Lanes(), prog.with_functions([fn2]))
    assert len(rw) == 1
    tail = [s for s in walk(out.functions[0].body) if isinstance(s, k.For) and s.var == "r"]
    assert tail[0].start == alu("sub", var("S_seq"), alu("mod", var("S_seq"), const(64)))
    validate(out)


# --------------------------------------------------------------------------------------------- names


def test_f16_run_is_structural():
    fn = _matvec("fp16", 64, 4).functions[0]
    off = alu("mul", const(64), var("j"))
    assert f16_run(_ld("p2", alu("add", off, var("r"))), "r", fn) == ("p2", off)
    assert f16_run(_ld("p2", alu("add", var("r"), off)), "r", fn) == ("p2", off)
    assert f16_run(_ld("p2", var("r")), "r", fn) == ("p2", const(0))
    assert f16_run(_ld("p2", alu("add", off, alu("mul", const(2), var("r")))), "r", fn) is None  # stride 2
    assert f16_run(_ld("p2", alu("add", alu("mul", var("r"), var("j")), var("r"))), "r", fn) is None
    assert f16_run(_ld("p1", var("r")), "r", fn) is None  # a float32 buffer
    assert f16_run(k.Load("p2", var("r"), F, k.Check(const(9), 0)), "r", fn) is None  # checked


def test_rename_reaches_every_name():
    s = k.For("r", const(0), var("n"), const(1),
              (k.Decl("a", F, _ld("hx", var("r"))), k.Store("hx", var("r"), var("a", F)),
               k.Assign("acc", alu("add", var("acc", F), var("a", F)))), role="stage", simd=True, reduction=("acc",))
    got = rename(s, {"a": "a_0", "hx": "hx_0", "acc": "acc_0", "n": "n_0"})
    assert got.reduction == ("acc_0",) and got.stop == var("n_0")
    assert got.body[0] == k.Decl("a_0", F, _ld("hx_0", var("r")))
    assert got.body[1] == k.Store("hx_0", var("r"), var("a_0", F))
    assert got.body[2] == k.Assign("acc_0", alu("add", var("acc_0", F), var("a_0", F)))


def test_rules_decline_rather_than_clash_with_existing_names():
    """A copy's new name that the function already binds (here: a hoist loop variable ``hx_0``, the
    name the per-row copy of array ``hx`` would get; a local ``acc_l``) makes the rule decline."""
    prog = _matmul("fp32", 37, 45, hoist=True)
    fn = prog.functions[0]
    loop_i = fn.body[1]
    hoist = loop_i.body[1]
    clash = replace(hoist, var="hx_0", body=tuple(rename(s, {"h": "hx_0"}) for s in hoist.body))
    fn2 = replace(fn, body=(fn.body[0], replace(loop_i, body=(loop_i.body[0], clash, loop_i.body[2]))))
    p2 = prog.with_functions([fn2])
    validate(p2)
    assert _run_pass(RowBlock(), p2) == (p2, [])
    mv = _matvec("int8", 64, 5)
    fn = mv.functions[0]
    taken = replace(fn, body=(fn.body[0], k.Decl("acc_l", F, const(0.0, F)), *fn.body[1:]))
    p3 = mv.with_functions([taken])
    assert _run_pass(Lanes(), p3) == (p3, [])
    assert len(_run_pass(Lanes(), mv)[1]) == 1
