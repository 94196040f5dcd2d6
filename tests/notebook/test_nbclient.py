"""A notebook using %%caten executed headless (nbclient, as nbconvert/nbmake do): the output carries
the widget view and a static HTML fallback, so it renders without a widget front-end (nbconvert, GitHub)."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

from .lab_server import REPO

CELL = """%%caten --check
import numpy as np
from caten_lab.frontend import Tensor
x = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
(x * 1.0 + 0.0).exp().sum(axis=1)
"""


def test_caten_cell_output_has_widget_and_static_fallback(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext caten_lab"),
        nbformat.v4.new_code_cell(CELL),
        nbformat.v4.new_code_cell(
            "caten_lab_report = __import__('caten_lab').show(_caten)\ncaten_lab_report"
        ),
    ]
    NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    outputs = nb.cells[1].outputs
    data = next(o["data"] for o in outputs if o.get("output_type") == "display_data")
    assert "application/vnd.jupyter.widget-view+json" in data
    html = data["text/html"]
    assert "caten_lab" in html and "simplify" in html and "render" in html
    report = nb.cells[2].outputs[0]["data"]["text/html"]
    assert "<details" in report and "exp2" in report
    # the executed notebook exports to HTML with the report in it
    HTMLExporter = pytest.importorskip("nbconvert").HTMLExporter  # noqa: N806

    body, _ = HTMLExporter().from_notebook_node(nb)
    assert "caten_lab compile report" in body
