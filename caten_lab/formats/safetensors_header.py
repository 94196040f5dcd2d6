"""The strict safetensors header check: rules HEADER .. OVERLAP, in the order the C loader checks them.

Order (the C loader's ``ct_st_open`` follows it exactly, so both name the same rule):
  1. HEADER: 8 bytes of header length; 0 < length <= 100 MB and 8 + length <= file size.
  2. JSON, then DUPLICATE_KEY (``strict_json``).
  3. each entry in file order: ENTRY (an object of exactly dtype / shape / data_offsets; dtype a
     string; shape a list of <= 8; data_offsets a list of 2), DTYPE (a known dtype), INTEGER (shape,
     then offsets), BOUNDS (begin <= end), NBYTES (end - begin == prod(shape) * itemsize);
     ``__metadata__`` must map strings to strings (ENTRY).
  4. BOUNDS: every end inside the data section (entries in file order).
  5. OVERLAP: no two non-empty spans share a byte.
Nothing is read but the header: a caller maps data only after this returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from caten_lab.formats.rules import DTYPE_SIZES, FormatError, WeightsError
from caten_lab.formats.strict_json import loads_strict

MAX_HEADER = 100 << 20
MAX_INT = 1 << 62
MAX_DIMS = 8
_FIELDS = {"dtype", "shape", "data_offsets"}


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header: byte span relative to the data section."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsHeader:
    entries: list[TensorEntry]
    data_start: int  # 8 + header length
    data_size: int  # bytes after the header


def _is_int(v: object) -> bool:
    return type(v) is int


def _entry(path: str, name: str, info: object, error: type[FormatError]) -> TensorEntry:
    where = f"{path}: tensor {name[:200]!r}"
    if not isinstance(info, dict) or set(info) != _FIELDS:
        got = sorted(info) if isinstance(info, dict) else type(info).__name__
        raise error(f"{where}: the entry must hold exactly dtype, shape and data_offsets, got {got}",
                    rule="ENTRY")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(dtype, str):
        raise error(f"{where}: dtype {dtype!r} is not a string", rule="ENTRY")
    if not isinstance(shape, list) or len(shape) > MAX_DIMS:
        raise error(f"{where}: shape {shape!r} is not a list of at most {MAX_DIMS} dims", rule="ENTRY")
    if not isinstance(offsets, list) or len(offsets) != 2:
        raise error(f"{where}: data_offsets {offsets!r} is not a list [begin, end]", rule="ENTRY")
    if dtype not in DTYPE_SIZES:
        raise error(f"{where}: unknown dtype {dtype[:40]!r}; known: {sorted(DTYPE_SIZES)}", rule="DTYPE")
    for what, values in (("shape", shape), ("data_offsets", offsets)):
        for v in values:
            if not _is_int(v) or not 0 <= v <= MAX_INT:
                raise error(f"{where}: {what} holds {v!r}, not a non-negative integer below 2^62",
                            rule="INTEGER", hint="offsets and dims are exact integers; a float or bool is corrupt")
    begin, end = offsets
    if begin > end:
        raise error(f"{where}: data_offsets [{begin}, {end}] end before they begin", rule="BOUNDS")
    need = math.prod(shape) * DTYPE_SIZES[dtype]
    if end - begin != need:
        raise error(f"{where}: spans {end - begin} bytes, but shape {tuple(shape)} of {dtype} needs {need}",
                    rule="NBYTES", hint="a relabelled dtype or a wrong shape: the file is corrupt")
    return TensorEntry(name, dtype, tuple(shape), begin, end)


def check_header(path: str, head: bytes, read_header: object, size: int,
                 error: type[FormatError] = WeightsError) -> SafetensorsHeader:
    """Validate the header of a safetensors file of ``size`` bytes whose first 8 bytes are ``head``;
    ``read_header(n)`` returns the next ``n`` bytes (called once, only if the length fits)."""
    if len(head) < 8:
        raise error(f"{path}: file is {size} bytes, too short for a safetensors header", rule="HEADER")
    n = int.from_bytes(head[:8], "little")
    if n == 0 or n > MAX_HEADER or 8 + n > size:
        raise error(f"{path}: header length {n} does not fit the file ({size} bytes) or the 100 MB cap",
                    rule="HEADER", hint="the file is truncated or not safetensors")
    raw = read_header(n)  # type: ignore[operator]
    header = loads_strict(raw, path, error, "safetensors header")
    entries: list[TensorEntry] = []
    for name, info in header.items():
        if name == "__metadata__":
            if not isinstance(info, dict) or not all(isinstance(v, str) for v in info.values()):
                raise error(f"{path}: __metadata__ must map strings to strings", rule="ENTRY")
            continue
        entries.append(_entry(path, name, info, error))
    data_size = size - 8 - n
    for e in entries:
        if e.end > data_size:
            raise error(f"{path}: tensor {e.name[:200]!r} ends at byte {8 + n + e.end} but the file has {size} bytes",
                        rule="BOUNDS", hint="the file is truncated; re-copy or re-export it")
    spans = sorted((e.begin, e.end, e.name) for e in entries if e.end > e.begin)
    reach, owner = 0, ""
    for begin, end, name in spans:
        if begin < reach:
            raise error(f"{path}: tensors {owner[:200]!r} and {name[:200]!r} share bytes (at {begin})",
                        rule="OVERLAP", hint="two tensors aliasing one byte range is corrupt")
        if end > reach:
            reach, owner = end, name
    return SafetensorsHeader(entries, 8 + n, data_size)
