"""The Profile pane's data: kernel bytes/flops, the roofline model, the machine ceilings, and the
cell timeline (rows exist, are non-negative and sum to the total; no timing assertions)."""

from __future__ import annotations

import datetime as dt
import json
import sys
import time
import types

import numpy as np
import pytest

from caten_lab.compiler import compile as compile_program
from caten_lab.frontend import Tensor, build_graph
from caten_lab.notebook import profile_payload
from caten_lab.notebook.payload import trace_payload
from caten_lab.notebook.profile_payload import cell_profile, request_epoch, timeline
from caten_lab.notebook.roofline import attainable, intensity, ridge, roofline, roofline_point
from caten_lab.passes.kernel_cost import kernel_cost
from caten_lab.runtime import machine

M, K, N = 24, 40, 56


def _matmul_program(**kw):
    rng = np.random.default_rng(0)
    a = Tensor.from_numpy(rng.standard_normal((M, K)).astype(np.float32), name="a")
    b = Tensor.from_numpy(rng.standard_normal((K, N)).astype(np.float32), name="b")
    g, arrays = build_graph([a @ b])
    return compile_program(g, trace=True, **kw), dict(arrays)


@pytest.fixture(scope="module")
def matmul():
    return _matmul_program(force=True)


def test_matmul_flops_bytes_and_intensity(matmul):
    prog, arrays = matmul
    (k,) = prog.schedule.kernels
    nbytes, flops = kernel_cost(k, prog.schedule.buffers, {})
    assert flops == 2 * M * N * K
    assert nbytes == 4 * (M * K + K * N + M * N)  # both operands read once, the result written once
    rows = prog.profile(arrays)
    (row,) = rows
    assert (row["bytes"], row["flops"]) == (nbytes, flops)
    assert row["node_ids"] == list(k.node_ids) and row["calls"] == 1 and row["seconds"] >= 0
    pt = roofline_point(row, bandwidth=10e9, peak=100e9)
    assert pt["intensity"] == pytest.approx(2 * M * N * K / (4 * (M * K + K * N + M * N)))
    assert pt["intensity"] == pytest.approx(intensity(flops, nbytes))


def test_elementwise_and_reduce_costs():
    x = Tensor.from_numpy(np.ones((8, 16), np.float32), name="x")
    g, _ = build_graph([(x * 2.0 + 1.0).sum(axis=1)])
    prog = compile_program(g, trace=True)
    costs = prog.kernel_costs({})
    assert sum(f for _, f in costs) == 8 * 16 * 3  # mul, add per element and the reduction's add
    assert sum(b for b, _ in costs) >= 4 * (8 * 16 + 8)


def test_roofline_model():
    bw, peak = 20e9, 200e9
    assert ridge(bw, peak) == pytest.approx(10.0)
    assert attainable(1.0, bw, peak) == pytest.approx(20e9)  # memory-bound: bandwidth * intensity
    assert attainable(50.0, bw, peak) == pytest.approx(200e9)  # compute-bound: the peak
    r = roofline(
        [{"kernel": "k", "seconds": 1e-3, "bytes": 1000, "flops": 20_000}],
        {"bandwidth": bw, "peak_flops": peak},
    )
    (p,) = r["points"]
    assert p["intensity"] == 20.0 and p["bound"] == "compute" and p["flops_per_s"] == pytest.approx(2e7)
    assert p["efficiency"] == pytest.approx(2e7 / 200e9)
    assert (
        roofline_point({"kernel": "copy", "seconds": 1e-6, "bytes": 64, "flops": 0}, bw, peak)["bound"]
        == "memory"
    )
    assert roofline_point({"kernel": "empty", "bytes": 0, "flops": 0}, bw, peak)["intensity"] is None


