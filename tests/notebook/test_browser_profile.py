"""Real-browser test of the Profile pane (JupyterLab + Debian's chromium via Playwright, as test_browser.py).

Runs a ``%%caten --profile --force`` cell on a one-layer GPT-2 and measures, in the page, the time from
the Shift+Enter that executes the cell to the cell's prompt showing its execution count (the execute
reply, just before the kernel goes idle). The Profile's total (tracing, every pass, the C compiler,
loading, the run, ... and drawing) must be within 10% of it (the issue's one timing assertion); the
roofline chart has one point per kernel, and clicking a point selects that kernel in the Inspector.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .lab_server import CHROMIUM_ARGS, REPO, jupyter_lab, playwright_and_chromium, write_notebook

pytestmark = pytest.mark.slow

CELL_PROFILE = """%%caten --profile --force
# a one-layer GPT-2 (random weights): traced, compiled to C, run, and every kernel timed
import numpy as np
from caten_lab.frontend import Tensor
from caten_lab.nn.gpt2 import GPT2, GPT2Config
model = GPT2(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=1, n_head=4))
tokens = Tensor.from_numpy(np.array([[1, 2, 3, 4, 5, 6, 7, 8]], dtype=np.int64), name="tokens")
model(tokens, 0)
"""

# records, in the page, the Shift+Enter that runs the second cell and the moment its prompt gets a count
WATCH = """() => {
  window.__catenT = {};
  document.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && e.shiftKey && window.__catenT.start === undefined) window.__catenT.start = Date.now();
  }, true);
  const prompt = document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')[1];
  new MutationObserver(() => {
    if (window.__catenT.start !== undefined && window.__catenT.end === undefined && /\\[\\d+\\]/.test(prompt.textContent))
      window.__catenT.end = Date.now();
  }).observe(prompt, { childList: true, characterData: true, subtree: true });
}"""


def _notebook(path: Path) -> None:
    write_notebook(path, CELL_PROFILE)


def test_profile_total_matches_the_cell_and_roofline_points(tmp_path):
    sync_api, chromium = playwright_and_chromium()
    _notebook(tmp_path / "profile_test.ipynb")
    errors: list[str] = []
    with jupyter_lab(tmp_path) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        page.goto(f"{base}/lab/tree/profile_test.ipynb?token=catentest")
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        page.wait_for_selector("text=/\\| Idle/", timeout=90_000)
        cells = page.locator(".jp-CodeCell")
        cells.nth(0).locator(".jp-InputArea-editor").click()
        page.keyboard.press(
            "Shift+Enter"
        )  # %load_ext: the kernel's imports happen here, not in the measured cell
        page.wait_for_function(
            "() => /\\[1\\]/.test(document.querySelectorAll('.jp-CodeCell .jp-InputPrompt')[0].textContent)",
            timeout=90_000,
        )
        page.evaluate(WATCH)
        cells.nth(1).locator(".jp-InputArea-editor").click()
        page.keyboard.press("Escape")  # command mode: Shift+Enter runs the selected cell
        page.keyboard.press("Shift+Enter")
        page.wait_for_function("() => window.__catenT.end !== undefined", timeout=300_000)
        page.wait_for_selector("text=/\\| Idle/", timeout=60_000)
        insp = page.locator(".caten-inspector").first
        insp.wait_for(timeout=60_000)
        insp.locator(".ci-tab[data-pane='profile']").click()
        page.wait_for_selector(".ci-pf-timeline[data-final='1']", timeout=60_000)
        t = page.evaluate("() => window.__catenT")
        total_s = float(insp.locator(".ci-pf-timeline").get_attribute("data-total-s"))
        phases = insp.locator(".ci-pf-trow").evaluate_all("rs => rs.map(r => r.dataset.phase)")
        tl = insp.locator(".ci-pf-timeline")
        # the cell is done for its user when the execution count shows and the Inspector is drawn; on a
        # loaded machine JupyterLab may draw the widget after the count (CI: 455 ms later), and the
        # Profile's total must cover that time too, not miss it
        wall_s = (max(t["end"] / 1e3, float(tl.get_attribute("data-drawn"))) - t["start"] / 1e3)
        start_gap = float(tl.get_attribute("data-start")) - t["start"] / 1e3
        end_gap = t["end"] / 1e3 - float(tl.get_attribute("data-drawn"))
        print(
            f"\nrequest header - Shift+Enter {start_gap * 1e3:.0f} ms; execution count - Profile drawn {end_gap * 1e3:.0f} ms"
        )
        print(
            f"cell wall time (Shift+Enter -> execution count and Inspector drawn) {wall_s:.3f} s, Profile total {total_s:.3f} s"
        )
        print(insp.locator(".ci-pf-timeline").inner_text())
        assert {"tracing", "pass", "compile", "cc", "load", "run", "profile", "display"} <= set(phases)
        assert abs(total_s - wall_s) <= 0.10 * wall_s, (total_s, wall_s)

        # the roofline: one point per scheduled kernel, each a row of the run profile
        n_kernels = page.evaluate("() => document.querySelectorAll('.ci-pf-krow').length")
        points = insp.locator(".ci-roofline .ci-roof-point")
        assert n_kernels >= 2 and points.count() == n_kernels
        assert insp.locator(".ci-roofline .ci-roof-line").count() == 1
        kernels = set(insp.locator(".ci-pf-krow").evaluate_all("rs => rs.map(r => r.dataset.kernel)"))
        assert set(points.evaluate_all("ps => ps.map(p => p.dataset.kernel)")) == kernels
        assets = REPO / "assets" if os.environ.get("CATEN_UPDATE_SCREENSHOTS") == "1" else tmp_path
        insp.screenshot(path=str(assets / "inspector_roofline.png"))

        # clicking a point selects its kernel: the kernel-IR view of a codegen pass with that kernel current
        fn = points.first.get_attribute("data-function")
        points.first.dispatch_event("click")
        page.wait_for_selector(f".ci-kir-k.current[data-kernel='{fn}']", timeout=30_000)
        assert insp.locator(".ci-pane-graph").is_visible()
        browser.close()
    assert not errors, errors
