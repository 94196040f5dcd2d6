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


RULE_CELL = """from caten_lab.air.rewriter import Pat, rule

@rule("x*1 -> x", Pat("mul", ["x", 1.0]))
def times_one(m):
    return m["x"]

times_one.location
"""

DEBUG_CELL = """%%caten --debug
import numpy as np
from caten_lab.frontend import Tensor
x = Tensor.from_numpy(np.ones((2, 3), np.float32), name="x")
bad = x + Tensor.from_numpy(np.ones((5, 3), np.float32))
bad
"""


def _execute(nb, tmp_path, monkeypatch, km):  # noqa: ANN001 - a KernelManager (conftest ipc_kernel)
    monkeypatch.setenv("PYTHONPATH", str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    NotebookClient(
        nb, km=km, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()


def _text(output) -> str:
    return "".join(output.get("text", "")) + "".join(output.get("data", {}).get("text/plain", ""))


def test_caten_cell_output_has_static_report_then_widget(tmp_path, monkeypatch, ipc_kernel):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext caten_lab"),
        nbformat.v4.new_code_cell(CELL),
        nbformat.v4.new_code_cell(
            "caten_lab_report = __import__('caten_lab').show(_caten)\ncaten_lab_report"
        ),
    ]
    _execute(nb, tmp_path, monkeypatch, ipc_kernel())
    shown = [o for o in nb.cells[1].outputs if o.get("output_type") == "display_data"]
    # two outputs: the static report (readable where the widget model is gone), then the widget
    assert len(shown) == 2, shown
    report, widget = shown[0]["data"], shown[1]["data"]
    assert "application/vnd.jupyter.widget-view+json" not in report
    html = report["text/html"]
    assert "caten-static-fallback" in html and "caten_lab" in html and "simplify" in html and "render" in html
    assert "application/vnd.jupyter.widget-view+json" in widget and "text/html" not in widget
    report = nb.cells[2].outputs[0]["data"]["text/html"]
    assert "<details" in report and "exp2" in report
    # the executed notebook exports to HTML with the report in it, in the output just before the widget's
    # own (the fallback's CSS hides whichever of the two did not render): with the widget state nbclient
    # saves (the widget's embed script) and without it (the widget's text/plain)
    HTMLExporter = pytest.importorskip("nbconvert").HTMLExporter  # noqa: N806

    for state in (True, False):
        if not state:
            nb.metadata.pop("widgets", None)
        body, _ = HTMLExporter().from_notebook_node(nb)
        assert "caten_lab compile report" in body
        after = body[body.index("caten-static-fallback") :]
        children = after.split('<div class="jp-OutputArea-child')
        assert len(children) >= 2, "the widget's output follows the report"
        widget_out = children[1]
        if state:
            assert "application/vnd.jupyter.widget-view+json" in widget_out
        else:
            assert "caten_lab Inspector (" in widget_out and "needs a running kernel" in widget_out


def test_cell_names_and_lines_are_the_editors(tmp_path, monkeypatch, ipc_kernel):
    """Node sources, rule locations and --debug tracebacks say In[n] and count the editor's lines."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext caten_lab"),  # In[1]
        nbformat.v4.new_code_cell(CELL),  # In[2]
        nbformat.v4.new_code_cell(  # In[3]
            "import json\nd = json.loads(_caten.inspector.data_json)\n"
            "print(sorted({n['src'] for n in d['nodes'] if n.get('src')}))\n"
            "print(sorted(d['source_lines'].items()))"
        ),
        nbformat.v4.new_code_cell(RULE_CELL),  # In[4]
        nbformat.v4.new_code_cell(DEBUG_CELL, metadata={"tags": ["raises-exception"]}),  # In[5]
    ]
    _execute(nb, tmp_path, monkeypatch, ipc_kernel())
    sources = _text(nb.cells[2].outputs[0])
    # line 4 of In[2] (the %%caten line is line 1) creates x
    assert "'In[2]:4'" in sources, sources
    assert (
        "('In[2]:4', 'x = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), name=\"x\")')"
        in sources.replace("\\'", "'")
    ), sources
    assert ".py:" not in sources and "caten-cell" not in sources
    # a rule written in a cell is located at its line in that cell (the @rule line), not an ipykernel temp file
    assert _text(nb.cells[3].outputs[0]).strip() == "'In[4]:3'"
    err = next(o for o in nb.cells[4].outputs if o["output_type"] == "error")
    assert err["ename"] == "ShapeError"
    tb = "\n".join(err["traceback"])
    assert "In[5]" in tb and "line 5" in tb and "bad = x + Tensor.from_numpy" in tb, tb
