"""The Inspector's kernel-IR views: per codegen pass, its kernels and their listings step by step.

For every record of a trace that ran on a kernel program (``PassRecord.is_codegen``), the payload
gets a ``kir`` block: one row per function (name, loop-nest summary, statement count, time per call
from ``Program.profile`` rows when the program has run, whether the pass changed it), the listing of
each function before and after the pass with the changed lines marked, and one step per recorded
kernel-IR rewrite (the function it touched, its listing before and after, the lines the rewrite
replaced and produced). Listings are interned ``states`` (a function object is listed once however
many passes share it); their lines are interned strings, each line carrying the AIR nodes of its
statement (its origin) and, for the program that was rendered, the C lines it became.

Changed lines are found by identity: the IR is immutable, so a statement a pass did not touch is the
same object before and after. A statement the rewrite produced is changed (even one it only moved,
e.g. hoisted); otherwise a leaf statement when it is a new object, and a loop or if header when its
printed line is new (a parent rebuilt around a changed child is not). O(size of the function).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from caten_lab.codegen.kir import BODIES, For, Function, Program, function_listing
from caten_lab.codegen.kir_rewrite import apply_one
from caten_lab.codegen.kir_walk import trip_count, walk, walk_paths

MAX_KERNEL_STEPS = 5_000  # beyond this a codegen pass's rewrites are counted, not steppable
MAX_STEP_LINES = 1_000_000  # listing lines all steps of one pass may add (a rewrite in a huge function)
CLOSERS = frozenset({"ENDFOR", "ENDIF", "ENDWHILE", "ELSE"})


def path_key(path: tuple) -> str:
    """A statement path as text: ``body.3/then.0``."""
    return "/".join(f"{f}.{i}" for f, i in path)


class KernelTables:
    """Interned lines, origins and function listings shared by every pass of one payload."""

    def __init__(self, c_paths: dict[tuple[str, str], list[int]] | None = None, rendered: Program | None = None):
        self.lines: list[str] = []
        self.origins: list[list[int]] = []
        self.states: list[dict[str, Any]] = []
        self._line: dict[str, int] = {}
        self._origin: dict[tuple[int, ...], int] = {}
        self._state: dict[int, int] = {}
        self._alive: list[Function] = []  # keeps id() keys valid
        self._stmts: dict[int, dict[str, Any]] = {}  # state index -> {path key: statement}
        self._c_paths = c_paths or {}
        self._rendered = {id(f) for f in rendered.functions} if rendered is not None else set()

    def _intern_line(self, text: str) -> int:
        i = self._line.get(text)
        if i is None:
            i = self._line[text] = len(self.lines)
            self.lines.append(text)
        return i

    def _intern_origin(self, nodes: tuple[int, ...]) -> int:
        if not nodes:
            return -1
        i = self._origin.get(nodes)
        if i is None:
            i = self._origin[nodes] = len(self.origins)
            self.origins.append(list(nodes))
        return i

    def state(self, f: Function) -> int:
        """The index of ``f``'s listing (built once per function object)."""
        i = self._state.get(id(f))
        if i is not None:
            return i
        listing = function_listing(f)
        stmts = {path_key(p): s for p, s in walk_paths(f.body)}
        lines, origins, paths, c_lines = [], [], [], []
        linked = id(f) in self._rendered
        for text, at in zip(listing.lines, listing.paths):
            lines.append(self._intern_line(text))
            if at is None:  # FUNCTION / ENDFUNCTION: the function itself (its C signature and closing brace)
                origins.append(self._intern_origin(tuple(f.origin.nodes)))
                paths.append("")
                c_lines.append(self._c_paths.get((f.name, ""), []) if linked and text.startswith("FUNCTION") else [])
                continue
            key = path_key(at[1])
            s = stmts.get(key)
            origins.append(self._intern_origin(tuple(s.origin.nodes)) if s is not None else -1)
            paths.append(key)
            c_lines.append(self._c_paths.get((f.name, key), []) if linked and text.strip() not in CLOSERS else [])
        i = len(self.states)
        self.states.append({"fn": f.name, "lines": lines, "origins": origins, "paths": paths,
                            "c": c_lines if linked else None})
        self._state[id(f)] = i
        self._alive.append(f)
        self._stmts[i] = stmts
        return i

    def changed_lines(self, old: Function | None, new: Function, produced: Iterable[Any] = ()) -> tuple[list[int], list[int]]:
        """(lines of ``old`` that are gone, lines of ``new`` that are new), 1-based, in their listings."""
        si_new = self.state(new)
        if old is None:
            return [], [k + 1 for k, p in enumerate(self.states[si_new]["paths"]) if p]
        si_old = self.state(old)
        old_ids = {id(s) for s in walk(old.body)}
        new_ids = {id(s) for s in walk(new.body)}
        made = {id(s) for s in produced}
        return (self._marks(si_old, new_ids, set(), self._texts(si_new)),
                self._marks(si_new, old_ids, made, self._texts(si_old)))

    def _texts(self, si: int) -> set[int]:
        return set(self.states[si]["lines"])

    def _marks(self, si: int, other_ids: set[int], made: set[int], other_texts: set[int]) -> list[int]:
        st = self.states[si]
        stmts = self._stmts[si]
        out = []
        for k, (li, key) in enumerate(zip(st["lines"], st["paths"])):
            if not key:
                continue
            s = stmts[key]
            text = self.lines[li].strip()
            if type(s) in BODIES:  # a header: produced by the rewrite, or new text (not a rebuilt parent)
                if text not in CLOSERS and (id(s) in made or (li not in other_texts and id(s) not in other_ids)):
                    out.append(k + 1)
            elif id(s) not in other_ids or id(s) in made:
                out.append(k + 1)
        return out


