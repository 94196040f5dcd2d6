"""Shared builders for the AIR tests: small graphs with one input of a given shape and dtype."""

from __future__ import annotations

import os

import pytest

from caten_lab.air import Graph, dtypes


def slow_scale() -> int:
    """Multiplier for @slow tests: CATEN_SLOW_SCALE (default 1 = the reduced CI size)."""
    try:
        return max(1, int(os.environ.get("CATEN_SLOW_SCALE", "1")))
    except ValueError:
        return 1


@pytest.fixture
def g() -> Graph:
    return Graph()


@pytest.fixture
def fx(g: Graph) -> str:
    """A named float32 input of shape (2, 3) in ``g``."""
    return g.insert("allocate", [], shape=(2, 3), dtype=dtypes.float32, name="x")
