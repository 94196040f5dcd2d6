"""The Inspector widget: graph per pass and per rewrite, profile, C with provenance, results.

An anywidget whose front-end (extensions/src/inspector.js, bundled into static/inspector.js with
Graphviz-WASM inline) does all stepping and layout in the browser: the kernel only ships one JSON
document (:mod:`caten_lab.notebook.payload`) and mirrors the view state in traitlets, so Python code
can drive the view (``insp.pass_index = 3``) and tests can read it back.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from caten_lab.errors import CatenError
from caten_lab.notebook.c_highlight import c_lines_html
from caten_lab.notebook.payload import trace_payload
from caten_lab.notebook.profile_chart import profile_png
from caten_lab.notebook.sources import trace_and_program

STATIC = Path(__file__).parent / "static"
ALL_PANES = ("graph", "profile", "c", "result")
VIEWS = ("after", "before", "side", "diff")
FALLBACK_MAX_NODES = 120  # the static fallback draws the final graph up to this size (dot runs in the kernel)


class Inspector(anywidget.AnyWidget):
    """Step through a compile: ``Inspector(program_or_trace, result=None, panes=None, title="", profile=None)``.

    ``profile``: the rows of ``program.profile(inputs)``; codegen passes then show each kernel's time per call.
    """

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
    kernel = traitlets.Unicode("").tag(sync=True)  # the function shown by a codegen pass's kernel view
    kernel_line = traitlets.Int(-1).tag(sync=True)  # its selected listing line (1-based), -1: none
    play_interval_ms = traitlets.Int(700).tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)  # written by the front-end after each render
    profile_png = traitlets.Unicode("").tag(sync=True)  # drawn on request (the Profile tab asks for it)

    def __init__(
        self,
        source: Any = None,
        *,
        result: dict[str, Any] | None = None,
        panes: Any = None,
        title: str = "",
        payload: dict[str, Any] | None = None,
        static_fallback: bool = True,
        profile: list[dict] | None = None,
        **kwargs: Any,
    ) -> None:
        if payload is None:
            payload = (
                build_payload(source, result=result, title=title, profile=profile)
                if source is not None
                else {}
            )
        wanted = list(panes) if panes else list(ALL_PANES)
        bad = [p for p in wanted if p not in ALL_PANES]
        if bad:
            raise ValueError(f"unknown pane(s) {bad}; choose from {', '.join(ALL_PANES)}")
        super().__init__(data_json=json.dumps(payload, separators=(",", ":")), panes=wanted, **kwargs)
        self._payload = payload
        self._source = source if static_fallback else None
        self._title = title
        self.on_msg(self._on_front_end_msg)
        if payload.get("passes"):
            # the first pass that changed the graph (codegen passes, which change the kernel program, come later)
            first_changed = next(
                (i for i, p in enumerate(payload["passes"]) if p["changed"] and not p.get("kir")), 0
            )
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

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The widget, plus a static HTML report for front-ends without widgets (nbconvert, GitHub)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle  # anywidget returns (data, metadata)
        report = self._fallback_report()
        if isinstance(data, dict) and report is not None:
            data["text/html"] = report
        return bundle

    def _ipython_display_(self) -> None:
        """Two outputs: the static report, then the widget. JupyterLab renders a widget output with the
        widget renderer whatever else its bundle holds, so a reopened notebook (no widget model) would show
        "Error displaying widget: model not found"; the report as its own output stays readable there, and
        CSS hides whichever of the two is not the one that rendered (static_html.fallback_html)."""
        from IPython.display import display

        from caten_lab.notebook.static_html import fallback_html

        report = self._fallback_report()
        if report is not None:
            display(
                {"text/html": fallback_html(report), "text/plain": f"<caten_lab report: {self._title}>"},
                raw=True,
            )
        bundle = super()._repr_mimebundle_()
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        if data:
            if report is not None:  # where widgets cannot render (GitHub, nbconvert) this text stands in
                data = {
                    **data,
                    "text/plain": f"caten_lab Inspector ({self._title or 'compile'}): "
                    "the interactive view needs a running kernel; the static report is above",
                }
            display(data, metadata=metadata or None, raw=True)

    def _fallback_report(self) -> str | None:
        if self._source is None:
            return None
        from caten_lab.notebook.static_html import show

        with contextlib.suppress(Exception):  # a fallback must never break displaying the widget
            return show(
                self._source, title=self._title, max_nodes=FALLBACK_MAX_NODES, graphs="last", chart=False
            ).html
        return None

    def _on_front_end_msg(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if isinstance(content, dict) and content.get("type") == "need_profile_png":
            self.draw_profile()

    def draw_profile(self) -> str:
        """Render the matplotlib profile chart now (the front-end asks when the Profile tab opens)."""
        if not self.profile_png:
            self.profile_png = profile_png(self._payload.get("profile", {}).get("rows") or []) or ""
        return self.profile_png

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
            if not self.hide_unchanged or _interesting(passes[i]):
                return self.goto(i)
        return self

    def prev_pass(self) -> Inspector:
        passes = self._payload.get("passes", [])
        for i in range(self.pass_index - 1, -1, -1):
            if not self.hide_unchanged or _interesting(passes[i]):
                return self.goto(i)
        return self

    def select(self, node_id: int) -> Inspector:
        self.selected_node = int(node_id)
        return self

    def show_kernel(self, name: str, line: int = -1) -> Inspector:
        """In a codegen pass, show function ``name`` of the kernel program (and select listing ``line``)."""
        names = self.kernel_names
        if name not in names:
            raise CatenError(
                f"show_kernel: no function {name!r} in the kernel programs of this trace",
                hint=f"functions: {', '.join(names[:12])}{' ...' if len(names) > 12 else ''}"
                if names
                else "no pass of this trace ran on a kernel program (codegen passes record ctx.artifacts['kernel_ir'])",
            )
        if isinstance(line, bool) or not isinstance(line, int) or (line < 1 and line != -1):
            raise CatenError(
                f"show_kernel: line must be a listing line number >= 1 (or -1: none), not {line!r}"
            )
        self.kernel = name
        self.kernel_line = int(line)
        return self

    @property
    def kernel_names(self) -> list[str]:
        """Every function of the kernel programs the trace recorded, in first-seen order."""
        seen: dict[str, None] = {}
        for p in self._payload.get("passes", []):
            for f in (p.get("kir") or {}).get("functions", []):
                seen.setdefault(f["name"], None)
        return list(seen)


def _interesting(p: dict[str, Any]) -> bool:
    """Shown even when unchanged passes are hidden: it changed the graph, failed, or produced artifacts."""
    return bool(p["changed"] or p["error"] or p.get("artifacts"))


def build_payload(
    source: Any,
    *,
    result: dict[str, Any] | None = None,
    title: str = "",
    profile_chart: bool = False,
    highlight_c: bool = False,
    profile: list[dict] | None = None,
) -> dict[str, Any]:
    """The Inspector's JSON document for a trace/program.

    The matplotlib chart and the Pygments-highlighted C are optional: the widget asks for the chart
    when its Profile tab opens and highlights C in the browser, keeping both off the kernel's path.
    """
    trace, program = trace_and_program(source)
    rows = trace.table() if hasattr(trace, "table") else []
    c_source = getattr(program, "c_source", None) if program is not None else None
    if c_source is None and highlight_c:
        for rec in reversed(list(trace.records)):
            if "c_source" in (getattr(rec, "artifacts", None) or {}):
                c_source = rec.artifacts["c_source"]
                break
    return trace_payload(
        trace,
        program=program,
        result=result,
        profile_png=profile_png(rows) if profile_chart else None,
        c_lines_html=c_lines_html(c_source) if (highlight_c and c_source) else None,
        title=title,
        profile=profile,
    )