def loop_nest(body: Sequence[Any], limit: int = 90) -> str:
    """A one-line summary of the loops of a body: ``i:4 par › j:8 unroll8; k:16 simd+``."""
    parts: list[str] = []
    for s in body:
        if isinstance(s, For):
            n = trip_count(s)
            tags = [] if s.role in ("loop", "") else [s.role]
            if s.parallel is not None:
                tags.append("par" + (f"{s.parallel.collapse}" if s.parallel.collapse > 1 else ""))
            if s.simd:
                tags.append("simd" + ("+" if s.reduction else ""))
            if s.unroll:
                tags.append(f"unroll{s.unroll}")
            head = f"{s.var}:{n if n is not None else '?'}" + (f" {' '.join(tags)}" if tags else "")
            inner = loop_nest(s.body, limit)
            parts.append(head + (f" › {inner}" if inner else ""))
        else:
            for fld in BODIES.get(type(s), ()):
                inner = loop_nest(getattr(s, fld), limit)
                if inner:
                    parts.append(inner)
    text = "; ".join(parts)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _times(profile: Sequence[dict] | None) -> dict[str, tuple[float, int]]:
    """Kernel name and function name -> (seconds per run, calls per run) from Program.profile rows."""
    out: dict[str, tuple[float, int]] = {}
    for r in profile or ():
        for key in {str(r.get("kernel", "")), str(r.get("function", ""))} - {""}:
            t, c = out.get(key, (0.0, 0))
            out[key] = (t + float(r.get("seconds", 0.0) or 0.0), c + 1)
    return out


def _function_time(f: Function, times: dict[str, tuple[float, int]]) -> tuple[float, int] | None:
    names = [str(n) for n in (f.get("kernel_names") or ())]
    hits = [times[n] for n in names if n in times]
    if not hits:
        return times.get(f.name)
    return sum(t for t, _ in hits), sum(c for _, c in hits)


