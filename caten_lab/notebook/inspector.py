"""The Inspector widget: graph per pass and per rewrite, profile, C with provenance, results.

An anywidget whose front-end (extensions/src/inspector.js, bundled into static/inspector.js with
Graphviz-WASM inline) does all stepping and layout in the browser: the kernel only ships one JSON
document (:mod:`caten_lab.notebook.payload`) and mirrors the view state in traitlets, so Python code
can drive the view (``insp.pass_index = 3``) and tests can read it back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from caten_lab.notebook.c_highlight import c_lines_html
from caten_lab.notebook.payload import trace_payload
from caten_lab.notebook.profile_chart import profile_png
from caten_lab.notebook.sources import trace_and_program

STATIC = Path(__file__).parent / "static"
ALL_PANES = ("graph", "profile", "c", "result")
VIEWS = ("after", "before", "side", "diff")


class Inspector(anywidget.AnyWidget):
    """Step through a compile: ``Inspector(program_or_trace, result=None, panes=None, title="")``."""

    _esm = STATIC / "inspector.js"
    _css = STATIC / "inspector.css"

    data_json = traitlets.Unicode("").tag(sync=True)
    panes = traitlets.List(traitlets.Unicode(), default_value=list(ALL_PANES)).tag(sync=True)
    pass_index = traitlets.Int(0).tag(sync=True)
    rewrite_index = traitlets.Int(-1).tag(sync=True)  # -1: the whole pass; k >= 1: after the k-th rewrite
    view = traitlets.Unicode("after").tag(sync=True)
    hide_unchanged = traitlets.Bool(False).tag(sync=True)
    collapse_kernels = traitlets.Bool(False).tag(sync=True)
    focus_hops = traitlets.Int(0).tag(sync=True)
    node_cap = traitlets.Int(400).tag(sync=True)
    selected_node = traitlets.Int(-1).tag(sync=True)
    play_interval_ms = traitlets.Int(700).tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)  # written by the front-end after each render

    def __init__(self, source: Any = None, *, result: dict[str, Any] | None = None, panes: Any = None,
                 title: str = "", payload: dict[str, Any] | None = None, **kwargs: Any) -> None:
        if payload is None:
            payload = build_payload(source, result=result, title=title) if source is not None else {}
        wanted = list(panes) if panes else list(ALL_PANES)
        bad = [p for p in wanted if p not in ALL_PANES]
        if bad:
            raise ValueError(f"unknown pane(s) {bad}; choose from {', '.join(ALL_PANES)}")
        super().__init__(data_json=json.dumps(payload, separators=(",", ":")), panes=wanted, **kwargs)
        self._payload = payload
        if payload.get("passes"):
            first_changed = next((i for i, p in enumerate(payload["passes"]) if p["changed"]), 0)
            self.pass_index = first_changed

    @traitlets.validate("view")
    def _check_view(self, proposal: Any) -> str:
        if proposal["value"] not in VIEWS:
            raise traitlets.TraitError(f"view must be one of {', '.join(VIEWS)}")
        return proposal["value"]

    @traitlets.validate("pass_index")
    def _check_pass(self, proposal: Any) -> int:
        n = len(getattr(self, "_payload", {}).get("passes", []) or []) or 1
        return max(0, min(int(proposal["value"]), n - 1))

    # ---- scripting the view from Python ----------------------------------------------------
    @property
    def payload(self) -> dict[str, Any]:
        return self._payload

    @property
    def pass_names(self) -> list[str]:
        return [p["name"] for p in self._payload.get("passes", [])]

    def goto(self, pass_: int | str, rewrite: int = -1) -> Inspector:
        """Show pass ``pass_`` (index or name), after its first ``rewrite`` rewrites (-1: the whole pass)."""
        i = self.pass_names.index(pass_) if isinstance(pass_, str) else int(pass_)
        self.pass_index = i
        self.rewrite_index = rewrite
        return self

    def next_pass(self) -> Inspector:
        passes = self._payload.get("passes", [])
        for i in range(self.pass_index + 1, len(passes)):
            if not self.hide_unchanged or passes[i]["changed"] or passes[i]["error"]:
                return self.goto(i)
        return self

    def prev_pass(self) -> Inspector:
        passes = self._payload.get("passes", [])
        for i in range(self.pass_index - 1, -1, -1):
            if not self.hide_unchanged or passes[i]["changed"] or passes[i]["error"]:
                return self.goto(i)
        return self

    def select(self, node_id: int) -> Inspector:
        self.selected_node = int(node_id)
        return self


def build_payload(source: Any, *, result: dict[str, Any] | None = None, title: str = "") -> dict[str, Any]:
    """The Inspector's JSON document for a trace/program (profile chart and highlighted C included)."""
    trace, program = trace_and_program(source)
    rows = trace.table() if hasattr(trace, "table") else []
    c_source = getattr(program, "c_source", None) if program is not None else None
    if c_source is None:
        for rec in reversed(list(trace.records)):
            if "c_source" in (getattr(rec, "artifacts", None) or {}):
                c_source = rec.artifacts["c_source"]
                break
    return trace_payload(
        trace,
        program=program,
        result=result,
        profile_png=profile_png(rows),
        c_lines_html=c_lines_html(c_source) if c_source else None,
        title=title,
    )
