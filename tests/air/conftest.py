"""Shared builders for the AIR tests: small graphs with one input of a given shape and dtype."""

from __future__ import annotations

import pytest

from caten_lab.air import Graph, dtypes


@pytest.fixture
def g() -> Graph:
    return Graph()


@pytest.fixture
def fx(g: Graph) -> str:
    """A named float32 input of shape (2, 3) in ``g``."""
    return g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32, name="x")
