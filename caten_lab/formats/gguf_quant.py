"""GGUF tensor encodings as bytes: block layouts, NumPy reference dequantizers, and K-quant quantizers.

The nine encodings caten_lab reads (ggml type names): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K
and Q6_K. A tensor of logical shape (rows, K) is ``rows * K / values`` blocks of ``nbytes`` bytes each
(:data:`LAYOUTS`), row after row; blocks run along K, so K must be a multiple of the block size.

Layouts (little-endian; ``f16`` an IEEE half, ``d`` a scale, ``m``/``dmin`` an offset):

- ``Q8_0`` (32 values, 34 bytes): ``d:f16, q:int8[32]``; ``x = d * q``.
- ``Q4_0`` (32, 18): ``d:f16, qs:u8[16]``; value ``i < 16`` is the low nibble of ``qs[i]``, value
  ``16 + i`` its high nibble; ``x = d * (nibble - 8)``.
- ``Q4_1`` (32, 20): ``d:f16, m:f16, qs:u8[16]`` (nibbles as Q4_0); ``x = d * nibble + m``.
- ``Q4_K`` (256, 144): ``d:f16, dmin:f16, scales:u8[12], qs:u8[128]``: 8 sub-blocks of 32, each with a
  6-bit scale ``sc`` and min ``mn`` packed into ``scales`` (sub-block ``j < 4``: low 6 bits of bytes
  ``j`` and ``j + 4``; ``j >= 4``: the nibbles of byte ``j + 4`` and the top 2 bits of bytes ``j - 4``
  and ``j``). Value ``64c + 32h + l`` is nibble ``h`` of ``qs[32c + l]`` in sub-block ``j = 2c + h``;
  ``x = (d * sc) * q - dmin * mn``.
- ``Q5_K`` (256, 176): ``d, dmin, scales:u8[12], qh:u8[32], qs:u8[128]``: as Q4_K with a fifth bit,
  bit ``j`` of ``qh[l]``, worth 16.
- ``Q6_K`` (256, 210): ``ql:u8[128], qh:u8[64], scales:int8[16], d:f16``; value ``128n + 32t + l``
  (``t`` in 0..3) is nibble ``t // 2`` of ``ql[64n + 32(t % 2) + l]`` plus 16 times bits ``2t, 2t+1``
  of ``qh[32n + l]``, minus 32; ``x = (d * scales[v // 16]) * q``.

The dequantizers here are the reference (tests check them against ``gguf.quants.dequantize``); the
compiled programs never call them: :mod:`caten_lab.models.quant_graph` expresses the same arithmetic
as AIR over the raw bytes. The ``gguf`` package cannot quantize K-quants, so :func:`quantize` has its
own for Q4_K, Q5_K and Q6_K: a plain min/max fit per sub-block whose grid always covers the data, so
the round-trip error is at most half a grid step (the step itself rounded up by the 6-/8-bit scale).
"""

from __future__ import annotations

import numpy as np

from caten_lab.formats.rules import FormatError

# ggml type name -> (values per block, bytes per block)
LAYOUTS: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q8_0": (32, 34),
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q4_K": (256, 144),
    "Q5_K": (256, 176),
    "Q6_K": (256, 210),
}


def type_name(ggml_type: object) -> str:
    """The ggml type name (``"Q4_K"``) of a name or a ``gguf.GGMLQuantizationType``; FormatError if unsupported."""
    name = getattr(ggml_type, "name", ggml_type)
    if not isinstance(name, str) or name.upper() not in LAYOUTS:
        raise FormatError(
            f"GGUF tensor type {name!r} is not supported",
            hint=f"supported types: {', '.join(LAYOUTS)}",
        )
    return name.upper()


def row_bytes(ggml_type: object, k: int, where: str = "tensor") -> int:
    """Bytes of one row of ``k`` values; FormatError when ``k`` is not a multiple of the block size."""
    values, nbytes = LAYOUTS[type_name(ggml_type)]
    if not isinstance(k, (int, np.integer)) or k <= 0 or k % values:
        raise FormatError(
            f"{where}: a {type_name(ggml_type)} row holds whole blocks of {values} values, "
            f"but the row length is {k}",
            hint=f"the last dimension must be a positive multiple of {values} for {type_name(ggml_type)}",
        )
    return int(k) // values * nbytes


