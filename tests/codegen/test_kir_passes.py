"""The codegen passes over the kernel IR: each fires on a small program, its recorded rewrites replay
to the program it produced, the validator accepts every program between passes, and the compiled
results equal the NumPy interpreter. Also the kernel IR's JSON form and the symbolic-index lowering."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from caten_lab.air import Graph, Sym, dtypes, interpret
from caten_lab.air.symbolic import Dim, evaluate, floordiv, mod, smax, smin
from caten_lab.codegen.kir import Alu, Const, For, If, Var
from caten_lab.codegen.kir_check import validate
from caten_lab.codegen.kir_json import program_from_json, program_to_json
from caten_lab.codegen.kir_rewrite import KRewrite, replay
from caten_lab.codegen.kir_walk import walk
from caten_lab.codegen.symbolic_kir import Names, dim_to_kir
from caten_lab.compiler import compile, default_pipeline
from caten_lab.config import settings
from caten_lab.passes.base import PassContext

CODEGEN = ("lower", "collapse", "hoist", "simd", "parallel", "unroll", "unnest_parallel", "render")


def stages(graph: Graph, threads: int = 2) -> dict[str, tuple]:
    """Run the default pipeline pass by pass: name -> (program before, program after, its kernel rewrites).
    Every program after a codegen pass is validated, and its rewrites replay to it."""
    ctx = PassContext(options={"safety": 1, "threads": threads})
    g = graph.copy()
    out = {}
    for p in default_pipeline().passes:
        before = ctx.artifacts.get("kernel_ir")
        ctx.rewrites = []
        g = p.run(g, ctx)
        after = ctx.artifacts.get("kernel_ir")
        rws = [r for r in ctx.rewrites if isinstance(r, KRewrite)]
        if after is not None:
            validate(after)
        if before is not None:
            assert replay(before, rws) == after, p.name
            for k in range(len(rws)):  # every intermediate step rebuilds and is valid
                validate(replay(before, rws[:k]))
        out[p.name] = (before, after, rws)
    return out


def loops(prog) -> list[For]:  # noqa: ANN001
    return [s for f in prog.functions for s in walk(f.body) if isinstance(s, For)]


def same_as_numpy(g: Graph, inputs: dict, symbols: dict | None = None, threads: int = 2, rtol: float = 2e-5) -> None:
    with settings(threads=threads):
        prog = compile(g)
        got = prog({k: v.copy() for k, v in inputs.items()}, symbols)
    want = interpret(g, {k: v.copy() for k, v in inputs.items()}, symbols or {})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)


def _x(g: Graph, name: str, shape: tuple, dtype=dtypes.float32) -> str:  # noqa: ANN001
    return g.insert("allocate", [], shape=shape, dtype=dtype, name=name)


def _rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def matvec_dots(rows: Dim = 1, k: int = 64, n: int = 5, f: str | None = "exp2", mark: bool = True) -> Graph:
    """``y[i, j] = sum_r f(x)[i, r] * w[j, r]`` (the weight contiguous along the reduction); ``mark``
    False leaves ``y`` (the last value of the graph) unmarked."""
    g = Graph()
    x = _x(g, "x", (rows, k))
    if f is not None:
        x = g.insert(f, [x])
    w = _x(g, "w", (n, k))
    a3 = g.insert("view", [x], shape=(rows, n, k), strides=(k, 0, 1))
    b3 = g.insert("view", [w], shape=(rows, n, k), strides=(0, k, 1))
    y = g.insert("reduce", [g.insert("mul", [a3, b3])], op="add", axes=(2,))
    if mark:
        g.mark_output(y)
    return g


def test_hoist_computes_the_operand_once_before_the_output_loop() -> None:
    g = matvec_dots()
    st = stages(g)
    before, after, rws = st["hoist"]
    assert [r.rule for r in rws] == ["hoist_operands"]
    assert before != after and "hoist" in {s.role for s in loops(after)}
    # exp2 is computed in the hoisted loop only, not inside the output loop's reduction
    (main,) = [s for s in loops(after) if s.role == "loop"]
    assert not [e for s in walk(main.body) for e in _alus(s) if e.op == "exp2"]
    same_as_numpy(g, {"x": _rand(1, 64), "w": _rand(5, 64, seed=1)})


def test_hoist_leaves_plain_loads_alone() -> None:
    st = stages(matvec_dots(f=None))
    assert st["hoist"][2] == [] and st["hoist"][0] == st["hoist"][1]


def _alus(s):  # noqa: ANN001, ANN202
    from caten_lab.codegen.kir_walk import exprs_of

    return [e for e in exprs_of(s) if isinstance(e, Alu)]


def test_simd_marks_sums_and_matmul_lanes() -> None:
    g = Graph()
    x = _x(g, "x", (6, 33))
    g.mark_output(g.insert("reduce", [g.insert("exp2", [x])], op="add", axes=(1,)))
    st = stages(g)
    _, after, rws = st["simd"]
    assert [r.rule for r in rws] == ["simd_sum"]
    (stage,) = [s for s in loops(after) if s.role == "stage"]
    assert stage.simd and stage.reduction and stage.reduction[0].startswith("acc")
    same_as_numpy(g, {"x": _rand(6, 33)})

    g = Graph()  # a matvec over a [K, N] weight: tiled over the outputs, accumulator lanes vectorized
    x = _x(g, "x", (1, 256))
    w = _x(g, "w", (256, 512))
    a3 = g.insert("view", [x], shape=(1, 512, 256), strides=(256, 0, 1))
    b3 = g.insert("view", [w], shape=(1, 512, 256), strides=(0, 1, 512))
    g.mark_output(g.insert("reduce", [g.insert("mul", [a3, b3])], op="add", axes=(2,)))
    _, after, rws = stages(g)["simd"]
    assert {r.rule for r in rws} == {"simd_lanes"} and len(rws) == 2  # the init and the update lanes
    assert all(s.simd for s in loops(after) if s.role == "vector" and s.var.startswith(("v", "w")))
    same_as_numpy(g, {"x": _rand(1, 256), "w": _rand(256, 512, seed=2)}, rtol=1e-4)


def test_parallel_runs_big_kernels_in_parallel_and_small_ones_serially() -> None:
    g = Graph()
    g.mark_output(g.insert("exp2", [_x(g, "x", (1024, 1024))]))  # above the threshold of sleeping threads too
    _, after, rws = stages(g)["parallel"]
    assert [r.rule for r in rws] == ["parallel_nest"]
    (top,) = [s for s in after.functions[0].body if isinstance(s, For)]
    assert top.parallel is not None and top.parallel.cond is None and top.role == "collapsed"
    assert stages(g, threads=1)["parallel"][2] == []
    small = Graph()
    small.mark_output(small.insert("exp2", [_x(small, "x", (4, 8))]))
    assert stages(small)["parallel"][2] == []  # 32 operations: below the work threshold
    same_as_numpy(g, {"x": _rand(1024, 1024)})


def test_unnest_chooses_one_parallel_loop_at_run_time() -> None:
    n = Sym("n")
    g = matvec_dots(rows=n, k=256, n=640, f=None, mark=False)  # plus each row's max: the row loop holds two
    dot = g.nodes[-1].out  # statements, so the rows and the outputs are not one collapsed nest
    m = g.insert("reduce", [g.inputs()[0].out], op="max", axes=(1,))
    mb = g.insert("view", [m], shape=(n, 640, 1), strides=(1, 0, 0))
    g.mark_output(g.insert("add", [dot, mb]))
    st = stages(g)
    _, par, _ = st["parallel"]
    (outer,) = [s for s in par.functions[0].body if isinstance(s, For)]
    assert outer.parallel is not None and any(isinstance(s, For) and s.parallel for s in walk(outer.body))
    _, after, rws = st["unnest_parallel"]
    assert [r.rule for r in rws] == ["unnest_parallel"]
    (choice,) = rws[0].after  # (inside the row-blocked nest's decode branch, when rowblock ran before)
    assert isinstance(choice, If) and rws[0].before[0].var == outer.var
    par_loop, ser_loop = choice.then[0], choice.orelse[0]
    assert choice.cond == outer.parallel.cond
    assert par_loop.parallel is not None and not any(isinstance(s, For) and s.parallel for s in walk(par_loop.body))
    assert ser_loop.parallel is None and any(isinstance(s, For) and s.parallel for s in walk(ser_loop.body))
    for rows in (1, 3):
        same_as_numpy(g, {"x": _rand(rows, 256), "w": _rand(640, 256, seed=3)}, {"n": rows}, rtol=1e-4)


def test_unroll_small_constant_loops() -> None:
    g = Graph()
    x = _x(g, "x", (64, 4))
    g.mark_output(g.insert("reduce", [x], op="max", axes=(1,)))
    _, after, rws = stages(g)["unroll"]
    assert [r.rule for r in rws] == ["unroll_small"]
    (stage,) = [s for s in loops(after) if s.role == "stage"]
    assert stage.unroll == 8 and stage.stop == Const(4, dtypes.int64)
    same_as_numpy(g, {"x": _rand(64, 4)})


def test_every_codegen_pass_of_gpt2_tiny_is_valid_and_replays() -> None:
    gpt2 = pytest.importorskip("caten_lab.nn.gpt2")
    m = gpt2.GPT2(gpt2.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=2))
    d = m.decoder_graph()
    st = stages(d.graph)
    changed = [name for name in CODEGEN if st[name][0] != st[name][1]]
    assert {"lower", "hoist", "simd", "parallel", "unnest_parallel"} <= set(changed), changed
    prog = st["render"][1]
    assert program_from_json(program_to_json(prog)) == prog
    with settings(threads=2):
        got = compile(d.graph)({**d.arrays, d.tokens: np.array([[1, 2, 3]], np.int64)}, {"pos": 0})
    want = interpret(d.graph, {**d.arrays, d.tokens: np.array([[1, 2, 3]], np.int64)}, {"pos": 0, "seq": 3})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_kernel_ir_json_round_trips_values_and_origins() -> None:
    g = Graph()
    x = _x(g, "x", (3, 5))
    y = g.insert("reduce", [x], op="max", axes=(1,))
    g.mark_output(g.insert("add", [y, float("inf")]))
    prog = stages(g)["render"][1]
    back = program_from_json(program_to_json(prog))
    assert back == prog and back.text() == prog.text()
    assert [s.origin for f in back.functions for s in walk(f.body)] == \
        [s.origin for f in prog.functions for s in walk(f.body)]
    assert any(isinstance(e, Const) and e.value == float("-inf") for f in back.functions for s in walk(f.body)
               for e in _consts(s))
    with pytest.raises(ValueError, match="unknown node kind"):
        program_from_json({"k": "Mystery"})


def _consts(s):  # noqa: ANN001, ANN202
    from caten_lab.codegen.kir_walk import exprs_of

    return [e for e in exprs_of(s) if isinstance(e, Const)]


def _value(e, env: dict) -> int:  # noqa: ANN001
    """C int64 semantics: ``div`` truncates; ``floordiv``/``floormod`` floor."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e.name]
    a = [_value(x, env) for x in e.args]
    ops = {"add": lambda: a[0] + a[1], "sub": lambda: a[0] - a[1], "mul": lambda: a[0] * a[1],
           "div": lambda: int(a[0] / a[1]) if abs(a[0]) < 2**52 else None, "floordiv": lambda: a[0] // a[1],
           "floormod": lambda: a[0] % a[1], "max": lambda: max(a), "min": lambda: min(a)}
    return ops[e.op]()


