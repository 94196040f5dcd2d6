"""What the scheduler decided for each AIR node, and why: the fusion log of a traced compile.

With tracing on, the ``schedule`` pass stores a list of :class:`FusionDecision` in
``ctx.artifacts["fusion"]`` (so it is in the schedule pass's :class:`~caten_lab.passes.trace.PassRecord`):
one per node it looked at, saying whether the node became a kernel's root (its value is written to a
buffer), was inlined into the kernels that read it (recomputed there as an index expression), or was
dead, with the reason, so "why is this not fused?" has an answer. Tracing off, nothing is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

ROOT = "root"  # the node's value is realized: it is the output of a kernel of its own
INLINE = "inline"  # the node is recomputed inside every kernel that reads it (fused)
DEAD = "dead"  # nothing reads it: no kernel computes it


@dataclass(frozen=True, slots=True)
class FusionDecision:
    """One scheduling decision. ``kernels``: the kernel a root heads, or the kernels an inlined node was
    fused into. ``refused`` is True when the node had readers it could have been fused into and was
    realized instead; ``reason`` says why (a graph output, a reduction read by several kernels, ...)."""

    node: int
    op: str
    value: str
    action: str
    kernels: tuple[str, ...]
    reason: str
    refused: bool = False

    def to_json(self) -> dict:
        return {"node": self.node, "op": self.op, "value": self.value, "action": self.action,
                "kernels": list(self.kernels), "reason": self.reason, "refused": self.refused}

    def __str__(self) -> str:
        where = ", ".join(self.kernels) or "-"
        mark = " (fusion refused)" if self.refused else ""
        return f"%{self.node} {self.op} -> {self.action} [{where}]{mark}: {self.reason}"


def fusion_summary(decisions: list[FusionDecision]) -> str:
    """One line per kernel root and per refused fusion (inlined nodes are counted, not listed)."""
    inlined = sum(1 for d in decisions if d.action == INLINE)
    lines = [f"{sum(1 for d in decisions if d.action == ROOT)} kernel roots, {inlined} nodes inlined, "
             f"{sum(1 for d in decisions if d.refused)} fusions refused"]
    lines += [f"  {d}" for d in decisions if d.action == ROOT]
    return "\n".join(lines)
