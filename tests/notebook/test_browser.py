"""Real-browser test: JupyterLab + Debian's chromium driven by Playwright (never `playwright install`).

Opens a notebook that runs ``%%caten`` on a small transformer-style block and the generator widget over
a fake generator; steps through every pass and every rewrite of one pass, checks the drawn graph
changes, opens a node's C lines, streams tokens, asserts no JavaScript errors, prints the per-step
time and saves screenshots (to assets/ with CATEN_UPDATE_SCREENSHOTS=1, for the README; else to a
temporary directory). Skips only when chromium cannot be installed.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from .lab_server import CHROMIUM_ARGS, REPO, jupyter_lab, playwright_and_chromium, wait_inspector_ready

pytestmark = pytest.mark.slow

CELL_MODEL = """%%caten --check
# a one-layer GPT-2 (random weights), with a redundant epilogue so simplify has rewrites to step through
import numpy as np
from caten_lab.frontend import Tensor
from caten_lab.nn.gpt2 import GPT2, GPT2Config
model = GPT2(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2))
tokens = Tensor.from_numpy(np.array([[1, 2, 3, 4]], dtype=np.int64), name="tokens")
logits = model(tokens, 0)
(logits * 1.0 + 0.0) / 1.0
"""

CELL_RUNNER = """# the generator widget over the bundled tiny GPT-2 (compiled to C) and its byte-level BPE tokenizer
from caten_lab.cli import BUNDLED_MODEL
from caten_lab.models.gpt2 import GPT2Runner
from caten_lab.notebook import GeneratorWidget, logits_generator
from caten_lab.workflow.tokenizers import GPT2Tokenizer
tok = GPT2Tokenizer.from_files(BUNDLED_MODEL / "vocab.json", BUNDLED_MODEL / "merges.txt")
gpt2 = GPT2Runner.from_pretrained(BUNDLED_MODEL)
generate = logits_generator(gpt2.forward, tok.encode, tok.decode, reset=gpt2.reset)
runner = GeneratorWidget(generate, prompt="ROMEO:\\n", max_new_tokens=12, show_probs=True)
runner
"""


# layers of the big model: 4 by default (~500 nodes, over the node cap); CATEN_SLOW_SCALE=1 -> 12 (~1500)
BIG_LAYERS = max(4, min(12, round(12 * float(os.environ.get("CATEN_SLOW_SCALE", "0.34")))))
CELL_BIG = f"""%%caten --no-run
# a {BIG_LAYERS}-layer GPT-2 (narrow): more nodes than the Inspector lays out unasked; it collapses kernels
import numpy as np
from caten_lab.frontend import Tensor
from caten_lab.nn.gpt2 import GPT2, GPT2Config
big = GPT2(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer={BIG_LAYERS}, n_head=4))
big(Tensor.from_numpy(np.array([[1, 2, 3, 4]], dtype=np.int64), name="tokens"), 0)
"""


# the codegen passes of a GPT-2 block over the kernel IR: the compiler's own pipeline
CELL_KIR_PIPELINE = """from caten_lab.compiler import default_pipeline
kir_pipeline = default_pipeline()  # the compiler's own codegen passes: collapse, hoist, simd, parallel, ...
"""

CELL_KIR = """%%caten --pipeline kir_pipeline
# a GPT-2 block: step through its codegen passes, kernel by kernel, rewrite by rewrite
import numpy as np
from caten_lab.frontend import Tensor
from caten_lab.nn.gpt2 import GPT2, GPT2Config
block = GPT2(GPT2Config(vocab_size=64, n_positions=32, n_embd=32, n_layer=1, n_head=2))
block(Tensor.from_numpy(np.array([[1, 2, 3, 4]], dtype=np.int64), name="tokens"), 0)
"""


def _notebook(path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%load_ext caten_lab"),
        nbformat.v4.new_code_cell(CELL_MODEL),
        nbformat.v4.new_code_cell(CELL_RUNNER),
        nbformat.v4.new_code_cell(CELL_BIG),
        nbformat.v4.new_code_cell(CELL_KIR_PIPELINE),
        nbformat.v4.new_code_cell(CELL_KIR),
    ]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3 (ipykernel)",
        "language": "python",
    }
    nbformat.write(nb, path)


def _graph_signature(page) -> str:
    return page.evaluate("""() => {
        const g = document.querySelector('.caten-inspector .ci-graph');
        if (!g) return '';
        const ids = [...g.querySelectorAll('g.node')].map(n => n.id + ':' + (n.querySelector('polygon,path')||{}).getAttribute?.('fill'));
        return ids.join(',') + '|' + g.querySelectorAll('g.edge').length;
    }""")


def _render_ms(page) -> float:
    return float(page.evaluate("() => document.querySelector('.caten-inspector').dataset.renderMs"))


def _wait_ready(page, pass_index=None, rewrite=None, timeout=60_000, nth=0):
    wait_inspector_ready(page, nth, pass_index=pass_index, rewrite=rewrite, timeout=timeout)


def _highlight_visible(page, nth: int) -> bool:
    """The first highlighted line of every kernel-IR listing is inside its scrolled box."""
    return page.evaluate(f"""() => {{
        const el = document.querySelectorAll('.caten-inspector')[{nth}];
        const boxes = [...el.querySelectorAll('.ci-kir-listing')];
        return boxes.length > 0 && boxes.every(b => {{
            const row = b.querySelector('.ci-kir-add, .ci-kir-del');
            if (!row) return true;
            const r = row.getBoundingClientRect(), o = b.getBoundingClientRect();
            return r.top >= o.top - 1 && r.bottom <= o.bottom + 1;
        }}) && !!el.querySelector('.ci-kir-add, .ci-kir-del');
    }}""")


def _step_codegen_passes(page, assets: Path, step_ms: list[float]) -> dict:
    """Step through every codegen pass of the GPT-2 block (inspector 2) and every kernel-IR rewrite of
    each (up to 15), checking the kernel list, the highlighted and scrolled-to lines, and the links
    statement -> AIR node -> graph -> kernel IR and statement -> C lines."""
    nth = 2
    kv = page.locator(".caten-inspector").nth(nth)
    kv.scroll_into_view_if_needed()
    _wait_ready(page, timeout=180_000, nth=nth)
    n_passes = int(kv.locator(".ci-pass-slider").get_attribute("max")) + 1
    kv.locator(".ci-first").click()
    _wait_ready(page, pass_index=0, nth=nth)
    mode = lambda: page.evaluate(f"() => document.querySelectorAll('.caten-inspector')[{nth}].dataset.mode")  # noqa: E731
    kernel_passes, stepped, changed_passes, with_steps = [], 0, 0, []
    for i in range(n_passes):
        if i:
            kv.locator(".ci-next").click()
            _wait_ready(page, pass_index=i, nth=nth)
        if mode() != "kernel":
            continue
        kernel_passes.append(i)
        n_kernels = kv.locator(".ci-kir-k").count()
        assert n_kernels >= 2, f"pass {i}: a GPT-2 block has more than one kernel"
        n_rw = int(kv.locator(".ci-rw-slider").get_attribute("max"))
        if n_rw == 0:
            continue
        changed_passes += 1
        with_steps.append(i)
        kv.locator(".ci-view").select_option("side")
        _wait_ready(page, pass_index=i, nth=nth)
        for k in range(1, min(n_rw, 15) + 1):
            t0 = time.perf_counter()
            kv.locator(".ci-rw-next").click()
            _wait_ready(page, pass_index=i, rewrite=k, nth=nth)
            step_ms.append((time.perf_counter() - t0) * 1e3)
            assert _highlight_visible(page, nth), f"pass {i} rewrite {k}: changed lines highlighted and in view"
            stepped += 1
        if changed_passes == 2:
            kv.scroll_into_view_if_needed()
            kv.screenshot(path=str(assets / "inspector_kir.png"))
    assert len(kernel_passes) >= 4 and changed_passes >= 3, (kernel_passes, changed_passes)

    # a changed statement: its AIR nodes and its C lines; the node in the graph; back to the kernel IR
    last = kernel_passes[-1]
    kv.locator(f".ci-pass[data-index='{with_steps[0]}']").click()
    _wait_ready(page, pass_index=with_steps[0], nth=nth)
    kv.locator(".ci-rw-next").click()
    _wait_ready(page, pass_index=with_steps[0], rewrite=1, nth=nth)
    kv.locator(".ci-kir-row.ci-kir-add, .ci-kir-row.ci-kir-del").first.click()
    kv.locator(".ci-kir-stmt").wait_for(timeout=10_000)
    details = kv.locator(".ci-details").inner_text()
    assert "AIR nodes" in details and "C lines" in details
    kv.locator(".ci-kir-goto-c").first.click()
    page.wait_for_function(
        f"() => document.querySelectorAll('.caten-inspector')[{nth}].querySelectorAll('.ci-c-row.ci-c-hit').length > 0",
        timeout=10_000,
    )
    kv.locator(".ci-tab[data-pane='graph']").click()
    kv.locator(".ci-kir-node").first.click()
    page.wait_for_function(
        f"() => {{ const el = document.querySelectorAll('.caten-inspector')[{nth}]; return el.dataset.mode === 'graph' "
        "&& el.dataset.state === 'ready' && el.querySelector('.ci-node-table'); }",
        timeout=120_000,
    )
    assert kv.locator(".ci-goto-kir").count() >= 1, "a node's details link to its kernel-IR statements"
    assert "fusion" in kv.locator(".ci-node-table").inner_text()  # the scheduler's decision for the node
    assert kv.locator(".ci-fusion").inner_text().startswith("fusion: ")  # the schedule's fusion log
    kv.locator(".ci-goto-kir").first.click()
    _wait_ready(page, nth=nth)
    page.wait_for_function(
        f"() => document.querySelectorAll('.caten-inspector')[{nth}].querySelector('.ci-kir-row.ci-kir-sel')",
        timeout=10_000,
    )
    assert mode() == "kernel" and int(page.evaluate(
        f"() => document.querySelectorAll('.caten-inspector')[{nth}].dataset.pass")) <= last
    return {"kernel_passes": len(kernel_passes), "rewrites_stepped": stepped}


def test_inspector_in_jupyterlab(tmp_path):
    sync_api, chromium = playwright_and_chromium()
    _notebook(tmp_path / "caten_test.ipynb")
    errors: list[str] = []
    step_ms: list[float] = []  # click -> drawn, seen from Playwright (includes its polling)
    render_ms: list[float] = []  # measured inside the page: step -> SVG in the DOM
    with jupyter_lab(tmp_path) as base, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.on("pageerror", lambda e: errors.append(f"pageerror: {e}"))
        page.on(
            "console",
            lambda m: (
                errors.append(f"console: {m.text}")
                if m.type == "error" and "caten" in (m.text + str(m.location)).lower()
                else None
            ),
        )
        page.goto(f"{base}/lab/tree/caten_test.ipynb?token=catentest")
        page.wait_for_selector(".jp-Notebook", timeout=90_000)
        page.wait_for_selector("text=/\\| Idle/", timeout=90_000)
        page.click("text=Run", timeout=10_000)
        page.click("text=Run All Cells", timeout=10_000)
        page.wait_for_selector(".caten-inspector", timeout=120_000)
        _wait_ready(page, timeout=120_000)
        insp = page.locator(".caten-inspector").first
        # the README's screenshots are refreshed on request only: a test run never edits tracked files
        assets = REPO / "assets" if os.environ.get("CATEN_UPDATE_SCREENSHOTS") == "1" else tmp_path
        assets.mkdir(exist_ok=True)
        n_passes = int(page.evaluate("() => document.querySelector('.ci-pass-slider').max")) + 1
        layout_mode = page.evaluate("() => document.querySelector('.caten-inspector').dataset.layout")
        assert layout_mode == "worker", f"Graphviz should lay out in a Web Worker, ran on the {layout_mode}"
        assert n_passes >= 3

        # step through every pass from the first
        insp.locator(".ci-first").click()
        _wait_ready(page, pass_index=0)
        signatures = {_graph_signature(page)}
        for i in range(1, n_passes):
            t0 = time.perf_counter()
            insp.locator(".ci-next").click()
            _wait_ready(page, pass_index=i)
            step_ms.append((time.perf_counter() - t0) * 1e3)
            render_ms.append(_render_ms(page))
            signatures.add(_graph_signature(page))
        assert len(signatures) >= 3, "the drawn graph should change while stepping through passes"

        # every rewrite of the first pass that has rewrites, in diff view
        counts = page.evaluate(
            "() => [...document.querySelectorAll('.ci-pass')].map(e => e.querySelector('.ci-pass-meta').textContent)"
        )
        with_rw = next(i for i, t in enumerate(counts) if " rw" in t)
        insp.locator(f".ci-pass[data-index='{with_rw}']").click()
        _wait_ready(page, pass_index=with_rw)
        insp.locator(".ci-view").select_option("diff")
        _wait_ready(page, pass_index=with_rw)
        n_rw = int(page.evaluate("() => document.querySelector('.ci-rw-slider').max"))
        assert n_rw >= 1
        rw_sigs = set()
        for k in range(1, min(n_rw, 40) + 1):
            t0 = time.perf_counter()
            insp.locator(".ci-rw-next").click()
            _wait_ready(page, pass_index=with_rw, rewrite=k)
            step_ms.append((time.perf_counter() - t0) * 1e3)
            render_ms.append(_render_ms(page))
            rw_sigs.add(_graph_signature(page))
        assert len(rw_sigs) >= min(n_rw, 2)

        # hide unchanged passes: the pass list shrinks; play steps on its own, pause stops it
        n_listed = insp.locator(".ci-pass").count()
        insp.locator(".ci-hide").check()
        page.wait_for_function(
            f"() => document.querySelectorAll('.caten-inspector')[0]"
            f".querySelectorAll('.ci-pass').length < {n_listed}",
            timeout=10_000,
        )
        insp.locator(".ci-hide").uncheck()
        insp.locator(".ci-first").click()
        _wait_ready(page, pass_index=0)
        insp.locator(".ci-play").click()
        page.wait_for_function(
            "() => Number(document.querySelector('.caten-inspector').dataset.pass) >= 2", timeout=30_000
        )
        insp.locator(".ci-play").click()
        page.locator(f".ci-pass[data-index='{with_rw}']").first.click()
        _wait_ready(page, pass_index=with_rw)

        # keyboard: the right arrow moves to the next pass
        insp.focus()
        page.keyboard.press("ArrowRight")
        _wait_ready(page, pass_index=with_rw + 1)
        page.keyboard.press("ArrowLeft")
        _wait_ready(page, pass_index=with_rw)

        # the scheduled graph: fused kernels drawn as frames; collapsed into boxes; a box expands on click
        names = page.evaluate("() => [...document.querySelectorAll('.ci-pass-name')].map(e => e.textContent)")
        sched = next(i for i, t in enumerate(names) if t.endswith(". schedule"))
        insp.locator(f".ci-pass[data-index='{sched}']").click()
        _wait_ready(page, pass_index=sched)
        insp.locator(".ci-view").select_option("after")
        _wait_ready(page, pass_index=sched)
        assert insp.locator(".ci-graph g.cluster").count() >= 2
        insp.locator(".ci-collapse").check()
        page.wait_for_function(
            "() => document.querySelectorAll('.ci-graph g.node[id^=ak]').length >= 2", timeout=30_000
        )
        n_boxes = insp.locator(".ci-graph g.node[id^=ak]").count()
        insp.locator(".ci-graph g.node[id^=ak]").first.click()
        page.wait_for_function(
            f"() => document.querySelectorAll('.ci-graph g.node[id^=ak]').length == {n_boxes - 1}",
            timeout=30_000,
        )
        insp.screenshot(path=str(assets / "inspector_kernels.png"))

        # click nodes until one has C lines: details (op/shape/dtype/source), then its C lines and back
        insp.locator(".ci-collapse").uncheck()
        _wait_ready(page, pass_index=sched)
        nodes = insp.locator(".ci-graph g.node[id^=an]")
        for j in range(min(nodes.count(), 40)):
            nodes.nth(j).click()
            insp.locator(".ci-node-table").wait_for(timeout=10_000)
            if insp.locator(".ci-goto-c").count():
                break
        details = insp.locator(".ci-details").inner_text()
        assert "op" in details and "shape" in details and "dtype" in details and "source" in details
        insp.locator(".ci-goto-c").first.click()
        page.wait_for_selector(".ci-c-row.ci-c-hit", timeout=10_000)
        assert insp.locator(".ci-c-code .kt").count() > 0 and insp.locator(".ci-c-code .k").count() > 0
        insp.screenshot(path=str(assets / "inspector_c.png"))
        insp.locator(".ci-goto-graph").first.click()
        page.wait_for_selector(".ci-graph g.node.ci-selected", timeout=10_000)
        insp.locator(".ci-tab[data-pane='profile']").click()
        page.wait_for_selector(".ci-profile-table", timeout=10_000)
        page.wait_for_selector(
            ".ci-profile-img[src^='data:image/png']", timeout=30_000
        )  # drawn by the kernel on request
        insp.screenshot(path=str(assets / "inspector_profile.png"))
        insp.locator(".ci-tab[data-pane='graph']").click()

        # the main screenshot: one rewrite of simplify, diff view, focused on what it touched
        insp.locator(f".ci-pass[data-index='{with_rw}']").click()
        _wait_ready(page, pass_index=with_rw)
        page.keyboard.press("Escape")
        insp.locator(".ci-rw-next").click()
        _wait_ready(page, pass_index=with_rw, rewrite=1)
        insp.locator(".ci-view").select_option("side")
        insp.locator(".ci-hops").fill("3")
        insp.locator(".ci-hops").press("Enter")
        _wait_ready(page, pass_index=with_rw, rewrite=1)
        page.wait_for_timeout(300)
        insp.screenshot(path=str(assets / "inspector.png"))
        with page.expect_download() as download:  # SVG export straight from the browser (no `dot` needed)
            insp.locator(".ci-svg").click()
        assert download.value.suggested_filename.endswith("_simplify.svg")

        # the generator widget streams tokens from the fake generator
        page.locator(".caten-runner .cr-generate").click()
        try:
            page.wait_for_function(
                "() => document.querySelectorAll('.caten-runner .cr-tok').length >= 12", timeout=60_000
            )
        except Exception:
            page.screenshot(path=str(Path(tempfile.gettempdir()) / "caten_runner_failure.png"), full_page=True)
            print(page.locator(".caten-runner").inner_text())
            print(errors)
            raise
        page.wait_for_function(
            "() => document.querySelector('.caten-runner').dataset.running === '0'", timeout=30_000
        )
        stats = page.locator(".caten-runner .cr-stats").inner_text()
        assert "12 tokens" in stats

        page.locator(".caten-runner").screenshot(path=str(assets / "gpt2_runner.png"))

        # a multi-layer GPT-2: over the node cap, so nothing is laid out until asked; collapsing by kernel
        # draws one box per fused kernel; "render anyway" lays out every node
        big = page.locator(".caten-inspector").nth(1)
        big.locator(".ci-cap").wait_for(timeout=180_000)
        big_nodes = int(big.locator(".ci-caption").first.inner_text().split("·")[1].split()[0])
        t0 = time.perf_counter()
        big.locator("text=collapse by kernel").click()
        page.wait_for_function(
            "() => { const e = document.querySelectorAll('.caten-inspector')[1]; "
            "return e.dataset.state === 'ready' && e.querySelectorAll('g.node').length > 0; }",
            timeout=120_000,
        )
        collapsed_ms = (time.perf_counter() - t0) * 1e3
        big_boxes = big.locator("g.node").count()
        big.scroll_into_view_if_needed()
        big.screenshot(path=str(assets / "inspector_big.png"))
        big.locator(".ci-next").click()
        page.wait_for_function(
            "() => document.querySelectorAll('.caten-inspector')[1].dataset.pass === '1' && "
            "document.querySelectorAll('.caten-inspector')[1].dataset.state === 'ready'",
            timeout=120_000,
        )
        big_step_ms = float(
            page.evaluate("() => document.querySelectorAll('.caten-inspector')[1].dataset.renderMs")
        )
        kir_ms: list[float] = []
        kir = _step_codegen_passes(page, assets, kir_ms)
        browser.close()
    print(
        f"\nper-step time over {len(step_ms)} steps ({n_passes} passes + {min(n_rw, 40)} rewrites), one-layer GPT-2: "
        f"in-page median {statistics.median(render_ms):.0f} ms / max {max(render_ms):.0f} ms; "
        f"click-to-drawn via Playwright median {statistics.median(step_ms):.0f} ms / max {max(step_ms):.0f} ms"
    )
    print(
        f"{BIG_LAYERS}-layer GPT-2: {big_nodes} nodes over the cap; collapsed to {big_boxes} boxes/nodes in {collapsed_ms:.0f} ms "
        f"(click-to-drawn), next pass in {big_step_ms:.0f} ms (in-page)"
    )
    print(
        f"GPT-2 block codegen passes: {kir['kernel_passes']} passes with a kernel program, "
        f"{kir['rewrites_stepped']} kernel-IR rewrites stepped; click-to-drawn median "
        f"{statistics.median(kir_ms):.0f} ms / max {max(kir_ms):.0f} ms"
    )
    assert big_boxes < big_nodes
    assert not errors, errors
    assert os.path.getsize(assets / "inspector.png") > 10_000