def test_symbolic_indices_lower_to_int64_expressions_that_evaluate_alike() -> None:
    s, t, v = Sym("seq"), Sym("pos"), Sym("__l0")  # a user symbol, another, a loop variable
    dims = [3 * s + 7, s * t + 2 * v - 5, floordiv(v, 64), mod(v + 3 * s, 12), floordiv(v - 7, 3), mod(v - 7, 5),
            smax(s, t) * 4, smin(v, s - 1), mod(floordiv(768 * v, 64), 12) * s + mod(v, 64)]
    names = Names()
    for d in dims:
        e = dim_to_kir(d, names)
        assert e.dtype == dtypes.int64
        assert not [x for x in _walk_expr(e) if isinstance(x, Var) and x.name not in ("S_seq", "S_pos", "l0")]
        for sv, tv, lv in itertools.product((1, 5, 64), (0, 9), (0, 7, 130)):
            want = evaluate(d, {"seq": sv, "pos": tv, "__l0": lv})
            assert _value(e, {"S_seq": sv, "S_pos": tv, "l0": lv}) == want, (d, sv, tv, lv)


def _walk_expr(e):  # noqa: ANN001, ANN202
    yield e
    for a in getattr(e, "args", ()):
        yield from _walk_expr(a)


def test_collapse_flattens_contiguous_nests_only() -> None:
    n = Sym("n")
    g = Graph()  # contiguous in every operand, symbolic rows: one loop over n * 24 elements
    x, y = _x(g, "x", (n, 4, 6)), _x(g, "y", (n, 4, 6))
    g.mark_output(g.insert("mul", [g.insert("exp2", [x]), y]))
    _, after, rws = stages(g)["collapse"]
    assert [r.rule for r in rws] == ["collapse_nest"]
    (top,) = [s for s in after.functions[0].body if isinstance(s, For)]
    assert top.role == "collapsed" and not [s for s in walk(top.body) if isinstance(s, For)]
    inputs = {"x": _rand(3, 4, 6), "y": _rand(3, 4, 6, seed=1)}
    same_as_numpy(g, inputs, {"n": 3})

    g = Graph()  # a broadcast operand (stride 0 along the rows): the nest stays
    x, b = _x(g, "x", (5, 7)), _x(g, "b", (7,))
    g.mark_output(g.insert("add", [x, g.insert("view", [b], shape=(5, 7), strides=(0, 1))]))
    assert stages(g)["collapse"][2] == []
    same_as_numpy(g, {"x": _rand(5, 7), "b": _rand(7, seed=2)})

    g = Graph()  # an index value (arange) uses the loop variable itself: the nest stays
    x = _x(g, "x", (3, 5))
    g.mark_output(g.insert("add", [x, g.insert("index", [], shape=(3, 5), axis=1, dtype=dtypes.float32)]))
    assert stages(g)["collapse"][2] == []
    same_as_numpy(g, {"x": _rand(3, 5)})


def test_the_parallel_threshold_is_an_option():
    from caten_lab.codegen.parallel import PARALLEL_WORK
    from caten_lab.codegen.passes import ParallelLoops

    assert ParallelLoops().options == {"parallel_work": PARALLEL_WORK}
    assert ParallelLoops(parallel_work=7).options == {"parallel_work": 7}
