"""The parallel C build: a multi-kernel program compiled as several translation units composed from
the renderer's units (``Rendered.units``, never by reading the C) gives the same library (bitwise-equal
results, same exported symbols), reports compiler errors at the original line numbers, leaves no temp
files, and stays out of the way for small sources, sources without units and units that do not tile
their source."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import cffi
import numpy as np
import pytest
from kir_progs import N_KERNELS, chain, reference

from caten_lab.codegen.markers import LINKAGE_MACRO, kernel_begin
from caten_lab.codegen.render import Rendered, render_program
from caten_lab.config import config
from caten_lab.errors import CompileError
from caten_lab.runtime import parallel_build, toolchain
from caten_lab.runtime.parallel_build import compose_parts, place_units
from caten_lab.runtime.toolchain import build_library


@pytest.fixture
def split(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Force the split (any size, 3 CPUs); returns the part counts of the parallel builds that ran."""
    monkeypatch.setattr(parallel_build, "MIN_SPLIT_LINES", 0)
    monkeypatch.setattr(parallel_build, "cpu_count", lambda: 3)
    calls: list[int] = []
    real = toolchain.compile_parts

    def spy(cc, flags, parts, out_path, timeout, **kw):  # noqa: ANN001, ANN003, ANN202
        calls.append(len(parts))
        return real(cc, flags, parts, out_path, timeout, **kw)

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


def _run(built: toolchain.Built, x: np.ndarray) -> np.ndarray:
    ffi = cffi.FFI()
    ffi.cdef("void caten_run(void **b, const int64_t *sym, int64_t *err);")
    lib = ffi.dlopen(str(built.load_path or built.path))
    bufs = [x, *(np.zeros_like(x) for _ in range(N_KERNELS))]
    ptrs = ffi.new(f"void *[{len(bufs)}]", [ffi.from_buffer(b) for b in bufs])
    err = ffi.new("int64_t[8]")
    lib.caten_run(ptrs, ffi.new("int64_t[1]", [x.size]), err)
    assert err[0] == 0
    return bufs[-1]


def test_split_build_matches_the_single_build_bitwise(tmp_path: Path, split: list[int]) -> None:
    tc = _tc()
    r = render_program(chain())
    built_split = build_library(r.source, tc, tmp_path / "split", units=r.units)
    assert split == [3] and not built_split.cached
    built_single = build_library(r.source, tc, tmp_path / "single")  # no units: one compiler call
    assert split == [3] and not built_single.cached and built_single.key == built_split.key
    x = np.random.default_rng(0).standard_normal(37).astype(np.float32)
    got, want = _run(built_split, x), _run(built_single, x)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-4)
    if shutil.which("nm"):
        exports = _exports(str(built_split.path))
        assert exports == _exports(str(built_single.path))
        assert "caten_run" in exports and not any(s.startswith("kern") for s in exports)


def test_parts_are_composed_from_the_units_balanced_and_keep_line_numbers() -> None:
    r = render_program(chain())
    lines = r.source.split("\n")
    units = place_units(r.source, r.units)
    assert [u.name for u in units] == ["prelude", *(f"kern{j}" for j in range(N_KERNELS)), "prototypes", "entry"]
    for u in units:  # each unit starts at its line of the one-file source
        assert "\n".join(lines[u.line - 1 : u.line - 1 + u.lines]) + "\n" == u.text
        if u.is_kernel:
            assert r.function_lines[u.name][0] == u.line and lines[u.line - 2] == kernel_begin(u.name)
    parts = compose_parts(units, 2, "prog.c")
    assert len(parts) == 2
    # every kernel is defined in exactly one part; the entry only in part 0; the prelude everywhere
    for j in range(N_KERNELS):
        assert sum(units[1 + j].text in p for p in parts) == 1
    assert "void caten_run(" in parts[0] and "void caten_run(" not in parts[1]
    assert all(units[0].text in p for p in parts)
    # largest kernel first onto the least-loaded part (part 0 starts with the entry's lines)
    size = {u.name: u.lines for u in units if u.is_kernel}
    load = [sum(u.lines for u in units if u.is_kernel and u.text in p) for p in parts]
    load[0] += sum(u.lines for u in units if u.name in ("prototypes", "entry"))
    assert abs(load[0] - load[1]) <= max(size.values())
    # after a #line N directive, the next lines are lines N, N+1, ... of the original file
    for p in parts:
        current = None
        for line in p.split("\n")[1:-1]:
            m = re.fullmatch(r'#line (\d+) "prog\.c"', line)
            if m:
                current = int(m.group(1))
                continue
            assert current is not None and lines[current - 1] == line
            current += 1
    assert compose_parts(units, 1, "prog.c") == []


