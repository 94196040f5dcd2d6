"""The parallel C build: a multi-kernel source compiled as several translation units and linked gives
the same library (bitwise-equal results, same exported symbols), reports compiler errors at the
original line numbers, leaves no temp files, and stays out of the way for small or unmarked sources."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from air_patterns import attention, gelu, inp, layernorm, linear, rand_inputs, reshape

from caten_lab.air import Graph
from caten_lab.compiler import compile
from caten_lab.config import config, settings
from caten_lab.errors import CompileError
from caten_lab.runtime import parallel_build, toolchain
from caten_lab.runtime.toolchain import build_library


def block_graph() -> Graph:
    """Attention + layernorm + MLP: several kernels of a few hundred lines in all."""
    g = Graph()
    q, k, v = (inp(g, n, (2, 8, 16)) for n in "qkv")
    a = reshape(g, attention(g, q, k, v), (16, 16))
    h = linear(g, layernorm(g, a, inp(g, "w", (16,)), inp(g, "b", (16,))), inp(g, "w1", (16, 64)), inp(g, "b1", (64,)))
    g.mark_output(linear(g, gelu(g, h), inp(g, "w2", (64, 16))))
    return g


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Force the split (any size, 3 CPUs); returns the part counts of the parallel builds that ran."""
    monkeypatch.setattr(parallel_build, "MIN_SPLIT_LINES", 0)
    monkeypatch.setattr(parallel_build, "cpu_count", lambda: 3)
    calls: list[int] = []
    real = toolchain.compile_parts

    def spy(cc, flags, parts, out_path, timeout):  # noqa: ANN001, ANN202
        calls.append(len(parts))
        return real(cc, flags, parts, out_path, timeout)

    monkeypatch.setattr(toolchain, "compile_parts", spy)
    return calls


def _tc():  # noqa: ANN202
    cfg = config()
    tc = toolchain.toolchain(cfg.cc, cfg.cache_dir)
    if not tc.openmp:
        pytest.skip("the parallel build needs an OpenMP (gcc/clang-like) toolchain")
    return tc


def _exports(path: str) -> list[str]:
    r = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True, check=True)
    return sorted(line.split()[-1] for line in r.stdout.splitlines() if line.strip())


def test_split_build_matches_the_single_build_bitwise(tmp_path: Path, split: list[int]) -> None:
    _tc()
    g = block_graph()
    xs = rand_inputs(g)
    with settings(cache_dir=tmp_path / "split"):
        prog_split = compile(g)
    assert split == [3] and not prog_split.cached
    split.clear()
    with settings(cache_dir=tmp_path / "single"), pytest.MonkeyPatch.context() as mp:
        mp.setattr(parallel_build, "MAX_PARTS", 1)
        prog_single = compile(g)
    assert split == [] and not prog_single.cached
    assert prog_split.c_source == prog_single.c_source
    got, want = prog_split(xs), prog_single(xs)
    for a, b, ref in zip(got, want, compile(g, backend="numpy")(xs)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, ref, rtol=1e-4, atol=1e-5)
    if shutil.which("nm"):
        exports = _exports(prog_split.library_path)
        assert exports == _exports(prog_single.library_path)
        assert "caten_run" in exports and not any(s.startswith("kern") for s in exports)


