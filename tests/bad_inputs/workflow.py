"""Bad inputs: workflow. See tests/bad_inputs/__init__.py for the case format."""

from __future__ import annotations

from bad_inputs import Case

CASES: list[Case] = []