def check_raw(name: str, ggml_type: object, raw: np.ndarray, shape: tuple[int, int]) -> np.ndarray:
    """``raw`` as a flat uint8 array of exactly the bytes a (rows, K) tensor of ``ggml_type`` takes."""
    t = type_name(ggml_type)
    if len(shape) != 2 or any(not isinstance(d, (int, np.integer)) or d <= 0 for d in shape):
        raise FormatError(f"{name}: quantized weights are 2-D with positive sizes, got shape {tuple(shape)}")
    want = shape[0] * row_bytes(t, shape[1], name)
    if not isinstance(raw, np.ndarray) or raw.dtype != np.uint8:
        got = getattr(raw, "dtype", type(raw).__name__)
        raise FormatError(f"{name}: the raw {t} data must be a uint8 NumPy array, got {got}",
                          hint="pass the tensor's bytes (gguf ReaderTensor.data viewed as np.uint8)")
    if raw.nbytes != want or not raw.flags.c_contiguous:
        raise FormatError(
            f"{name}: {t} data of shape {tuple(shape)} takes {want} bytes, got "
            f"{raw.nbytes}{'' if raw.flags.c_contiguous else ' (not contiguous)'}",
            hint="the file's tensor data is truncated or its shape/type metadata is wrong",
        )
    return raw.reshape(-1)


def _f16(b: np.ndarray, at: int) -> np.ndarray:
    """The f16 at byte ``at`` of every block row of ``b`` (n, nbytes), as float32 (n, 1)."""
    return np.ascontiguousarray(b[:, at : at + 2]).view(np.float16).astype(np.float32)