def _with_line(r: Rendered, old: str, new: str) -> Rendered:
    """``r`` with one line changed in the source and in its unit alike."""
    assert r.source.count(old) == 1
    units = [(n, t.replace(old, new)) for n, t in r.units]
    return replace(r, source=r.source.replace(old, new), units=units)


def test_units_that_do_not_tile_their_source_build_as_one_file() -> None:
    r = render_program(chain())
    assert place_units(r.source, []) == []
    assert place_units(r.source, r.units[1:]) == []  # no prelude first
    assert place_units(r.source, [u for u in r.units if u[0] != "kern2"]) == []  # a function left out
    assert place_units(r.source, [r.units[0], r.units[2], r.units[1], *r.units[3:]]) == []  # out of order
    stray = r.source.replace(kernel_begin("kern3"), "static int stray;\n" + kernel_begin("kern3"))
    assert place_units(stray, r.units) == []  # C between units that no unit holds
    assert place_units(r.source + "int tail;\n", r.units) == []
    edited = _with_line(r, "/* k1 */", "/* k1: edited */")
    assert place_units(edited.source, r.units) == []  # a unit that is not the source's text
    assert len(place_units(edited.source, edited.units)) == len(r.units)


def test_error_in_a_later_part_reports_the_original_line(tmp_path: Path, split: list[int],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    tc = _tc()
    r = render_program(chain())
    units = place_units(r.source, r.units)
    parts = compose_parts(units, 3, "f.c")
    victim = next(u for u in units if u.is_kernel and u.text in parts[1])
    lines = r.source.split("\n")
    sig = next(i for i in range(victim.line - 1, victim.line - 1 + victim.lines)
               if lines[i].startswith(LINKAGE_MACRO) and lines[i].endswith(" {"))
    broken = _with_line(r, lines[sig], lines[sig] + " this is not C;")
    with pytest.raises(CompileError) as split_err:
        build_library(broken.source, tc, tmp_path / "split", units=broken.units)
    assert split == [3]
    msg = str(split_err.value)
    assert re.search(rf":{sig + 1}:\d+: error", msg), msg
    assert f"{sig + 1:5d}> {lines[sig]} this is not C;" in msg
    with pytest.raises(CompileError) as single_err:
        build_library(broken.source, tc, tmp_path / "single")
    assert split == [3]
    assert split_err.value.c_lines == single_err.value.c_lines  # type: ignore[attr-defined]
    for d in (tmp_path / "split", tmp_path / "single"):
        assert list(d.iterdir()) == []  # no temp files, nothing cached


def test_no_temp_files_and_a_second_build_hits_the_cache(tmp_path: Path, split: list[int]) -> None:
    tc = _tc()
    r = render_program(chain())
    first = build_library(r.source, tc, tmp_path, units=r.units)
    assert split == [3] and not first.cached
    cached = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".tmp_load_"))  # loaded copies
    assert cached == sorted([f"caten_{first.key}.so", f"caten_{first.key}.so.sha256", f"caten_{first.key}.c"])
    assert (tmp_path / f"caten_{first.key}.c").read_text() == r.source  # the full single-file source
    second = build_library(r.source, tc, tmp_path, units=r.units)
    assert second.cached and second.path == first.path and split == [3]


def test_small_sources_and_sources_without_units_keep_one_compiler_call(
        tmp_path: Path, split: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    tc = _tc()
    r = render_program(chain())
    assert not build_library(r.source, tc, tmp_path / "no_units").cached and split == []
    assert not build_library(r.source + "int tail;\n", tc, tmp_path / "bad_units", units=r.units).cached and split == []
    monkeypatch.setattr(parallel_build, "MIN_SPLIT_LINES", 10**6)
    assert not build_library(r.source, tc, tmp_path / "small", units=r.units).cached and split == []
