"""Verified caches (issue 13, item 2): a damaged library, compile result or probe file is discarded
with a warning naming it and rebuilt; nothing is unpickled; stale temp files are swept; files get the
umask's modes; an unusable cache directory is one clear error (or, for the default one, a fallback)."""

from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from compiler_progs import row_max_graph

from caten_lab.air import Graph
from caten_lab.codegen.render import render_program
from caten_lab.compiler import clear_cache, compile
from caten_lab.config import settings
from caten_lab.errors import CatenError
from caten_lab.nn.gpt2 import GPT2, GPT2Config
from caten_lab.runtime import artifact_cache, cache_files, toolchain
from caten_lab.runtime.cache_files import CacheWarning

REPO = Path(__file__).resolve().parents[2]


X = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
WANT = X + X.max(axis=1, keepdims=True)


def _library(d: Path) -> Path:
    (so,) = d.glob("caten_*.so")
    return so


# ---- libraries ---------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_library_is_rebuilt_in_process_with_a_warning(tmp_path: Path, damage: str) -> None:
    with settings(cache_dir=tmp_path):
        compile(row_max_graph())
        so = _library(tmp_path)
        data = so.read_bytes()
        if damage == "truncate":
            so.write_bytes(data[: len(data) // 2])
        else:  # same length, other bytes
            so.write_bytes(np.random.default_rng(1).integers(0, 256, len(data), dtype=np.uint8).tobytes())
        clear_cache()
        with pytest.warns(CacheWarning, match=so.name):
            prog = compile(row_max_graph())
        assert not prog.cached  # rebuilt, not loaded
        np.testing.assert_allclose(prog({"x": X})[0], WANT, rtol=1e-6)
        assert len(so.read_bytes()) == len(data)  # a complete build is back in the cache
        clear_cache()
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            again = compile(row_max_graph())  # it verifies: no warning
        assert again.cached


_CHILD = textwrap.dedent(
    """
    import warnings, numpy as np
    from caten_lab.air import Graph
    from caten_lab.compiler import compile
    g = Graph()
    x = g.insert("allocate", [], shape=(4, 8), dtype="float32", name="x")
    m = g.insert("reduce", [x], op="max", axes=(1,))
    g.mark_output(g.insert("add", [x, g.insert("view", [m], shape=(4, 8), strides=(1, 0))]))
    xs = np.arange(32, dtype=np.float32).reshape(4, 8)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        out = compile(g)({"x": xs})[0]
    assert np.array_equal(out, xs + xs.max(axis=1, keepdims=True)), out
    print("ok", len(w), *(str(x.message).splitlines()[0] for x in w))
    """
)


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_a_damaged_library_never_crashes_a_new_process(tmp_path: Path, damage: str) -> None:
    """The issue's crash: a fresh process dlopened the damaged file (SIGBUS/SIGSEGV) until force=True."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CATEN_CACHE_DIR": str(tmp_path)}
    run = lambda: subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, cwd=REPO,  # noqa: E731
                                 env=env, timeout=300)
    first = run()
    assert first.returncode == 0 and first.stdout.startswith("ok 0"), first.stderr
    so = _library(tmp_path)
    size = so.stat().st_size
    if damage == "truncate":
        os.truncate(so, size // 3)
    else:
        with open(so, "r+b") as f:  # overwritten in place with garbage of the same length
            f.write(os.urandom(size))
    second = run()
    assert second.returncode == 0, (second.returncode, second.stderr)
    assert second.stdout.startswith("ok 1") and so.name in second.stdout and "damaged" in second.stdout
    third = run()  # the rebuilt entry verifies
    assert third.returncode == 0 and third.stdout.startswith("ok 0"), third.stdout + third.stderr


def test_the_loaded_library_is_a_private_copy_of_the_verified_bytes(tmp_path: Path) -> None:
    with settings(cache_dir=tmp_path):
        compile(row_max_graph())
        so = _library(tmp_path)
        built = toolchain.build_library(so.with_suffix(".c").read_text(), toolchain.toolchain("cc", tmp_path), tmp_path)
    assert built.cached and built.load_path != built.path
    assert built.load_path.read_bytes() == so.read_bytes()
    assert built.sha256 == cache_files.digest(so.read_bytes())
    assert (tmp_path / (so.name + ".sha256")).read_text().split() == [built.sha256, str(so.stat().st_size)]
    good = so.read_bytes()
    so.write_bytes(b"\0" * len(good))  # the cache file changes after the check ...
    assert built.load_path.read_bytes() == good  # ... what gets loaded does not


def test_two_processes_building_the_same_library_agree(tmp_path: Path) -> None:
    """The race: both build and publish; the builds are identical, so each sidecar matches either
    library and no later process sees damage."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CATEN_CACHE_DIR": str(tmp_path)}
    procs = [subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=REPO, env=env) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0 and out.startswith("ok 0"), out + err
    third = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True, cwd=REPO, env=env,
                           timeout=300)
    assert third.returncode == 0 and third.stdout.startswith("ok 0"), third.stdout + third.stderr
    assert len(list(tmp_path.glob("caten_*.so"))) == 1 and not list(tmp_path.glob(".tmp_*"))


