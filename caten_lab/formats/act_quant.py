"""8-bit activation blocks and the quantized matmul over GGUF weight blocks: the NumPy reference.

A matmul ``x @ W.T`` whose weight ``W`` (n, k) stays in its GGUF blocks runs, as in llama.cpp, on
integers: each row of ``x`` is first quantized to 8 bits in blocks (:func:`quantize_rows`), then every
output is a sum over blocks of ``(weight scale * activation scale) * (integer dot product)`` plus the
weight minima's terms. The AIR ops ``quant_rows`` and ``quant_matmul`` are these two functions; the
interpreter calls them and the compiled kernels call the C helpers of ``codegen/c/quant.h``, which
compute the same integers exactly and combine them in float32 (in another order: results agree to
float rounding, not bit for bit).

**Activation blocks** (little-endian, ``block`` values each, the row length a multiple of ``block``):

- ``block = 32`` (weights Q8_0, Q4_0, Q4_1), 40 bytes: ``d: f32, sd: f32, q: int8[32]``, where
  ``sd = d * sum(q)`` (the Q4_1 minimum's term);
- ``block = 256`` (the K-quants Q4_K, Q5_K, Q6_K), 292 bytes: ``d: f32, bsum: int16[16], q: int8[256]``,
  where ``bsum[g]`` is the sum of ``q[16 g : 16 g + 16]``.

Quantizing one block of float32 values ``x`` (every operation in float32):
``amax = max |x|``; when ``amax`` is finite and ``127 / amax`` too, ``q = rint(x * (127 / amax))``
(round half to even) and ``d = amax / 127``; when ``amax`` is 0 (or so small that ``127 / amax``
overflows) ``q = 0, d = 0``; when ``x`` holds an infinity or a NaN, ``q = 0, d = NaN`` (so every
output that reads the block is NaN, as the float matmul would give).

The value a block stands for is ``d * q``; :func:`quant_matmul` is the exact dot product of those
values with the dequantized weight rows (:func:`caten_lab.formats.gguf_quant.dequantize`), rounded once
to float32.
"""

from __future__ import annotations

import numpy as np

from caten_lab.formats.gguf_quant import dequantize, row_bytes, type_name
from caten_lab.formats.rules import FormatError

A_BYTES: dict[int, int] = {32: 40, 256: 292}  # activation block size -> bytes per block
ACT_BLOCK: dict[str, int] = {"Q8_0": 32, "Q4_0": 32, "Q4_1": 32, "Q4_K": 256, "Q5_K": 256, "Q6_K": 256}
QUANT_MATMUL_TYPES = tuple(ACT_BLOCK)  # the weight types quant_matmul reads


def act_block(wtype: object) -> int:
    """The activation block size a weight of ``wtype`` is multiplied with (32 or 256)."""
    t = type_name(wtype)
    if t not in ACT_BLOCK:
        raise FormatError(f"quant_matmul does not read {t} weights", hint=f"types: {', '.join(ACT_BLOCK)}")
    return ACT_BLOCK[t]


def act_row_bytes(k: int, block: int) -> int:
    """Bytes of one quantized activation row of ``k`` values."""
    if block not in A_BYTES:
        raise FormatError(f"activation blocks hold 32 or 256 values, not {block}")
    if not isinstance(k, (int, np.integer)) or k <= 0 or k % block:
        raise FormatError(f"an activation row of {k} values is no whole number of {block}-value blocks",
                          hint=f"the row length must be a positive multiple of {block}")
    return int(k) // block * A_BYTES[block]


def quantize_rows(x: np.ndarray, block: int) -> np.ndarray:
    """float32 (..., k) -> uint8 (..., k / block * A_BYTES[block]): each row in 8-bit blocks."""
    x = np.asarray(x, dtype=np.float32)
    k = x.shape[-1]
    rb = act_row_bytes(k, block)
    lead = x.shape[:-1]
    b = x.reshape(-1, block)  # one block per row
    with np.errstate(all="ignore"):
        amax = np.max(np.abs(b), axis=1) if b.shape[0] else np.zeros(0, np.float32)
        inv = np.float32(127.0) / amax
        ok = np.isfinite(amax) & (amax > 0) & np.isfinite(inv)
        q = np.where(ok[:, None], np.rint(b * inv[:, None]), 0).astype(np.float32)
        q = np.clip(q, -127, 127).astype(np.int8)
        d = np.where(ok, amax / np.float32(127.0), np.where(np.isfinite(amax), 0, np.nan)).astype(np.float32)
    n = b.shape[0]
    out = np.empty((n, A_BYTES[block]), np.uint8)
    if block == 32:
        sd = (d * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float32)
        out[:, 0:4] = d.reshape(n, 1).view(np.uint8)
        out[:, 4:8] = sd.reshape(n, 1).view(np.uint8)
        out[:, 8:] = q.view(np.uint8)
    else:
        bsum = q.astype(np.int32).reshape(n, 16, 16).sum(axis=2).astype(np.int16)
        out[:, 0:4] = d.reshape(n, 1).view(np.uint8)
        out[:, 4:36] = bsum.view(np.uint8)
        out[:, 36:] = q.view(np.uint8)
    return out.reshape(*lead, rb)


def act_values(xq: np.ndarray, block: int, k: int) -> np.ndarray:
    """The float64 (..., k) values ``d * q`` that quantized rows ``xq`` (uint8 (..., row bytes)) stand for."""
    xq = np.ascontiguousarray(xq, dtype=np.uint8)
    rb = act_row_bytes(k, block)
    if xq.shape[-1] != rb:
        raise FormatError(f"a quantized row of {k} values takes {rb} bytes, got {xq.shape[-1]}")
    b = xq.reshape(-1, A_BYTES[block])
    d = np.ascontiguousarray(b[:, 0:4]).view(np.float32).astype(np.float64)
    q = np.ascontiguousarray(b[:, 8:] if block == 32 else b[:, 36:]).view(np.int8).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return (d * q).reshape(*xq.shape[:-1], k)


def quant_matmul(xq: np.ndarray, w: np.ndarray, wtype: object, n: int, k: int) -> np.ndarray:
    """float32 (..., n): rows ``xq`` (quantized by :func:`quantize_rows` with the type's block) times the
    (n, k) weight whose GGUF bytes are ``w`` (any dtype: its bytes), transposed."""
    t = type_name(wtype)
    raw = np.ascontiguousarray(w).reshape(-1).view(np.uint8)
    if raw.nbytes != n * row_bytes(t, k, "quant_matmul"):
        raise FormatError(f"quant_matmul: a ({n}, {k}) {t} weight takes {n * row_bytes(t, k)} bytes, "
                          f"got {raw.nbytes}")
    wf = dequantize(raw, t, (n, k)).astype(np.float64)
    x = act_values(xq, act_block(t), k)
    with np.errstate(all="ignore"):
        return (x.reshape(-1, k) @ wf.T).astype(np.float32).reshape(*x.shape[:-1], n)
