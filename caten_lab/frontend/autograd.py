"""Reverse-mode autodiff over the lazy graph: ``grad(loss, params)`` and ``loss.backward()``.

Every frontend op is a composition of AIR primitives (softmax is exp2, reduce and recip; matmul is a
broadcast multiply and a sum; ``w[ids]`` a one-hot select and sum), so the rules below cover the AIR
primitives only and every op built from them differentiates for free. The backward program is more
LazyNodes, so it lands in the same AIR graph as the forward: one compile runs both.

The walk is O(N): one iterative post-order over the nodes reachable from the outputs, marking those on
a path from a differentiated tensor, then one reverse sweep that applies each node's rule once and
accumulates (adds) the gradients of its operands. Each backward node takes the forward node's source
line, so the Inspector shows the gradient of a line beside the line.

Rules (``g`` the gradient of a node's value, ``out`` the value):
- ``add``: g, g. ``mul``: g*b, g*a. ``neg``: -g. ``recip``: -g*out*out. ``sqrt``: g/(2*out).
  ``exp2``: g*out*ln2. ``log2``: g/(x*ln2). ``sin``: g*cos(x). ``cast`` from a float: g cast back.
- ``max(a, b)``: g to the larger operand; a tie splits it in half (torch.maximum). Against a literal
  (``relu``, ``clamp``) a tie gives 0, as torch.relu.
- ``where(c, a, b)``: where(c, g, 0) to a, where(c, 0, g) to b.
- ``reduce add``: g broadcast back. ``reduce max``: g shared equally by the elements equal to the max.
- ``view``: the adjoint of the strided window: padding (mask) dropped, broadcast (stride 0) axes
  summed; a window covering its operand once (reshape, permute, flip) is a view of g, any other
  (slices, steps) writes g into zeros through the same window (``store``).
- ``store(dst, src)``: g with the window zeroed to dst, g read through the window to src.
Integer and bool values carry no gradient; ``const``, ``index`` and ``allocate`` are leaves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from caten_lab.air.dtypes import DType
from caten_lab.air.shapes import numel
from caten_lab.errors import CatenError
from caten_lab.frontend.lazy import LazyNode, node_mark, post_order, root_buffer
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor
from caten_lab.frontend.view import View
from caten_lab.frontend.view_grad import view_adjoint

LN2 = math.log(2.0)
Rule = Callable[[LazyNode, Tensor], list]


def _t(x: Any) -> Any:
    """An operand as a Tensor (a literal stays a Python scalar)."""
    return Tensor(x) if isinstance(x, LazyNode) else x


def _is_buffer_leaf(node: LazyNode) -> bool:
    return node.op == "allocate" and node.buffer is not None and not node.nograd


# ---- the rules ---------------------------------------------------------------------------------------


def _add(node: LazyNode, g: Tensor) -> list:
    return [g, g]


def _mul(node: LazyNode, g: Tensor) -> list:
    a, b = (_t(s) for s in node.srcs)
    return [g * b, g * a]


def _neg(node: LazyNode, g: Tensor) -> list:
    return [-g]


def _recip(node: LazyNode, g: Tensor) -> list:
    out = Tensor(node)
    return [-(g * out * out)]


def _sqrt(node: LazyNode, g: Tensor) -> list:
    return [g / (Tensor(node) * 2.0)]


def _exp2(node: LazyNode, g: Tensor) -> list:
    return [g * Tensor(node) * LN2]


def _log2(node: LazyNode, g: Tensor) -> list:
    return [g / (_t(node.srcs[0]) * LN2)]


def _sin(node: LazyNode, g: Tensor) -> list:
    return [g * _t(node.srcs[0]).cos()]


def _cast(node: LazyNode, g: Tensor) -> list:
    src = node.srcs[0]
    return [g.cast(src.dtype) if isinstance(src, LazyNode) and src.dtype.is_float else None]


def _max(node: LazyNode, g: Tensor) -> list:
    a, b = (_t(s) for s in node.srcs)
    if not isinstance(b, Tensor) or not isinstance(a, Tensor):  # against a literal: relu / clamp
        x, lit = (a, b) if isinstance(a, Tensor) else (b, a)
        gx = (x > lit).where(g, 0.0)
        return [gx, None] if isinstance(a, Tensor) else [None, gx]
    half = (a == b).where(g * 0.5, 0.0)
    return [(a > b).where(g, half), (b > a).where(g, half)]


def _where(node: LazyNode, g: Tensor) -> list:
    c = _t(node.srcs[0])
    if not isinstance(c, Tensor):  # a literal condition selects one side
        return [None, g if c else None, None if c else g]
    return [None, c.where(g, 0.0), c.where(0.0, g)]


def _reduce(node: LazyNode, g: Tensor) -> list:
    x = _t(node.srcs[0])
    if node.attrs["op"] == "add":
        return [g.broadcast_to(x.shape)]
    hit = x == Tensor(node).broadcast_to(x.shape)  # every element equal to the max shares its gradient
    count = hit.cast(g.dtype).sum(node.attrs["axes"], keepdim=True)
    return [hit.where((g / count).broadcast_to(x.shape), 0.0)]


def _view(node: LazyNode, g: Tensor) -> list:
    base = node.srcs[0]
    a = node.attrs
    v = node.view or View(a["shape"], a["strides"], a["offset"], a["mask"])
    return [view_adjoint(g, v, base.shape, base.dtype)]


def _store(node: LazyNode, g: Tensor) -> list:
    dst, src = node.srcs
    a = node.attrs
    keep = LazyNode("store", (Tensor.full(dst.shape, True).node, False), dict(a), dst.shape, DType.bool, None)
    g_dst = Tensor(keep).where(g, 0.0)
    if not isinstance(src, LazyNode):
        return [g_dst, None]
    window = View(a["shape"], a["strides"], a["offset"], None)
    g_src = Tensor(LazyNode("view", (g.node,), dict(a, mask=None), window.shape, g.dtype, None, view=window))
    return [g_dst, g_src.reshape(*src.shape) if src.shape != window.shape else g_src]


RULES: dict[str, Rule] = {
    "add": _add,
    "mul": _mul,
    "neg": _neg,
    "recip": _recip,
    "sqrt": _sqrt,
    "exp2": _exp2,
    "log2": _log2,
    "sin": _sin,
    "cast": _cast,
    "max": _max,
    "where": _where,
    "reduce": _reduce,
    "view": _view,
    "store": _store,
}


# ---- the walk ----------------------------------------------------------------------------------------


def _differentiable(node: LazyNode) -> bool:
    return node.dtype.is_float


def _live(order: list[LazyNode], is_leaf: Callable[[LazyNode], bool]) -> set[int]:
    """The nodes of ``order`` (operands first) on a path from a leaf: a leaf, or a float value made outside
    ``no_grad`` from a live operand."""
    live: set[int] = set()
    for node in order:
        if is_leaf(node) or (
            not node.nograd
            and _differentiable(node)
            and any(isinstance(s, LazyNode) and s.id in live for s in node.srcs)
        ):
            live.add(node.id)
    return live


def backprop(
    roots: Sequence[Tensor], seeds: Sequence[Tensor], key_of: Callable[[LazyNode], object | None]
) -> dict[object, Tensor]:
    """Gradients of ``roots`` (seeded with ``seeds``) for every node ``key_of`` names: key -> gradient
    (summed over the nodes of one key, e.g. every read of a parameter)."""
    order = post_order([r.node for r in roots])
    live = _live(order, lambda node: key_of(node) is not None)
    grads: dict[int, Tensor] = {}
    for root, seed in zip(roots, seeds):
        if root.node.id in live:
            _accumulate(grads, root.node, seed)
    mark = node_mark()  # every node made from here on belongs to the backward program
    labeled: set[int] = set()
    out: dict[object, Tensor] = {}
    for node in reversed(order):
        g = grads.pop(node.id, None)
        if g is None:
            continue
        key = key_of(node)
        if key is not None:
            out[key] = out[key] + g if key in out else g
        rule = RULES.get(node.op)
        if node.nograd or rule is None:
            continue
        for src, gs in zip(node.srcs, rule(node, g)):
            if gs is not None and isinstance(src, LazyNode) and src.id in live:
                gs = gs.cast(src.dtype) if gs.dtype != src.dtype else gs
                _accumulate(grads, src, gs)
                _label(gs.node, mark, node.source, labeled)
    for g in out.values():
        _label(g.node, mark, None, labeled)
    return out


def _accumulate(grads: dict[int, Tensor], node: LazyNode, g: Tensor) -> None:
    if g.shape != node.shape:
        g = g.reshape(*node.shape)
    old = grads.get(node.id)
    grads[node.id] = g if old is None else old + g


def _label(node: LazyNode, mark: int, source: str | None, labeled: set[int]) -> None:
    """Give the backward nodes behind ``node`` (made after ``mark``, not yet labeled) ``source``."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.id <= mark or n.id in labeled:
            continue
        labeled.add(n.id)
        if source is not None:
            n.source = source
        elif n.source is None:
            n.source = user_source()
        stack.extend(s for s in n.srcs if isinstance(s, LazyNode))


