"""Compile one generated C file as several translation units at once, then link them.

The C compiler dominates a cold compile (GPT-2 small: ~0.1 s of Python, ~1.5-2 s of gcc on one
core), and almost all of that goes into the large kernel functions. ``codegen/render_c.py`` brackets
every kernel function with two whole marker lines (defined here, ``KERNEL_END`` and ``kernel_begin``; render_c imports them)::

    /* cl:kernel <function name> */
    ... the function ...
    /* cl:end */

declares kernels ``CL_KERNEL_LINKAGE __attribute__((noinline))`` (``CL_KERNEL_LINKAGE`` defaults to
``static``), and repeats their prototypes before the entry. ``split_source`` cuts the file on the
markers: every part gets the prelude (the text before the first kernel) and a share of the kernels,
balanced by size; part 0 also gets everything else (prototypes, trampolines, tables, entry points).
Each part defines the linkage as hidden visibility, so the kernels link across parts while the
``.so`` exports exactly what the one-file build exports; kernels are noinline, so each compiles to
the same code either way. ``#line`` directives name the full source file with its line numbers, so a
diagnostic from any part reads as the one-file build's would.

A source without markers (e.g. cached by an earlier version), a small one, or a one-core machine
gets a single part: ``build_library`` then keeps its one compiler call.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

# The contract with codegen/render_c.py, which imports these: marker lines around each kernel
# function, and the macro its signature starts with.
LINKAGE_MACRO = "CL_KERNEL_LINKAGE"
KERNEL_END = "/* cl:end */"


def kernel_begin(name: str) -> str:
    """The marker line before kernel function ``name``."""
    return f"/* cl:kernel {name} */"


_BEGIN = re.compile(re.escape(kernel_begin("@")).replace("@", r"(\w+)"))
_HIDDEN = f'#define {LINKAGE_MACRO} __attribute__((visibility("hidden")))'

MIN_SPLIT_LINES = 300  # kernel lines; below, the extra compiler process and link cost more than they save
MAX_PARTS = 8


def cpu_count() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's total)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def kernel_spans(lines: Sequence[str]) -> list[tuple[int, int]]:
    """0-based (begin marker, end marker) line of every kernel; [] when the markers are absent or unpaired."""
    spans: list[tuple[int, int]] = []
    start = -1
    for i, line in enumerate(lines):
        if _BEGIN.fullmatch(line):
            if start >= 0:
                return []
            start = i
        elif line == KERNEL_END:
            if start < 0:
                return []
            spans.append((start, i))
            start = -1
    return spans if start < 0 else []


def part_count(spans: Sequence[tuple[int, int]]) -> int:
    """How many translation units pay off: 1 unless the kernels are big and there are CPUs to spare."""
    kernel_lines = sum(e - b + 1 for b, e in spans)
    if kernel_lines < MIN_SPLIT_LINES:
        return 1
    return max(1, min(cpu_count(), len(spans), MAX_PARTS))


def split_source(source: str, parts: int, filename: str) -> list[str]:
    """``source`` as ``parts`` translation units (largest kernel first onto the least-loaded part).

    Returns ``[source]`` when it cannot be split. ``filename`` is the name ``#line`` gives every chunk.
    """
    lines = source.split("\n")
    spans = kernel_spans(lines)
    parts = min(parts, len(spans))
    if parts < 2:
        return [source]
    shared = spans[0][0]  # the prelude: in every part
    load = [0] * parts
    load[0] = len(lines) - shared - sum(e - b + 1 for b, e in spans)  # part 0 alone has the rest
    owner = [0] * len(spans)
    for k in sorted(range(len(spans)), key=lambda k: spans[k][0] - spans[k][1]):
        p = min(range(parts), key=load.__getitem__)
        owner[k] = p
        load[p] += spans[k][1] - spans[k][0] + 1
    name = filename.replace("\\", "\\\\").replace('"', '\\"')
    # (first line, end line, part or -1 for all) segments in file order
    segments = [(0, shared, -1)]
    pos = shared
    for k, (b, e) in enumerate(spans):
        if pos < b:
            segments.append((pos, b, 0))
        segments.append((b, e + 1, owner[k]))
        pos = e + 1
    segments.append((pos, len(lines), 0))
    out = []
    for p in range(parts):
        text = [_HIDDEN]
        for a, b, who in segments:
            if who in (-1, p) and a < b:
                text.append(f'#line {a + 1} "{name}"')
                text.extend(lines[a:b])
        out.append("\n".join(text))
    return out


def compile_parts(cc: Sequence[str], flags: Sequence[str], parts: Sequence[str], out_path: str,
                  timeout: float) -> tuple[int, str]:
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
        r = subprocess.run([*cc, *flags, "-o", out_path, *objs, "-lm"], capture_output=True, text=True,
                           timeout=max(1.0, deadline - time.monotonic()))
        return r.returncode, r.stderr or r.stdout
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        shutil.rmtree(tmp, ignore_errors=True)
