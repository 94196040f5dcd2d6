"""Real-browser test of a saved notebook: JupyterLab + Debian's chromium driven by Playwright.

A ``%%caten`` cell is run in JupyterLab (the live Inspector shows, its static report is hidden), the
notebook is saved, its kernel shut down and the page reloaded: the reopened notebook (fresh kernel,
nothing run, no widget model) shows the static report and no "Error displaying widget: model not
found". The same notebook exported by nbconvert and opened in chromium shows the report too.
Skips only when chromium cannot be installed.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from .lab_server import CHROMIUM_ARGS, REPO, jupyter_lab, playwright_and_chromium, write_notebook

pytestmark = pytest.mark.slow

TOKEN = "catentest"
CELL = """%%caten --check
# a small graph with a redundancy simplify removes
import numpy as np
from caten_lab.frontend import Tensor
x = Tensor.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), name="x")
(x * 1.0 + 0.0).exp().sum(axis=1)
"""


def _notebook(path: Path) -> None:
    write_notebook(path, CELL)


def _visible_text(page) -> str:
    return page.evaluate("() => document.body.innerText")


def _shut_down_kernels(base: str) -> None:
    with urllib.request.urlopen(f"{base}/api/sessions?token={TOKEN}", timeout=10) as r:
        sessions = json.load(r)
    for s in sessions:
        req = urllib.request.Request(f"{base}/api/sessions/{s['id']}?token={TOKEN}", method="DELETE")
        urllib.request.urlopen(req, timeout=30).close()


def _saved_outputs(path: Path) -> list:
    try:
        nb = nbformat.read(path, as_version=4)
    except Exception:  # being written
        return []
    return nb.cells[1].get("outputs", []) if len(nb.cells) > 1 else []


def test_saved_notebook_reopens_with_the_static_report(tmp_path):
    sync_api, chromium = playwright_and_chromium()
    path = tmp_path / "saved.ipynb"
    _notebook(path)
    assets = REPO / "assets" if os.environ.get("CATEN_UPDATE_SCREENSHOTS") == "1" else tmp_path
    with jupyter_lab(tmp_path, token=TOKEN) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        url = f"{base}/lab/tree/saved.ipynb?token={TOKEN}"
        page.goto(url)
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        page.wait_for_selector("text=/\\| Idle/", timeout=90_000)
        page.click("text=Run", timeout=10_000)
        page.click("text=Run All Cells", timeout=10_000)
        page.wait_for_selector(".caten-inspector", timeout=120_000)
        # live: the widget shows, its static report (the output just before it) is hidden
        page.wait_for_selector(".caten-static-fallback", state="attached", timeout=30_000)
        assert not page.locator(".caten-static-fallback").first.is_visible()
        assert page.locator(".caten-inspector").first.is_visible()
        page.click(".lm-MenuBar-itemLabel:text-is('File')", timeout=10_000)
        page.click(".lm-Menu-itemLabel:text-is('Save Notebook')", timeout=10_000)
        deadline = time.time() + 60
        while time.time() < deadline and len(_saved_outputs(path)) < 2:
            time.sleep(0.5)
        outputs = _saved_outputs(path)
        assert any(
            "caten-static-fallback" in "".join(o.get("data", {}).get("text/html", "")) for o in outputs
        )
        assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outputs)

        # reopen: kernel gone, a fresh one starts, nothing is run
        _shut_down_kernels(base)
        page.goto(url)
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        page.wait_for_selector("text=/\\| Idle/", timeout=90_000)
        page.wait_for_selector(".caten-static-fallback", state="visible", timeout=60_000)
        # the widget manager gives up on the missing model once it has restored: wait for that verdict
        page.wait_for_function(
            "() => [...document.querySelectorAll('.jp-OutputArea-output')].some("
            "e => (e.textContent || '').includes('model not found'))",
            timeout=60_000,
        )
        text = _visible_text(page)
        assert "model not found" not in text and "Error displaying widget" not in text
        assert "caten_lab" in text and "simplify" in text and "passes" in text
        assert page.locator(".caten-inspector").count() == 0
        page.screenshot(path=str(assets / "saved_notebook_reopened.png"))

        # nbconvert HTML of the saved notebook, opened from disk
        HTMLExporter = pytest.importorskip("nbconvert").HTMLExporter  # noqa: N806
        body, _ = HTMLExporter().from_notebook_node(nbformat.read(path, as_version=4))
        html_path = tmp_path / "saved.html"
        html_path.write_text(body)
        page.route("http*://**", lambda route: route.abort())  # offline: no widget manager from a CDN
        page.goto(html_path.as_uri())
        page.wait_for_selector(".caten-static-fallback", state="visible", timeout=30_000)
        text = _visible_text(page)
        assert "caten_lab" in text and "simplify" in text
        assert "needs a running kernel" not in text  # the widget's text/plain stand-in is hidden
        browser.close()
