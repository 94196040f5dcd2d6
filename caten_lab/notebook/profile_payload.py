"""The Profile pane's data: where the cell's time went, and the per-kernel run profile with a roofline.

``cell_profile(trace, program=..., result=..., profile=...)`` is the payload's ``cell_profile`` field:

- ``timeline``: rows that partition the cell's wall time, from the moment the front-end sent the
  execute request (the Jupyter message header's date; without one, the compile's start) to the
  moment this payload is built: the cell's own Python and the tracing of its tensors, every pass,
  the rest of the compile (cache, toolchain), the C compiler, loading the library, the run, the
  ``--profile`` run, the one-off machine benchmark, and what is left (checks, results, payload).
  The front-end appends the last row (sending and drawing the Inspector), so the total it shows is
  the wall time from execute to the pane being drawn. A program compiled in an earlier cell (the
  ``%%caten`` cache) shows its passes as cached, with zero time in this cell.
- ``run``: with ``Program.profile`` rows (``%%caten --profile``), one point per kernel (calls, time,
  bytes, flops, intensity) against this machine's measured ceilings (:mod:`caten_lab.runtime.machine`).
"""

from __future__ import annotations

import datetime as _dt
import sys
import time
from collections.abc import Sequence
from typing import Any

from caten_lab.notebook.roofline import roofline

MAX_CLOCK_GAP_S = 3600.0  # a request older than this (or in the future) is another clock: not used


def request_epoch() -> float | None:
    """When the front-end sent the execute request being run (``time.time()`` scale), or None."""
    ipy_mod = sys.modules.get("IPython")
    if ipy_mod is None:
        return None
    ip = ipy_mod.get_ipython()
    kernel = getattr(ip, "kernel", None)
    get_parent = getattr(kernel, "get_parent", None)
    if get_parent is None:
        return None
    try:
        parent = get_parent("shell")
    except Exception:  # noqa: BLE001 - an older kernel: no parent to read
        return None
    date = ((parent or {}).get("header") or {}).get("date")
    if isinstance(date, str):
        try:
            date = _dt.datetime.fromisoformat(date.replace("Z", "+00:00"))
        except ValueError:
            return None
    if not isinstance(date, _dt.datetime):
        return None
    if date.tzinfo is None:
        date = date.replace(tzinfo=_dt.UTC)
    return date.timestamp()


def _row(phase: str, label: str, seconds: float, **extra: Any) -> dict[str, Any]:
    return {"phase": phase, "label": label, "seconds": max(0.0, float(seconds)), **extra}


def _pass_rows(trace: Any, cached: bool) -> list[dict[str, Any]]:
    return [
        _row(
            "pass",
            f"pass {rec.name}",
            0.0 if cached else float(getattr(rec, "wall_s", 0.0) or 0.0),
            pass_index=i,
            cached=cached,
        )
        for i, rec in enumerate(getattr(trace, "records", []) or [])
    ]


def timeline(
    trace: Any,
    program: Any,
    run_s: float | None,
    now: float,
    start: float | None,
    extra: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The rows between ``start`` (the request, or None) and ``now``; their sum is ``now - start``."""
    tm = dict(getattr(program, "timings", None) or {})
    cs, ce = tm.get("compile_start"), tm.get("compile_end")
    source = "request"
    if start is not None and not (0.0 <= now - start <= MAX_CLOCK_GAP_S):
        start = None
    # with the request's date: compiled in this cell if the compile began after it; without one, if no
    # payload has shown this compile yet (a program from the %%caten cache has been shown before)
    compiled_here = (
        cs is not None and ce is not None and (cs >= start if start is not None else "shown" not in tm)
    )
    if start is None:
        source = "compile" if compiled_here else "run"
        start = float(cs) if compiled_here else now - float(run_s or 0.0)
    rows: list[dict[str, Any]] = []
    if compiled_here:
        rows.append(_row("tracing", "cell Python and tracing (building the graph)", cs - start))
        passes = _pass_rows(trace, False)
        in_passes = sum(r["seconds"] for r in passes)
        cc_s, load_s = float(tm.get("cc_s", 0.0)), float(tm.get("load_s", 0.0))
        rows += passes
        rest = (ce - cs) - in_passes - cc_s - load_s
        rows.append(_row("compile", "compile: trace snapshots between passes, toolchain, checks", rest))
        rows.append(_row("cc", "C compiler", cc_s))
        rows.append(_row("load", "loading the library", load_s))
    else:
        rows += _pass_rows(trace, True)
    if run_s is not None:
        rows.append(_row("run", "run", run_s))
    ps, pe = tm.get("profile_start"), tm.get("profile_end")
    if ps is not None and pe is not None and ps >= start:
        rows.append(_row("profile", "profile run (--profile: every kernel timed)", pe - ps))
    rows += list(extra)
    left = (now - start) - sum(r["seconds"] for r in rows)
    label = (
        "checks, results and the Inspector payload"
        if compiled_here
        else "cell Python, tracing, checks and payload"
    )
    rows.append(_row("python", label, left))
    return {
        "rows": rows,
        "start": start,
        "end": now,
        "start_source": source,
        "total_s": sum(r["seconds"] for r in rows),
        "compiled_here": compiled_here,
    }


def _machine(note: list[str]) -> tuple[dict[str, Any] | None, float]:
    """The machine's ceilings and the seconds it took to get them (build + measure, or a file read)."""
    from caten_lab.errors import CatenError
    from caten_lab.runtime.machine import machine_ceilings

    t0 = time.perf_counter()
    try:
        return machine_ceilings(), time.perf_counter() - t0
    except (CatenError, OSError) as exc:
        note.append(f"no machine ceilings: {exc}")
        return None, time.perf_counter() - t0


def cell_profile(
    trace: Any,
    *,
    program: Any = None,
    result: dict[str, Any] | None = None,
    profile: Sequence[dict] | None = None,
    start: float | None = None,
) -> dict[str, Any]:
    """The ``cell_profile`` payload field (see the module doc). ``start``: the cell's start epoch
    (default: the Jupyter request's date)."""
    start = request_epoch() if start is None else start
    note: list[str] = []
    extra: list[dict[str, Any]] = []
    machine = None
    if profile:
        machine, took = _machine(note)
        if machine is None or not machine.get("cached"):
            extra.append(_row("machine", "machine benchmark (once per machine, then cached)", took))
    else:
        note.append("run with %%caten --profile for the per-kernel run profile and the roofline")
    run_s = (result or {}).get("run_s") if isinstance(result, dict) else None
    tl = timeline(trace, program, None if run_s is None else float(run_s), time.time(), start, extra)
    timings = getattr(program, "timings", None)
    if isinstance(timings, dict) and tl["compiled_here"]:
        timings["shown"] = tl["end"]
    run = roofline(profile or [], machine)
    run["machine"] = (
        {k: machine.get(k) for k in ("cpu", "toolchain", "threads", "bandwidth", "peak_flops", "cached")}
        if machine
        else None
    )
    run["profiled"] = bool(profile)
    return {"timeline": tl, "run": run, "note": " · ".join(note)}
