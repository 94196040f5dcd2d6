"""Pipelines for tests that look at what the loop passes decided, before the ``team`` pass rewrites the
parallel loops into each thread's chunks (tests/codegen/test_team.py checks that rewrite itself)."""

from __future__ import annotations

from caten_lab.compiler import default_pipeline


def pre_team(pm=None):  # noqa: ANN001, ANN201 - a PassManager
    """``pm`` (default: the default pipeline) without the ``team`` pass."""
    pm = default_pipeline() if pm is None else pm
    pm.remove("team")
    return pm
