"""Shared fixtures: every compiler test compiles into one session-wide temporary cache directory."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def caten_cache_dir(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    path = tmp_path_factory.mktemp("caten_cache")
    old = os.environ.get("CATEN_CACHE_DIR")
    os.environ["CATEN_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("CATEN_CACHE_DIR", None)
    else:
        os.environ["CATEN_CACHE_DIR"] = old
