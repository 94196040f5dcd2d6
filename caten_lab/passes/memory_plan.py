"""Memory planning: intermediate buffers share storage slots when their lifetimes do not overlap.

Lifetime of a buffer = [first kernel touching it, last kernel touching it] in schedule order.
Buffers are visited by start; each takes the free slot whose size fits best (greedy best fit,
sizes compared under a representative symbol binding), else the largest free slot (which grows),
else a new slot. Slot sizes stay symbolic: at run time a slot is as large as its largest member
under the actual symbols. Strictly disjoint lifetimes mean a kernel never reads and writes the
same slot through two names, so ``restrict`` stays true.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from caten_lab.air.serialize import decode_value, encode_value
from caten_lab.air.shapes import numel
from caten_lab.air.symbolic import Dim, evaluate
from caten_lab.passes.base import PassContext
from caten_lab.passes.schedule import Schedule

DEFAULT_SYMBOL_VALUE = 64


@dataclass
class MemoryPlan:
    slots: list[list[str]]  # members of each slot
    slot_of: dict[str, int]
    sizes: dict[str, Dim]  # bytes per intermediate buffer
    lifetimes: dict[str, tuple[int, int]]
    peak_bytes_without_reuse: int
    peak_bytes_with_reuse: int
    symbols_assumed: dict[str, int] = field(default_factory=dict)

    def slot_bytes(self, symbols: dict[str, int]) -> list[int]:
        return [max((evaluate(self.sizes[b], symbols) for b in members), default=0) for members in self.slots]

    def to_json(self) -> dict:
        """JSON-ready data (the artifact cache's format); :meth:`from_json` rebuilds an equal plan."""
        return {"slots": [list(m) for m in self.slots], "slot_of": dict(self.slot_of),
                "sizes": {b: encode_value(v) for b, v in self.sizes.items()},
                "lifetimes": {b: list(v) for b, v in self.lifetimes.items()},
                "peak_bytes_without_reuse": self.peak_bytes_without_reuse,
                "peak_bytes_with_reuse": self.peak_bytes_with_reuse, "symbols_assumed": dict(self.symbols_assumed)}

    @classmethod
    def from_json(cls, d: dict) -> MemoryPlan:
        return cls([[str(b) for b in m] for m in d["slots"]], {str(b): int(s) for b, s in d["slot_of"].items()},
                   {str(b): decode_value(v) for b, v in d["sizes"].items()},
                   {str(b): (int(v[0]), int(v[1])) for b, v in d["lifetimes"].items()},
                   int(d["peak_bytes_without_reuse"]), int(d["peak_bytes_with_reuse"]),
                   {str(k): int(v) for k, v in d["symbols_assumed"].items()})

    def summary(self) -> dict:
        return {
            "buffers": len(self.sizes),
            "slots": len(self.slots),
            "peak_bytes_without_reuse": self.peak_bytes_without_reuse,
            "peak_bytes_with_reuse": self.peak_bytes_with_reuse,
            "symbols_assumed": dict(self.symbols_assumed),
        }


def plan_memory(sched: Schedule, symbols: dict[str, int] | None = None, *, reuse: bool = True) -> MemoryPlan:
    binding = {s: DEFAULT_SYMBOL_VALUE for s in sched.symbols}
    binding.update(symbols or {})
    inter = {n for n, b in sched.buffers.items() if b.kind == "intermediate"}
    life: dict[str, list[int]] = {}
    for i, k in enumerate(sched.kernels):
        for b in (*k.outputs, *k.inputs):
            if b in inter:
                span = life.setdefault(b, [i, i])
                span[0] = min(span[0], i)
                span[1] = max(span[1], i)
    sizes = {b: numel(sched.buffers[b].shape) * sched.buffers[b].itemsize for b in life}
    value = {b: evaluate(sizes[b], binding) for b in life}
    order = sorted(life, key=lambda b: (life[b][0], -value[b]))
    slots: list[list[str]] = []
    slot_end: list[int] = []
    slot_size: list[int] = []
    slot_of: dict[str, int] = {}
    for b in order:
        start, end = life[b]
        free = [s for s in range(len(slots)) if slot_end[s] < start] if reuse else []
        fits = [s for s in free if slot_size[s] >= value[b]]
        if fits:
            s = min(fits, key=lambda s: slot_size[s])
        elif free:
            s = max(free, key=lambda s: slot_size[s])
        else:
            s = len(slots)
            slots.append([])
            slot_end.append(-1)
            slot_size.append(0)
        slots[s].append(b)
        slot_end[s] = end
        slot_size[s] = max(slot_size[s], value[b])
        slot_of[b] = s
    return MemoryPlan(
        slots, slot_of, sizes, {b: (v[0], v[1]) for b, v in life.items()}, sum(value.values()), sum(slot_size), binding
    )


class PlanMemory:
    """Pass: plan intermediate buffer reuse; ``ctx.artifacts['memory_plan']``."""

    name = "memory_plan"
    description = "reuse intermediate buffers by lifetime (greedy best fit); reports peak bytes with/without reuse"

    def run(self, graph, ctx: PassContext):  # noqa: ANN001, ANN201 - Pass protocol
        sched = ctx.artifacts.get("schedule")
        if sched is not None:
            reuse = ctx.options.get("memory_reuse", True)
            ctx.artifacts["memory_plan"] = plan_memory(sched, ctx.symbols or None, reuse=reuse)
        return graph
