"""Short, JSON-ready summaries of program outputs for the Result pane and the static report."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def summarize_array(name: str, a: Any, *, head: int = 6) -> dict[str, Any]:
    """Shape, dtype, min/max/mean (numeric arrays) and the first few values of one output."""
    arr = np.asarray(a)
    out: dict[str, Any] = {"name": name, "shape": str(tuple(arr.shape)), "dtype": str(arr.dtype)}
    flat = arr.reshape(-1)
    if flat.size and (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
        f = flat.astype(np.float64)
        finite = f[np.isfinite(f)]
        if finite.size:
            out.update(min=_g(finite.min()), max=_g(finite.max()), mean=_g(finite.mean()))
        if finite.size != f.size:
            out["nonfinite"] = int(f.size - finite.size)
    out["head"] = np.array2string(flat[:head], precision=4, separator=", ") + (
        " …" if flat.size > head else ""
    )
    return out


def _g(x: float) -> str:
    return f"{float(x):.6g}"


def output_names(graph: Any, count: int) -> list[str]:
    """The names the Inspector shows for a graph's first ``count`` outputs (payload.value_names): the
    value's own name when it has one (a named buffer, ``name=...``), else ``out<i>``."""
    outs = list(getattr(graph, "outputs", None) or []) if graph is not None else []
    names = []
    for i in range(count):
        if i >= len(outs):
            names.append(f"out{i}")
            continue
        node = graph.producer_of(outs[i]) if hasattr(graph, "producer_of") else None
        own = getattr(getattr(node, "attrs", None), "name", None)  # attribute objects have slots, not keys
        names.append(str(own) if isinstance(own, str) and own else f"out{i}")
    return names


def result_summary(
    outputs: Sequence[Any],
    names: Sequence[str] | None = None,
    *,
    run_s: float | None = None,
    note: str = "",
    mismatch: str | None = None,
) -> dict[str, Any]:
    names = list(names or [])
    rows = [summarize_array(names[i] if i < len(names) else f"out{i}", a) for i, a in enumerate(outputs)]
    return {"outputs": rows, "run_s": run_s, "note": note, "mismatch": mismatch}
