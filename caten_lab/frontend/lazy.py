"""The lazy record a Tensor points at: one future AIR node, plus the buffers bound at run time.

A LazyNode is cheap (slots, no validation); ``build_graph`` turns the DAG of LazyNodes reachable from
the outputs into AIR, validating every node through ``Graph.insert``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.frontend.source import user_source
from caten_lab.frontend.view import View

_ids = itertools.count()


class Buffer:
    """Storage bound at run time: an input, a parameter or a state (e.g. a KV cache).

    ``array`` may be None until it is needed (``init`` makes it on demand), so a graph can be built
    for a model whose weights were never allocated. ``pending`` is the latest ``store`` written into
    this buffer that has not been committed yet; ``owner`` is the Tensor that receives the new value.
    """

    __slots__ = ("name", "shape", "dtype", "array", "init", "pending", "owner", "kind", "__weakref__")

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

    def materialize(self) -> np.ndarray | None:
        if self.array is None and self.init is not None:
            arr = np.ascontiguousarray(self.init(), dtype=self.dtype.np)
            self.array = arr
        return self.array

    def __repr__(self) -> str:
        return f"<Buffer {self.name or '?'} {self.dtype.value}{list(self.shape)} {self.kind}>"


class LazyNode:
    """One future AIR node: ``op``, operands (LazyNodes or Python scalars), AIR attributes."""

    __slots__ = ("id", "op", "srcs", "attrs", "shape", "dtype", "source", "buffer", "view", "folds")

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

    def __repr__(self) -> str:
        return f"<LazyNode {self.op} {self.dtype.value}{list(self.shape)}>"


def buffer_node(buf: Buffer) -> LazyNode:
    """The ``allocate`` node that reads ``buf`` (made where the user's code asked for it)."""
    return LazyNode(
        "allocate", (), {"shape": buf.shape, "dtype": buf.dtype}, buf.shape, buf.dtype, user_source(), buffer=buf
    )
