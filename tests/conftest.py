import os
import sys
import zlib

import numpy as np
import pytest

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
