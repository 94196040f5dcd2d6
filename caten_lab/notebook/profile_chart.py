"""The per-pass profile as a matplotlib chart (PNG, base64) for the Inspector and the static report."""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any


def profile_png(rows: Sequence[dict[str, Any]], *, width_in: float = 7.5) -> str | None:
    """Horizontal bars of time per pass with node counts before→after; None when there is nothing to draw."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    names = [f"{i}. {r['pass']}" for i, r in enumerate(rows)]
    times_ms = [1e3 * float(r.get("time_s") or 0.0) for r in rows]
    fig = Figure(figsize=(width_in, 0.28 * len(rows) + 0.9), dpi=96)
    ax = fig.add_subplot(1, 1, 1)
    y = list(range(len(rows)))[::-1]
    colours = ["#6366f1" if r.get("rewrites") or r.get("changed", True) else "#c7d2fe" for r in rows]
    ax.barh(y, times_ms, color=colours)
    ax.set_yticks(y, names, fontsize=8, fontfamily="monospace")
    ax.set_xlabel("wall time per pass (ms)")
    top = max(times_ms) or 1.0
    for yi, t, r in zip(y, times_ms, rows):
        ax.text(
            t + top * 0.01,
            yi,
            f"{r.get('nodes_before', '')}→{r.get('nodes_after', '')}  {r.get('rewrites', 0)} rw",
            va="center",
            fontsize=7,
            color="#374151",
        )
    ax.set_xlim(0, top * 1.35)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")
