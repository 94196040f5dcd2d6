"""The compile-result cache: a warm compile skips the passes and gives the same program."""

import numpy as np

from caten_lab.air import Graph
from caten_lab.compiler import compile
from caten_lab.config import settings
from caten_lab.runtime import artifact_cache


def _graph() -> Graph:
    g = Graph()
    x = g.insert("allocate", [], shape=(4, 8), dtype="float32", name="x")
    m = g.insert("reduce", [x], op="max", axes=(1,))
    g.mark_output(g.insert("add", [x, g.insert("view", [m], shape=(4, 8), strides=(1, 0))]))
    return g


def test_warm_compile_loads_artifacts_and_matches(tmp_path, monkeypatch):
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    with settings(cache_dir=tmp_path):
        cold = compile(_graph())
        assert list(tmp_path.glob("artifacts_*.pkl"))

        def fail(*a, **k):
            raise AssertionError("the passes ran although the result was cached")

        monkeypatch.setattr("caten_lab.compiler.lower_to_c", fail)
        warm = compile(_graph())
        assert warm.c_source == cold.c_source and warm.cached
        np.testing.assert_array_equal(warm({"x": x})[0], cold({"x": x})[0])
        np.testing.assert_allclose(warm({"x": x})[0], x + x.max(axis=1, keepdims=True))


def test_corrupt_entry_is_rebuilt_and_tracing_bypasses_the_cache(tmp_path):
    with settings(cache_dir=tmp_path):
        compile(_graph())
        for f in tmp_path.glob("artifacts_*.pkl"):
            f.write_bytes(b"not a pickle")
        prog = compile(_graph())
        assert prog.c_source
        traced = compile(_graph(), trace=True)
        assert traced.trace is not None and len(traced.trace.records) > 0


def test_key_depends_on_options_and_compiler_code():
    a = artifact_cache.artifact_key("h", safety=1, threads=2)
    assert a != artifact_cache.artifact_key("h", safety=2, threads=2)
    assert a != artifact_cache.artifact_key("h2", safety=1, threads=2)
    assert len(artifact_cache.compiler_fingerprint()) == 32
