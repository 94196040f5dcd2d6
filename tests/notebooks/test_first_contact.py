"""A newcomer's first look shows the compiler working: the README's ten lines and notebook 01's first
``%%caten`` cell run as written (in a real IPython shell, from another directory) and the passes the
text points at really change something: ``simplify`` and ``cse`` rewrite, ``schedule`` fuses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from IPython.core.interactiveshell import InteractiveShell

ROOT = Path(__file__).resolve().parents[2]


def readme_section_code(after: str = "") -> list[str]:
    """The Python code blocks of the README's "Ten lines" section: before the text ``after``, or after it."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Ten lines", 1)[1].split("\n## ", 1)[0]
    head, _, tail = section.partition("Run the bundled GPT-2")
    return re.findall(r"```python\n(.*?)```", tail if after else head, re.S)


def readme_ten_lines() -> list[str]:
    return readme_section_code()


def notebook_cells(name: str) -> list[str]:
    nb = json.loads((ROOT / "notebooks" / name).read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.fixture
def shell(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # "from any directory": nothing may depend on the repository as cwd
    ip = InteractiveShell.instance()
    yield ip
    ip.user_ns.pop("_caten", None)


def run_cells(ip: InteractiveShell, cells: list[str]):
    for cell in cells:
        r = ip.run_cell(cell)
        assert r.error_before_exec is None and r.error_in_exec is None, (
            cell,
            r.error_before_exec,
            r.error_in_exec,
        )
    return ip.user_ns["_caten"]


def assert_passes_do_something(res) -> None:
    trace = res.trace
    simplify, cse = trace["simplify"], trace["cse"]
    assert simplify.graph_rewrites and simplify.nodes_after < simplify.nodes_before, simplify
    assert cse.graph_rewrites and cse.nodes_after < cse.nodes_before, cse
    # the scheduler fuses: fewer kernels than compute nodes, and its log says what it inlined
    fusion = trace["schedule"].artifacts["fusion"]
    inlined = [d for d in fusion if d.action == "inline"]
    assert inlined, [d.to_json() for d in fusion]
    kernels = res.program.schedule.kernels
    assert any(len(k.node_ids) >= 5 for k in kernels), [len(k.node_ids) for k in kernels]


def test_readme_ten_lines_run_as_written_and_every_named_pass_changes_something(shell):
    cells = readme_ten_lines()
    assert len(cells) == 2 and cells[1].startswith("%%caten")
    assert "randn" not in cells[1]  # fixed from_numpy data: no random-number internals in the graph
    res = run_cells(shell, cells)
    assert_passes_do_something(res)
    assert res.trace["simplify"].rule_counts() == {"x*1 -> x": 1}  # the README names this rewrite
    assert len(res.program.schedule.kernels) == 2  # ... and says: the matmul, then one fused kernel
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16), dtype=np.float32)
    w = rng.standard_normal((16, 4), dtype=np.float32)
    logits = (x @ w).astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    np.testing.assert_allclose(res.outputs[0], -(np.exp(logp) * logp).sum(-1), rtol=1e-4, atol=1e-5)
    assert "matches the NumPy interpreter" in json.loads(res.inspector.data_json)["result"]["note"]


def test_notebook_01_first_program_makes_the_passes_work(shell):
    cells = notebook_cells("01_quick_tour.ipynb")
    setup = next(c for c in cells if "%load_ext caten_lab" in c)
    first = next(c for c in cells if c.startswith("%%caten"))
    assert "randn" not in first
    res = run_cells(shell, [setup, first])
    assert_passes_do_something(res)
    assert res.trace["simplify"].rule_counts() == {"x*1 -> x": 1}  # what the notebook's text names
    assert res.trace["cse"].rule_counts().get("cse: exp2") == 1
    assert len(res.program.schedule.kernels) == 3  # two matmuls, then everything after them in one kernel
    entropy = res.outputs[0]
    assert entropy.shape == (4,) and np.all(entropy > 0) and np.all(entropy < np.log(10))


def test_readme_bundled_gpt2_example_runs_from_another_directory(tmp_path, monkeypatch, capsys):
    (code,) = readme_section_code(after="Run the bundled GPT-2")
    assert '"assets/' not in code  # no path relative to the clone's root
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {})
    text = capsys.readouterr().out
    assert text.startswith("BRUTUS:\n") and len(text) > len("BRUTUS:\n") + 20, text
