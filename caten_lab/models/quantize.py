"""Weight storage formats: rewrite a traced graph so chosen weights are stored as fp16 or int8.

The graph keeps computing in float32; only the named weight inputs change. For fp16 the weight
becomes ``cast(allocate(float16))``; for int8 it becomes ``cast(allocate(int8)) * scale`` with one
float32 scale per output channel (row). Both are elementwise on the weight read, so the scheduler
fuses the dequantization into the matmul/matvec kernel that reads the weight: each weight byte is
read once per step and no dequantized copy is ever materialized.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.errors import CatenError

FORMATS = ("fp32", "fp16", "int8")


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: ``w ≈ q * scale`` with ``scale`` of shape (rows, 1)."""
    w = np.asarray(w, dtype=np.float32)
    amax = np.maximum(w.max(axis=1, keepdims=True), -w.min(axis=1, keepdims=True))
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    x = w / scale  # one temporary, then in place: this runs over every weight at load time
    np.rint(x, out=x)
    np.clip(x, -127, 127, out=x)
    return x.astype(np.int8), scale


def apply_weight_format(
    graph: Graph, arrays: dict[str, np.ndarray], names: Iterable[str], fmt: str
) -> tuple[Graph, dict[str, np.ndarray]]:
    """Store the 2-D weights ``names`` in ``fmt``; returns the rewritten graph and the new arrays.

    ``graph`` is modified in place; ``arrays`` is not (a new dict is returned).
    """
    if fmt not in FORMATS:
        raise CatenError(f"unknown weight format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    out = dict(arrays)
    if fmt == "fp32":
        return graph, out
    by_name = {n.attrs.name: n for n in graph.inputs()}
    for name in names:
        node = by_name.get(name)
        if node is None:
            raise CatenError(f"weight {name!r} is not an input of the graph")
        w = out.pop(name)
        if w.ndim != 2 or node.dtype != DType.float32:
            raise CatenError(
                f"weight {name!r}: only 2-D float32 weights can be stored as {fmt}, got {w.dtype}{w.shape}"
            )
        rows, cols = node.shape
        if fmt == "fp16":
            stored = graph.insert("allocate", [], shape=node.shape, dtype=DType.float16, name=name + ".fp16")
            new = graph.insert("cast", [stored], dtype=DType.float32)
            out[name + ".fp16"] = w.astype(np.float16)
        else:
            q, scale = quantize_int8(w)
            stored = graph.insert("allocate", [], shape=node.shape, dtype=DType.int8, name=name + ".int8")
            sc = graph.insert("allocate", [], shape=(rows, 1), dtype=DType.float32, name=name + ".scale")
            sc_b = graph.insert("view", [sc], shape=node.shape, strides=(1, 0))
            new = graph.insert("mul", [graph.insert("cast", [stored], dtype=DType.float32), sc_b])
            out[name + ".int8"] = q
            out[name + ".scale"] = scale
        graph.replace_uses(node.out, new)
        graph.remove(node.id)
    graph.sort()
    return graph, out
