"""The contract between the C renderer and the parallel build (``runtime/parallel_build.py``).

The renderer declares every kernel function ``CL_KERNEL_LINKAGE __attribute__((noinline))``, with
the prelude defining ``CL_KERNEL_LINKAGE`` as ``static`` unless it is already defined, and brackets
each kernel function with two whole comment lines (``kernel_begin(name)`` ... ``KERNEL_END``) so a
reader of the C (and of a cached ``.c``) sees where each kernel starts and ends. The parallel build
composes its translation units from the renderer's units (``Rendered.units``), never from the C
text; it defines ``LINKAGE_MACRO`` as hidden visibility so kernels link across units while the
library exports what the one-file build exports.
"""

from __future__ import annotations

LINKAGE_MACRO = "CL_KERNEL_LINKAGE"
# ``Rendered.units``: (name, text) in file order; the first is the prelude (every translation unit
# needs it), units named in MAIN_UNITS go with the entry, every other unit is one kernel function.
PRELUDE_UNIT = "prelude"
MAIN_UNITS = frozenset({"prototypes", "entry"})
KERNEL_END = "/* cl:end */"


def kernel_begin(name: str) -> str:
    """The marker line before kernel function ``name``."""
    return f"/* cl:kernel {name} */"
