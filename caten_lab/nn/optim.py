"""Optimizers as graph programs: SGD (momentum, Nesterov) and AdamW with PyTorch's formulas, gradient
clipping by global norm, and learning-rate schedules.

``step()`` records the update of every parameter and of the optimizer's state (momentum buffers,
Adam moments: ``state`` buffers) as in-place stores, then realizes them: the forward, the backward and
the update run as ONE program (compiled once; every later step reuses it). Whatever changes per step
(the learning rate of a schedule, Adam's bias corrections, computed in Python in double precision as
torch does) enters as a small input array, so the program never changes.

    opt = AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    loss = F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))
    loss.backward()
    (value,) = opt.step(loss)   # forward + backward + update in one call; returns the loss
    opt.zero_grad()
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from caten_lab.errors import CatenError
from caten_lab.frontend.build import realize
from caten_lab.frontend.lazy import Buffer, no_grad
from caten_lab.frontend.source import user_source
from caten_lab.frontend.tensor import Tensor
from caten_lab.nn.module import buffer_of
from caten_lab.runtime.aligned import aligned_zeros


def _groups(params: Iterable[Any], defaults: dict[str, Any], op: str) -> list[dict[str, Any]]:
    """torch-style parameter groups: an iterable of Tensors, or of dicts {"params": [...], option: value}."""
    items = list(params)
    if not items:
        raise CatenError(f"{op}: got no parameters", where=user_source())
    raw = items if isinstance(items[0], dict) else [{"params": items}]
    groups = []
    for g in raw:
        unknown = set(g) - {"params", *defaults}
        if unknown:
            raise CatenError(
                f"{op}: unknown option(s) {', '.join(sorted(unknown))} in a parameter group",
                where=user_source(),
                hint=f"options: {', '.join(defaults)}",
            )
        group = {**defaults, **g, "params": list(g["params"])}
        for p in group["params"]:
            buf = buffer_of(p) if isinstance(p, Tensor) else None
            if buf is None or not buf.dtype.is_float:
                raise CatenError(
                    f"{op}: {p!r} is not a floating-point parameter (a bound tensor)", where=user_source()
                )
        groups.append(group)
    return groups


class Optimizer:
    """Base class: parameter groups, ``zero_grad`` and the realization of a step."""

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        self.param_groups = _groups(params, defaults, type(self).__name__)
        self.state: dict[int, dict[str, Tensor]] = {}  # id(buffer) -> name -> state tensor
        self.steps = 0
        self.hyper = np.zeros((len(self.param_groups), 0), np.float32)  # this step's scalars (record_step)

    def _buffers(self) -> list[tuple[dict[str, Any], Tensor, Buffer]]:
        return [(g, p, buffer_of(p)) for g in self.param_groups for p in g["params"]]  # type: ignore[misc]

    def zero_grad(self) -> None:
        for _, _, buf in self._buffers():
            buf.grad = None

    def _state(self, buf: Buffer, name: str) -> Tensor:
        slots = self.state.setdefault(id(buf), {})
        if name not in slots:
            arr = aligned_zeros(tuple(buf.shape), buf.dtype.np)
            slots[name] = Tensor.from_buffer(
                Buffer(buf.shape, buf.dtype, arr, name=f"{buf.name}.{name}", kind="state")
            )
        return slots[name]

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every state slot's values by ``"<parameter name>|<slot>"`` (a checkpoint's optimizer part)."""
        out = {}
        for _, _, buf in self._buffers():
            for slot, t in self.state.get(id(buf), {}).items():
                sbuf = buffer_of(t)
                assert sbuf is not None and sbuf.array is not None  # noqa: S101 - made bound in _state
                out[f"{buf.name}|{slot}"] = sbuf.array
        return out

    def load_state_arrays(self, arrays: dict[str, np.ndarray], steps: int) -> None:
        """Restore :meth:`state_arrays` (and the step count the bias corrections use)."""
        by_name = {buf.name: buf for _, _, buf in self._buffers()}
        for key, value in arrays.items():
            pname, slot = key.split("|")
            if pname not in by_name:
                raise CatenError(f"{type(self).__name__}: the checkpoint has state for unknown parameter {pname!r}")
            sbuf = buffer_of(self._state(by_name[pname], slot))
            assert sbuf is not None and sbuf.array is not None  # noqa: S101
            if sbuf.array.shape != np.shape(value):
                raise CatenError(f"{type(self).__name__}: state {key} has shape {np.shape(value)}, "
                                 f"the parameter {sbuf.array.shape}")
            sbuf.array[...] = value
        self.steps = steps

    def _update(
        self, hyper: Tensor, gi: int, group: dict[str, Any], p: Tensor, buf: Buffer, g: Tensor
    ) -> None:
        raise NotImplementedError

    def hyper_rows(self) -> list[list[float]]:
        """This step's per-group scalars (the learning rate and what depends on the step count), the values
        of the optimizer's input array (``hyper``)."""
        raise NotImplementedError

    def record_step(self) -> list[Tensor]:
        """Record (lazily) one update of every parameter with a gradient and of the optimizer state; returns
        the updated parameters. ``self.hyper`` is the input array this step's scalars are read from."""
        work = [
            (gi, group, p, buf)
            for gi, group in enumerate(self.param_groups)
            for p in group["params"]
            if (buf := buffer_of(p)) is not None and buf.grad is not None
        ]
        if not work:
            raise CatenError(
                f"{type(self).__name__}.step: no parameter has a gradient",
                where=user_source(),
                hint="call loss.backward() before step()",
            )
        self.steps += 1
        self.hyper = np.array(self.hyper_rows(), np.float32)
        with no_grad():
            hyper = Tensor.from_numpy(self.hyper, name=f"optim.{type(self).__name__.lower()}")
            for gi, group, p, buf in work:
                self._update(hyper, gi, group, p, buf, buf.grad)
        return [p for _, _, p, _ in work]

    def step(self, *also: Tensor) -> list[np.ndarray]:
        """Apply one update to every parameter with a gradient, realizing it together with ``also`` (e.g.
        the loss) in one program; returns ``also``'s values."""
        updated = self.record_step()
        out = realize([*also, *updated], {})
        return out[: len(also)]


