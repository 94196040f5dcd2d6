"""C for an action (and every action it calls): its kernel-IR program through the one C renderer.

The lowering is :mod:`caten_lab.workflow.to_kir`; the C comes from :mod:`caten_lab.codegen.render`
after the runtime header and the action helpers (``codegen/c/action.h``). ``#line`` directives,
built from the statements' origins, point C diagnostics at the user's Python lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from caten_lab.codegen import kir as K
from caten_lab.codegen.kir_check import validate
from caten_lab.codegen.render import PRELUDE, Writer, c_file, render_functions, signature
from caten_lab.workflow.to_kir import LoweredActions, entry_signature, lower_actions

ACTION_HEADER = "action.h"


@dataclass
class RenderedActions:
    """C source of an action and its callees; ``entry`` is the exported function's name, ``cdef`` its
    prototype (for cffi), ``functions`` maps action names to C function names, ``program`` is the
    kernel-IR program it was rendered from, ``line_origins`` the origin of each line of ``source``."""

    source: str
    entry: str
    cdef: str
    functions: dict[str, str] = field(default_factory=dict)
    program: K.Program | None = None
    line_origins: list[K.Origin] = field(default_factory=list)
    line_paths: list[tuple[str, tuple] | None] = field(default_factory=list)
    externs: tuple[str, ...] = ()  # functions called but defined elsewhere (host_<name>: the export glue)


def render_lowered(lowered: LoweredActions, check: bool = False) -> RenderedActions:
    """Render a lowered action tree: prelude, prototypes of the externs, the functions (``check``:
    run the kernel-IR validator first, as the tests do)."""
    program = lowered.program
    if check:
        validate(program, helpers=frozenset(f.name for f in lowered.externs))
    w = Writer()
    for line in (PRELUDE + c_file(ACTION_HEADER)).rstrip("\n").split("\n"):
        w.emit(line)
    for f in lowered.externs:  # defined by the export glue (host actions)
        w.emit(signature(f) + ";", f.origin)
    render_functions(program.functions, w, prelude=False)
    lines, origins, paths = _line_directives(w)
    entry = program.function(lowered.entry)
    return RenderedActions("\n".join(lines) + "\n", lowered.entry, signature(entry) + ";", lowered.functions,
                           program, origins, paths, tuple(f.name for f in lowered.externs))


def _line_directives(w: Writer) -> tuple[list[str], list[K.Origin], list[tuple[str, tuple] | None]]:
    """The writer's lines with a ``#line N "file"`` before each statement whose Python line changes
    (the closing lines of a statement, ``}`` and ``} else {``, get none)."""
    lines: list[str] = []
    origins: list[K.Origin] = []
    paths: list[tuple[str, tuple] | None] = []
    last = None
    seen: set[tuple[str, tuple]] = set()
    for text, o, p in zip(w.lines, w.origins, w.paths):
        first = p is None or p not in seen
        if p is not None:
            seen.add(p)
        if first and o.line and o.file and (o.file, o.line) != last:
            file = o.file.replace("\\", "\\\\").replace('"', '\\"')
            lines.append(f'#line {o.line} "{file}"')
            origins.append(o)
            paths.append(None)
            last = (o.file, o.line)
        lines.append(text)
        origins.append(o)
        paths.append(p)
    return lines, origins, paths


def render_c(act: object, safety: int = 1, check: bool = False) -> RenderedActions:
    """C for ``act`` and all actions reachable through calls; the entry is exported (non-static)."""
    return render_lowered(lower_actions(act, safety=safety), check=check)


def entry_cdef(act: object) -> tuple[str, str]:
    """``(entry name, its C prototype)`` of ``act``, the same as ``render_c(act).entry/.cdef``, without
    lowering or rendering any body (for glue code that calls the entry)."""
    f = entry_signature(act)
    return f.name, signature(f) + ";"