def test_a_library_without_its_sidecar_is_rebuilt_quietly(tmp_path: Path, recwarn: pytest.WarningsRecorder) -> None:
    """An entry of an older version (no sidecar) is a miss, not damage: rebuilt without a warning."""
    with settings(cache_dir=tmp_path):
        compile(row_max_graph())
        so = _library(tmp_path)
        Path(str(so) + ".sha256").unlink()
        clear_cache()
        prog = compile(row_max_graph())
    assert not prog.cached and not [w for w in recwarn if issubclass(w.category, CacheWarning)]
    np.testing.assert_allclose(prog({"x": X})[0], WANT, rtol=1e-6)


# ---- compile results: JSON, never pickle ---------------------------------------------------------


def _entry(d: Path) -> Path:
    (e,) = d.glob("artifacts_*.json")
    return e


def test_a_tampered_compile_result_is_discarded_and_rebuilt(tmp_path: Path) -> None:
    with settings(cache_dir=tmp_path):
        cold = compile(row_max_graph())
        entry = _entry(tmp_path)
        text = entry.read_bytes()
        i = text.index(b"caten_run")  # one byte of the cached C source changed
        entry.write_bytes(text[:i] + b"X" + text[i + 1 :])
        clear_cache()
        with pytest.warns(CacheWarning, match=f"{entry.name}.*SHA-256"):
            prog = compile(row_max_graph())
        assert prog.c_source == cold.c_source
        np.testing.assert_allclose(prog({"x": X})[0], WANT, rtol=1e-6)
        key = entry.name[len("artifacts_") : -len(".json")]
        assert artifact_cache.load(tmp_path, key) is not None  # rewritten by the rebuild


def test_a_truncated_compile_result_is_discarded(tmp_path: Path) -> None:
    with settings(cache_dir=tmp_path):
        compile(row_max_graph())
        entry = _entry(tmp_path)
        entry.write_bytes(entry.read_bytes()[:-100])
        with pytest.warns(CacheWarning, match="truncated"):
            prog = compile(row_max_graph())
        np.testing.assert_allclose(prog({"x": X})[0], WANT, rtol=1e-6)


