"""Every tutorial notebook runs top to bottom in a real Jupyter kernel (nbclient) at small size.

CATEN_NOTEBOOK_SMALL=1 switches the notebooks to tiny configurations and few tokens. Each test checks
that no cell failed and one or two outputs that show the notebook did its job. The notebooks are stored
without outputs; that is checked too (cheap, no kernel).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from caten_lab.config import config

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
NAMES = [
    "01_quick_tour",
    "02_air_graph",
    "03_passes",
    "04_loops_to_c",
    "05_gpt2",
    "06_workflows",
    "07_performance",
    "08_real_llm",
    "09_training",
]
CELL_TIMEOUT_S = 300
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

pytestmark = pytest.mark.xdist_group("notebooks")


@pytest.fixture(scope="module")
def kernel_env():
    """Environment of the kernels: small sizes, the session's compile cache (notebook 08's SmolLM2 is then
    the program the chat tests compile: ~30 s less), no OpenMP spinning."""
    env = {
        "CATEN_NOTEBOOK_SMALL": "1",
        "CATEN_CACHE_DIR": str(config().cache_dir),
        "OMP_WAIT_POLICY": "PASSIVE",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        # the kernel imports this checkout's caten_lab, whatever the venv's editable install points at
        "PYTHONPATH": os.pathsep.join(p for p in (str(NOTEBOOKS.parent), os.environ.get("PYTHONPATH")) if p),
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel process inherits this process's environment
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


class Executed:
    """A notebook after execution, with helpers to read its outputs."""

    def __init__(self, nb) -> None:  # noqa: ANN001 - an nbformat NotebookNode
        self.nb = nb

    def cells(self):  # noqa: ANN201
        return [c for c in self.nb.cells if c.cell_type == "code"]

    def outputs(self):  # noqa: ANN201
        return [o for c in self.cells() for o in c.get("outputs", [])]

    def text(self) -> str:
        """All stream and text/plain output, in order."""
        parts = []
        for o in self.outputs():
            if o.output_type == "stream":
                parts.append(o.text)
            elif o.output_type in ("execute_result", "display_data"):
                parts.append(o.data.get("text/plain", ""))
        return "\n".join(parts)

    def mimes(self) -> set[str]:
        return {
            m for o in self.outputs() if o.output_type in ("execute_result", "display_data") for m in o.data
        }

    def errors(self) -> list[str]:
        return [f"{o.ename}: {o.evalue}" for o in self.outputs() if o.output_type == "error"]


def run_notebook(name: str, cwd: Path, km) -> Executed:  # noqa: ANN001 - a KernelManager
    """Run a notebook in a kernel whose working directory is ``cwd``: not notebooks/, so a notebook that
    finds files relative to where it is opened (``Path("..") / "assets"``) fails here."""
    path = NOTEBOOKS / f"{name}.ipynb"
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT_S,
        kernel_name="python3",
        allow_errors=True,  # run every cell, then report all failures at once
        resources={"metadata": {"path": str(cwd)}},
    )
    client.execute()
    ex = Executed(nb)
    assert not ex.errors(), f"{name}: cells failed:\n" + "\n".join(ex.errors())
    unrun = [
        c.source.splitlines()[0] for c in ex.cells() if c.source.strip() and c.get("execution_count") is None
    ]
    assert not unrun, f"{name}: cells not executed: {unrun}"
    return ex


@pytest.mark.parametrize("name", NAMES)
def test_notebook_is_stored_without_outputs(name):
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))
    nbformat.validate(nbformat.from_dict(nb))
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code, name
    assert all(c["outputs"] == [] and c["execution_count"] is None for c in code), (
        f"{name}: strip the outputs"
    )
    assert nb["cells"][-1]["cell_type"] == "code", (
        f"{name} should end with a cell the reader can change and re-run"
    )


@pytest.mark.parametrize("name", NAMES)
def test_notebook_finds_files_without_relative_paths(name):
    """A notebook must run from any directory: repository files are found from the package
    (``caten_lab.cli.BUNDLED_MODEL``), never as ``Path("..")`` / ``"../assets"`` from notebooks/."""
    nb = json.loads((NOTEBOOKS / f"{name}.ipynb").read_text(encoding="utf-8"))
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert 'Path("..")' not in code and '"../' not in code and "'../" not in code, name


def test_01_quick_tour(tmp_path, kernel_env, ipc_kernel):
    ex = run_notebook("01_quick_tour", tmp_path, ipc_kernel())
    text = ex.text()
    assert "between 0 and log(10): True" in text
    assert "matches the NumPy interpreter" in text
    assert "x*1 -> x ×1" in text and "cse: exp2 ×1" in text  # the passes the text points at did something
    assert "3 kernels" in text
    assert WIDGET_MIME in ex.mimes()  # the Inspector widget was displayed
    assert "image/png" in ex.mimes()  # the profile chart


def test_02_air_graph(tmp_path, kernel_env, ipc_kernel):
    text = run_notebook("02_air_graph", tmp_path, ipc_kernel()).text()
    assert "same structure, same hash: True" in text and "after changing one operand: False" in text
    assert "after 3 rewrite(s): 3 nodes" in text
    assert "still correct: True" in text


def test_03_passes(tmp_path, kernel_env, ipc_kernel):
    text = run_notebook("03_passes", tmp_path, ipc_kernel()).text()
    assert "{'x + x -> x * 2': 1}" in text  # the custom RewritePass fired
    assert "op histogram after dce:" in text and "still correct: True" in text
    assert "miscompile in pass 'relu_is_identity'" in text and "rewrite #1" in text  # the bisector found it


def test_04_loops_to_c(tmp_path, kernel_env, ipc_kernel):
    text = run_notebook("04_loops_to_c", tmp_path, ipc_kernel()).text()
    assert "FOR l0 in [0, S_rows)" in text  # the loop IR keeps the symbolic size
    assert "rows=5 matches NumPy: True" in text
    assert "caught SymbolError (a CatenError)" in text and "the window needs pos <= 4" in text  # at entry
    assert "warm:" in text and "cached=True" in text


def test_05_gpt2(tmp_path, kernel_env, ipc_kernel):
    ex = run_notebook("05_gpt2", tmp_path, ipc_kernel())
    text = ex.text()
    assert "ROMEO:\nBut soft, what light" in text
    stats = next(line for line in text.splitlines() if "tokens · first token after" in line)
    assert int(stats.split()[0]) > 0
    assert "same next token: True" in text  # agrees with transformers
    for fmt in ("fp16", "int8"):
        assert any(line.startswith(fmt) for line in text.splitlines()), fmt
    assert WIDGET_MIME in ex.mimes()  # the generator widget
    # the text the generator widget generated is printed (repr of a non-empty string)
    widget_text = [line for line in text.splitlines() if line.startswith(("'", '"')) and len(line) > 2]
    assert widget_text, text[-2000:]


def test_06_workflows(tmp_path, kernel_env, ipc_kernel):
    text = run_notebook("06_workflows", tmp_path, ipc_kernel()).text()
    line = next(ln for ln in text.splitlines() if ln.startswith("interpreted:"))
    _, ours, _, ref, *_ = line.split()
    assert ours == ref
    assert "ActionTypeError: variable 'found' is possibly undefined" in text
    assert "CatenError: not supported in an @action: list comprehensions" in text
    assert "RuntimeCheckError: index" in text
    assert "same as `tokenizers`: True" in text
    assert "picked token 3 (error code 0)" in text or "no C compiler found" in text
    assert "exported program ran without Python" in text


def test_07_performance(tmp_path, kernel_env, ipc_kernel):
    ex = run_notebook("07_performance", tmp_path, ipc_kernel())
    text = ex.text()
    assert "fitted exponent of the pass time:" in text
    assert "same greedy tokens: True" in text
    assert "caten_lab / PyTorch:" in text
    assert "image/png" in ex.mimes()


def test_08_real_llm(tmp_path, kernel_env, smollm2_gguf, monkeypatch, ipc_kernel):
    monkeypatch.setenv("CATEN_SMOLLM2", str(smollm2_gguf))  # before the kernel starts: it inherits it
    ex = run_notebook("08_real_llm", tmp_path, ipc_kernel())
    text = ex.text()
    assert f"{smollm2_gguf} " in text  # the fixture's file, not a download
    assert "tensor types: {'Q8_0': 1, 'F32': 61, 'Q4_1': 210}" in text
    assert "<|im_start|>assistant" in text and "an answer ends at: ['<|im_end|>']" in text
    assert "Berlin" in text  # the streamed greedy answer
    assert WIDGET_MIME in ex.mimes()  # the generator widget, and the Inspector
    widget_text = [line for line in text.splitlines() if line.startswith(("'", '"')) and len(line) > 2]
    assert widget_text, text[-2000:]
    nodes, kernels = next(ln for ln in text.splitlines() if ln.startswith("one block:")).split()[2:6:3]
    assert int(nodes) > 0 and int(kernels) > 0
    rows = {
        ln[:22].strip(): ln[22:].split()
        for ln in text.splitlines()
        if ln.startswith(("GPT-2 (", "SmolLM2-135M"))
    }
    gpt2_mb, _, gpt2_tps = rows["GPT-2 (notebook 05)"]
    smol_mb, _, smol_tps = rows["SmolLM2-135M Q4_1"]
    assert float(gpt2_mb) > 0 and float(gpt2_tps) > 0 and float(smol_tps) > 0
    # the weights are the file's blocks (not dequantized to 4 bytes a weight): at most the file's size
    assert 0.9 * smollm2_gguf.stat().st_size < float(smol_mb) * 2**20 < smollm2_gguf.stat().st_size


def test_09_training(tmp_path, kernel_env, ipc_kernel):
    ex = run_notebook("09_training", tmp_path, ipc_kernel())
    text = ex.text()
    assert "matches finite differences: True" in text
    assert "loss went down: True" in text
    assert "checkpoint generates: True" in text
    assert "exported trainer ran: True" in text and "saved " in text  # the C trainer, from the checkpoint
    assert WIDGET_MIME in ex.mimes()  # the Inspector on the training step
    assert "image/png" in ex.mimes()  # the live loss plot
