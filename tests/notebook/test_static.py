"""The static (no-widget) report and SVG export."""

from __future__ import annotations

import shutil

import pytest

import caten_lab
from caten_lab.notebook import static_html
from caten_lab.notebook.static_html import show


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
