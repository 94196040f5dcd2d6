"""The contract between the C renderer and the parallel build (``runtime/parallel_build.py``).

The renderer declares every kernel function ``CL_KERNEL_LINKAGE __attribute__((noinline))``, with
the prelude defining ``CL_KERNEL_LINKAGE`` as ``static`` unless it is already defined, and brackets
each kernel function with two whole comment lines (``kernel_begin(name)`` ... ``KERNEL_END``) so a
reader of the C (and of a cached ``.c``) sees where each kernel starts and ends. The parallel build
composes its translation units from the renderer's units, not from these lines; it defines
``LINKAGE_MACRO`` as hidden visibility so kernels link across units while the library exports what
the one-file build exports.
"""

from __future__ import annotations

LINKAGE_MACRO = "CL_KERNEL_LINKAGE"
KERNEL_END = "/* cl:end */"


def kernel_begin(name: str) -> str:
    """The marker line before kernel function ``name``."""
    return f"/* cl:kernel {name} */"