def _k_scales(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The 8 six-bit scales and mins of the 12 packed bytes ``s`` (n, 12) of Q4_K/Q5_K; (n, 8) each."""
    s = s.astype(np.int32)
    sc = np.concatenate([s[:, 0:4] & 63, (s[:, 8:12] & 15) | ((s[:, 0:4] >> 6) << 4)], axis=1)
    mn = np.concatenate([s[:, 4:8] & 63, (s[:, 8:12] >> 4) | ((s[:, 4:8] >> 6) << 4)], axis=1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _nibbles(qs: np.ndarray, group: int) -> np.ndarray:
    """(n, len) bytes -> (n, 2 len) nibbles: per ``group`` bytes, their low nibbles then their high."""
    n = qs.shape[0]
    g = qs.reshape(n, -1, 1, group).astype(np.int32)
    return np.concatenate([g & 15, g >> 4], axis=2).reshape(n, -1)


def dequantize(raw: np.ndarray, ggml_type: object, shape: tuple[int, int]) -> np.ndarray:
    """The float32 (rows, K) values of the raw tensor bytes (the reference; the kernels never call it)."""
    t = type_name(ggml_type)
    flat = check_raw("dequantize", t, raw, shape)
    values, nbytes = LAYOUTS[t]
    if t == "F32":
        return flat.view(np.float32).reshape(shape).copy()
    if t == "F16":
        return flat.view(np.float16).astype(np.float32).reshape(shape)
    if t == "BF16":
        return (flat.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    b = flat.reshape(-1, nbytes)
    if t == "Q8_0":
        out = _f16(b, 0) * b[:, 2:].view(np.int8).astype(np.float32)
    elif t in ("Q4_0", "Q4_1"):
        q = _nibbles(b[:, nbytes - 16 :], 16).astype(np.float32)
        out = _f16(b, 0) * (q - 8) if t == "Q4_0" else _f16(b, 0) * q + _f16(b, 2)
    elif t in ("Q4_K", "Q5_K"):
        sc, mn = _k_scales(b[:, 4:16])
        q = _nibbles(b[:, nbytes - 128 :], 32)  # (n, 256): sub-block j = values 32j..32j+31
        if t == "Q5_K":
            qh = b[:, 16:48].astype(np.int32)
            q = q + 16 * ((qh[:, None, :] >> np.arange(8)[None, :, None]) & 1).reshape(-1, 256)
        d = (_f16(b, 0) * sc)[:, :, None]
        m = (_f16(b, 2) * mn)[:, :, None]
        out = (d * q.reshape(-1, 8, 32).astype(np.float32) - m).reshape(-1, 256)
    else:  # Q6_K
        ql = b[:, :128].astype(np.int32).reshape(-1, 2, 2, 32)  # (n, half, t % 2, l)
        qh = b[:, 128:192].astype(np.int32).reshape(-1, 2, 1, 32)  # (n, half, -, l)
        lo = np.concatenate([ql & 15, ql >> 4], axis=2)  # (n, half, t, l)
        hi = (qh >> (2 * np.arange(4))[None, None, :, None]) & 3
        q = (lo + 16 * hi - 32).reshape(-1, 16, 16).astype(np.float32)
        d = _f16(b, 208) * b[:, 192:208].view(np.int8).astype(np.float32)  # (n, 16)
        out = (d[:, :, None] * q).reshape(-1, 256)
    return out.reshape(shape).astype(np.float32, copy=False)


# ---- quantizers -----------------------------------------------------------------------------------

def _f16_up(x: np.ndarray) -> np.ndarray:
    """The smallest f16 >= x (x >= 0), as float32: a scale rounded up so the grid still covers the data."""
    h = x.astype(np.float16)
    low = h.astype(np.float32) < x
    h[low] = np.nextafter(h[low], np.float16(np.inf))
    return h.astype(np.float32)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.divide(a, b, out=np.zeros(np.broadcast(a, b).shape, np.float32), where=b > 0)


def _pack_f16(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16).reshape(-1, 1).view(np.uint8)


def _quantize_k_asym(x: np.ndarray, levels: int) -> tuple[np.ndarray, ...]:
    """Q4_K/Q5_K fit of (n, 8, 32) values: x ≈ (d * sc) * q - dmin * mn, q in 0..levels."""
    lo = np.minimum(x.min(axis=2), 0.0)  # (n, 8): the grid starts at or below 0
    hi = x.max(axis=2)
    dmin = _f16_up(-lo.min(axis=1) / 63)  # (n,)
    mn = np.clip(np.ceil(_div(-lo, dmin[:, None])), 0, 63)  # offset dmin*mn >= -lo
    start = -(dmin[:, None] * mn)
    step = np.maximum(hi - start, 0) / levels
    d = _f16_up(step.max(axis=1) / 63)
    sc = np.clip(np.ceil(_div(step, d[:, None])), 0, 63)  # d*sc >= step: the grid reaches hi
    g = (d[:, None] * sc)[:, :, None]
    q = np.clip(np.rint(_div(x - start[:, :, None], g)), 0, levels).astype(np.int32)
    return d, dmin, sc.astype(np.int32), mn.astype(np.int32), q


def _pack_k_scales(sc: np.ndarray, mn: np.ndarray) -> np.ndarray:
    s = np.empty((sc.shape[0], 12), np.int32)
    s[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = mn[:, 0:4] | ((mn[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 15) | ((mn[:, 4:8] & 15) << 4)
    return s.astype(np.uint8)


def _pack_nibbles(q: np.ndarray, group: int) -> np.ndarray:
    """Inverse of :func:`_nibbles` for values already < 16: (n, 2 len) -> (n, len) bytes."""
    g = q.reshape(q.shape[0], -1, 2, group)
    return (g[:, :, 0] | (g[:, :, 1] << 4)).reshape(q.shape[0], -1).astype(np.uint8)


def _quantize_q6_k(x: np.ndarray) -> np.ndarray:
    x = x.reshape(-1, 16, 16)
    amax = np.abs(x).max(axis=2)  # (n, 16)
    step = amax / 31
    d = _f16_up(step.max(axis=1) / 127)
    sc = np.clip(np.ceil(_div(step, d[:, None])), 0, 127)
    g = (d[:, None] * sc)[:, :, None]
    q = (np.clip(np.rint(_div(x, g)), -32, 31).astype(np.int32) + 32).reshape(-1, 2, 4, 32)  # (n, half, t, l)
    ql = (q[:, :, 0:2] & 15) | ((q[:, :, 2:4] & 15) << 4)  # (n, half, t % 2, l)
    hi = q >> 4
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)
    n = x.shape[0]
    return np.concatenate([ql.reshape(n, 128).astype(np.uint8), qh.reshape(n, 64).astype(np.uint8),
                           sc.astype(np.int8).view(np.uint8), _pack_f16(d)], axis=1)


def quantize(w: np.ndarray, ggml_type: object) -> np.ndarray:
    """The bytes of the float (rows, K) array ``w`` encoded as ``ggml_type``: uint8 (rows, row_bytes).

    Q4_K/Q5_K/Q6_K are quantized here; the other types by ``gguf.quants.quantize``."""
    t = type_name(ggml_type)
    w = np.asarray(w, dtype=np.float32)
    if w.ndim != 2:
        raise FormatError(f"quantize: a 2-D weight is needed, got shape {w.shape}")
    rb = row_bytes(t, w.shape[1], "quantize")
    if not np.isfinite(w).all():
        raise FormatError("quantize: the weight holds NaN or inf", hint="quantize finite weights only")
    if t not in ("Q4_K", "Q5_K", "Q6_K"):
        import gguf  # not at import time: the package takes ~50 ms to import, and only this needs it

        out = np.ascontiguousarray(gguf.quants.quantize(w, gguf.GGMLQuantizationType[t]))
        return out.view(np.uint8).reshape(w.shape[0], rb)
    x = w.reshape(-1, 256)
    n = x.shape[0]
    if t == "Q6_K":
        return _quantize_q6_k(x).reshape(w.shape[0], rb)
    d, dmin, sc, mn, q = _quantize_k_asym(x.reshape(n, 8, 32), 15 if t == "Q4_K" else 31)
    q = q.reshape(n, 256)
    parts = [_pack_f16(d), _pack_f16(dmin), _pack_k_scales(sc, mn)]
    if t == "Q5_K":
        bits = (q >> 4).reshape(n, 8, 32)
        parts.append((bits << np.arange(8)[None, :, None]).sum(axis=1).astype(np.uint8))
    parts.append(_pack_nibbles(q & 15, 32))
    return np.concatenate(parts, axis=1).reshape(w.shape[0], rb)
