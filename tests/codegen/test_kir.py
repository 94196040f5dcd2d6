"""The kernel IR core: listing, structural equality, recorded rewrites that replay, the validator,
and the one C renderer (rendered kernels compiled and run against NumPy)."""

from __future__ import annotations

from dataclasses import replace

import cffi
import numpy as np
import pytest

import caten_lab.codegen.kir as k
from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir_check import validate
from caten_lab.codegen.kir_rewrite import apply_rules, replay
from caten_lab.codegen.kir_walk import alu, const, trip_count, var
from caten_lab.codegen.render import render_functions, render_program
from caten_lab.errors import CompileError
from caten_lab.runtime.toolchain import build_library, toolchain

F = DType.float32
I = DType.int64


def _matvec(n_const: int = 64) -> k.Program:
    """p0[i] = max(sum_r p1[r] (fp16) * p2[i*K + r], 0) for i < S_n."""
    acc = k.Decl("acc", F, const(0.0, F))
    prod = alu("mul", k.Load("p1", var("r"), F), k.Load("p2", alu("add", alu("mul", var("i"), const(n_const)), var("r")), F))
    red = k.For("r", const(0), const(n_const), const(1), (k.Assign("acc", alu("add", var("acc", F), prod)),),
                role="stage")
    st = k.Store("p0", var("i"), alu("max", var("acc", F), const(0.0, F)), check=k.Check(var("S_n"), 0))
    loop = k.For("i", const(0), var("S_n"), const(1), (acc, red, st), origin=k.Origin((7,)))
    sym = k.Decl("S_n", I, k.Load("sym", const(0), I), const=True)
    params = (k.Param("p0", F), k.Param("p1", DType.float16, const=True), k.Param("p2", F, const=True),
              k.Param("sym", I, const=True), k.Param("err", I))
    fn = k.Function("kern0", params, (sym, loop), linkage="kernel", meta=(("kernel_names", ("k0",)),))
    return k.Program((fn,), (k.KernelCall("kern0", (0, 1, 2)),), ("n",), ("out", "x", "w"))


def _simd(body, i, ctx):  # a rule: mark innermost stage loops simd with their accumulator
    s = body[i]
    if isinstance(s, k.For) and s.role == "stage" and not s.simd:
        return 1, (replace(s, simd=True, reduction=("acc",)),)
    return None


def _parallel(body, i, ctx):
    s = body[i]
    if isinstance(s, k.For) and not ctx.loops and s.parallel is None:
        return 1, (replace(s, parallel=k.Parallel(1, alu("ge", var("S_n"), const(64)))),)
    return None


def test_listing_maps_lines_to_statements():
    p = _matvec()
    lst = p.listing()
    text = lst.text()
    assert "FOR i in [0, S_n) [loop]" in text and "p0[i]! = max(acc, 0.0)" in text
    line = lst.line_of("kern0", (("body", 1), ("body", 2)))
    assert lst.lines[line - 1].strip().startswith("p0[i]!")
    assert text.splitlines()[-3:] == ["ENTRY", "  CALL kern0(b0, b1, b2)", "ENDENTRY"]


def test_equality_is_structural_and_ignores_origins():
    a, b = _matvec(), _matvec()
    assert a == b and a is not b
    loop = a.functions[0].body[1]
    assert replace(loop, origin=k.Origin((99,))) == loop
    assert replace(loop, unroll=4) != loop


def test_rewrites_record_and_replay_step_by_step():
    p = _matvec()
    rec: list = []
    q = apply_rules(p, [("parallel", _parallel), ("simd", _simd)], record=rec)
    assert [r.rule for r in rec] == ["parallel", "simd"]
    assert replay(p, rec) == q
    mid = replay(p, rec[:1])
    assert mid.functions[0].body[1].parallel is not None and not mid.functions[0].body[1].body[1].simd
    assert "parallel(if (S_n >= 64))" in q.text() and "simd reduction(+:acc)" in q.text()
    assert apply_rules(q, [("simd", _simd)], record=(again := [])) is q and not again  # nothing left to do
    assert trip_count(q.functions[0].body[1].body[1]) == 64 and trip_count(q.functions[0].body[1]) is None