def kernel_pass_view(rec: Any, tables: KernelTables, profile: Sequence[dict] | None = None) -> dict[str, Any] | None:
    """The ``kir`` block of one pass record (None for a pass that never saw a kernel program)."""
    if not getattr(rec, "is_codegen", False):
        return None
    before: Program | None = rec.kernel_before
    after: Program | None = rec.kernel_after if rec.kernel_after is not None else before
    times = _times(profile)
    old = {f.name: f for f in before.functions} if before is not None else {}
    rewrites = list(rec.kernel_rewrites)
    produced_by: dict[str, list[Any]] = {}
    for rw in rewrites:
        produced_by.setdefault(rw.function, []).extend(rw.after)
    fns = []
    for f in after.functions if after is not None else ():
        o = old.get(f.name)
        hl_b, hl_a = ([], []) if o is f else tables.changed_lines(o, f, produced_by.get(f.name, ()))
        t = _function_time(f, times)
        fns.append({
            "name": f.name,
            "kernels": [str(n) for n in (f.get("kernel_names") or ())],
            "loops": loop_nest(f.body),
            "stmts": sum(1 for _ in walk(f.body)),
            "changed": o is not f and (o is None or o != f),
            "before": tables.state(o) if o is not None else None,
            "after": tables.state(f),
            "hl_before": hl_b,
            "hl_after": hl_a,
            "seconds": None if t is None else t[0],
            "calls": None if t is None else t[1],
        })
    removed = [name for name in old if after is None or all(f.name != name for f in after.functions)]
    steps, note = _steps(before, after, rewrites, tables)
    return {"functions": fns, "removed": removed, "steps": steps, "steps_note": note,
            "n_steps": len(rewrites), "profiled": bool(times)}


def _steps(before: Program | None, after: Program | None, rewrites: list[Any],
           tables: KernelTables) -> tuple[list[dict], str]:
    if not rewrites:
        return [], ""
    if before is None:
        return [], "the pass made the kernel program: its rewrites cannot be replayed"
    if len(rewrites) > MAX_KERNEL_STEPS:
        return [], f"{len(rewrites)} rewrites (too many to step)"
    cur = {f.name: f for f in before.functions}
    final = {f.name: f for f in after.functions} if after is not None else {}
    last = {rw.function: k for k, rw in enumerate(rewrites)}
    steps = []
    budget = MAX_STEP_LINES
    for k, rw in enumerate(rewrites):
        f = cur.get(rw.function)
        if budget <= 0:
            return steps, f"rewrites {k + 1}..{len(rewrites)} not steppable: their listings exceed {MAX_STEP_LINES} lines"
        try:
            if f is None:
                raise KeyError(f"no function {rw.function!r}")
            new = apply_one(Program((f,)), rw).functions[0]
        except (ValueError, KeyError, IndexError, AttributeError) as exc:
            return steps, f"rewrite {k + 1} ({rw.rule}) does not replay: {exc}"
        if last[rw.function] == k and final.get(rw.function) == new:
            new = final[rw.function]  # the recorded object itself: its listing links to the rendered C
        hl_b, hl_a = tables.changed_lines(f, new, rw.after)
        budget -= len(tables.states[tables.state(new)]["lines"])
        steps.append({"rule": rw.rule, "loc": getattr(rw, "location", "") or "", "fn": rw.function,
                      "before": tables.state(f), "after": tables.state(new), "hl_before": hl_b, "hl_after": hl_a})
        cur[rw.function] = new
    return steps, ""


def c_path_index(line_paths: Sequence[Any] | None) -> dict[tuple[str, str], list[int]]:
    """(function, statement path key) -> the 1-based C lines rendered from it (renderer's ``line_paths``)."""
    out: dict[tuple[str, str], list[int]] = {}
    for ln, at in enumerate(line_paths or (), start=1):
        if at:
            fn, path = at
            out.setdefault((str(fn), path_key(tuple(path))), []).append(ln)
    return out
