"""The compiler's tuning constants, as part of every compile-cache key.

Module-level knobs such as ``rowblock.TILE_BYTES`` or ``hoist.ENABLED`` change the generated code
without changing the compiler's source, and tests and benchmarks set them at run time. A cached
compile keyed only by graph, options and source would hand a program built under one setting to a
caller running under another.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import lru_cache
from types import ModuleType

_SCALARS = (bool, int, float, str)


@lru_cache(maxsize=1)
def _knob_names() -> tuple[tuple[ModuleType, str], ...]:
    """(module, name) of every upper-case scalar constant of the pass and codegen modules.

    Every module of both packages is imported here, so the set does not depend on which of them
    happened to be loaded already (some are imported lazily by the pipeline).
    """
    import caten_lab.codegen
    import caten_lab.passes

    out = []
    for pkg in (caten_lab.passes, caten_lab.codegen):
        for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
            module = importlib.import_module(f"{pkg.__name__}.{info.name}")
            for attr, value in sorted(vars(module).items()):
                if attr.isupper() and value.__class__ in _SCALARS:
                    out.append((module, attr))
    return tuple(out)


def tuning_knobs() -> tuple[object, ...]:
    """The current value of every tuning constant, in a fixed order (a few microseconds)."""
    return tuple(getattr(module, attr) for module, attr in _knob_names())
