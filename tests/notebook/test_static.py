"""The static (no-widget) report and SVG export."""

from __future__ import annotations

import shutil
from html import escape as html_escape

import pytest

import caten_lab
from caten_lab.frontend import build_graph, placeholder
from caten_lab.notebook import static_html
from caten_lab.notebook.static_html import show

from .conftest import kernel_passes


def test_report_with_svg_when_dot_exists(program):
    rep = show(program, title="my compile")
    html = rep._repr_html_()
    assert "my compile" in html and "const_fold" in html and "simplify" in html
    assert "<table" in html and "data:image/png;base64," in html
    assert "exp2f" in html  # the C source, highlighted
    if shutil.which("dot"):
        assert "<svg" in html and "<pre" not in html.split("C source")[0].split("<details")[1]
    assert caten_lab.show(program).html == html.replace("my compile", "caten_lab compile report")


def test_report_falls_back_to_dot_text_without_graphviz(program, monkeypatch):
    monkeypatch.setattr(static_html.shutil, "which", lambda name: None)
    html = show(program).html
    assert "<svg" not in html and "digraph" in html and "not installed" in html


def test_large_graphs_are_not_drawn(program):
    html = show(program, max_nodes=2, svg=False).html
    assert "too many for a static drawing" in html


def test_save_and_svg_export(program, tmp_path):
    rep = show(program, svg=False)
    assert rep.save(tmp_path / "r.html").read_text().startswith("<!doctype html>")
    if not shutil.which("dot"):
        with pytest.raises(caten_lab.CatenError, match="dot"):
            rep.save_svg(tmp_path / "g.svg")
        return
    out = rep.save_svg(tmp_path / "g.svg", "simplify")
    text = out.read_text()
    assert text.startswith("<svg") and "exp2" in text
    assert rep.save_svg(tmp_path / "b.svg", 0, which="before").read_text().count("<g id=") > 3


def test_show_accepts_a_magic_result_and_outputs(traced, inputs):
    from caten_lab.notebook.magic import CatenResult

    g, res = traced
    from caten_lab.air import interpret

    outs = interpret(g, inputs)
    html = show(CatenResult(g, inputs, None, res.trace, outputs=outs)).html
    assert "Outputs" in html and "(4, 4)" in html


def test_report_graph_selection(program):
    n_svg_or_dot = lambda html: html.count("<svg") + html.count("digraph")  # noqa: E731
    changed = show(program, chart=False).html
    last = show(program, graphs="last", chart=False).html
    none = show(program, graphs="none", chart=False).html
    assert n_svg_or_dot(none) == 0 < n_svg_or_dot(last) < n_svg_or_dot(changed)
    assert "data:image/png" not in none
    with pytest.raises(caten_lab.CatenError, match="graphs="):
        show(program, graphs="some")


def test_static_report_lists_the_kernel_ir_of_codegen_passes():
    """Without widgets, a codegen pass that changed the kernel program shows its changed functions."""
    x = placeholder((4, 8), name="x")
    g, _ = build_graph([(x * 2.0).exp(), x.max(-1)])
    tr = kernel_passes.kernel_pipeline().run(g, trace=True).trace
    page = show(tr, svg=False).html
    unroll = page.split(". unroll</code>")[1].split("</details>")[0]
    assert "kernel IR: 2 of 2 functions changed, 3 kernel-IR rewrites" in unroll  # k0 split in two halves
    assert html_escape(tr.program_at("unroll").text(tr.program_at("unroll").functions[0].name)) in unroll
    mem = page.split(". memory_plan</code>")[1].split("</details>")[0]
    assert "kernel IR:" not in mem and "no change" in mem
    sched = page.split(". schedule</code>")[1].split("</details>")[0]
    assert "2 kernel roots, " in sched and "a graph output" in sched  # the fusion log
