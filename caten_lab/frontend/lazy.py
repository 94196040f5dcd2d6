"""The lazy record a Tensor points at: one future AIR node, plus the buffers bound at run time.

A LazyNode is cheap (slots, no validation); ``build_graph`` turns the DAG of LazyNodes reachable from
the outputs into AIR, validating every node through ``Graph.insert``.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.frontend.source import user_source
from caten_lab.frontend.view import View

_ids = itertools.count()
_grad_enabled: ContextVar[bool] = ContextVar("caten_grad_enabled", default=True)


def node_mark() -> int:
    """An id below every LazyNode made after this call (and above every one made before)."""
    return next(_ids)


def grad_enabled() -> bool:
    """False inside ``no_grad()``: the nodes made there stop gradients (see autograd.py)."""
    return _grad_enabled.get()


@contextlib.contextmanager
def set_grad_enabled(enabled: bool) -> Iterator[None]:
    """Record gradients (``True``) or not (``False``, as ``no_grad``) for the ops made inside the block."""
    token = _grad_enabled.set(bool(enabled))
    try:
        yield
    finally:
        _grad_enabled.reset(token)


def no_grad() -> contextlib.AbstractContextManager[None]:
    """``with no_grad():`` ops made inside never pass gradients back (an optimizer's update, an eval)."""
    return set_grad_enabled(False)


class Buffer:
    """Storage bound at run time: an input, a parameter or a state (e.g. a KV cache).

    ``array`` may be None until it is needed (``init`` makes it on demand), so a graph can be built
    for a model whose weights were never allocated. ``pending`` is the latest ``store`` written into
    this buffer that has not been committed yet; ``owner`` is the Tensor that receives the new value.
    ``requires_grad`` (parameters by default) makes ``backward()`` accumulate a gradient in ``grad``.
    """

    __slots__ = (
        "name",
        "shape",
        "dtype",
        "array",
        "init",
        "pending",
        "owner",
        "kind",
        "requires_grad",
        "grad",
        "__weakref__",
    )

    def __init__(
        self,
        shape: tuple,
        dtype: DType,
        array: np.ndarray | None = None,
        *,
        name: str | None = None,
        init: Callable[[], np.ndarray] | None = None,
        kind: str = "input",
    ) -> None:
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.array = array
        self.init = init
        self.pending: LazyNode | None = None
        self.owner: Any = None
        self.kind = kind  # input | parameter | state
        self.requires_grad = kind == "parameter"
        self.grad: Any = None  # a Tensor once backward() reached this buffer

    def materialize(self) -> np.ndarray | None:
        if self.array is None and self.init is not None:
            arr = np.ascontiguousarray(self.init(), dtype=self.dtype.np)
            self.array = arr
        return self.array

    def __repr__(self) -> str:
        return f"<Buffer {self.name or '?'} {self.dtype.value}{list(self.shape)} {self.kind}>"


class LazyNode:
    """One future AIR node: ``op``, operands (LazyNodes or Python scalars), AIR attributes."""

    __slots__ = ("id", "op", "srcs", "attrs", "shape", "dtype", "source", "buffer", "view", "folds", "nograd")

    def __init__(
        self,
        op: str,
        srcs: tuple,
        attrs: dict[str, Any],
        shape: tuple,
        dtype: DType,
        source: str | None,
        *,
        buffer: Buffer | None = None,
        view: View | None = None,
    ) -> None:
        self.id = next(_ids)
        self.op = op
        self.srcs = srcs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.source = source
        self.buffer = buffer
        self.view = view  # for op == "view": the composed view over srcs[0]
        self.folds = view is not None  # a later view may compose with this one (False once forced contiguous)
        self.nograd = not _grad_enabled.get()  # made under no_grad() or by detach(): gradients stop here

    def __repr__(self) -> str:
        return f"<LazyNode {self.op} {self.dtype.value}{list(self.shape)}>"


def root_buffer(node: LazyNode) -> Buffer | None:
    """The Buffer a node's value lives in: a bound ``allocate``, following pending stores to their root."""
    while node.op == "store":
        node = node.srcs[0]
    return node.buffer if node.op == "allocate" else None


def buffer_node(buf: Buffer) -> LazyNode:
    """The ``allocate`` node that reads ``buf`` (made where the user's code asked for it)."""
    return LazyNode(
        "allocate", (), {"shape": buf.shape, "dtype": buf.dtype}, buf.shape, buf.dtype, user_source(), buffer=buf
    )


def post_order(roots: list[LazyNode], seen: set[int] | None = None) -> list[LazyNode]:
    """The nodes reachable from ``roots`` and not in ``seen``, every node after its operands (one iterative
    walk: O(N), no recursion limit). ``seen`` is updated, so a later call continues the same walk."""
    seen = set() if seen is None else seen
    order: list[LazyNode] = []
    for root in roots:
        if root.id in seen:
            continue
        seen.add(root.id)
        stack: list[tuple[LazyNode, int]] = [(root, 0)]
        while stack:
            node, i = stack[-1]
            srcs = node.srcs
            while i < len(srcs):
                s = srcs[i]
                i += 1
                if isinstance(s, LazyNode) and s.id not in seen:
                    seen.add(s.id)
                    stack[-1] = (node, i)
                    stack.append((s, 0))
                    break
            else:
                stack.pop()
                order.append(node)
    return order
