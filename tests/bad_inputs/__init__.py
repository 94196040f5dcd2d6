"""The bad-input catalogue, one module per area; ``tests/test_bad_inputs.py`` runs them all.

Each module defines ``CASES: list[Case]`` with ``Case = (id, zero-argument callable that must raise,
error type, words the message must contain)``: the callable must raise that error (a ``CatenError``),
never crash the process and never return. Areas: ``runtime`` (compiled entry checks, safety levels),
``caches`` (compile and weight caches), ``loaders`` (safetensors, GGUF, vocabularies, both the Python
and the exported C loader), ``workflow`` (actions, the exported CLI and C API, the ``%%caten`` magic),
``frontend`` (tensor ops), ``trace`` (codegen passes read back from a trace, the Inspector's kernel view).
"""

from __future__ import annotations

from collections.abc import Callable

Case = tuple[str, Callable[[], object], type[BaseException], tuple[str, ...]]
