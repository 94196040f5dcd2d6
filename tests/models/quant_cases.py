"""Shared cases of the quantized-weight tests: weights, their GGUF bytes, the fp32 tolerance, and the
check that a compiled program reads a weight as its raw bytes (tests/models/test_quant_*.py)."""

from __future__ import annotations

import gguf
import numpy as np

from caten_lab.air.shapes import numel
from caten_lab.air.symbolic import evaluate
from caten_lab.compiler import compile as compile_graph
from caten_lab.config import settings
from caten_lab.formats import gguf_quant as gq

TYPES = list(gq.LAYOUTS)
BACKENDS = ["numpy", "c"]


def weights(rng: np.random.Generator, rows: int, k: int) -> np.ndarray:
    """Rows of different scales, an all-zero stretch, an all-positive and an all-negative row."""
    w = rng.standard_normal((rows, k)).astype(np.float32) * rng.uniform(0.05, 4.0, (rows, 1)).astype(np.float32)
    w[0, : k // 2] = 0
    w[1] = np.abs(w[1])
    w[2] = -np.abs(w[2])
    return w


def k_for(t: str, blocks: int) -> int:
    return gq.LAYOUTS[t][0] * blocks if gq.LAYOUTS[t][0] > 1 else 32 * blocks + 3


def quantized(t: str, rows: int, k: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(raw bytes (rows, row bytes), their float32 dequantization by gguf)."""
    raw = gq.quantize(weights(np.random.default_rng(seed), rows, k), t)
    return raw, gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[t]).astype(np.float32)


def close(got: np.ndarray, want: np.ndarray, bound: np.ndarray, msg: str) -> None:
    """fp32 accuracy of a sum: ``|got - want| <= 1e-5 * sum |terms| + 1e-6``."""
    err = np.abs(got.astype(np.float64) - want)
    assert np.all(err <= 1e-5 * bound + 1e-6), f"{msg}: max error {err.max()}"


def compile_with(graph, backend: str):  # noqa: ANN201 - a Program
    with settings(threads=2):
        return compile_graph(graph, backend=backend)


def assert_reads_raw(prog, weight_numel: int, raw_names: set[str]) -> None:
    """The weight is read as its raw bytes by the kernels that use it; nothing weight-sized is written."""
    sched = prog.schedule
    written = {b for k in sched.kernels for b in k.outputs}
    for name, info in sched.buffers.items():
        if info.kind not in ("input", "output"):
            assert evaluate(numel(info.shape), {"seq": 9}) < weight_numel, \
                f"{name} {info.shape} ({info.kind}): a weight-sized buffer is written"
    inputs = {n for n, i in sched.buffers.items() if i.kind == "input"}
    assert raw_names <= inputs and not (written & raw_names)
    plan = prog.memory_plan  # intermediates at a prefill of 9 rows: each far below the weight's float size
    assert plan is not None and all(b < 4 * weight_numel for b in plan.slot_bytes({"seq": 9}))
    readers = [k for k in sched.kernels if raw_names & set(k.inputs)]
    assert readers, "no kernel reads the raw weight"
    for k in readers:  # the decoding is inside the kernels that reduce over the weight: matvec/gather
        assert k.n_stages >= 1, f"{k.name} reads the raw weight but reduces nothing: a dequantizing copy"
