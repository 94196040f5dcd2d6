"""GGUF-quantized weights read in place: matmuls over the tensor's own bytes.

:func:`quantize_graph` rewrites a float32 weight input (out, in) of a traced graph to read *raw inputs*:
the tensor's bytes exactly as they sit in the GGUF file, bound once per dtype the arithmetic needs.

- A linear use ``x @ W.T`` (:func:`caten_lab.passes.linear_form.linear_uses`) of a quantized weight becomes,
  with ``activations="q8"`` (the default), ``quant_matmul(quant_rows(x), W's bytes)``: the rows of ``x``
  rounded to 8 bits in blocks and integer block dot products, as llama.cpp computes it (the AIR ops and
  their arithmetic: :mod:`caten_lab.formats.act_quant`; the kernels: codegen/lower_quant.py). About 0.3% of
  perplexity on SmolLM2 (bench/quant_accuracy.py).
- Every other use (an embedding's row lookup; any use with ``activations="f32"``; F32, F16 and BF16
  weights) reads the weight's dequantization written as AIR over the bytes. AIR has no bitcast, but a
  ``view`` is a strided window over its operand's storage, so the same bytes bound as ``float16``,
  ``uint8`` and ``int8`` arrays give the block scales (strided f16 views), the packed quants (uint8 views,
  nibbles by ``// 16`` and ``% 16``, high bits by constant divisions chosen with ``where``) and signed
  scales (int8 views). Every op on the way is elementwise, so the scheduler inlines the dequantization
  into the kernel that reads the weight (the matvec, the matmul, the embedding's one-hot gather) and no
  float copy of the weight ever exists.

**Raw-input naming convention** (the exported C binds the same inputs straight from the file): a
weight ``W`` stored as ggml type ``T`` becomes the inputs ``W#<s>`` for each suffix ``s`` of
``RAW_SUFFIXES[T]``; each is the whole tensor data (``rows * row_bytes`` bytes, starting at the
tensor's offset in the file) seen as a flat array of dtype ``SUFFIX_DTYPES[s]`` with
``nbytes / itemsize`` elements: ``f32`` float32, ``f16`` float16, ``u8`` uint8, ``i8`` int8. So

    F32: W#f32   F16: W#f16   BF16: W#u8   Q8_0: W#f16 W#i8   Q4_0, Q4_1, Q4_K, Q5_K: W#f16 W#u8
    Q6_K: W#f16 W#u8 W#i8

:func:`raw_input_specs` gives (dtype, element count) per name without any data; :func:`raw_inputs`
gives the NumPy views (zero copy) of a uint8 buffer (a memory-mapped file slice): bind those the rewritten
graph has as inputs (a weight read only by quantized matmuls keeps its byte view alone, ``W#u8`` or
``W#i8``). The block layouts are documented in :mod:`caten_lab.formats.gguf_quant`.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from caten_lab.air.dtypes import DType
from caten_lab.air.graph import Graph
from caten_lab.air.shapes import contiguous_strides
from caten_lab.air.value import Value
from caten_lab.formats.act_quant import QUANT_MATMUL_TYPES, act_block
from caten_lab.formats.gguf_quant import LAYOUTS, check_raw, row_bytes, type_name
from caten_lab.formats.rules import FormatError
from caten_lab.passes.linear_form import LinearUse, linear_uses

SUFFIX_DTYPES: dict[str, DType] = {"f32": DType.float32, "f16": DType.float16, "u8": DType.uint8, "i8": DType.int8}
RAW_SUFFIXES: dict[str, tuple[str, ...]] = {
    "F32": ("f32",),
    "F16": ("f16",),
    "BF16": ("u8",),
    "Q8_0": ("f16", "i8"),
    "Q4_0": ("f16", "u8"),
    "Q4_1": ("f16", "u8"),
    "Q4_K": ("f16", "u8"),
    "Q5_K": ("f16", "u8"),
    "Q6_K": ("f16", "u8", "i8"),
}
# values of one block split into axes (the order of the values inside a block is row-major over them)
_INNER: dict[str, tuple[int, ...]] = {
    "F32": (), "F16": (), "BF16": (), "Q8_0": (32,), "Q4_0": (2, 16), "Q4_1": (2, 16),
    "Q4_K": (2, 2, 2, 32), "Q5_K": (2, 2, 2, 32), "Q6_K": (2, 2, 2, 2, 16),
}
I32, F32 = DType.int32, DType.float32


def raw_name(name: str, suffix: str) -> str:
    """The raw input of weight ``name`` seen as dtype suffix ``suffix`` (``"w#f16"``)."""
    return f"{name}#{suffix}"


def raw_input_specs(name: str, ggml_type: object, shape: tuple[int, int]) -> dict[str, tuple[DType, int]]:
    """``{raw input name: (dtype, element count)}`` of a (rows, K) weight stored as ``ggml_type``."""
    t = type_name(ggml_type)
    if len(shape) != 2 or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape):
        raise FormatError(f"{name}: a quantized weight is 2-D with positive static sizes, got {tuple(shape)}")
    nbytes = int(shape[0]) * row_bytes(t, shape[1], name)
    return {raw_name(name, s): (SUFFIX_DTYPES[s], nbytes // SUFFIX_DTYPES[s].itemsize) for s in RAW_SUFFIXES[t]}


def raw_inputs(name: str, ggml_type: object, raw: np.ndarray, shape: tuple[int, int] | None = None
               ) -> dict[str, np.ndarray]:
    """The arrays to bind for weight ``name``: views of the uint8 bytes ``raw`` (no copy).

    ``shape`` is the logical (rows, K); without it ``raw`` must be 2-D (rows, row bytes), as ``gguf``'s
    reader gives quantized tensors (``raw_inputs(name, t.tensor_type, t.data)`` for a ``ReaderTensor``;
    its F32/F16 tensors, float arrays (rows, K), are taken as their bytes). A wrong byte count or a K that is no whole number of blocks is a
    FormatError naming the weight."""
    t = type_name(ggml_type)
    natural = {"F32": np.float32, "F16": np.float16}.get(t)
    if isinstance(raw, np.ndarray) and natural is not None and raw.dtype == natural and raw.flags.c_contiguous:
        raw = raw.view(np.uint8)  # gguf's reader gives F32/F16 tensors as float arrays: their bytes
    if shape is None:
        if not isinstance(raw, np.ndarray) or raw.ndim != 2:
            raise FormatError(f"{name}: give the logical shape, or the raw {t} data as (rows, row bytes)",
                              hint="raw_inputs(name, type, raw, shape=(rows, K))")
        values, nbytes = LAYOUTS[t]
        if raw.shape[1] % nbytes:
            raise FormatError(f"{name}: a row of {raw.shape[1]} bytes is no whole number of {t} blocks "
                              f"({nbytes} bytes each)")
        shape = (raw.shape[0], raw.shape[1] // nbytes * values)
    flat = check_raw(name, t, raw, shape)
    return {n: flat.view(dt.np) for n, (dt, _) in raw_input_specs(name, t, shape).items()}


class _Blocks:
    """Builds one weight's dequantization: values indexed (row, block, *inner axes of a block)."""

    def __init__(self, graph: Graph, t: str, rows: int, k: int, raw: dict[str, Value]) -> None:
        self.g, self.t = graph, t
        values, self.nbytes = LAYOUTS[t]
        self.nb = k // values
        self.rows, self.k = rows, k
        self.shape = (rows, self.nb, *_INNER[t]) if _INNER[t] else (rows, k)
        self.raw = raw  # suffix -> the raw input of that dtype (raw_allocates)

    def field(self, suffix: str, offset: int, inner: tuple[int, ...] = (), dtype: DType | None = None) -> Value:
        """The raw ``suffix`` view at byte ``offset`` of each block, ``inner`` strides (elements) per inner
        axis (default 0: broadcast), cast to ``dtype`` (int32 for integers, float32 for f16)."""
        size = SUFFIX_DTYPES[suffix].itemsize
        per_block = self.nbytes // size
        inner = inner or (0,) * (len(self.shape) - 2)
        strides = (self.nb * per_block, per_block, *inner) if _INNER[self.t] else (self.k * per_block, per_block)
        v = self.g.insert("view", [self.raw[suffix]], shape=self.shape, strides=strides, offset=offset // size)
        want = dtype or (F32 if SUFFIX_DTYPES[suffix].is_float else I32)
        return v if want == SUFFIX_DTYPES[suffix] else self.g.insert("cast", [v], dtype=want)

    def op(self, name: str, *reads: Value | int | float) -> Value:
        return self.g.insert(name, list(reads))

    def bit(self, axis: int) -> Value:
        """True where the coordinate along ``axis`` (an axis of size 2) is 1."""
        idx = self.g.insert("index", [], shape=self.shape, axis=axis, dtype=I32)
        return self.op("ne", idx, 0)

    def f32(self, v: Value) -> Value:
        return self.g.insert("cast", [v], dtype=F32)

    def choose(self, cond: Value, a: int | float, b: int | float) -> Value:
        """``cond ? a : b`` for two literals, as int32 (ints) or float32."""
        return self.g.insert("cast", [self.op("where", cond, a, b)], dtype=F32 if isinstance(a, float) else I32)

    def bits(self, x: Value, mask: int | Value) -> Value:
        """``x & mask`` as float32."""
        return self.f32(self.op("and", x, mask))

    def nibble(self, byte: Value, high: Value) -> Value:
        """The low or (where ``high``) the high nibble of ``byte``, as float32: ``(b & 0xF0) / 16`` is exact."""
        return self.op("mul", self.bits(byte, self.choose(high, 240, 15)), self.choose(high, 0.0625, 1.0))

    def value(self) -> Value:
        """The float32 (rows, K) weight."""
        out = _DECODERS[self.t](self)
        if not _INNER[self.t]:
            return out
        return self.g.insert("view", [out], shape=(self.rows, self.k), strides=(self.k, 1), offset=0)

    # ---- one method per type: the arithmetic of gguf_quant.dequantize, as AIR ----------------------
    # Only and/mul/add/where/cast: no integer division nor transcendental, so the scheduler recomputes
    # the decoding where the weight is read instead of realizing a float copy (passes/recompute.py, expensive_values).
    def _f32(self) -> Value:
        return self.field("f32", 0)

    def _f16(self) -> Value:
        return self.field("f16", 0)

    def _bf16(self) -> Value:
        """sign | 8-bit exponent e | 7-bit mantissa m from the two bytes: ``(128 + m) * 2**(e - 134)``
        (``m * 2**-133`` for e = 0, inf/NaN for e = 255), the power of two as a product over e's bits."""
        lo, hi = self.field("u8", 0), self.field("u8", 1)
        e_hi = self.op("and", hi, 127)  # e >> 1
        e_lo = self.op("ne", self.op("and", lo, 128), 0)  # e & 1
        normal = self.op("or", self.op("ne", e_hi, 0), e_lo)  # e != 0
        is_max = self.op("and", self.op("not", self.op("ne", e_hi, 127)), e_lo)  # e == 255
        mant = self.bits(lo, 127)
        # e = 128 b7 + r: 2**(e - 134) = 2**(r - 70) * 2**(128 b7 - 64); r = max(e, 1) & 127, bit by bit
        pr = self.choose(self.op("or", e_lo, self.op("not", normal)), 2.0, 1.0)
        for i in range(6):  # bit i of hi is bit i + 1 of e
            pr = self.op("mul", pr, self.choose(self.op("ne", self.op("and", hi, 1 << i), 0), 2.0 ** (2 << i), 1.0))
        b7 = self.choose(self.op("ne", self.op("and", hi, 64), 0), 2.0 ** 64, 2.0 ** -64)
        mult = self.op("add", mant, self.choose(normal, 128.0, 0.0))  # the implicit leading 1
        mag = self.op("mul", self.op("mul", self.op("mul", mult, 2.0 ** -70), pr), b7)  # exact: one rounding
        inf = self.op("mul", self.op("add", self.op("mul", mant, 0.0), 2.0 ** 127), 4.0)
        inf_nan = self.op("mul", inf, self.choose(self.op("ne", self.op("and", lo, 127), 0), 0.0, 1.0))  # 0*inf: NaN
        mag = self.op("where", is_max, inf_nan, mag)
        return self.op("where", self.op("lt", hi, 128), mag, self.op("neg", mag))

    def _q8_0(self) -> Value:
        return self.op("mul", self.field("i8", 2, (1,), F32), self.field("f16", 0))

    def _q4_0(self) -> Value:
        q = self.nibble(self.field("u8", 2, (0, 1)), self.bit(2))
        return self.op("mul", self.field("f16", 0), self.op("add", q, -8.0))

    def _q4_1(self) -> Value:
        q = self.nibble(self.field("u8", 4, (0, 1)), self.bit(2))
        return self.op("add", self.op("mul", self.field("f16", 0), q), self.field("f16", 2))

    def _k_scales(self) -> tuple[Value, Value]:
        """Q4_K/Q5_K: sub-block j = 4 c1 + 2 c0 + h (axes 2, 3, 4): its 6-bit scale and min (float32)."""
        a = self.field("u8", 4, (4, 2, 1, 0))  # scales[j]
        b = self.field("u8", 8, (4, 2, 1, 0))  # scales[j + 4]
        c = self.field("u8", 0, (4, 2, 1, 0))  # scales[j - 4], read only where j >= 4
        upper = self.bit(2)
        sc_hi = self.op("add", self.bits(b, 15), self.op("mul", self.bits(c, 192), 0.25))
        mn_hi = self.op("add", self.op("mul", self.bits(b, 240), 0.0625), self.op("mul", self.bits(a, 192), 0.25))
        return (self.op("where", upper, sc_hi, self.bits(a, 63)), self.op("where", upper, mn_hi, self.bits(b, 63)))

    def _k_asym(self, q: Value) -> Value:
        sc, mn = self._k_scales()
        scaled = self.op("mul", self.op("mul", self.field("f16", 0), sc), q)
        return self.op("add", scaled, self.op("neg", self.op("mul", self.field("f16", 2), mn)))

    def _q4_k(self) -> Value:
        return self._k_asym(self.nibble(self.field("u8", 16, (64, 32, 0, 1)), self.bit(4)))

    def _q5_k(self) -> Value:
        q = self.nibble(self.field("u8", 48, (64, 32, 0, 1)), self.bit(4))
        qh = self.field("u8", 16, (0, 0, 0, 1))  # qh[l]: bit j is the fifth bit of value 32 j + l
        mask = self.choose(self.bit(2), 16, 1)
        mask = self.op("mul", self.op("mul", mask, self.choose(self.bit(3), 4, 1)), self.choose(self.bit(4), 2, 1))
        five = self.choose(self.op("ne", self.op("and", qh, mask), 0), 16.0, 0.0)
        return self._k_asym(self.op("add", q, five))

    def _q6_k(self) -> Value:
        """axes (half n, th, tl, lh, ll): value 128 n + 64 th + 32 tl + 16 lh + ll, t = 2 th + tl."""
        lo = self.nibble(self.field("u8", 0, (64, 0, 32, 16, 1)), self.bit(3))
        qh = self.field("u8", 128, (32, 0, 0, 16, 1))  # bits 2t, 2t+1 of qh[l]: mask 3 * 4**t, worth 16 / 4**t
        p = self.op("mul", self.choose(self.bit(3), 16, 1), self.choose(self.bit(4), 4, 1))
        w = self.op("mul", self.choose(self.bit(3), 1.0, 16.0), self.choose(self.bit(4), 0.25, 1.0))
        hi = self.op("mul", self.bits(qh, self.op("mul", p, 3)), w)
        q = self.op("add", self.op("add", lo, hi), -32.0)
        d = self.op("mul", self.field("f16", 208), self.field("i8", 192, (8, 4, 2, 1, 0), F32))
        return self.op("mul", d, q)


_DECODERS = {"F32": _Blocks._f32, "F16": _Blocks._f16, "BF16": _Blocks._bf16, "Q8_0": _Blocks._q8_0,
             "Q4_0": _Blocks._q4_0, "Q4_1": _Blocks._q4_1, "Q4_K": _Blocks._q4_k, "Q5_K": _Blocks._q5_k,
             "Q6_K": _Blocks._q6_k}
assert set(_DECODERS) == set(LAYOUTS) == set(RAW_SUFFIXES) == set(_INNER)


def raw_allocates(graph: Graph, name: str, t: str, shape: tuple[int, int]) -> dict[str, Value]:
    """The raw inputs of weight ``name`` (suffix -> value): one ``allocate`` per dtype view of its bytes."""
    return {n.rpartition("#")[2]: graph.insert("allocate", [], shape=(c,), dtype=dt, name=n)
            for n, (dt, c) in raw_input_specs(name, t, shape).items()}


def _quant_matmul(graph: Graph, use: LinearUse, t: str, shape: tuple[int, int], raw: dict[str, Value]) -> None:
    """Replace the sum of ``use`` by quant_matmul(quant_rows(x), the weight's bytes)."""
    n, k = shape
    src = use.reduce.source
    rows = tuple(use.reduce.shape[:-2])
    x = use.x
    if tuple(graph.producer_of(x).shape) != (*rows, k):  # heads (..., h, d) read as rows of k = h * d
        x = graph.insert("view", [x], source=src, shape=(*rows, k), strides=contiguous_strides((*rows, k)), offset=0)
    xq = graph.insert("quant_rows", [x], source=src, block=act_block(t))
    w = raw["i8"] if t == "Q8_0" else raw["u8"]
    y = graph.insert("quant_matmul", [xq, w], source=src, wtype=t, n=n, k=k)
    out_shape = tuple(use.reduce.shape)
    view = graph.insert("view", [y], source=src, shape=out_shape, strides=contiguous_strides(out_shape), offset=0)
    graph.replace_uses(use.reduce.out, view)
    graph.remove(use.reduce.id)
    graph.remove(use.mul.id)
    if not graph.users_of(use.weight_view.out):  # (a view shared with an embedding's lookup stays)
        graph.remove(use.weight_view.id)


def quantize_graph(graph: Graph, types: Mapping[str, object], *, activations: str = "q8") -> Graph:
    """Rewrite each float32 input ``name`` (rows, K) of ``graph`` stored as ``types[name]`` (a ggml type
    name or ``gguf.GGMLQuantizationType``) to read the raw inputs of its bytes (in place; returned).

    With ``activations="q8"`` every linear use ``x @ W.T`` of a weight of a type in
    :data:`~caten_lab.formats.act_quant.QUANT_MATMUL_TYPES` becomes ``quant_matmul(quant_rows(x), W's
    bytes)``: the activations quantized to 8 bits in blocks and integer block dot products, as llama.cpp
    computes it (:mod:`caten_lab.formats.act_quant`; about 0.5% of relative error in each product). Every
    other use (an embedding's row lookup; every use with ``activations="f32"``) reads the weight's
    dequantization as AIR over its bytes: float products, the same values as the reference dequantizer.

    Blocks run along K (the input features of a Linear, the embedding width). A weight that is not a
    2-D static float32 input, or whose K is no whole number of blocks, is a FormatError."""
    if activations not in ("q8", "f32"):
        raise FormatError(f"activations must be 'q8' or 'f32', got {activations!r}",
                          hint="'q8': 8-bit activations and integer dot products (fast); 'f32': float products")
    by_name = {n.attrs.name: n for n in graph.inputs()}
    for name, ggml_type in types.items():
        t = type_name(ggml_type)
        node = by_name.get(name)
        if node is None:
            raise FormatError(f"weight {name!r} is not an input of the graph",
                              hint=f"inputs: {', '.join(sorted(by_name)[:8])}")
        shape = tuple(node.shape)
        if len(shape) != 2 or node.dtype != F32 or not all(isinstance(d, int) for d in shape):
            raise FormatError(f"weight {name!r}: only 2-D static float32 inputs can be stored as {t}, "
                              f"got {node.dtype.value}{shape}")
        row_bytes(t, shape[1], f"weight {name!r}")
        raw = raw_allocates(graph, name, t, shape)
        if activations == "q8" and t in QUANT_MATMUL_TYPES:
            for use in [u for v in graph.users_of(node.out) for u in linear_uses(graph, v)]:
                _quant_matmul(graph, use, t, shape, raw)
        if graph.users_of(node.out):
            graph.replace_uses(node.out, _Blocks(graph, t, shape[0], shape[1], raw).value())
        graph.remove(node.id)
        for v in raw.values():
            if not graph.users_of(v):
                graph.remove(graph.producer_of(v).id)
    graph.sort()
    return graph