def test_a_planted_pickle_is_never_unpickled(tmp_path: Path) -> None:
    """Whoever can write the cache directory must not run code in the user's process."""
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):  # noqa: ANN204
            return (Path.touch, (marker,))

    with settings(cache_dir=tmp_path):
        compile(row_max_graph())
        entry = _entry(tmp_path)
        key = entry.name[len("artifacts_") : -len(".json")]
        planted = pickle.dumps(Payload())
        pickle.loads(planted)  # the payload works: unpickling it creates the marker
        assert marker.exists()
        marker.unlink()
        (tmp_path / f"artifacts_{key}.pkl").write_bytes(planted)  # where older versions looked
        entry.write_bytes(planted)  # and where this one looks
        clear_cache()
        with pytest.warns(CacheWarning, match=entry.name):
            prog = compile(row_max_graph())
        np.testing.assert_allclose(prog({"x": X})[0], WANT, rtol=1e-6)
    assert not marker.exists()
    assert cache_files.sweep(tmp_path) >= 1 and not list(tmp_path.glob("*.pkl"))  # legacy pickles are swept


def test_the_cache_modules_do_not_import_pickle() -> None:
    for mod in (artifact_cache, cache_files, toolchain):
        assert "import pickle" not in Path(mod.__file__).read_text(), mod.__name__


def _small_gpt2():  # noqa: ANN202
    cfg = GPT2Config(vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=2)
    return GPT2(cfg).decoder_graph()


def _run_decoder(prog, dec, ids: np.ndarray) -> list[np.ndarray]:  # noqa: ANN001
    arrays = {k: np.array(v, copy=True) for k, v in dec.arrays.items()}  # the KV caches change in place
    first = prog({**arrays, dec.tokens: ids}, {"pos": 0})[0].copy()
    nxt = prog({**arrays, dec.tokens: ids[:, :1]}, {"pos": ids.shape[1]})[0].copy()
    return [first, nxt]


