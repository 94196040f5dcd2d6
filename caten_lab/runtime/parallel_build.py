"""Compile one generated C file as several translation units at once, then link them.

The C compiler dominates a cold compile (GPT-2 small: ~0.1 s of Python, ~1.5-2 s of gcc on one
core), and almost all of that goes into the large kernel functions. The renderer
(``codegen/render.py``) hands over the file as units, in file order (``Rendered.units``): the
prelude, one unit per kernel function, then the rest (prototypes, trampolines, call table, entry).
It declares kernels ``CL_KERNEL_LINKAGE __attribute__((noinline))`` (``codegen/markers.py``, the
contract; the prelude defines the macro as ``static`` unless it is defined) and repeats their
prototypes before the entry. ``compose_parts`` builds the translation units from those units, never
by reading the C: every part gets the prelude and a share of the kernels, balanced by size; part 0
also gets the rest. Each part defines the linkage as hidden visibility, so the kernels link across
parts while the ``.so`` exports exactly what the one-file build exports; kernels are noinline, so each
compiles to the same code either way. ``#line`` directives name the full source file with each
unit's line number in it, so a diagnostic from any part reads as the one-file build's would.

A source without units (an action, the export), units that do not tile the source, a small source,
or a one-core machine gets a single part: ``build_library`` then keeps its one compiler call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from caten_lab.codegen.markers import KERNEL_END, LINKAGE_MACRO, MAIN_UNITS, PRELUDE_UNIT, kernel_begin

_HIDDEN = f'#define {LINKAGE_MACRO} __attribute__((visibility("hidden")))'

MIN_SPLIT_LINES = 300  # kernel lines; below, the extra compiler process and link cost more than they save
MAX_PARTS = 8


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Unit:
    """One unit of the source: ``name`` (``PRELUDE_UNIT``, a kernel function, or one of ``MAIN_UNITS``),
    its ``text`` and the 1-based source line it starts on."""

    name: str
    text: str
    line: int

    @property
    def lines(self) -> int:
        return self.text.count("\n")

    @property
    def is_kernel(self) -> bool:
        return self.name != PRELUDE_UNIT and self.name not in MAIN_UNITS


def place_units(source: str, units: Sequence[tuple[str, str]]) -> list[Unit]:
    """``units`` (the renderer's (name, text) pairs, in file order) with their line in ``source``.

    [] unless they tile the source exactly: each text is whole lines found at or after the previous
    unit, the first unit is the prelude at line 1, and between units there is nothing but the
    renderer's marker lines and blank lines. Anything else builds as one file.
    """
    if not units or units[0][0] != PRELUDE_UNIT:
        return []
    markers = {"", KERNEL_END}
    out: list[Unit] = []
    pos, line = 0, 1
    for name, text in units:
        if not text.endswith("\n"):
            return []
        at = source.find(text, pos)
        if at < 0 or (at > 0 and source[at - 1] != "\n"):
            return []
        gap = source[pos:at].split("\n")[:-1]
        if any(g not in markers and g != kernel_begin(name) for g in gap):
            return []
        line += len(gap)
        out.append(Unit(name, text, line))
        line += text.count("\n")
        pos = at + len(text)
    if any(g not in markers for g in source[pos:].split("\n")):
        return []
    return out


def part_count(units: Sequence[Unit]) -> int:
    """How many translation units pay off: 1 unless the kernels are big and there are CPUs to spare."""
    kernels = [u for u in units if u.is_kernel]
    if sum(u.lines for u in kernels) < MIN_SPLIT_LINES:
        return 1
    return max(1, min(cpu_count(), len(kernels), MAX_PARTS))


def compose_parts(units: Sequence[Unit], parts: int, filename: str) -> list[str]:
    """The text of ``parts`` translation units (largest kernel first onto the least-loaded part).

    ``units`` come from :func:`place_units`; returns [] when there are fewer than two kernels to share.
    ``filename`` is the name ``#line`` gives every unit.
    """
    kernels = [k for k, u in enumerate(units) if u.is_kernel]
    parts = min(parts, len(kernels))
    if parts < 2:
        return []
    load = [0] * parts
    load[0] = sum(u.lines for u in units if not u.is_kernel and u.name != PRELUDE_UNIT)  # part 0 has the rest
    owner = [0] * len(units)  # the part of each unit; -1 for the prelude, in every part
    for k, u in enumerate(units):
        if u.name == PRELUDE_UNIT:
            owner[k] = -1
    for k in sorted(kernels, key=lambda k: -units[k].lines):
        p = min(range(parts), key=load.__getitem__)
        owner[k] = p
        load[p] += units[k].lines
    name = filename.replace("\\", "\\\\").replace('"', '\\"')
    out = []
    for p in range(parts):
        text = [_HIDDEN + "\n"]
        for k, u in enumerate(units):
            if owner[k] in (-1, p):
                text.append(f'#line {u.line} "{name}"\n')
                text.append(u.text)
        out.append("".join(text))
    return out


def compile_parts(cc: Sequence[str], flags: Sequence[str], parts: Sequence[str], out_path: str,
                  timeout: float, libs: Sequence[str] = ("-lm",)) -> tuple[int, str]:
    """Compile ``parts`` concurrently (``-c``) and link them into the shared library ``out_path``.

    Returns (exit status, compiler output): the failing parts' output when a part fails, else the
    link's. The parts and objects live in a temp dir next to ``out_path``, removed before returning.
    Raises OSError / subprocess.SubprocessError (e.g. a timeout) like ``subprocess.run``.
    """
    cflags = [f for f in flags if f != "-shared"]
    tmp = tempfile.mkdtemp(dir=Path(out_path).parent, prefix=".tmp_")
    procs: list[subprocess.Popen] = []
    try:
        objs = []
        for i, text in enumerate(parts):
            src = os.path.join(tmp, f"part{i}.c")
            with open(src, "w") as f:
                f.write(text)
            objs.append(src[:-2] + ".o")
            procs.append(subprocess.Popen([*cc, *cflags, "-c", "-o", objs[-1], src],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        deadline = time.monotonic() + timeout
        failed = []
        for p in procs:
            out, err = p.communicate(timeout=max(0.0, deadline - time.monotonic()))
            if p.returncode != 0:
                failed.append(err or out)
        if failed:
            return 1, "".join(failed)
        r = subprocess.run([*cc, *flags, "-o", out_path, *objs, *libs], capture_output=True, text=True,
                           timeout=max(1.0, deadline - time.monotonic()))
        return r.returncode, r.stderr or r.stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
