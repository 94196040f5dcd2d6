"""Kernel-IR programs for the tests of building and caching rendered C (no lowering involved)."""

from __future__ import annotations

import numpy as np

import caten_lab.codegen.kir as k
from caten_lab.air.dtypes import DType
from caten_lab.codegen.kir_walk import alu, const, var

F, I = DType.float32, DType.int64
N_KERNELS = 5


def _kernel(j: int) -> k.Function:
    """Kernel j: p0[i] = p1[i] * (j + 2) - j, then j more loops p0[i] += m (m = 1..j): sizes differ."""
    loops = [k.For("i", const(0), var("S_n"), const(1), (
        k.Store("p0", var("i"), alu("sub", alu("mul", k.Load("p1", var("i"), F), const(float(j + 2), F)),
                                    const(float(j), F))),))]
    for m in range(1, j + 1):
        loops.append(k.For("i", const(0), var("S_n"), const(1), (
            k.Store("p0", var("i"), alu("add", k.Load("p0", var("i"), F), const(float(m), F))),)))
    sym = k.Decl("S_n", I, k.Load("sym", const(0), I), const=True)
    params = (k.Param("p0", F), k.Param("p1", F, const=True), k.Param("sym", I, const=True), k.Param("err", I))
    return k.Function(f"kern{j}", params, (sym, *loops), linkage="kernel", meta=(("kernel_names", (f"k{j}",)),))


def chain() -> k.Program:
    """Buffer j + 1 = kernel j of buffer j, for j < N_KERNELS."""
    fns = tuple(_kernel(j) for j in range(N_KERNELS))
    calls = tuple(k.KernelCall(f"kern{j}", (j + 1, j)) for j in range(N_KERNELS))
    return k.Program(fns, calls, ("n",), tuple(f"b{j}" for j in range(N_KERNELS + 1)))


def reference(x: np.ndarray) -> np.ndarray:
    for j in range(N_KERNELS):
        x = x * np.float32(j + 2) - np.float32(j) + np.float32(j * (j + 1) // 2)
    return x