# ---- the public functions ----------------------------------------------------------------------------


def _seeds(outputs: Sequence[Tensor], grad_outputs: Sequence[Any] | None, op: str) -> list[Tensor]:
    seeds = []
    for i, out in enumerate(outputs):
        given = None if grad_outputs is None else grad_outputs[i]
        if not out.dtype.is_float:
            raise CatenError(
                f"{op}: output {i} is {out.dtype.value}; only floating-point values have gradients",
                where=user_source(),
            )
        if given is None:
            if numel(out.shape) != 1:
                raise CatenError(
                    f"{op}: output {i} has shape {tuple(out.shape)}; a gradient can only be implied for a "
                    "single value",
                    where=user_source(),
                    hint="reduce it first (loss.sum(), loss.mean()) or pass the output's gradient",
                )
            given = Tensor.full(out.shape, 1.0, out.dtype)
        elif not isinstance(given, Tensor):
            given = Tensor.from_numpy(given).cast(out.dtype)
        if tuple(given.shape) != tuple(out.shape):
            raise CatenError(
                f"{op}: the gradient of output {i} has shape {tuple(given.shape)}, the output {tuple(out.shape)}",
                where=user_source(),
            )
        seeds.append(given.cast(out.dtype))
    return seeds


def _leaf_key(t: Tensor) -> object:
    node = t.node
    return ("buffer", id(node.buffer)) if _is_buffer_leaf(node) else ("node", node.id)


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Sequence[Any] | None = None,
    *,
    allow_unused: bool = False,
) -> list[Tensor | None]:
    """The gradients of ``outputs`` with respect to ``inputs``, as lazy Tensors in the same graph
    (torch.autograd.grad). ``inputs`` may be parameters, inputs or any intermediate tensor."""
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    ins = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    for t in (*outs, *ins):
        if not isinstance(t, Tensor):
            raise CatenError(f"grad: expected Tensors, got {type(t).__name__}", where=user_source())
    bufs = {id(t.node.buffer) for t in ins if _is_buffer_leaf(t.node)}
    ids = {t.node.id for t in ins if not _is_buffer_leaf(t.node)}

    def key_of(node: LazyNode) -> object | None:
        if node.id in ids:
            return ("node", node.id)
        if bufs and _is_buffer_leaf(node) and id(node.buffer) in bufs:
            return ("buffer", id(node.buffer))
        return None

    found = backprop(outs, _seeds(outs, grad_outputs, "grad"), key_of)
    result: list[Tensor | None] = []
    for i, t in enumerate(ins):
        g = found.get(_leaf_key(t))
        if g is None and not allow_unused:
            raise CatenError(
                f"grad: input {i} ({t!r}) does not affect the outputs",
                where=user_source(),
                hint="pass allow_unused=True to get None for it",
            )
        result.append(g)
    return result


