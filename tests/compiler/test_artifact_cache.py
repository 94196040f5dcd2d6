"""The compile-result cache: a warm compile skips the passes and gives the same program."""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from compiler_progs import row_max_graph
from kir_progs import chain

import caten_lab.compiler as compiler
from caten_lab.air import Graph
from caten_lab.codegen.render import render_program
from caten_lab.compiler import compile
from caten_lab.config import settings
from caten_lab.runtime import artifact_cache
from caten_lab.runtime.cache_files import CacheWarning


def test_warm_compile_loads_artifacts_and_matches(tmp_path, monkeypatch):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    with settings(cache_dir=tmp_path):
        cold = compile(row_max_graph())
        assert list(tmp_path.glob("artifacts_*.json"))

        def fail(*a, **k):
            raise AssertionError("the passes ran although the result was cached")

        monkeypatch.setattr("caten_lab.compiler.lower_to_c", fail)
        warm = compile(row_max_graph())
        assert warm.c_source == cold.c_source and warm.cached
        np.testing.assert_array_equal(warm({"x": x})[0], cold({"x": x})[0])
        np.testing.assert_allclose(warm({"x": x})[0], x + x.max(axis=1, keepdims=True))


def test_corrupt_entry_is_rebuilt_and_tracing_bypasses_the_cache(tmp_path):
    with settings(cache_dir=tmp_path):
        compile(row_max_graph())
        for f in tmp_path.glob("artifacts_*.json"):
            f.write_bytes(b"not a cache entry")
        with pytest.warns(CacheWarning, match="artifacts_.*damaged"):
            prog = compile(row_max_graph())
        assert prog.c_source
        traced = compile(row_max_graph(), trace=True)
        assert traced.trace is not None and len(traced.trace.records) > 0


def test_key_depends_on_options_and_compiler_code():
    a = artifact_cache.artifact_key("h", safety=1, threads=2)
    assert a != artifact_cache.artifact_key("h", safety=2, threads=2)
    assert a != artifact_cache.artifact_key("h2", safety=1, threads=2)
    assert len(artifact_cache.compiler_fingerprint()) == 32


def test_the_key_holds_the_pipeline_options_and_another_option_is_another_program(tmp_path):
    """Options are arguments of the pipeline's passes: they are part of the cache key (no reflection
    over module constants), and a pipeline built with other options never gets the cached program."""
    from caten_lab.codegen.passes import ParallelLoops, pipeline_options
    from caten_lab.compiler import default_pipeline

    pm = default_pipeline()
    opts = pipeline_options(pm.passes)
    assert ("parallel", (("parallel_work", 1 << 15),)) in opts
    assert ("lower", (("vector_tile", 32),)) in opts and ("hoist", (("hoist_max", 16384),)) in opts
    pm.replace("parallel", ParallelLoops(parallel_work=1 << 20))
    assert pipeline_options(pm.passes) != opts
    assert artifact_cache.artifact_key("h", passes=opts) != artifact_cache.artifact_key("h", passes=pipeline_options(pm.passes))

    g = Graph()  # a matvec whose operand (exp2 of x) is hoisted out of the output loop by default
    x = g.insert("allocate", [], shape=(1, 64), dtype="float32", name="x")
    w = g.insert("allocate", [], shape=(5, 64), dtype="float32", name="w")
    a3 = g.insert("view", [g.insert("exp2", [x])], shape=(1, 5, 64), strides=(64, 0, 1))
    b3 = g.insert("view", [w], shape=(1, 5, 64), strides=(0, 64, 1))
    g.mark_output(g.insert("reduce", [g.insert("mul", [a3, b3])], op="add", axes=(2,)))
    rng = np.random.default_rng(0)
    inputs = {"x": rng.standard_normal((1, 64)).astype(np.float32), "w": rng.standard_normal((5, 64)).astype(np.float32)}
    want = np.exp2(inputs["x"]) @ inputs["w"].T
    with settings(cache_dir=tmp_path):
        hoisted = compile(g)
        plain_pm = default_pipeline()
        plain_pm.remove("hoist")
        plain = compile(g, pipeline=plain_pm)
    roles = [{s.role for f in p.kernel_ir.functions for s in _loops(f.body)} for p in (hoisted, plain)]
    assert "hoist" in roles[0] and "hoist" not in roles[1]
    for p in (hoisted, plain):
        np.testing.assert_allclose(p(inputs)[0][..., 0], want, rtol=1e-5, atol=1e-5)


def _loops(body):
    from caten_lab.codegen.kir import For

    for s in body:
        if isinstance(s, For):
            yield s
            yield from _loops(s.body)


def test_the_renderers_units_round_trip_through_the_cache():
    """A warm compile hands build_library the same units as a cold one, so it builds in parallel too."""
    r = render_program(chain())
    g = row_max_graph()
    body = artifact_cache.encode(g, {"c_source": r.source, "c_units": r.units})
    assert body is not None
    _, arts = artifact_cache.decode(body)
    assert arts == {"c_source": r.source, "c_units": r.units}
    assert [name for name, _ in arts["c_units"]] == ["prelude", "kern0", "kern1", "kern2", "kern3", "kern4",
                                                    "prototypes", "entry"]


_WAITER = """
import sys
from pathlib import Path
import caten_lab.compiler as compiler
from compiler_progs import row_max_graph

def lowered(*a, **k):
    raise SystemExit("lowered: it did not wait for the other process's compile")

compiler.lower_to_c = lowered
Path(sys.argv[1]).touch()  # about to compile
print("ok", compiler.compile(row_max_graph()).cached)
"""


def test_a_second_process_waits_for_the_compile_in_progress_and_loads_it(tmp_path, monkeypatch):
    """Processes sharing a cache directory (two notebooks, two test workers) compile a missing entry once:
    while this process lowers the graph, another one compiling the same graph waits for it, then loads its
    result and library instead of running the passes and the C compiler again."""
    cache, ready = tmp_path / "cache", tmp_path / "ready"
    env = {**os.environ, "CATEN_CACHE_DIR": str(cache),
           "PYTHONPATH": str(Path(__file__).resolve().parent)}
    real, child = compiler.lower_to_c, []

    def lower_slowly(*a, **k):
        child.append(subprocess.Popen([sys.executable, "-c", _WAITER, str(ready)], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True, env=env))
        deadline = time.monotonic() + 120
        while not ready.exists() and time.monotonic() < deadline and child[0].poll() is None:
            time.sleep(0.02)
        time.sleep(0.5)  # the other process is in compile() now: without the lock it would lower too
        return real(*a, **k)

    monkeypatch.setattr(compiler, "lower_to_c", lower_slowly)
    with settings(cache_dir=cache):
        prog = compile(row_max_graph())
    out, err = child[0].communicate(timeout=300)
    assert ready.exists() and not prog.cached
    assert child[0].returncode == 0 and out.split() == ["ok", "True"], out + err
    assert list(cache.glob(".lock_*"))  # the lock files stay (swept with the temp files)