def test_machine_ceilings_measured_once_and_cached(tmp_path, monkeypatch):
    calls = []
    real = machine._measure

    def counting(tc, threads):
        calls.append(threads)
        return real(tc, threads)

    monkeypatch.setattr(machine, "_measure", counting)
    first = machine.machine_ceilings(tmp_path)
    second = machine.machine_ceilings(tmp_path)
    assert len(calls) == 1 and not first["cached"] and second["cached"]
    assert first["bandwidth"] > 1e8 and first["peak_flops"] > 1e8  # at least 100 MB/s and 100 MFLOP/s
    assert second["bandwidth"] == first["bandwidth"] and second["key"] == first["key"]
    assert list(tmp_path.rglob(f"machine-{first['key']}.json"))


def test_machine_key_depends_on_toolchain_and_threads():
    tc_a = types.SimpleNamespace(identity="cc|12|-O3|cpu1")
    tc_b = types.SimpleNamespace(identity="clang|17|-O3|cpu1")
    assert machine.machine_key(tc_a, 2) != machine.machine_key(tc_b, 2)
    assert machine.machine_key(tc_a, 1) != machine.machine_key(tc_a, 2)
    assert machine.machine_key(tc_a, 2) == machine.machine_key(tc_a, 2)


def _check_rows(tl):
    rows = tl["rows"]
    assert rows and all(r["seconds"] >= 0 for r in rows)
    assert tl["total_s"] == pytest.approx(sum(r["seconds"] for r in rows))
    return {r["phase"] for r in rows}


def test_timeline_rows_of_a_compile_in_the_cell():
    start = time.time()
    prog, arrays = _matmul_program(force=True)
    t0 = time.perf_counter()
    prog(arrays)
    run_s = time.perf_counter() - t0
    rows = prog.profile(arrays)
    tl = cell_profile(prog.trace, program=prog, result={"run_s": run_s}, profile=rows, start=start)[
        "timeline"
    ]
    phases = _check_rows(tl)
    assert {"tracing", "pass", "compile", "cc", "load", "run", "profile", "python"} <= phases
    passes = [r for r in tl["rows"] if r["phase"] == "pass"]
    assert [r["label"] for r in passes] == [f"pass {rec.name}" for rec in prog.trace.records]
    assert [r["pass_index"] for r in passes] == list(range(len(prog.trace.records)))
    assert tl["compiled_here"] and tl["start"] == start and tl["start_source"] == "request"
    assert tl["total_s"] == pytest.approx(tl["end"] - start)  # the rows partition start .. payload


def test_timeline_of_a_program_compiled_earlier(matmul):
    prog, _ = matmul
    start = time.time() + 1e-3  # this "cell" began after the compile: the passes are cached rows
    tl = timeline(prog.trace, prog, 0.01, start + 0.5, start)
    assert not tl["compiled_here"]
    passes = [r for r in tl["rows"] if r["phase"] == "pass"]
    assert passes and all(r["cached"] and r["seconds"] == 0 for r in passes)
    _check_rows(tl)
    assert tl["total_s"] == pytest.approx(0.5)


def test_timeline_without_a_request_starts_at_the_compile(matmul):
    prog, _ = matmul
    prog.timings.pop("shown", None)  # as if no payload had shown this compile yet
    tl = timeline(prog.trace, prog, None, time.time(), None)
    assert tl["start_source"] == "compile" and tl["start"] == prog.timings["compile_start"]
    _check_rows(tl)


def test_request_epoch_reads_the_jupyter_header(monkeypatch):
    sent = dt.datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=dt.UTC)
    kernel = types.SimpleNamespace(get_parent=lambda channel: {"header": {"date": sent}})
    fake = types.ModuleType("IPython")
    fake.get_ipython = lambda: types.SimpleNamespace(kernel=kernel)
    monkeypatch.setitem(sys.modules, "IPython", fake)
    assert request_epoch() == pytest.approx(sent.timestamp())
    kernel.get_parent = lambda channel: {"header": {"date": "2026-01-02T03:04:05.250000Z"}}
    assert request_epoch() == pytest.approx(sent.timestamp())
    fake.get_ipython = lambda: None  # plain Python: no request
    assert request_epoch() is None


