"""The export's modules form layers: the library build (c_library, model_tables) below both workflows,
no module importing one above it (before: export.py and perplexity.py imported each other)."""

from __future__ import annotations

import subprocess
import sys

import pytest

EXPORT = ("caten_lab.workflow.export", "caten_lab.workflow.perplexity", "caten_lab.workflow.c_library",
          "caten_lab.workflow.model_tables")


def _loaded_after(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(m for m in sys.modules if m.startswith('caten_lab.workflow')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize(
    ("module", "above"),
    [
        ("caten_lab.workflow.perplexity", {"caten_lab.workflow.export"}),
        ("caten_lab.workflow.c_library", {"caten_lab.workflow.export", "caten_lab.workflow.perplexity"}),
        ("caten_lab.workflow.model_tables", set(EXPORT) - {"caten_lab.workflow.model_tables"}),
    ],
)
def test_a_layer_does_not_import_the_ones_above(module: str, above: set[str]) -> None:
    loaded = _loaded_after(module)
    assert module in loaded
    assert not loaded & above, sorted(loaded & above)
