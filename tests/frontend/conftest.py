"""Frontend semantics are tested on the reference interpreter (fast); test_backend_c.py covers the
compiled backend behind the same Tensor.numpy() call, and tests/compiler fuzzes C against the interpreter."""

import pytest

from caten_lab.config import settings


@pytest.fixture(autouse=True)
def _numpy_backend(request):
    if request.node.get_closest_marker("c_backend"):
        yield
        return
    with settings(backend="numpy"):
        yield
