import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import pytest  # noqa: E402

from caten_lab.config import settings  # noqa: E402


@pytest.fixture(autouse=True)
def _numpy_backend():
    """nn layers are checked on the reference interpreter; tests/models runs GPT-2 compiled."""
    with settings(backend="numpy"):
        yield
