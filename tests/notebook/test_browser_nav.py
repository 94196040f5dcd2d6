"""Real-browser test of the Inspector's navigation: it takes you to the change.

JupyterLab + Debian's chromium via Playwright (never `playwright install`), as test_browser.py. On a
2-layer GPT-2 graph: `simplify`, diff view, rewrite 3/3 (the issue's case: the changed node used to
sit 6,562 px below the top of a 620 px pane) the changed node is inside the visible pane, unchanged
nodes are grey, the matched and produced nodes are outlined and the rule's location is shown; "next
change" focuses a change; "go to the change" unchecked keeps the view still; "fit" fits both axes.
On a graph over the node cap: arriving from a C line draws the node's neighbourhood instead of the
cap, "render anyway" survives a pass change, and the node list finds a node. Random-number
internals (Tensor.randn) are one box, expanded by a click.
"""

from __future__ import annotations

import os

import nbformat
import pytest

from .lab_server import REPO, jupyter_lab, open_and_run_all, playwright_and_chromium, wait_inspector_ready

pytestmark = pytest.mark.slow

CELL_GPT2 = """%%caten --no-run
# a 2-layer GPT-2 with a redundant epilogue: simplify removes it in 3 rewrites, at the bottom of the graph
import numpy as np
from caten_lab.frontend import Tensor
from caten_lab.nn.gpt2 import GPT2, GPT2Config
model = GPT2(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=2, n_head=2))
logits = model(Tensor.from_numpy(np.array([[1, 2, 3, 4]], dtype=np.int64), name="tokens"), 0)
(logits * 1.0 + 0.0) / 1.0
"""

CELL_BIG = """%%caten --no-run
# a 4-layer GPT-2 (narrow): more nodes than the Inspector lays out unasked; simplify changes two
import numpy as np
from caten_lab.frontend import Tensor
from caten_lab.nn.gpt2 import GPT2, GPT2Config
big = GPT2(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=4, n_head=4))
big(Tensor.from_numpy(np.array([[1, 2, 3, 4]], dtype=np.int64), name="tokens"), 0) * 1.0 + 0.0
"""

CELL_RNG = """%%caten --no-run
import numpy as np
from caten_lab.frontend import Tensor
x = Tensor.randn(4, 8)
w = Tensor.from_numpy(np.ones((8, 3), dtype=np.float32), name="w")
(x @ w).relu()
"""

# the diff palette of extensions/src/inspector.js (DIFF, UNCHANGED, OUTLINE)
DIFF_FILLS = ("#2dd4bf", "#fb7185", "#a78bfa")
UNCHANGED_FILL = "#f3f4f6"
MATCHED_PEN = "#dc2626"
PRODUCED_PEN = "#1d4ed8"


def _notebook(path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(c) for c in ("%load_ext caten_lab", CELL_GPT2, CELL_BIG, CELL_RNG)]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nbformat.write(nb, path)


def _wait_ready(page, nth, pass_index=None, rewrite=None, timeout=120_000):
    wait_inspector_ready(page, nth, pass_index=pass_index, rewrite=rewrite, timeout=timeout)


# where the nodes drawn with a fill of `fills` are, relative to their scrolled holder and to the pane
_GEOMETRY = """([nth, fills]) => {
    const el = document.querySelectorAll('.caten-inspector')[nth];
    const pane = el.querySelector('.ci-graph').getBoundingClientRect();
    const out = [];
    for (const holder of el.querySelectorAll('.ci-svg-holder')) {
        const hr = holder.getBoundingClientRect();
        for (const g of holder.querySelectorAll('g.node')) {
            const shape = g.querySelector('polygon, path');
            const fill = shape && (shape.getAttribute('fill') || '').toLowerCase();
            if (!fills.includes(fill)) continue;
            const r = g.getBoundingClientRect();
            out.push({id: g.id, fill, top: r.top, bottom: r.bottom, left: r.left, right: r.right,
                      inHolder: r.top >= hr.top - 1 && r.bottom <= hr.bottom + 1 && r.left >= hr.left - 1 && r.right <= hr.right + 1,
                      inPane: r.top >= pane.top - 1 && r.bottom <= pane.bottom + 1,
                      fromPaneTop: r.top - pane.top + holder.scrollTop});
        }
    }
    return out;
}"""


def _pens(page, nth) -> set[str]:
    return set(
        page.evaluate(
            f"""() => [...document.querySelectorAll('.caten-inspector')[{nth}].querySelectorAll('.ci-svg-holder g.node')]
            .map(g => ((g.querySelector('polygon, path') || {{}}).getAttribute?.('stroke') || '').toLowerCase())"""
        )
    )