def test_a_program_loaded_from_the_cache_is_the_program_compiled_afresh(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    dec = _small_gpt2()
    ids = np.array([[3, 14, 15, 92, 65]], dtype=np.int64)
    with settings(cache_dir=tmp_path):
        cold = compile(dec.graph)
        clear_cache()
        monkeypatch.setattr("caten_lab.compiler.lower_to_c", lambda *a, **k: pytest.fail("the passes ran"))
        warm = compile(dec.graph)
    ref = _run_decoder(compile(dec.graph, backend="numpy"), dec, ids)
    got_cold, got_warm = _run_decoder(cold, dec, ids), _run_decoder(warm, dec, ids)
    for c, w, r in zip(got_cold, got_warm, ref):
        np.testing.assert_array_equal(w, c)  # bit for bit
        np.testing.assert_allclose(w, r, rtol=2e-4, atol=2e-5)
    assert warm.c_source == cold.c_source and warm.source_map == cold.source_map
    assert warm.kernel_lines == cold.kernel_lines
    assert warm.schedule.summary() == cold.schedule.summary()
    assert warm.schedule.to_json() == cold.schedule.to_json()  # kernel graphs included
    assert warm.memory_plan == cold.memory_plan
    assert warm.kernel_ir == cold.kernel_ir and warm.kernel_ir.text() == cold.kernel_ir.text()
    assert [f.origin for f in warm.kernel_ir.functions] == [f.origin for f in cold.kernel_ir.functions]
    assert render_program(warm.kernel_ir).source == cold.c_source
    assert set(warm.artifacts) == set(cold.artifacts)
    for name, value in cold.artifacts.items():
        if name not in ("schedule",):  # kernels hold graphs (compared through to_json above)
            assert warm.artifacts[name] == value, name
    assert [n.op for n in warm.compiled_graph.nodes] == [n.op for n in cold.compiled_graph.nodes]
    k = warm.schedule.kernels[-1]
    assert [n.op for n in k.graph.nodes] == [n.op for n in cold.schedule.kernels[-1].graph.nodes]


def test_a_result_with_an_artifact_it_cannot_encode_is_not_cached(tmp_path: Path) -> None:
    assert artifact_cache.encode(row_max_graph(), {"c_source": "int x;", "mystery": object()}) is None
    assert not artifact_cache.store(tmp_path, "k", (row_max_graph(), {"mystery": object()}))
    assert not list(tmp_path.glob("artifacts_*"))


# ---- toolchains.json -------------------------------------------------------------------------------


def test_toolchains_json_with_unknown_flags_is_not_used(tmp_path: Path) -> None:
    toolchain.toolchain("cc", tmp_path)
    probe = tmp_path / "toolchains.json"
    obj = json.loads(probe.read_text())
    for info in obj["entries"].values():
        info["base"] = ["-O3", "-fPIC", "-shared", "-fplugin=/tmp/evil.so"]
    obj["sha256"] = cache_files.digest(json.dumps(obj["entries"], sort_keys=True).encode())  # a consistent digest
    probe.write_text(json.dumps(obj))
    toolchain.forget_toolchains()
    with pytest.warns(CacheWarning, match="unknown compiler flags"):
        tc = toolchain.toolchain("cc", tmp_path)
    assert not any("plugin" in f for f in tc.flags)
    probe.write_text(probe.read_text().replace('"openmp": true', '"openmp": false', 1))  # digest now wrong
    toolchain.forget_toolchains()
    with pytest.warns(CacheWarning, match="toolchains.json.*SHA-256"):
        toolchain.toolchain("cc", tmp_path)


# ---- temp files, modes, unusable directories ---------------------------------------------------------


def test_stale_temp_files_are_swept_on_first_use(tmp_path: Path) -> None:
    d = tmp_path / "cache"
    d.mkdir()
    old = time.time() - 2 * cache_files.STALE_S
    stale = [d / ".tmp_abc.c", d / ".tmp_abc.so", d / ".artifacts_x.tmp", d / ".prepared_y.tmp"]
    for p in stale:
        p.write_bytes(b"half written")
    parts = d / ".tmp_parts"  # parallel_build's directory of parts
    parts.mkdir()
    (parts / "part0.c").write_text("int x;")
    fresh = d / ".tmp_live.c"  # a compile running right now
    fresh.write_text("int y;")
    keep = d / "caten_0123.c"
    keep.write_text("int z;")
    for p in (*stale, parts / "part0.c", parts):
        os.utime(p, (old, old))
    assert cache_files.cache_root(d) == d
    assert not any(p.exists() for p in (*stale, parts))
    assert fresh.exists() and keep.exists()


def test_cache_files_get_the_umask_file_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for umask, want in ((0o022, 0o644), (0o027, 0o640)):
        monkeypatch.setattr(cache_files, "_umask", None)
        old = os.umask(umask)
        try:
            d = tmp_path / f"u{umask:o}"
            with settings(cache_dir=d):
                compile(row_max_graph())
        finally:
            os.umask(old)
        for pattern in ("caten_*.c", "caten_*.so.sha256", "artifacts_*.json", "toolchains.json"):
            (f,) = d.glob(pattern)
            assert f.stat().st_mode & 0o777 == want, (pattern, oct(f.stat().st_mode))
        assert _library(d).stat().st_mode & 0o777 == 0o777 & ~umask  # the linker's mode
        assert d.stat().st_mode & 0o777 == 0o777 & ~umask


def test_a_cache_dir_under_a_file_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("CATEN_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(CatenError, match="CATEN_CACHE_DIR") as ei:
        compile(row_max_graph())
    assert "cannot be used" in str(ei.value) and "writable directory" in str(ei.value)
    with settings(cache_dir=blocker), pytest.raises(CatenError, match="not a directory|File exists"):
        compile(row_max_graph())


def test_an_unwritable_cache_dir_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated: root ignores permission bits, so os.access is made to report the directory read-only."""
    d = tmp_path / "ro"
    d.mkdir()
    real = os.access
    monkeypatch.setattr(cache_files.os, "access", lambda p, m: False if Path(p) == d else real(p, m))
    with settings(cache_dir=d), pytest.raises(CatenError, match="not writable") as ei:
        compile(row_max_graph())
    assert "CATEN_CACHE_DIR" in str(ei.value)


def test_an_unusable_default_cache_dir_falls_back_to_a_temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".cache").write_text("a file where ~/.cache should be")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("CATEN_CACHE_DIR", raising=False)
    with pytest.warns(CacheWarning, match="CATEN_CACHE_DIR") as rec:
        prog = compile(row_max_graph())
    assert len([w for w in rec if issubclass(w.category, CacheWarning)]) == 1
    np.testing.assert_allclose(prog({"x": X})[0], WANT, rtol=1e-6)
    root = cache_files.cache_root(home / ".cache" / "caten_lab")
    assert Path(prog.library_path).parent == root and str(root).startswith(tempfile.gettempdir())
    clear_cache()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        compile(row_max_graph())  # one warning per process, not one per compile


def test_a_full_disk_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated ENOSPC: every temp file the cache would create fails as on a full disk."""
    d = tmp_path / "full"
    cache_files.cache_root(d)

    def full(*a, **k):  # noqa: ANN002, ANN003, ANN202
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(tempfile, "mkstemp", full)
    with settings(cache_dir=d), pytest.warns(CacheWarning, match="cannot be cached"), \
            pytest.raises(CatenError, match="No space left on device") as ei:
        compile(row_max_graph())
    assert "CATEN_CACHE_DIR" in str(ei.value) and "free some disk space" in str(ei.value)


def test_a_symbol_named_like_the_format_keys_round_trips(tmp_path: Path) -> None:
    """The memory plan's symbols_assumed is {"expr": 64} here: not to be mistaken for an expression."""
    from caten_lab.air import Sym

    g = Graph()
    x = g.insert("allocate", [], shape=(Sym("expr"), 4), dtype="float32", name="x")
    g.mark_output(g.insert("exp2", [g.insert("neg", [x])]))
    xs = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    with settings(cache_dir=tmp_path):
        cold = compile(g)
        clear_cache()
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)
            warm = compile(g)
    assert warm.memory_plan == cold.memory_plan and warm.memory_plan.symbols_assumed == {"expr": 64}
    np.testing.assert_allclose(warm({"x": xs})[0], np.exp2(-xs), rtol=1e-6)


def test_a_compiler_that_runs_out_of_disk_is_a_cache_error_not_a_codegen_bug(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Simulated: the linker reports ENOSPC while writing the library into the cache."""
    src = "int caten_probe(int x) { return x; }\n"
    tc = toolchain.toolchain("cc", tmp_path)
    full = subprocess.CompletedProcess([], 1, "", "/usr/bin/ld: final link failed: No space left on device\n")
    monkeypatch.setattr(toolchain, "_run", lambda *a, **k: full)
    with pytest.raises(CatenError, match="No space left on device") as ei:
        toolchain.build_library(src, tc, tmp_path)
    assert "CATEN_CACHE_DIR" in str(ei.value) and "code generation bug" not in str(ei.value)


def test_warm_compile_defers_the_kernel_program_and_refuses_a_malformed_one(tmp_path):
    """A warm compile reads only each function's checks and kernel names from the cached kernel program
    (decoding GPT-2's ~50,000 nodes doubled a warm compile); the program decodes, equal, when looked at.
    A cached function table that does not parse is refused by the cache (a warning, then a fresh compile)."""
    from caten_lab.codegen.kir_json import DeferredProgram, program_to_json

    with settings(cache_dir=str(tmp_path)):
        clear_cache()
        cold = compile(row_max_graph())
        clear_cache()
        warm = compile(row_max_graph())
    assert isinstance(warm.kernel_ir, DeferredProgram) and warm.kernel_ir._program is None
    assert warm.kernel_ir == cold.kernel_ir and warm.kernel_ir._program is not None
    data = program_to_json(cold.kernel_ir)
    data["functions"][0]["meta"] = 7  # not a table
    with pytest.raises(ValueError, match="malformed function table"):
        DeferredProgram(data)
    with pytest.raises(ValueError, match="not a program"):
        DeferredProgram({"k": "Function"})