def test_split_source_balances_kernels_and_keeps_line_numbers() -> None:
    source = compile(block_graph(), trace=True).c_source
    lines = source.split("\n")
    spans = parallel_build.kernel_spans(lines)
    names = [re.search(r"cl:kernel (\w+)", lines[b]).group(1) for b, _ in spans]
    assert len(spans) >= 3 and len(spans) == source.count("CL_KERNEL_LINKAGE __attribute__((noinline)) void kern") // 2
    parts = parallel_build.split_source(source, 2, "prog.c")
    assert len(parts) == 2
    # every kernel is defined in exactly one part; the entry only in part 0; the prelude everywhere
    for name in names:
        assert sum(f"void {name}(" in p and f"cl:kernel {name} */" in p for p in parts) == 1
    assert "void caten_run(" in parts[0] and "void caten_run(" not in parts[1]
    assert all("static inline int64_t cl_check" in p for p in parts)
    # largest kernel first onto the least-loaded part (part 0 starts with the entry's lines): the loads
    # differ by at most one kernel
    size = {n: e - b + 1 for n, (b, e) in zip(names, spans)}
    load = [sum(s for n, s in size.items() if f"cl:kernel {n} */" in p) for p in parts]
    load[0] += len(lines) - spans[0][0] - sum(size.values())
    assert abs(load[0] - load[1]) <= max(size.values())
    # after a #line N directive, the next lines are lines N, N+1, ... of the original file
    for p in parts:
        current = None
        for line in p.split("\n")[1:]:
            m = re.fullmatch(r'#line (\d+) "prog\.c"', line)
            if m:
                current = int(m.group(1))
                continue
            assert current is not None and lines[current - 1] == line
            current += 1
    assert parallel_build.split_source(source, 1, "prog.c") == [source]
    unmarked = "\n".join(line for line in lines if "cl:kernel" not in line)
    assert parallel_build.split_source(unmarked, 2, "prog.c") == [unmarked]


def test_error_in_a_later_part_reports_the_original_line(tmp_path: Path, split: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tc = _tc()
    lines = compile(block_graph(), trace=True).c_source.split("\n")
    split.clear()  # (that compile may itself have been a split build, or a cache hit)
    spans = parallel_build.kernel_spans(lines)
    # break the definition line of a kernel that goes to part 1 (same line count, same split)
    parts = parallel_build.split_source("\n".join(lines), 3, "f.c")
    b = next(b for b, _ in spans if lines[b] in parts[1].split("\n"))
    sig = b + 2
    assert lines[sig].startswith("CL_KERNEL_LINKAGE") and lines[sig].endswith(" {")
    lines[sig] += " this is not C;"
    broken = "\n".join(lines)
    with pytest.raises(CompileError) as split_err:
        build_library(broken, tc, tmp_path / "split")
    assert split == [3]
    msg = str(split_err.value)
    assert re.search(rf":{sig + 1}:\d+: error", msg), msg
    assert f"{sig + 1:5d}> {lines[sig]}" in msg and "this is not C" in msg
    monkeypatch.setattr(parallel_build, "MAX_PARTS", 1)
    with pytest.raises(CompileError) as single_err:
        build_library(broken, tc, tmp_path / "single")
    assert split == [3]
    assert split_err.value.c_lines == single_err.value.c_lines  # type: ignore[attr-defined]
    for d in (tmp_path / "split", tmp_path / "single"):
        assert list(d.iterdir()) == []  # no temp files, nothing cached


def test_no_temp_files_and_a_second_build_hits_the_cache(tmp_path: Path, split: list[int]) -> None:
    tc = _tc()
    source = compile(block_graph(), trace=True).c_source
    split.clear()
    first = build_library(source, tc, tmp_path)
    assert split == [3] and not first.cached
    cached = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".tmp_load_"))  # loaded copies
    assert cached == sorted([f"caten_{first.key}.so", f"caten_{first.key}.so.sha256", f"caten_{first.key}.c"])
    assert (tmp_path / f"caten_{first.key}.c").read_text() == source  # the full single-file source
    second = build_library(source, tc, tmp_path)
    assert second.cached and second.path == first.path and split == [3]


def test_small_and_unmarked_sources_keep_one_compiler_call(tmp_path: Path, split: list[int],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    tc = _tc()
    source = compile(block_graph(), trace=True).c_source
    split.clear()
    # a source cached by an earlier version: no markers, static kernels
    old = "\n".join(line.replace("CL_KERNEL_LINKAGE", "static") for line in source.split("\n")
                    if not line.startswith("/* cl:"))
    assert not build_library(old, tc, tmp_path / "old").cached and split == []
    monkeypatch.setattr(parallel_build, "MIN_SPLIT_LINES", 10**6)
    assert not build_library(source, tc, tmp_path / "small").cached and split == []
