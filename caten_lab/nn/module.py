"""``Module``: named parameters, submodules and PyTorch-style ``state_dict`` / ``load_state_dict``.

Parameters are Tensors over a Buffer whose data is created on first need (``init``), so a model can
be traced into a graph without allocating its weights. Names follow PyTorch: attribute paths joined
by dots, list children by index (``transformer.h.0.attn.c_attn.weight``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.frontend.errors import StateDictError, fmt_shape
from caten_lab.frontend.lazy import Buffer, root_buffer
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor
from caten_lab.runtime.aligned import aligned_copy, aligned_zeros

_init_counter = itertools.count()
_calls = [0]  # depth of nested Module calls


def parameter(
    shape: tuple, init: Callable[[np.random.Generator, tuple], np.ndarray], dtype: DType = DType.float32
) -> Tensor:
    """A weight Tensor; ``init(rng, shape)`` makes its data when first needed (seeded, deterministic)."""
    seed = next(_init_counter)
    buf = Buffer(
        tuple(shape),
        dtype,
        None,
        init=lambda: aligned_copy(init(np.random.default_rng(seed), tuple(shape)), dtype.np),
        kind="parameter",
    )
    return Tensor.from_buffer(buf)


def state(shape: tuple, dtype: DType = DType.float32) -> Tensor:
    """A zero-initialized state buffer (e.g. a KV cache): not in the state_dict, updated in place."""
    buf = Buffer(tuple(shape), dtype, None, init=lambda: aligned_zeros(tuple(shape), dtype.np), kind="state")
    return Tensor.from_buffer(buf)


def buffer_of(t: Tensor) -> Buffer | None:
    """The Buffer behind a parameter/state tensor (following pending stores to their root)."""
    return root_buffer(t.node)


def _to_numpy(v: Any) -> np.ndarray:
    if hasattr(v, "detach"):  # a torch tensor
        v = v.detach().cpu().numpy()
    return np.asarray(v)


class Module:
    """Base class: subclasses assign Tensors (from ``parameter``/``state``) and Modules as attributes."""

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _calls[0] == 0:  # the outermost call names unnamed parameters by their path from here
            for kind in ("parameter", "state"):
                for name, _, buf in self._named_buffers(kind):
                    if buf.name is None:
                        buf.name = name
        _calls[0] += 1
        try:
            return self.forward(*args, **kwargs)
        finally:
            _calls[0] -= 1

    # ---- traversal -----------------------------------------------------------------------
    def named_children(self) -> Iterator[tuple[str, Module]]:
        for k, v in vars(self).items():
            if isinstance(v, Module):
                yield k, v

    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        yield prefix, self
        for k, m in self.named_children():
            yield from m.named_modules(f"{prefix}.{k}" if prefix else k)

    def _named_buffers(self, kind: str) -> Iterator[tuple[str, Tensor, Buffer]]:
        for path, m in self.named_modules():
            for k, v in vars(m).items():
                if isinstance(v, Tensor):
                    buf = buffer_of(v)
                    if buf is not None and buf.kind == kind:
                        yield (f"{path}.{k}" if path else k), v, buf

    def named_parameters(self) -> Iterator[tuple[str, Tensor]]:
        for name, t, _ in self._named_buffers("parameter"):
            yield name, t

    def parameters(self) -> list[Tensor]:
        return [t for _, t in self.named_parameters()]

    def named_states(self) -> Iterator[tuple[str, Tensor]]:
        for name, t, _ in self._named_buffers("state"):
            yield name, t

    def assign_names(self) -> Module:
        """Give every parameter and state buffer its dotted path as its graph input name."""
        for kind in ("parameter", "state"):
            for name, _, buf in self._named_buffers(kind):
                buf.name = name
        return self

    # ---- state dict ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        """Parameter arrays by PyTorch-style name (creating initial values where none were loaded)."""
        out = {}
        for name, _, buf in self._named_buffers("parameter"):
            arr = buf.materialize()
            assert arr is not None
            out[name] = arr
        return out

    def load_state_dict(self, state_dict: dict[str, Any], strict: bool = True) -> Module:
        """Copy arrays (NumPy or torch) into the parameters; strict about keys, always about shapes."""
        where = user_source()
        params = {name: buf for name, _, buf in self._named_buffers("parameter")}
        missing = [k for k in params if k not in state_dict]
        unexpected = [k for k in state_dict if k not in params]
        if strict and (missing or unexpected):
            parts = []
            if missing:
                parts.append(f"missing keys: {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}")
            if unexpected:
                parts.append(
                    f"unexpected keys: {', '.join(unexpected[:8])}{' ...' if len(unexpected) > 8 else ''}"
                )
            raise StateDictError(
                f"load_state_dict({type(self).__name__}): " + "; ".join(parts),
                where=where,
                hint=f"expected names look like {next(iter(params), '?')!r}; "
                "pass strict=False to load a subset",
            )
        for name, buf in params.items():
            if name not in state_dict:
                continue
            arr = _to_numpy(state_dict[name])
            if tuple(arr.shape) != tuple(buf.shape):
                raise StateDictError(
                    f"load_state_dict({type(self).__name__}): {name!r} "
                    f"has shape {fmt_shape(tuple(arr.shape))}, "
                    f"the model expects {fmt_shape(tuple(buf.shape))}",
                    where=where,
                )
            buf.array = aligned_copy(arr, buf.dtype.np)
        self.assign_names()
        return self


class ModuleList(Module):
    """An indexed list of modules; children are named "0", "1", ..."""

    def __init__(self, modules: list[Module] | None = None) -> None:
        self._items: list[Module] = []
        for m in modules or []:
            self.append(m)

    def append(self, m: Module) -> None:
        setattr(self, str(len(self._items)), m)
        self._items.append(m)

    def named_children(self) -> Iterator[tuple[str, Module]]:
        for i, m in enumerate(self._items):
            yield str(i), m

    def __getitem__(self, i: int) -> Module:
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._items)