def test_payload_carries_the_cell_profile(matmul):
    prog, arrays = matmul
    rows = prog.profile(arrays)
    payload = trace_payload(prog.trace, program=prog, profile=rows, result={"run_s": 0.001})
    cp = json.loads(json.dumps(payload["cell_profile"]))  # JSON-ready
    (pt,) = cp["run"]["points"]
    assert cp["run"]["profiled"] and pt["kernel"] == prog.schedule.kernels[0].name
    assert pt["flops"] == 2 * M * N * K and pt["node_ids"]
    assert cp["run"]["bandwidth"] > 0 and cp["run"]["ridge"] == pytest.approx(
        cp["run"]["peak_flops"] / cp["run"]["bandwidth"]
    )
    unprofiled = trace_payload(prog.trace, program=prog)["cell_profile"]
    assert not unprofiled["run"]["profiled"] and "--profile" in unprofiled["note"]
    assert profile_payload.MAX_CLOCK_GAP_S > 0


def test_one_hot_embedding_counts_one_row_read_per_token():
    from caten_lab.nn.functional import embedding

    vocab, dim, seq = 300, 16, 5
    w = Tensor.from_numpy(np.ones((vocab, dim), np.float32), name="w")
    ids = Tensor.from_numpy(np.arange(seq, dtype=np.int64).reshape(1, seq), name="ids")
    g, arrays = build_graph([embedding(ids, w) * 2.0])
    prog = compile_program(g, trace=True)
    costs = prog.kernel_costs({})
    assert sum(f for _, f in costs) == seq * dim  # the * 2.0; the gather itself is no arithmetic
    # ids read, one row of the table per token, the result written: never the whole 300-row table
    assert sum(b for b, _ in costs) == 8 * seq + 4 * seq * dim + 4 * seq * dim


def test_roofline_png_for_a_notebook(matmul):
    import base64

    from caten_lab.notebook.profile_chart import roofline_png

    prog, arrays = matmul
    png = roofline_png(prog.profile(arrays, repeat=3), {"bandwidth": 20e9, "peak_flops": 200e9})
    assert base64.b64decode(png)[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        roofline_png(
            [{"kernel": "copy", "seconds": 1e-6, "bytes": 64, "flops": 0}],
            {"bandwidth": 1e9, "peak_flops": 1e9},
        )
        is None
    )


MAGIC_CELL = """%%caten --profile --force
import numpy as np
from caten_lab.frontend import Tensor
x = Tensor.from_numpy(np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6), name="x")
w = Tensor.from_numpy(np.linspace(0, 1, 18, dtype=np.float32).reshape(6, 3), name="w")
((x @ w).relu() * 2.0).sum(axis=1)
"""


def test_a_profiled_cell_carries_its_timeline_and_one_point_per_kernel():
    from IPython.core.interactiveshell import InteractiveShell

    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "caten_lab")
    r = ip.run_cell(MAGIC_CELL)
    assert r.error_in_exec is None, r.error_in_exec
    res = ip.user_ns["_caten"]
    cp = json.loads(res.inspector.data_json)["cell_profile"]
    phases = _check_rows(cp["timeline"])
    assert {"tracing", "pass", "compile", "cc", "load", "run", "profile", "python"} <= phases
    points = cp["run"]["points"]
    assert sorted(p["kernel"] for p in points) == sorted(k.name for k in res.program.schedule.kernels)
    assert sum(p["flops"] for p in points) == 2 * 4 * 3 * 6 + 4 * 3 * 2 + 4 * 3  # matmul, relu+scale, sum
    # a second run of the same cell takes the program from the %%caten cache: its passes are cached rows
    r = ip.run_cell(MAGIC_CELL.replace(" --force", ""))
    assert r.error_in_exec is None, r.error_in_exec
    cp2 = json.loads(ip.user_ns["_caten"].inspector.data_json)["cell_profile"]
    assert "tracing" not in _check_rows(cp2["timeline"]) and not cp2["timeline"]["compiled_here"]
    assert all(r["cached"] and r["seconds"] == 0 for r in cp2["timeline"]["rows"] if r["phase"] == "pass")