class SGD(Optimizer):
    """torch.optim.SGD: ``lr``, ``momentum``, ``dampening``, ``weight_decay`` (L2, added to the gradient),
    ``nesterov``."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        if nesterov and (momentum <= 0 or dampening != 0):
            raise CatenError("SGD: nesterov needs momentum > 0 and dampening 0", where=user_source())
        super().__init__(
            params,
            dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay, nesterov=nesterov),
        )

    def hyper_rows(self) -> list[list[float]]:
        # torch: the first step's momentum buffer is the gradient itself (no dampening)
        first = self.steps == 1
        return [
            [g["lr"], 0.0 if first else g["momentum"], 1.0 if first else 1.0 - g["dampening"]]
            for g in self.param_groups
        ]

    def _update(
        self, hyper: Tensor, gi: int, group: dict[str, Any], p: Tensor, buf: Buffer, g: Tensor
    ) -> None:
        lr = hyper[gi, 0]
        if group["weight_decay"]:
            g = g + p * group["weight_decay"]
        if group["momentum"]:
            m = self._state(buf, "momentum_buffer")
            new_m = m * hyper[gi, 1] + g * hyper[gi, 2]
            m[:] = new_m
            g = g + new_m * group["momentum"] if group["nesterov"] else new_m
        p[:] = p - lr * g


class AdamW(Optimizer):
    """torch.optim.AdamW (decoupled weight decay; ``amsgrad`` not supported)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        betas: Sequence[float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        b1, b2 = betas
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise CatenError(f"AdamW: betas must be in [0, 1), got {tuple(betas)}", where=user_source())
        super().__init__(params, dict(lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay))

    def hyper_rows(self) -> list[list[float]]:
        t = self.steps
        rows = []
        for g in self.param_groups:
            b1, b2 = g["betas"]
            step_size = g["lr"] / (1 - b1**t)
            rows.append([1 - g["lr"] * g["weight_decay"], step_size, math.sqrt(1 - b2**t)])
        return rows

    def _update(
        self, hyper: Tensor, gi: int, group: dict[str, Any], p: Tensor, buf: Buffer, g: Tensor
    ) -> None:
        b1, b2 = group["betas"]
        m, v = self._state(buf, "exp_avg"), self._state(buf, "exp_avg_sq")
        new_m = m + (g - m) * (1 - b1)  # torch's lerp
        new_v = v * b2 + g * g * (1 - b2)
        m[:] = new_m
        v[:] = new_v
        denom = new_v.sqrt() / hyper[gi, 2] + group["eps"]
        p[:] = p * hyper[gi, 0] - hyper[gi, 1] * (new_m / denom)


def clip_grad_norm(params: Iterable[Tensor], max_norm: float) -> Tensor:
    """torch.nn.utils.clip_grad_norm_: scale every gradient by ``min(1, max_norm / (norm + 1e-6))`` where
    ``norm`` is the 2-norm of all gradients together; returns that norm (lazy, like the gradients)."""
    bufs = [b for p in params if (b := buffer_of(p)) is not None and b.grad is not None]
    if not bufs:
        raise CatenError("clip_grad_norm: no parameter has a gradient", where=user_source())
    with no_grad():
        total = None
        for b in bufs:
            s = (b.grad * b.grad).sum()
            total = s if total is None else total + s
        norm = total.sqrt()  # type: ignore[union-attr]
        coef = (max_norm / (norm + 1e-6)).minimum(1.0)
        for b in bufs:
            b.grad = b.grad * coef
    return norm


def cosine_schedule(step: int, *, lr: float, warmup: int, total: int, min_lr: float = 0.0) -> float:
    """Linear warmup for ``warmup`` steps, then cosine decay to ``min_lr`` at ``total`` (step counts from 0)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def linear_schedule(step: int, *, lr: float, warmup: int, total: int) -> float:
    """Linear warmup, then linear decay to 0 at ``total`` (transformers' get_linear_schedule_with_warmup)."""
    if step < warmup:
        return lr * step / max(1, warmup)
    return lr * max(0.0, (total - step) / max(1, total - warmup))


def set_lr(opt: Optimizer, lr: float | Callable[[dict[str, Any]], float]) -> None:
    """Set every group's learning rate (the next ``step()`` uses it; no recompile)."""
    for g in opt.param_groups:
        g["lr"] = lr(g) if callable(lr) else float(lr)
