"""``caten_lab.show(trace_or_program)``: a static HTML report that needs no widget front-end.

It renders in nbconvert, on GitHub and in any HTML viewer: the per-pass profile (chart + table),
one collapsible section per pass with its graph (SVG pre-rendered by Graphviz ``dot`` when it is
installed, the DOT text otherwise) coloured by what the pass added or changed, the generated C
coloured by kernel, and the outputs. ``save_svg`` exports one graph as an SVG file (needs ``dot``).
"""

from __future__ import annotations

import html
import shutil
import subprocess
from pathlib import Path
from typing import Any

from caten_lab.air.graph import Graph
from caten_lab.air.serialize import to_dot
from caten_lab.errors import CatenError
from caten_lab.notebook.c_highlight import c_lines_html
from caten_lab.notebook.profile_chart import profile_png
from caten_lab.notebook.sources import trace_and_program
from caten_lab.passes.fusion import fusion_summary

ADDED = "#86efac"
CHANGED = "#fdba74"
KERNEL_COLORS = ["#fde2e4", "#e2ece9", "#dfe7fd", "#fff1c1", "#e8dff5", "#d8f3dc", "#ffe5d9", "#cddafd"]
DOT_TIMEOUT_S = 30


def dot_available() -> bool:
    return shutil.which("dot") is not None


