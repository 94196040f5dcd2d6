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


def roofline_png(
    rows: Sequence[dict[str, Any]], machine: dict[str, Any] | None = None, *, width_in: float = 6.5
) -> str | None:
    """The roofline of ``Program.profile`` rows (one point per kernel that does floating-point work)
    against ``machine`` (default: this machine's measured ceilings), as a base64 PNG; None when no
    kernel has both flops and a measurable time. ``IPython.display.Image(base64.b64decode(png))``
    shows it inline in a notebook."""
    from caten_lab.notebook.roofline import roofline

    if machine is None:
        from caten_lab.runtime.machine import machine_ceilings

        machine = machine_ceilings()
    r = roofline(rows, machine)
    pts = [p for p in r["points"] if p["intensity"] and p["flops_per_s"]]
    if not pts:
        return None
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    bw, peak, ridge = r["bandwidth"], r["peak_flops"], r["ridge"]
    lo = min([p["intensity"] for p in pts] + [ridge]) / 4
    hi = max([p["intensity"] for p in pts] + [ridge]) * 4
    fig = Figure(figsize=(width_in, 0.62 * width_in), dpi=96)
    ax = fig.add_subplot(1, 1, 1)
    ax.loglog([lo, ridge, hi], [bw * lo, peak, peak], color="#111827", lw=1.5)
    ax.text(ridge, peak * 1.15, f"peak {peak / 1e9:.0f} GFLOP/s", fontsize=8)
    ax.text(lo * 1.2, bw * lo * 1.6, f"memory {bw / 1e9:.1f} GB/s", fontsize=8, rotation=0)
    total = sum(p["seconds"] for p in pts) or 1.0
    ax.scatter(
        [p["intensity"] for p in pts],
        [p["flops_per_s"] for p in pts],
        s=[20 + 300 * p["seconds"] / total for p in pts],
        color="#6366f1",
        alpha=0.7,
        edgecolors="#312e81",
    )
    for p in sorted(pts, key=lambda p: -p["seconds"])[:5]:
        ax.annotate(
            p["kernel"],
            (p["intensity"], p["flops_per_s"]),
            fontsize=7,
            xytext=(4, -3),
            textcoords="offset points",
        )
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("FLOP/s")
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return base64.b64encode(buf.getvalue()).decode("ascii")