def backward(self: Tensor, gradient: Any = None) -> None:
    """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every buffer with ``requires_grad`` (parameters,
    and inputs made with ``requires_grad=True``). The gradients are lazy: ``p.grad.numpy()`` or an
    optimizer step runs the forward and backward program together."""
    seeds = _seeds([self], None if gradient is None else [gradient], "backward")
    bufs: dict[int, Any] = {}

    def key_of(node: LazyNode) -> object | None:
        if _is_buffer_leaf(node) and node.buffer.requires_grad:  # type: ignore[union-attr]
            bufs[id(node.buffer)] = node.buffer
            return id(node.buffer)
        return None

    found = backprop([self], seeds, key_of)
    if not found:
        raise CatenError(
            "backward: nothing this value depends on requires a gradient",
            where=user_source(),
            hint="parameters require gradients; for an input use Tensor.from_numpy(a, requires_grad=True)",
        )
    for key, g in found.items():
        buf = bufs[key]  # type: ignore[index]
        buf.grad = g if buf.grad is None else buf.grad + g


def detach(self: Tensor) -> Tensor:
    """The same value, with gradients stopped (torch's ``detach``)."""
    n = self.node
    copy = LazyNode(n.op, n.srcs, n.attrs, n.shape, n.dtype, n.source, buffer=n.buffer, view=n.view)
    copy.folds = n.folds
    copy.nograd = True
    return Tensor(copy)


def leaf_grad(self: Tensor) -> Tensor | None:
    """``.grad`` of a parameter or input: the gradients ``backward()`` accumulated (None before)."""
    buf = root_buffer(self.node)
    return None if buf is None else buf.grad


def requires_grad(self: Tensor) -> bool:
    """True when a gradient can flow into this tensor: a buffer with ``requires_grad``, or a value
    computed (outside ``no_grad``) from one."""
    live = _live(post_order([self.node]), lambda n: _is_buffer_leaf(n) and n.buffer.requires_grad)  # type: ignore[union-attr]
    return self.node.id in live


def requires_grad_(self: Tensor, flag: bool = True) -> Tensor:
    """Mark a bound tensor (``from_numpy``, a parameter) as needing a gradient, in place."""
    node = self.node
    if not (node.op == "allocate" and node.buffer is not None):
        raise CatenError(
            f"requires_grad_: {self!r} is computed; only a bound tensor (from_numpy, a parameter) is a leaf",
            where=user_source(),
            hint="differentiate with respect to a computed value with caten_lab.grad(loss, [value])",
        )
    node.buffer.requires_grad = bool(flag)
    return self
