"""The per-call hot path of a compiled program: one library call with as little Python as possible.

A decode step calls the same program hundreds of times with the same weight and cache arrays and
only a new token array and new symbol values. :class:`FastCall` keeps, per buffer slot, the cffi
pointer of the array last bound there; an array object seen again (same object, so same memory:
we hold a reference, so it cannot be freed or moved) reuses its pointer without a new
``from_buffer``. Intermediates live in grow-only workspace slots (pointers change only when a slot
grows); the symbol and error records are preallocated. Conversion and validation run for every
array that was not seen before: :func:`input_array` (a copy of the right dtype and layout, refused
when converting would change values), the program's state check (exact dtype, C-contiguous,
writable). The shapes and symbol windows of every call are checked before this runs, by
``Program._enter`` (caten_lab/compiler.py) at safety >= 1.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from caten_lab.air.symbolic import evaluate
from caten_lab.errors import CatenError, ShapeError
from caten_lab.runtime.aligned import aligned_empty
from caten_lab.runtime.library import FFI, profile_pointer


def input_array(name: str, a: Any, npdt: np.dtype, shape: tuple | None = None) -> np.ndarray:
    """``a`` as a C-contiguous array of ``npdt``: ``a`` itself when it is one, else a converted copy.

    A conversion that would change values is refused: float to int or bool, int to bool, or a wider
    integer whose values do not fit (NumPy would truncate or wrap without a word). With ``shape``, a
    converted copy must have it (the entry's shape check reads ``.shape``, which an object that is not
    an array may report differently from the array it converts to)."""
    if type(a) is np.ndarray and a.dtype == npdt and a.flags.c_contiguous:
        return a
    try:
        src = np.asarray(a)
    except (TypeError, ValueError) as e:
        raise CatenError(f"input {name!r} cannot be read as an array: {e}",
                         hint=f"pass a NumPy array of {np.dtype(npdt)}") from None
    want = np.dtype(npdt)
    if src.dtype != want:
        if src.dtype.kind not in "biuf" or not np.can_cast(src.dtype, want, "same_kind"):
            raise CatenError(
                f"input {name!r} is {src.dtype}, but the program takes {want}: converting would change its values",
                hint=f"convert it yourself if that is what you mean: np.asarray(x).astype(np.{want})",
            )
        if src.dtype.kind in "iu" and want.kind in "iu" and src.size and not np.can_cast(src.dtype, want, "safe"):
            info = np.iinfo(want)
            lo, hi = int(src.min()), int(src.max())
            if lo < info.min or hi > info.max:
                raise CatenError(
                    f"input {name!r} holds values {lo}..{hi}, outside the program's {want} "
                    f"({info.min}..{info.max})",
                    hint="the values would wrap around: check the array",
                )
    out = np.ascontiguousarray(src, dtype=want)
    if shape is not None and out.shape != shape:
        raise ShapeError(f"input {name!r}: expected shape {shape}, got {out.shape} (after conversion to an array)",
                         hint="pass a NumPy array")
    return out


def output_array(name: str, shape: tuple, npdt: np.dtype) -> np.ndarray:
    """A fresh output array; a size the machine cannot allocate is a CatenError naming the output."""
    try:
        return aligned_empty(shape, npdt)
    except (MemoryError, ValueError) as e:
        raise CatenError(f"output {name!r} of shape {shape} cannot be allocated: {e}",
                         hint="check the symbol values") from None


class FastCall:
    """Bind arrays to a program's buffer order and call ``caten_run`` (see module docstring)."""

    def __init__(self, program: Any) -> None:
        sched = program.schedule
        self.program = program
        self.lib = program._lib.lib
        self.order = list(sched.buffers)
        self.index = {b: i for i, b in enumerate(self.order)}
        self.infos = [sched.buffers[b] for b in self.order]
        n = max(1, len(self.order))
        self.ptrs = FFI.new("void *[]", n)
        self.bound: list[Any] = [None] * n  # the object whose pointer sits in ptrs[i] (kept alive)
        self.keep: list[Any] = [None] * n  # cffi buffers backing ptrs[i]
        states = set(program.state_writes.values())
        self.inputs = [(i, b, b in states) for i, b in enumerate(self.order)
                       if self.infos[i].kind in ("input", "state")]
        self.outputs = [(i, b) for i, b in enumerate(self.order) if self.infos[i].kind == "output"]
        plan = program.memory_plan
        self.slot_of = dict(plan.slot_of) if plan is not None else {}
        self.plan = plan
        self.slot_members: list[list[int]] = []
        if plan is not None:
            self.slot_members = [[self.index[b] for b in members if b in self.index] for members in plan.slots]
        self.slots: list[np.ndarray | None] = [None] * len(self.slot_members)
        self.other = [i for i, b in enumerate(self.order)
                      if self.infos[i].kind not in ("input", "state", "output") and b not in self.slot_of]
        self.sym_names = list(sched.symbols)
        self.sym = np.zeros(max(1, len(self.sym_names)), dtype=np.int64)
        self.err = np.zeros(8, dtype=np.int64)
        self.sym_p = FFI.cast("const int64_t *", FFI.from_buffer(self.sym))
        self.err_p = FFI.cast("int64_t *", FFI.from_buffer(self.err))
        self.other_cache: OrderedDict[tuple, list[np.ndarray]] = OrderedDict()
        self.sched_outputs = list(sched.outputs)
        self.lock = threading.Lock()  # the pointer table is shared: one call at a time

    def _bind(self, i: int, arr: np.ndarray) -> None:
        buf = FFI.from_buffer(arr)
        self.ptrs[i] = FFI.cast("void *", buf)
        self.keep[i] = buf
        self.bound[i] = arr

    def _shape(self, i: int, sym: Mapping[str, int]) -> tuple:
        return tuple(evaluate(d, sym) for d in self.infos[i].shape)

    def run(self, inputs: Mapping[str, Any], sym: Mapping[str, int],
            state_array: Callable[[str, Mapping[str, Any]], np.ndarray],
            profile: np.ndarray | None = None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """Bind and call; returns the error record and the output arrays by buffer name. With ``profile``
        (float64, one slot per kernel call) ``caten_run_profile`` adds each call's wall time to its slot:
        the same buffers as a plain call, so the times are those of a plain call's kernels."""
        for i, name, is_state in self.inputs:
            a = inputs[name]
            if a is self.bound[i]:
                continue  # same object as last call: same memory, pointer still valid
            if is_state:
                arr = state_array(name, inputs)
            else:
                arr = input_array(name, a, self.infos[i].dtype.np, self._shape(i, sym))
            self._bind(i, arr)
            if arr is not a:  # a converted copy must be made again next call (the source may change)
                self.bound[i] = None
        outs: dict[str, np.ndarray] = {}
        fresh: list[np.ndarray] = []  # arrays allocated by this call: a profiled call touches their pages first
        for i, name in self.outputs:
            arr = output_array(name, self._shape(i, sym), self.infos[i].dtype.np)
            self._bind(i, arr)
            outs[name] = arr
            fresh.append(arr)
        if self.slot_members:
            sizes = self.plan.slot_bytes(dict(sym))  # type: ignore[union-attr]
            for s, need in enumerate(sizes):
                cur = self.slots[s]
                if cur is None or cur.nbytes < need:
                    grown = int(need * 1.25) if cur is not None else need  # amortize growth with pos
                    cur = aligned_empty((max(64, grown),), np.uint8)
                    self.slots[s] = cur
                    fresh.append(cur)
                    for i in self.slot_members[s]:
                        self._bind(i, cur)
        if self.other:
            key = tuple(sym.get(s, 0) for s in self.sym_names)
            arrs = self.other_cache.get(key)
            if arrs is None:
                arrs = [aligned_empty(self._shape(i, sym), self.infos[i].dtype.np) for i in self.other]
                self.other_cache[key] = arrs
                fresh += arrs
                while len(self.other_cache) > 4:
                    self.other_cache.popitem(last=False)
            for i, arr in zip(self.other, arrs):
                if self.bound[i] is not arr:
                    self._bind(i, arr)
        for k, s in enumerate(self.sym_names):
            self.sym[k] = sym[s]
        self.err[:] = 0
        if profile is None:
            self.lib.caten_run(self.ptrs, self.sym_p, self.err_p)
        else:
            for arr in fresh:  # the OS maps a new page at its first write: outside the kernels' timers
                arr.reshape(-1).view(np.uint8)[::4096] = 0
            self.lib.caten_run_profile(self.ptrs, self.sym_p, self.err_p, profile_pointer(profile))
        return self.err, outs


def collect_outputs(program: Any, fast: FastCall, inputs: Mapping[str, Any], outs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The program's results in graph-output order (what ``Program._run_c`` returns)."""
    sched = program.schedule
    states = program.state_writes
    result: list[Any] = []
    for i, b in enumerate(fast.sched_outputs):  # first every output but the state updates: an output
        if i in states:  # that is an input is copied before a state write-back can change that input
            result.append(None)
        elif sched.buffers[b].kind == "input":
            result.append(np.array(inputs[b], copy=True))
        else:
            result.append(outs[b])
    last = {name: i for i, name in states.items()}
    for i, name in states.items():
        b = fast.sched_outputs[i]
        st = inputs[name]
        arr = outs.get(b)
        if arr is None:
            arr = fast.bound[fast.index[b]]
        if last[name] != i:  # a later output updates the same input: this one keeps its own copy
            result[i] = np.array(arr, copy=True)
            continue
        if arr is not st:
            st[...] = arr
        result[i] = st
    return result