def _fills(page, nth) -> list[str]:
    return page.evaluate(
        f"""() => [...document.querySelectorAll('.caten-inspector')[{nth}].querySelectorAll('.ci-svg-holder g.node')]
        .map(g => ((g.querySelector('polygon, path') || {{}}).getAttribute?.('fill') || '').toLowerCase())"""
    )


def _pass_index(page, nth, name: str) -> int:
    names = page.evaluate(
        f"() => [...document.querySelectorAll('.caten-inspector')[{nth}].querySelectorAll('.ci-pass-name')].map(e => e.textContent)"
    )
    return next(i for i, t in enumerate(names) if t.endswith(f". {name}"))


def test_inspector_takes_you_to_the_change(tmp_path):
    sync_api, chromium = playwright_and_chromium()
    _notebook(tmp_path / "nav.ipynb")
    errors: list[str] = []
    with jupyter_lab(tmp_path) as base, sync_api.sync_playwright() as pw:
        browser, page = open_and_run_all(pw, chromium, base, "nav.ipynb", errors)
        page.wait_for_function(
            "() => document.querySelectorAll('.caten-inspector').length >= 3", timeout=300_000
        )
        for nth in range(3):
            _wait_ready(page, nth, timeout=300_000)

        # ---- 1. the 2-layer GPT-2: simplify, diff view, rewrite 3/3
        insp = page.locator(".caten-inspector").nth(0)
        insp.scroll_into_view_if_needed()
        simplify = _pass_index(page, 0, "simplify")
        insp.locator(f".ci-pass[data-index='{simplify}']").click()
        _wait_ready(page, 0, pass_index=simplify)
        insp.locator(".ci-view").select_option("diff")
        _wait_ready(page, 0, pass_index=simplify)
        assert int(insp.locator(".ci-rw-slider").get_attribute("max")) == 3
        for k in (1, 2, 3):
            insp.locator(".ci-rw-next").click()
            _wait_ready(page, 0, pass_index=simplify, rewrite=k)
        changed = page.evaluate(_GEOMETRY, [0, list(DIFF_FILLS)])
        assert changed, "rewrite 3/3 draws its change in the diff palette"
        assert all(c["inHolder"] and c["inPane"] for c in changed), changed
        deepest = max(c["fromPaneTop"] for c in changed)
        fills = _fills(page, 0)
        # diff mode: everything unchanged is grey, nothing is drawn in an op colour
        assert fills.count(UNCHANGED_FILL) > 100 and set(fills) <= {UNCHANGED_FILL, *DIFF_FILLS}, set(fills)
        assert {MATCHED_PEN, PRODUCED_PEN} & _pens(page, 0), (
            "the rewrite's matched / produced nodes are outlined"
        )
        assert "simplify.py:" in insp.locator(".ci-rw-loc").inner_text()  # the rule's source location
        legend = insp.locator(".ci-legend").inner_text()
        assert "added" in legend and "unchanged" in legend and "matched" in legend
        # the README's screenshots are refreshed on request only: a test run never edits tracked files
        shots = REPO / "assets" if os.environ.get("CATEN_UPDATE_SCREENSHOTS") == "1" else tmp_path
        insp.screenshot(path=str(shots / "inspector_diff.png"))

        # "fit" fits both axes of the pane
        insp.locator(".ci-rw-all").click()
        _wait_ready(page, 0, pass_index=simplify, rewrite=-1)
        insp.locator(".ci-fit").click()
        fit = page.evaluate("""() => { const h = document.querySelector('.caten-inspector .ci-svg-holder');
            const s = h.querySelector('svg'); return [s.getBoundingClientRect().width, s.getBoundingClientRect().height, h.clientWidth, h.clientHeight]; }""")
        assert fit[0] <= fit[2] + 1 and fit[1] <= fit[3] + 1, fit

        # next change (n): the whole pass's first change, focused and in view
        insp.focus()
        page.keyboard.press("n")
        assert insp.locator(".ci-change-label").inner_text().startswith("1 of ")
        focused = page.evaluate("""() => { const el = document.querySelector('.caten-inspector');
            const g = el.querySelector('g.node.ci-focus'); if (!g) return null;
            const r = g.getBoundingClientRect(), h = g.closest('.ci-svg-holder').getBoundingClientRect();
            return r.top >= h.top - 1 && r.bottom <= h.bottom + 1; }""")
        assert focused is True

        # "go to the change" unchecked: the view stays where it is while stepping
        # (scrolled to the top, far from the change at the bottom that following would scroll to)
        insp.locator(".ci-follow").uncheck()
        page.evaluate("() => { document.querySelector('.caten-inspector .ci-svg-holder').scrollTop = 0; }")
        insp.locator(".ci-rw-next").click()
        _wait_ready(page, 0, pass_index=simplify, rewrite=1)
        assert page.evaluate("() => document.querySelector('.caten-inspector .ci-svg-holder').scrollTop") == 0
        insp.locator(".ci-follow").check()

        # ---- 2. a graph over the node cap
        big = page.locator(".caten-inspector").nth(1)
        big.scroll_into_view_if_needed()
        # a whole pass over the cap that changed a few nodes: those nodes and their neighbours, in view
        big_simplify = _pass_index(page, 1, "simplify")
        big.locator(f".ci-pass[data-index='{big_simplify}']").click()
        _wait_ready(page, 1, pass_index=big_simplify)
        assert big.locator(".ci-cap").count() == 0 and big.locator("g.node").count() > 0  # after view
        big.locator(".ci-view").select_option("diff")
        _wait_ready(page, 1, pass_index=big_simplify)
        assert big.locator(".ci-cap").count() == 0
        assert "changed node" in big.locator(".ci-caption").first.inner_text()
        changed_big = page.evaluate(_GEOMETRY, [1, list(DIFF_FILLS)])
        assert changed_big and all(c["inHolder"] for c in changed_big), changed_big
        big.locator(".ci-view").select_option("after")
        big.locator(".ci-pass[data-index='0']").click()  # typecheck: no change, all 500+ nodes
        _wait_ready(page, 1, pass_index=0)
        big.locator(".ci-cap").wait_for(timeout=60_000)
        # arriving from a C line: the node's neighbourhood is drawn, not the cap
        big.locator(".ci-tab[data-pane='c']").click()
        rows = big.locator(".ci-c-row")
        for j in range(rows.count() // 2, rows.count()):
            rows.nth(j).click()
            if big.locator(".ci-goto-graph").count():
                break
        target = int(big.locator(".ci-goto-graph").first.inner_text().strip()[1:])
        big.locator(".ci-goto-graph").first.click()
        page.wait_for_function(
            f"() => {{ const el = document.querySelectorAll('.caten-inspector')[1]; return el.dataset.state === 'ready' "
            f"&& el.querySelector('g.node.ci-selected[id$=\"n{target}\"]'); }}",
            timeout=120_000,
        )
        assert big.locator(".ci-cap").count() == 0
        assert "hops around n" in big.locator(".ci-caption").first.inner_text()
        big.focus()
        page.keyboard.press("Escape")
        big.locator(".ci-cap").wait_for(timeout=60_000)  # no selection: the cap again
        n_nodes = int(big.locator(".ci-caption").first.inner_text().split("·")[1].split()[0])
        big.locator(".ci-render-anyway").first.click()
        page.wait_for_function(
            f"() => document.querySelectorAll('.caten-inspector')[1].querySelectorAll('g.node').length >= {n_nodes}",
            timeout=300_000,
        )
        pi = int(page.evaluate("() => document.querySelectorAll('.caten-inspector')[1].dataset.pass"))
        big.locator(".ci-next").click()
        _wait_ready(page, 1, pass_index=pi + 1, timeout=300_000)
        assert big.locator(".ci-cap").count() == 0, "render anyway sticks across a pass change"
        assert big.locator("g.node").count() >= n_nodes - 50
        # the node list finds a node by its name and takes you to it
        big.locator(".ci-find").fill("ln_f.weight")
        hits = big.locator(".ci-nodelist-item")
        assert hits.count() >= 1 and "ln_f.weight" in hits.first.inner_text()
        found = int(hits.first.get_attribute("data-node"))
        hits.first.click()
        page.wait_for_function(
            f"() => document.querySelectorAll('.caten-inspector')[1].querySelector('g.node.ci-selected[id$=\"n{found}\"]')",
            timeout=60_000,
        )
        assert f"n{found}" in big.locator(".ci-node-table").inner_text()
        big.screenshot(path=str(shots / "inspector_nodelist.png"))

        # ---- 3. Tensor.randn: one collapsed box, expanded by a click
        rng = page.locator(".caten-inspector").nth(2)
        rng.scroll_into_view_if_needed()
        box = rng.locator("g.node[id^=ar]")
        assert box.count() == 1 and "random numbers" in box.text_content()
        rng.screenshot(path=str(shots / "inspector_rng.png"))
        n_before = rng.locator("g.node").count()
        box.click()
        page.wait_for_function(
            f"() => document.querySelectorAll('.caten-inspector')[2].querySelectorAll('g.node').length > {n_before + 50}",
            timeout=120_000,
        )
        browser.close()
    print(
        f"\nsimplify 3/3 on a 2-layer GPT-2: the change drawn at {deepest:.0f} px of the graph, inside the pane"
    )
    assert not errors, errors
