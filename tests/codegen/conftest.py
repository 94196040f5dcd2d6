import os

import pytest


@pytest.fixture(scope="module", autouse=True)
def _private_cache_dir(tmp_path_factory):
    """Each codegen test module compiles into a cache dir of its own: the tests switch codegen knobs,
    and a shared cache must never be what decides which program a test gets."""
    old = os.environ.get("CATEN_CACHE_DIR")
    os.environ["CATEN_CACHE_DIR"] = str(tmp_path_factory.mktemp("caten_cache"))
    yield
    if old is None:
        os.environ.pop("CATEN_CACHE_DIR", None)
    else:
        os.environ["CATEN_CACHE_DIR"] = old
