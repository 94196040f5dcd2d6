"""The strict GGUF v3 header walk (rules HEADER, DUPLICATE_KEY, DTYPE), then the tensor layout.

The ``gguf`` package trusts the counts a file states: an array claiming 2^60 items of a type it then
finds no bytes for loops for ever, a string length past the end raises an IndexError, a key twice a
KeyError. Here the header is walked once, in file order, before the package reads it; the first
defect found is the verdict. The exported C reader (caten_lab/workflow/c/gguf_reader.c) walks it
with the same checks in the same order, so both name the same rule for every file:

  1. HEADER: at least 24 bytes, the magic ``GGUF``, version 3 (little-endian), tensor and key counts
     that fit in the bytes left (a key/value takes >= 13 bytes, a tensor info >= 32).
  2. Each key/value, in order: the key (a u64 length inside the file, UTF-8), a known value type
     (0..12), the value inside the file (strings UTF-8, bools 0 or 1, arrays of a known non-array
     item type whose count fits in the bytes left) -> HEADER; the key seen before -> DUPLICATE_KEY.
  3. Each tensor info, in order: the name (as a key) -> HEADER; 1..4 dims -> HEADER; a ggml type the
     gguf package knows -> DTYPE; fewer than 2^62 elements -> HEADER; the name seen before ->
     DUPLICATE_KEY.
  4. ``general.alignment``, when present: a UINT32, a non-zero power of two -> HEADER.
  5. The layout of formats/gguf_layout.py: ALIGNMENT, DTYPE (rows of whole blocks), BOUNDS, OVERLAP,
     NBYTES.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from caten_lab.formats.gguf_layout import TensorSpan, check_tensor_layout
from caten_lab.formats.rules import WeightsError

__all__ = ["GGUFHeader", "GGUFTensorInfo", "VALUE_TYPES", "mapped", "metadata_hash", "read_gguf_header"]

GGUF_MAGIC = b"GGUF"
MAX_DIMS = 4
MAX_ELEMENTS = 1 << 62
# value type id -> (name, struct code of a scalar; "" for STRING and ARRAY)
VALUE_TYPES: dict[int, tuple[str, str]] = {
    0: ("UINT8", "B"), 1: ("INT8", "b"), 2: ("UINT16", "H"), 3: ("INT16", "h"), 4: ("UINT32", "I"),
    5: ("INT32", "i"), 6: ("FLOAT32", "f"), 7: ("BOOL", "B"), 8: ("STRING", ""), 9: ("ARRAY", ""),
    10: ("UINT64", "Q"), 11: ("INT64", "q"), 12: ("FLOAT64", "d"),
}
STRING, ARRAY, BOOL, UINT32 = 8, 9, 7, 4
_U64 = struct.Struct("<Q")
KV_MIN, TENSOR_MIN = 13, 32  # the fewest bytes a key/value (empty key, u8 value) and a tensor info take


@dataclass(frozen=True)
class GGUFTensorInfo:
    name: str
    dims: tuple[int, ...]  # GGUF order: the fastest-varying dimension first
    type_id: int
    offset: int  # relative to the data section
    n_bytes: int


@dataclass(frozen=True)
class GGUFHeader:
    path: str
    size: int
    metadata: dict[str, tuple[int, Any]]  # key -> (value type id, value); an ARRAY's value: (item type id, list)
    tensors: list[GGUFTensorInfo]
    alignment: int
    data_start: int
    spans: dict[str, tuple[int, int]]  # key -> the file bytes [begin, end) of its value (from its type field)

    def tensor(self, name: str) -> GGUFTensorInfo | None:
        return next((t for t in self.tensors if t.name == name), None)


class _Walk:
    def __init__(self, path: str, data: bytes | memoryview) -> None:
        self.path, self.buf, self.pos = path, data, 0

    def fail(self, what: str, rule: str = "HEADER") -> WeightsError:
        return WeightsError(f"{self.path}: {what}", rule=rule, where=f"byte {self.pos}",
                            hint="the file is truncated or corrupt (or not a GGUF v3 file)")

    def left(self) -> int:
        return len(self.buf) - self.pos

    def scalar(self, code: str, what: str) -> Any:
        n = struct.calcsize("<" + code)
        if self.left() < n:
            raise self.fail(f"{what} is cut off by the end of the file")
        (v,) = struct.unpack_from("<" + code, self.buf, self.pos)
        self.pos += n
        return v

    def string(self, what: str) -> str:
        n = self.scalar("Q", f"the length of {what}")
        if n > self.left():
            raise self.fail(f"{what} has a length of {n} bytes, past the end of the file")
        raw = bytes(self.buf[self.pos : self.pos + n])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail(f"{what} is not UTF-8") from None
        self.pos += n
        return text

    def strings(self, count: int, key: str) -> list[str]:
        """``count`` strings (the items of array ``key``): :meth:`string` ``count`` times, with the same
        checks and messages, in one loop (a vocabulary has ~50k of them: 0.29 s -> ~0.1 s for SmolLM2)."""
        buf, pos, end = self.buf, self.pos, len(self.buf)
        length = _U64.unpack_from
        out: list[str] = []
        for i in range(count):
            if end - pos < 8:
                self.pos = pos
                raise self.fail(f"the length of item {i} of {key!r} is cut off by the end of the file")
            (n,) = length(buf, pos)
            pos += 8
            if n > end - pos:
                self.pos = pos
                raise self.fail(f"item {i} of {key!r} has a length of {n} bytes, past the end of the file")
            try:
                out.append(str(buf[pos : pos + n], "utf-8"))
            except UnicodeDecodeError:
                self.pos = pos
                raise self.fail(f"item {i} of {key!r} is not UTF-8") from None
            pos += n
        self.pos = pos
        return out

    def value(self, vtype: int, what: str) -> Any:
        if vtype == STRING:
            return self.string(what)
        v = self.scalar(VALUE_TYPES[vtype][1], what)
        if vtype == BOOL and v > 1:
            raise self.fail(f"{what} is a BOOL of value {v} (not 0 or 1)")
        return bool(v) if vtype == BOOL else v

    def kv_value(self, key: str) -> tuple[int, Any]:
        vtype = self.scalar("I", f"the value type of {key!r}")
        if vtype not in VALUE_TYPES:
            raise self.fail(f"metadata {key!r} has the unknown value type {vtype}")
        if vtype != ARRAY:
            return vtype, self.value(vtype, f"the value of {key!r}")
        itype = self.scalar("I", f"the item type of {key!r}")
        if itype not in VALUE_TYPES or itype == ARRAY:
            raise self.fail(f"metadata {key!r} is an array of the unknown or nested item type {itype}")
        count = self.scalar("Q", f"the item count of {key!r}")
        least = 8 if itype == STRING else struct.calcsize("<" + VALUE_TYPES[itype][1])
        if count > self.left() // least:
            raise self.fail(f"metadata {key!r} claims {count} items, more than the {self.left()} bytes left hold")
        if itype == STRING:
            return vtype, (itype, self.strings(count, key))
        code = VALUE_TYPES[itype][1]
        items = list(struct.unpack_from(f"<{count}{code}", self.buf, self.pos))
        self.pos += count * struct.calcsize("<" + code)
        if itype == BOOL:
            bad = next((i for i, v in enumerate(items) if v > 1), None)
            if bad is not None:
                raise self.fail(f"item {bad} of {key!r} is a BOOL of value {items[bad]} (not 0 or 1)")
            items = [bool(v) for v in items]
        return vtype, (itype, items)


def read_gguf_header(path: str | os.PathLike, data: bytes | memoryview | None = None,
                     quant_sizes: dict[int, tuple[int, int]] | None = None) -> GGUFHeader:
    """Walk and check a GGUF v3 file (steps 1-5 of the module doc); raise WeightsError naming the rule.
    ``quant_sizes``: ggml type id -> (block values, block bytes); default: the gguf package's."""
    if quant_sizes is None:
        quant_sizes = _package_quant_sizes()
    p = str(path)
    if data is None:
        data = mapped(p)
    w = _Walk(p, data)
    if len(data) < 24 or bytes(data[:4]) != GGUF_MAGIC:
        raise w.fail("not a GGUF file (no 'GGUF' magic in its first 24 bytes)")
    w.pos = 4
    version = w.scalar("I", "the version")
    if version != 3:
        more = " (a big-endian file)" if version & 0xFFFF == 0 else ""
        raise w.fail(f"GGUF version {version}{more}: only little-endian GGUF v3 is read")
    n_tensors, n_kv = w.scalar("Q", "the tensor count"), w.scalar("Q", "the key count")
    if n_kv > w.left() // KV_MIN or n_tensors > w.left() // TENSOR_MIN:
        raise w.fail(f"{n_tensors} tensors and {n_kv} keys cannot fit in the {w.left()} bytes left")
    metadata: dict[str, tuple[int, Any]] = {}
    spans: dict[str, tuple[int, int]] = {}
    for i in range(n_kv):
        key = w.string(f"metadata key {i}")
        begin = w.pos
        entry = w.kv_value(key)
        spans[key] = (begin, w.pos)
        if key in metadata:
            raise w.fail(f"metadata key {key!r} appears twice", "DUPLICATE_KEY")
        metadata[key] = entry
    tensors: list[GGUFTensorInfo] = []
    seen: set[str] = set()
    for i in range(n_tensors):
        name = w.string(f"the name of tensor {i}")
        nd = w.scalar("I", f"the dim count of {name!r}")
        if not 1 <= nd <= MAX_DIMS:
            raise w.fail(f"tensor {name!r} has {nd} dims (1 to {MAX_DIMS} allowed)")
        dims = tuple(w.scalar("Q", f"dim {d} of {name!r}") for d in range(nd))
        type_id = w.scalar("I", f"the type of {name!r}")
        if type_id not in quant_sizes:
            raise w.fail(f"tensor {name!r} has the unknown ggml type {type_id}", "DTYPE")
        offset = w.scalar("Q", f"the offset of {name!r}")
        n = 1
        for d in dims:
            n *= d
        if n >= MAX_ELEMENTS:
            raise w.fail(f"tensor {name!r} of dims {list(dims)} has 2^62 elements or more")
        if name in seen:
            raise w.fail(f"tensor {name!r} appears twice", "DUPLICATE_KEY")
        seen.add(name)
        block, nbytes = quant_sizes[type_id]
        tensors.append(GGUFTensorInfo(name, dims, type_id, offset, n * nbytes // block))
    alignment = 32
    if "general.alignment" in metadata:
        vtype, alignment = metadata["general.alignment"]
        if vtype != UINT32 or alignment == 0 or alignment & (alignment - 1):
            raise w.fail(f"general.alignment must be a UINT32 power of two, not {VALUE_TYPES[vtype][0]} {alignment!r}")
    start = (w.pos + alignment - 1) // alignment * alignment
    names = {t: _type_name(t) for t in {x.type_id for x in tensors}}
    layout = [TensorSpan(t.name, names[t.type_id], t.dims[0], t.offset, t.n_bytes) for t in tensors]
    check_tensor_layout(p, layout, start, alignment, len(data), {names[k]: v for k, v in quant_sizes.items() if k in names})
    return GGUFHeader(p, len(data), metadata, tensors, alignment, start, spans)


def mapped(path: str | os.PathLike) -> memoryview | bytes:
    """The bytes of a file, memory-mapped (read-only; b"" for an empty file)."""
    import numpy as np

    p = Path(path)
    if not p.is_file():
        raise WeightsError(f"{p}: file not found")
    return memoryview(np.memmap(p, mode="r")) if p.stat().st_size else b""


def metadata_hash(header: GGUFHeader, data: bytes | memoryview, keys: list[str]) -> int:
    """FNV-1a 64 of the raw values of ``keys`` in the file's bytes ``data`` (an absent key: one 0xFF
    byte), as the exported reader's ct_gguf_metadata_hash computes it."""
    h = 1469598103934665603
    for key in keys:
        span = header.spans.get(key)
        for b in (bytes(data[span[0] : span[1]]) if span else b"\xff"):
            h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def _package_quant_sizes() -> dict[int, tuple[int, int]]:
    import gguf

    return {int(t): (int(b), int(s)) for t, (b, s) in gguf.GGML_QUANT_SIZES.items()}


def _type_name(type_id: int) -> str:
    import gguf

    return gguf.GGMLQuantizationType(type_id).name
