"""Weight storage formats: rewrite a traced graph so chosen weights are stored as fp16 or int8.

The graph keeps computing in float32; only the named weight inputs change. For fp16 the weight
becomes ``cast(allocate(float16))``; for int8 it becomes ``cast(allocate(int8)) * scale`` with one
float32 scale per output channel (row). Both are elementwise on the weight read, so the scheduler
fuses the dequantization into the matmul/matvec kernel that reads the weight: each weight byte is
read once per step and no dequantized copy is ever materialized.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.errors import CatenError

FORMATS = ("fp32", "fp16", "int8")


def quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric per-row int8: ``w ≈ q * scale`` with ``scale`` of shape (rows, 1)."""
    q = np.empty(w.shape, np.int8)
    scale = np.empty((w.shape[0], 1), np.float32)
    convert_into(w, "int8", q, scale)
    return q, scale


_BLOCK_ROWS = 256  # int8: the float32 temporary is one block of rows, not the whole weight


def convert_into(src: np.ndarray, fmt: str, out: np.ndarray, scale: np.ndarray | None = None) -> None:
    """Write a 2-D float weight into ``out`` stored as ``fmt``, in one pass over ``src``.

    ``src`` may be any strided view (a transposed Conv1D weight, a memory-mapped file) and ``out``
    any writable buffer (a memory-mapped cache entry): transposing and converting together reads
    each weight once and never materializes a float32 copy. int8 is per row (``scale``: rows x 1),
    with exactly the arithmetic of a whole-array quantization (max, divide, round, clip in float32).
    """
    if fmt in ("fp32", "fp16"):
        np.copyto(out, src, casting="same_kind")
        return
    if fmt != "int8" or scale is None:
        raise CatenError(
            f"convert_into: format {fmt!r} needs {'a scale array' if fmt == 'int8' else 'fp32/fp16/int8'}"
        )
    amax = np.maximum(src.max(axis=1, keepdims=True), -src.min(axis=1, keepdims=True)).astype(np.float32)
    scale[...] = np.where(amax > 0, amax / np.float32(127.0), np.float32(1.0))
    for r in range(0, src.shape[0], _BLOCK_ROWS):
        x = np.asarray(src[r : r + _BLOCK_ROWS], dtype=np.float32) / scale[r : r + _BLOCK_ROWS]
        np.rint(x, out=x)
        np.clip(x, -127, 127, out=x)
        out[r : r + _BLOCK_ROWS] = x.astype(np.int8)


def format_graph(graph: Graph, names: Iterable[str], fmt: str) -> Graph:
    """Rewrite the float32 inputs ``names`` to be stored in ``fmt`` (graph only, in place).

    Separate from the array conversion so a runner whose arrays come ready-made from the
    prepared-weights cache rewrites the graph without touching any weight data.
    """
    if fmt not in FORMATS:
        raise CatenError(f"unknown weight format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    if fmt == "fp32":
        return graph
    by_name = {n.attrs.name: n for n in graph.inputs()}
    for name in names:
        node = by_name.get(name)
        if node is None:
            raise CatenError(f"weight {name!r} is not an input of the graph")
        if len(node.shape) != 2 or node.dtype != DType.float32:
            raise CatenError(
                f"weight {name!r}: only 2-D float32 weights can be stored as {fmt}, "
                f"got {node.dtype.value}{tuple(node.shape)}"
            )
        rows, _ = node.shape
        if fmt == "fp16":
            stored = graph.insert("allocate", [], shape=node.shape, dtype=DType.float16, name=name + ".fp16")
            new = graph.insert("cast", [stored], dtype=DType.float32)
        else:
            stored = graph.insert("allocate", [], shape=node.shape, dtype=DType.int8, name=name + ".int8")
            sc = graph.insert("allocate", [], shape=(rows, 1), dtype=DType.float32, name=name + ".scale")
            sc_b = graph.insert("view", [sc], shape=node.shape, strides=(1, 0))
            new = graph.insert("mul", [graph.insert("cast", [stored], dtype=DType.float32), sc_b])
        graph.replace_uses(node.out, new)
        graph.remove(node.id)
    graph.sort()
    return graph


def format_arrays(arrays: dict[str, np.ndarray], names: Iterable[str], fmt: str) -> dict[str, np.ndarray]:
    """The arrays ``format_graph`` expects: ``name.fp16``, or ``name.int8`` + ``name.scale``.

    ``arrays`` is not modified (a new dict is returned).
    """
    if fmt not in FORMATS:
        raise CatenError(f"unknown weight format {fmt!r}", hint=f"use one of {', '.join(FORMATS)}")
    out = dict(arrays)
    if fmt == "fp32":
        return out
    for name in names:
        if name not in out:
            raise CatenError(f"weight {name!r} is not among the arrays")
        w = out.pop(name)
        if w.ndim != 2 or w.dtype != np.float32:
            raise CatenError(
                f"weight {name!r}: only 2-D float32 weights can be stored as {fmt}, got {w.dtype}{w.shape}"
            )
        if fmt == "fp16":
            out[name + ".fp16"] = w.astype(np.float16)
        else:
            out[name + ".int8"], out[name + ".scale"] = quantize_int8(w)
    return out


def apply_weight_format(
    graph: Graph, arrays: dict[str, np.ndarray], names: Iterable[str], fmt: str
) -> tuple[Graph, dict[str, np.ndarray]]:
    """Store the 2-D weights ``names`` in ``fmt``; returns the rewritten graph and the new arrays.

    ``graph`` is modified in place; ``arrays`` is not (a new dict is returned).
    """
    names = list(names)
    out = format_arrays(arrays, names, fmt)
    return format_graph(graph, names, fmt), out


def _stored_as(name: str) -> tuple[str, str]:
    """``("w", "fp16")`` for ``"w.fp16"``; the weight's name and format from a stored input name."""
    for fmt, suffix in (("fp16", ".fp16"), ("int8", ".int8"), ("scale", ".scale")):
        if name.endswith(suffix):
            return name[: -len(suffix)], fmt
    return name, "fp32"


def convert_all_into(sources: Mapping[str, np.ndarray], out: Mapping[str, np.ndarray]) -> None:
    """Fill ``out`` — buffers named as ``format_graph`` stores them (``w``, ``w.fp16``, or ``w.int8``
    with ``w.scale``) — from the float weights ``sources`` (any strides, e.g. transposed views)."""
    wanted: dict[str, tuple[str, tuple]] = {}
    for name, arr in out.items():
        base, fmt = _stored_as(name)
        if fmt != "scale":
            wanted[base] = (fmt, arr.shape)
    missing = sorted(set(wanted) - set(sources))
    unexpected = sorted(set(sources) - set(wanted))
    if missing or unexpected:
        raise CatenError(
            f"weights do not match the model: missing {missing[:5]}, unexpected {unexpected[:5]}",
            hint="the state dict must hold exactly the model's parameters",
        )
    for base, (fmt, shape) in wanted.items():
        src = np.asarray(sources[base])
        if src.shape != shape:
            raise CatenError(f"weight {base!r} has shape {src.shape}, the model expects {shape}")
        if fmt == "fp32":
            np.copyto(out[base], src, casting="same_kind")
        else:
            convert_into(src, fmt, out[f"{base}.{fmt}"], out.get(base + ".scale"))
