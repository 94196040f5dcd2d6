"""runtime/objects.py, the exported library's build: units compiled with the runtime's flags (concurrently,
objects written atomically) and linked into a shared library and a program; failures are CompileErrors."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import pytest

from caten_lab.errors import CompileError
from caten_lab.runtime.objects import compile_objects, current_toolchain, link, object_flags

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

TWICE = "int twice(int x) { return 2 * x; }\n"
QUAD = "int twice(int x);\n__attribute__((visibility(\"default\"))) int quad(int x) { return twice(twice(x)); }\n"
MAIN = '#include <stdio.h>\nint quad(int x);\nint main(void) { printf("%d\\n", quad(7)); return 0; }\n'


def _write(d: Path, files: dict[str, str]) -> list[Path]:
    paths = []
    for name, text in files.items():
        (d / name).write_text(text)
        paths.append(d / name)
    return paths


def test_units_link_into_a_library_and_a_program(tmp_path) -> None:
    tc = current_toolchain()
    assert "-shared" not in object_flags(tc) and "-O3" in object_flags(tc)
    units = _write(tmp_path, {"a.c": TWICE, "b.c": QUAD})
    times = compile_objects(tc, units, ["-fvisibility=hidden"])
    assert set(times) == {"a", "b"} and all(t > 0 for t in times.values())
    lib = tmp_path / "libquad.so"
    link(tc, [u.with_suffix(".o") for u in units], lib, shared=True)
    assert ctypes.CDLL(str(lib)).quad(5) == 20
    main = _write(tmp_path, {"main.c": MAIN})[0]
    exe = tmp_path / "quad"
    link(tc, [main], exe, shared=False, extra=[f"-L{tmp_path}", "-lquad", "-Wl,-rpath,$ORIGIN"])
    assert subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout == "28\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.c", "a.o", "b.c", "b.o", "libquad.so", "main.c", "quad"]


def test_a_compile_error_names_the_unit_and_leaves_no_object(tmp_path) -> None:
    tc = current_toolchain()
    units = _write(tmp_path, {"good.c": TWICE, "bad.c": "int f(void) {\n  return nope;\n}\n"})
    with pytest.raises(CompileError) as exc:
        compile_objects(tc, units)
    out = exc.value.compiler_output
    assert "bad.c:2:" in out and "nope" in out and "undeclared" in out
    assert "return nope;" in "\n".join(exc.value.c_lines)  # the offending line of the unit
    assert not (tmp_path / "bad.o").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp file left


def test_a_link_error_is_a_compile_error_and_leaves_no_output(tmp_path) -> None:
    tc = current_toolchain()
    main = _write(tmp_path, {"main.c": MAIN})[0]
    with pytest.raises(CompileError, match=r"linking quad failed:(.|\n)*quad"):
        link(tc, [main], tmp_path / "quad", shared=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["main.c"]