def render_svg(dot_text: str, *, timeout: float = DOT_TIMEOUT_S) -> str:
    """DOT -> SVG text with the Graphviz binary (CatenError when it is missing, fails or times out)."""
    exe = shutil.which("dot")
    if exe is None:
        raise CatenError(
            "Graphviz `dot` is not installed, so no SVG can be rendered here",
            hint="apt-get install graphviz (the Inspector widget lays graphs out in the browser without it)",
        )
    try:
        proc = subprocess.run([exe, "-Tsvg"], input=dot_text, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise CatenError(
            f"dot took more than {timeout:.0f} s on this graph",
            hint="show a smaller graph (max_nodes) or collapse it",
        ) from None
    if proc.returncode != 0:
        raise CatenError(f"dot failed: {proc.stderr.strip()[:500]}")
    svg = proc.stdout
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


def diff_highlight(before: Graph | None, after: Graph) -> dict[int, str]:
    """Node id -> colour: added nodes green, nodes whose operands changed orange."""
    if before is None:
        return {}
    old = {n.id: n for n in before.nodes}
    marks: dict[int, str] = {}
    for n in after.nodes:
        b = old.get(n.id)
        if b is None:
            marks[n.id] = ADDED
        elif b.op != n.op or list(b.reads) != list(n.reads) or b.attrs != n.attrs:
            marks[n.id] = CHANGED
    return marks


class StaticReport:
    """The HTML of one report; displays itself in Jupyter (``_repr_html_``) and can be saved."""

    def __init__(self, html_text: str, trace: Any) -> None:
        self.html = html_text
        self.trace = trace

    def _repr_html_(self) -> str:
        return self.html

    def save(self, path: str | Path) -> Path:
        p = Path(path)
        p.write_text(
            f"<!doctype html><meta charset='utf-8'><title>caten_lab report</title>\n{self.html}",
            encoding="utf-8",
        )
        return p

    def save_svg(self, path: str | Path, pass_: int | str = -1, *, which: str = "after") -> Path:
        """Write the graph after (or ``which="before"``) a pass as an SVG file (needs Graphviz ``dot``)."""
        rec = self.trace[pass_] if isinstance(pass_, str) else self.trace.records[pass_]
        g = rec.before if which == "before" else (rec.after if rec.after is not None else rec.before)
        p = Path(path)
        p.write_text(
            render_svg(
                to_dot(
                    g, name=rec.name, highlight=diff_highlight(rec.before, g) if which == "after" else None
                )
            ),
            encoding="utf-8",
        )
        return p


def show(
    obj: Any,
    *,
    title: str = "",
    max_nodes: int = 300,
    svg: bool | None = None,
    graphs: str = "changed",
    chart: bool = True,
) -> StaticReport:
    """A static report of a PassTrace / Program / %%caten result.

    ``svg=None``: SVG when ``dot`` exists, else DOT text. ``graphs``: draw the graph of every pass that
    changed it ("changed"), only the final one ("last") or none ("none"). ``chart``: the matplotlib profile.
    """
    if graphs not in ("changed", "last", "none"):
        raise CatenError(f"show(graphs={graphs!r}): use 'changed', 'last' or 'none'")
    trace, program = trace_and_program(obj)
    use_svg = dot_available() if svg is None else svg
    esc = html.escape
    parts = ["<div class='caten-report' style='font-family:system-ui,sans-serif;font-size:13px'>"]
    parts.append(f"<h3 style='margin:4px 0'>{esc(title or 'caten_lab compile report')}</h3>")
    rows = trace.table() if hasattr(trace, "table") else []
    total = float(getattr(trace, "total_s", 0.0) or 0.0)
    parts.append(
        f"<p>{len(trace.records)} passes, {total * 1e3:.2f} ms in passes"
        + (f"; backend {esc(str(getattr(program, 'backend', '')))}" if program is not None else "")
        + "</p>"
    )
    png = profile_png(rows) if chart else None
    if png:
        parts.append(f"<img alt='time per pass' src='data:image/png;base64,{png}'/>")
    parts.append(_profile_table(rows))
    first_changed = True
    for i, rec in enumerate(trace.records):
        after = rec.after if rec.after is not None else rec.before
        open_attr = " open" if rec.changed and first_changed else ""
        first_changed = first_changed and not rec.changed
        status = (
            "FAILED: " + esc(rec.error)
            if getattr(rec, "error", None)
            else ("changed" if rec.changed else "no change")
        )
        parts.append(
            f"<details{open_attr}><summary><code>{i}. {esc(rec.name)}</code> · {rec.wall_s * 1e3:.2f} ms · "
            f"{rec.nodes_before}→{rec.nodes_after} nodes · {len(rec.rewrites or [])} rewrites · {status}"
            f"</summary><div style='color:#6b7280'>{esc(rec.description or '')}</div>"
        )
        last = i == len(trace.records) - 1
        kernel = bool(getattr(rec, "is_codegen", False) and getattr(rec, "kernel_changed", False))
        if kernel:  # a codegen pass changed the kernel program: its listing, not the (same) graph again
            parts.append(_kernel_html(rec))
        fusion = (getattr(rec, "artifacts", None) or {}).get("fusion")
        if isinstance(fusion, list) and fusion:  # the scheduler's decisions: every kernel root and why
            parts.append(f"<pre style='max-height:240px;overflow:auto'>{esc(fusion_summary(fusion))}</pre>")
        if (graphs == "changed" and ((rec.changed and not kernel) or last)) or (graphs == "last" and last):
            parts.append(_graph_html(rec, after, use_svg, max_nodes))
        parts.append("</details>")
    c_source = getattr(program, "c_source", None) if program is not None else None
    if c_source:
        parts.append(_c_html(c_source, getattr(program, "kernel_lines", None) or {}, program))
    outputs = getattr(obj, "outputs", None)
    if outputs is not None:
        from caten_lab.notebook.summary import output_names, summarize_array

        names = output_names(getattr(obj, "graph", None), len(outputs))  # the names the Inspector shows
        parts.append("<h4>Outputs</h4><table>")
        for name, o in zip(names, outputs):
            s = summarize_array(name, o)
            parts.append(
                f"<tr><td><code>{esc(s['name'])}</code></td><td>{esc(s['shape'])}</td><td>{esc(s['dtype'])}</td>"
                f"<td><code>{esc(s['head'])}</code></td></tr>"
            )
        parts.append("</table>")
    parts.append("</div>")
    return StaticReport("\n".join(parts), trace)


def _profile_table(rows: list[dict[str, Any]]) -> str:
    head = "".join(
        f"<th style='text-align:left;padding:0 8px'>{h}</th>"
        for h in ("pass", "time", "share", "memory", "nodes before", "nodes after", "rewrites")
    )
    body = []
    for r in rows:
        body.append(
            "<tr>"
            + "".join(
                f"<td style='padding:0 8px'><code>{html.escape(str(v))}</code></td>"
                for v in (
                    r["pass"],
                    f"{r['time_s'] * 1e3:.3f} ms",
                    f"{100 * r['share']:.1f}%",
                    f"{r['mem_bytes']} B",
                    r["nodes_before"],
                    r["nodes_after"],
                    r["rewrites"],
                )
            )
            + "</tr>"
        )
    return f"<table style='border-collapse:collapse'><tr>{head}</tr>{''.join(body)}</table>"


MAX_KERNEL_FUNCTIONS = 12  # functions listed per codegen pass in the static report


def _kernel_html(rec: Any) -> str:
    """The functions a codegen pass changed, as kernel-IR listings after the pass."""
    before = {f.name: f for f in rec.kernel_before.functions} if rec.kernel_before is not None else {}
    after = rec.kernel_after if rec.kernel_after is not None else rec.kernel_before
    changed = [f for f in after.functions if before.get(f.name) != f]
    n_rw = len(getattr(rec, "kernel_rewrites", []) or [])
    out = [
        f"<p>kernel IR: {len(changed)} of {len(after.functions)} functions changed, {n_rw} kernel-IR rewrites"
        + (f" (the first {MAX_KERNEL_FUNCTIONS} shown)" if len(changed) > MAX_KERNEL_FUNCTIONS else "")
        + "</p>"
    ]
    for f in changed[:MAX_KERNEL_FUNCTIONS]:
        out.append(
            f"<pre style='max-height:300px;overflow:auto;background:#f9fafb'>{html.escape(after.text(f.name))}</pre>"
        )
    return "".join(out)


def _graph_html(rec: Any, after: Graph, use_svg: bool, max_nodes: int) -> str:
    if len(after) > max_nodes:
        return (
            f"<p><i>{len(after)} nodes: too many for a static drawing (raise max_nodes, or use the Inspector widget, "
            f"which collapses kernels and focuses on a node).</i></p>"
        )
    dot_text = to_dot(after, name=rec.name, highlight=diff_highlight(rec.before, after))
    if use_svg:
        try:
            return f"<div style='overflow:auto;max-height:640px'>{render_svg(dot_text)}</div>"
        except CatenError as exc:
            return f"<p><i>{html.escape(exc.message)}</i></p><pre>{html.escape(dot_text)}</pre>"
    return (
        "<p><i>Graphviz <code>dot</code> is not installed: the graph as DOT text "
        "(paste it into any Graphviz viewer)</i></p>"
        f"<pre style='max-height:400px;overflow:auto'>{html.escape(dot_text)}</pre>"
    )


def _c_html(c_source: str, kernel_lines: dict[str, Any], program: Any) -> str:
    line_kernel: dict[int, int] = {}
    for ki, (_name, (a, b)) in enumerate(kernel_lines.items()):
        for ln in range(int(a), int(b) + 1):
            line_kernel[ln] = ki
    flags = getattr(program, "flags", None)
    flags_s = " ".join(flags) if isinstance(flags, (list, tuple)) else str(flags or "")
    rows = []
    for i, lh in enumerate(c_lines_html(c_source), start=1):
        ki = line_kernel.get(i)
        bg = f"background:{KERNEL_COLORS[ki % len(KERNEL_COLORS)]};" if ki is not None else ""
        rows.append(
            f"<div style='{bg}white-space:pre'><span style='color:#9ca3af;display:inline-block;width:40px;"
            f"text-align:right;margin-right:8px'>{i}</span>{lh}</div>"
        )
    style = (
        "<style>.caten-c .k,.caten-c .kt{color:#7c3aed;font-weight:600}.caten-c .c1,.caten-c .cm{color:#6b7280}"
        ".caten-c .cp{color:#b45309}.caten-c .mi,.caten-c .mf{color:#0369a1}.caten-c .nf{color:#1d4ed8}</style>"
    )
    return (
        f"<details><summary>C source ({c_source.count(chr(10)) + 1} lines) · flags <code>{html.escape(flags_s)}</code></summary>"
        f"{style}<div class='caten-c' style='font-family:monospace;font-size:12px;max-height:500px;overflow:auto'>"
        f"{''.join(rows)}</div></details>"
    )


# The saved-notebook fallback: the static report is its own output, just before the widget's. Where the
# widget renders (a live kernel, or widget state saved in the notebook) the report hides; where it cannot
# (a reopened notebook: "model not found"; nbconvert HTML, which shows the widget's text/plain) the widget's
# output hides and the report stays. Both rules are plain CSS over JupyterLab's (and nbconvert's lab
# template's) output markup, so they work without a kernel and in untrusted views that keep styles.
FALLBACK_CLASS = "caten-static-fallback"
LIVE_CLASS = "caten-inspector"  # the root element the Inspector's front-end draws
_FALLBACK_CSS = (
    f".jp-OutputArea-child:has(.{FALLBACK_CLASS}):has(+ .jp-OutputArea-child .{LIVE_CLASS}){{display:none}}"
    f".jp-OutputArea-child:has(.{FALLBACK_CLASS}) + .jp-OutputArea-child:not(:has(.{LIVE_CLASS})){{display:none}}"
)


def fallback_html(report_html: str) -> str:
    """The report as the output shown in place of the Inspector widget when the widget cannot render."""
    note = (
        "<p style='color:#6b7280;margin:2px 0'>static report (the interactive Inspector needs the "
        "running kernel: re-run this cell)</p>"
    )
    return f"<div class='{FALLBACK_CLASS}'><style>{_FALLBACK_CSS}</style>{note}{report_html}</div>"