@pytest.mark.parametrize("breakage, words", [
    (lambda f: replace(f, body=(k.Store("p0", var("x"), const(1.0, F)),)), "'x' is used but not defined"),
    (lambda f: replace(f, body=(k.Store("q9", const(0), const(1.0, F)),)), "unknown buffer 'q9'"),
    (lambda f: replace(f, body=(k.Store("p0", const(0, DType.int32), const(1.0, F)),)), "not int64"),
    (lambda f: replace(f, body=(k.Store("p0", const(0), alu("add", const(1.0, F), const(1, I))),)),
     "operand types must agree"),
    (lambda f: replace(f, body=(k.Decl("a", I), k.Decl("a", I))), "declared twice"),
])
def test_validator_names_the_broken_statement(breakage, words):
    p = _matvec()
    bad = p.with_functions([breakage(p.functions[0])])
    with pytest.raises(CompileError, match=words):
        validate(bad)
    validate(p)


_LOADED: list = []  # never unloaded: closing a library after OpenMP started can crash later tests


def _load(source: str, cdef: str, tmp_path):
    tc = toolchain("cc", tmp_path)
    built = build_library(source, tc, tmp_path)
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    lib = ffi.dlopen(str(built.load_path or built.path))
    _LOADED.append((ffi, lib))
    return ffi, lib


def test_rendered_tensor_program_runs_like_numpy(tmp_path):
    p = apply_rules(_matvec(), [("parallel", _parallel), ("simd", _simd)])
    r = render_program(p)
    assert len(r.source_map) == len(r.source.splitlines()) == len(r.line_paths)
    assert [u[0] for u in r.units] == ["prelude", "kern0", "prototypes", "entry"]
    start = r.function_lines["kern0"][0]  # (the prelude's helpers have loops of their own)
    c_line = next(i for i, ln in enumerate(r.source.splitlines()) if i >= start and ln.strip().startswith("for (int64_t i"))
    assert r.source_map[c_line] == [7] and r.line_paths[c_line] == ("kern0", (("body", 1),))
    ffi, lib = _load(r.source, "void caten_run(void **b, const int64_t *sym, int64_t *err);", tmp_path)
    rng = np.random.default_rng(0)
    n = 5
    x = rng.standard_normal(64).astype(np.float16)
    w = rng.standard_normal((n, 64)).astype(np.float32)
    out = np.zeros(n, np.float32)
    bufs = ffi.new("void *[3]", [ffi.from_buffer(a) for a in (out, x, w)])
    sym, err = ffi.new("int64_t[1]", [n]), ffi.new("int64_t[8]")
    lib.caten_run(bufs, sym, err)
    assert err[0] == 0
    np.testing.assert_allclose(out, np.maximum(w @ x.astype(np.float32), 0), rtol=1e-5, atol=1e-5)


def test_rendered_functions_cover_control_flow(tmp_path):
    """while / if / break / continue / return of an action-like function: sum of odd i < n, stop at 50."""
    s = var("s")
    body = (
        k.Decl("s", I, const(0)), k.Decl("i", I, const(0)),
        k.While(alu("lt", var("i"), var("n")), (
            k.Assign("i", alu("add", var("i"), const(1))),
            k.If(alu("eq", alu("floormod", var("i"), const(2)), const(0)), (k.Continue(),)),
            k.If(alu("gt", s, const(50)), (k.Break(),)),
            k.Assign("s", alu("add", s, var("i"))),
        )),
        k.Return(s),
    )
    fn = k.Function("odd_sum", (k.Param("n", I, pointer=False),), body, returns=I, linkage="export")
    validate(k.Program((fn,)))
    src = render_functions([fn]).text()
    ffi, lib = _load(src, "int64_t odd_sum(int64_t n);", tmp_path)

    def ref(n):
        s = i = 0
        while i < n:
            i += 1
            if i % 2 == 0:
                continue
            if s > 50:
                break
            s += i
        return s

    assert [lib.odd_sum(n) for n in (0, 1, 7, 30)] == [ref(n) for n in (0, 1, 7, 30)]


def test_a_rule_must_consume_what_it_replaces():
    with pytest.raises(ValueError, match="consumed 0 statements"):
        apply_rules(_matvec(), [("insert", lambda body, i, ctx: (0, (k.Comment("x"),)))])
