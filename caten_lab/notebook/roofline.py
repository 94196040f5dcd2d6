"""The roofline model: where each kernel of a profiled run sits against this machine's ceilings.

A kernel doing ``flops`` floating-point operations while moving ``bytes`` (both per run, counted by
:mod:`caten_lab.passes.kernel_cost`) has arithmetic intensity ``flops / bytes`` (FLOP per byte). On a
machine with memory bandwidth ``B`` (bytes/s) and peak ``P`` (FLOP/s) it can reach at most
``min(P, B * intensity)`` FLOP/s: below the ridge point ``P / B`` it is memory-bound, above it
compute-bound. ``efficiency`` is the achieved FLOP/s over that bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def intensity(flops: float, nbytes: float) -> float | None:
    """FLOP per byte moved; None for a kernel that moves nothing."""
    return float(flops) / float(nbytes) if nbytes > 0 else None


def attainable(ai: float, bandwidth: float, peak: float) -> float:
    """The roof at intensity ``ai``: ``min(peak, bandwidth * ai)`` FLOP/s."""
    return min(float(peak), float(bandwidth) * float(ai))


def ridge(bandwidth: float, peak: float) -> float:
    """The intensity where the memory roof meets the compute roof (FLOP/byte)."""
    return float(peak) / float(bandwidth)


def roofline_point(row: Mapping[str, Any], bandwidth: float | None, peak: float | None) -> dict[str, Any]:
    """One kernel's point from a ``Program.profile`` row (seconds, bytes and flops per run)."""
    seconds = float(row.get("seconds") or 0.0)
    nbytes = int(row.get("bytes") or 0)
    flops = int(row.get("flops") or 0)
    ai = intensity(flops, nbytes)
    point: dict[str, Any] = {
        "kernel": str(row.get("kernel", "")),
        "function": str(row.get("function", "")),
        "calls": int(row.get("calls") or 0),
        "seconds": seconds,
        "bytes": nbytes,
        "flops": flops,
        "intensity": ai,
        "flops_per_s": flops / seconds if seconds > 0 else None,
        "bytes_per_s": nbytes / seconds if seconds > 0 else None,
        "node_ids": [int(i) for i in row.get("node_ids") or []],
        "roof": None,
        "bound": None,
        "efficiency": None,
    }
    if ai is not None and bandwidth and peak:  # intensity 0 (a copy): memory-bound, no FLOP roof
        roof = attainable(ai, bandwidth, peak)
        point["roof"] = roof
        point["bound"] = "memory" if ai < ridge(bandwidth, peak) else "compute"
        if point["flops_per_s"] is not None and roof > 0:
            point["efficiency"] = point["flops_per_s"] / roof
    return point


def roofline(rows: Sequence[Mapping[str, Any]], machine: Mapping[str, Any] | None) -> dict[str, Any]:
    """Points for every profiled kernel plus the ceilings (``bandwidth``, ``peak_flops``, ``ridge``)."""
    bw = float(machine["bandwidth"]) if machine else None
    peak = float(machine["peak_flops"]) if machine else None
    return {
        "points": [roofline_point(r, bw, peak) for r in rows],
        "bandwidth": bw,
        "peak_flops": peak,
        "ridge": ridge(bw, peak) if bw and peak else None,
    }
