"""Coverage-guided fuzzing of the loaders, bounded: atheris over the Python loaders (comparing the
safetensors and vocabulary verdicts with the C loader's on every input) and libFuzzer over the
exported C loader (with AddressSanitizer and UBSan; the corpus it grew is replayed through both
loaders afterwards). Seeds: tests/corpus/. A crash, a sanitizer report or a disagreement fails.

The runs are small here (CI); ``CATEN_FUZZ_RUNS`` / ``CATEN_FUZZ_SECONDS`` make them longer. Both
stop at whichever bound comes first: never unbounded. One input may take at most 30 s and 1.5 GB
more than pytest's peak RSS (a child inherits that peak across fork and exec, and libFuzzer's RSS
limit counts it): a hang or a memory blow-up is a finding too.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from loader_verdicts import (
    C_DIR,
    CORPUS,
    DRIVER,
    FUZZ_EXPECTED,
    FUZZ_VOCAB,
    MODES,
    RULES_DIR,
    Expected,
    build_driver,
    c_safetensors,
    c_vocab,
    py_safetensors,
    py_vocab,
)

RUNS = int(os.environ.get("CATEN_FUZZ_RUNS", "3000"))
SECONDS = int(os.environ.get("CATEN_FUZZ_SECONDS", "10"))
HERE = Path(__file__).resolve().parent


def _limits() -> list[str]:
    import resource

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    return [f"-rss_limit_mb={peak_mb + 1536}", "-malloc_limit_mb=1024", "-timeout=30"]


def _finding(stderr: str, tmp_path: Path) -> str:
    """The report of a failed run: the Python exception (atheris) or sanitizer report, and every
    saved input (base64), so a finding survives the temporary directory."""
    import base64

    at = max(stderr.find("=== Uncaught Python exception"), stderr.find("==ERROR"), stderr.find("runtime error"))
    report = stderr[at : at + 4000] if at >= 0 else stderr[-3000:]
    saved = [p for p in tmp_path.iterdir() if p.name.startswith(("crash-", "oom-", "leak-", "timeout-"))]
    inputs = "\n".join(f"{p.name}: {base64.b64encode(p.read_bytes()).decode()}" for p in saved)
    return f"{report}\n{inputs}"


def _seeds(d: Path, modes: tuple[str, ...]) -> Path:
    """The corpus as fuzz inputs: a mode byte, then the file."""
    d.mkdir()
    for m in modes:
        for p in (CORPUS / m).iterdir():
            (d / f"{m}-{p.name}").write_bytes(bytes([modes.index(m)]) + p.read_bytes())
    return d


def test_atheris_python_loaders(tmp_path) -> None:
    pytest.importorskip("atheris")
    seeds = _seeds(tmp_path / "seeds", MODES)
    work = tmp_path / "work"
    work.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parents[1]), str(HERE)])}
    r = subprocess.run(
        [sys.executable, str(HERE / "fuzz_python_loaders.py"), str(tmp_path), str(work), f"-runs={RUNS}",
         f"-max_total_time={SECONDS}", "-max_len=4096", "-seed=1", *_limits(),
         f"-artifact_prefix={tmp_path}/", str(seeds)],
        capture_output=True, text=True, timeout=SECONDS + 300, env=env,
    )
    assert r.returncode == 0, _finding(r.stderr, tmp_path)
    assert "Done" in r.stderr, r.stderr[-2000:]


@pytest.mark.skipif(shutil.which("clang") is None, reason="libFuzzer needs clang (scripts/install_system_deps.sh)")
def test_libfuzzer_c_loader(tmp_path) -> None:
    """The C loader under libFuzzer + ASan + UBSan; then every input of the grown corpus through both."""
    exe = tmp_path / "fuzz_loader"
    r = subprocess.run(
        ["clang", "-O1", "-g", "-DDRV_FUZZ", "-fsanitize=fuzzer,address,undefined", "-fno-sanitize-recover=all",
         f"-I{C_DIR}", f"-I{RULES_DIR}", "-o", str(exe), str(DRIVER)],
        capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seeds = _seeds(tmp_path / "seeds", ("safetensors", "vocab"))
    grown = tmp_path / "grown"
    grown.mkdir()
    r = subprocess.run(
        [str(exe), f"-runs={RUNS * 10}", f"-max_total_time={SECONDS}", "-max_len=4096", "-seed=1",
         *_limits(), f"-artifact_prefix={tmp_path}/", str(grown), str(seeds)],
        capture_output=True, text=True, timeout=SECONDS + 300,
    )
    assert r.returncode == 0, _finding(r.stderr, tmp_path)
    lib = build_driver(tmp_path)
    ex = Expected(FUZZ_EXPECTED)
    f = tmp_path / "replay"
    inputs = sorted(grown.iterdir())
    assert inputs, "libFuzzer wrote no corpus"
    for p in inputs:
        data = p.read_bytes()
        if not data:
            continue
        f.write_bytes(data[1:])
        if data[0] % 2 == 0:
            assert py_safetensors(f, FUZZ_EXPECTED) == c_safetensors(lib, f, ex), p.name
        else:
            assert py_vocab(f, FUZZ_VOCAB) == c_vocab(lib, f, FUZZ_VOCAB), p.name
