"""A GGUF file read once per process: the checked header and NumPy views of its tensors.

The header walk of :mod:`caten_lab.formats.gguf_header` already decodes every key and value while it
checks them (~0.15 s for SmolLM2's 49k-token vocabulary and merges); ``gguf.GGUFReader`` would parse the
same header again into one NumPy view per string (~1.5 s), and loading a chat model opens its file four
times (the architecture, the weights, the tokenizer, the chat template). :func:`read_gguf` gives the
walked header with the tensors as views of the memory-mapped file, the same for the same file within a
process (keyed by its path, size, modification time and inode, so a rewritten file is read again).

The objects answer the part of ``gguf.GGUFReader``'s interface caten_lab reads — ``fields[key].contents()``
and ``tensors`` with ``name``, ``tensor_type``, ``shape`` (GGUF order), ``n_elements``, ``n_bytes``,
``data_offset`` and ``data`` (the package's dtypes and shapes: float arrays for F16/F32/F64 and integer
tensors, ``uint8`` (rows, row bytes) for block-quantized ones) — so the readers that accept either keep
accepting a ``gguf.GGUFReader`` too.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from caten_lab.formats.gguf_header import ARRAY, GGUFHeader, mapped, read_gguf_header
from caten_lab.formats.rules import WeightsError

__all__ = ["GGUFContents", "GGUFField", "GGUFTensor", "open_gguf", "read_gguf"]

# ggml types whose data gguf.GGUFReader gives as plain arrays of these dtypes (the rest: bytes of blocks)
_PLAIN = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
          "I32": np.int32, "I64": np.int64}
_OPEN: OrderedDict[tuple, GGUFContents] = OrderedDict()
_OPEN_MAX = 4


@dataclass(frozen=True)
class GGUFField:
    """One metadata key: its GGUF value type id and decoded value (an ARRAY: (item type id, items))."""

    name: str
    vtype: int
    value: Any

    def contents(self) -> Any:
        """The value as Python (an array: a new list of its items), as ``gguf.ReaderField.contents()``."""
        return list(self.value[1]) if self.vtype == ARRAY else self.value


class GGUFTensor(NamedTuple):
    name: str
    tensor_type: Any  # gguf.GGMLQuantizationType
    shape: np.ndarray  # GGUF order: the fastest-varying dimension first
    n_elements: int
    n_bytes: int
    data_offset: int  # in the file
    data: np.ndarray  # a read-only view of the memory-mapped file


@dataclass(frozen=True)
class GGUFContents:
    path: str
    header: GGUFHeader
    fields: dict[str, GGUFField]
    tensors: list[GGUFTensor]

    @property
    def alignment(self) -> int:
        return self.header.alignment


def _tensors(header: GGUFHeader, data: memoryview | bytes) -> list[GGUFTensor]:
    import gguf

    out = []
    for t in header.tensors:
        kind = gguf.GGMLQuantizationType(t.type_id)
        n = int(np.prod(t.dims, dtype=np.int64))
        dims = tuple(reversed(t.dims))
        start = header.data_start + t.offset
        plain = _PLAIN.get(kind.name)
        if plain is not None:
            view = np.frombuffer(data, dtype=plain, count=n, offset=start).reshape(dims)
        else:  # rows of whole blocks (checked by the walk): bytes per row = n_bytes / rows
            rows = int(np.prod(t.dims[1:], dtype=np.int64))
            view = np.frombuffer(data, dtype=np.uint8, count=t.n_bytes, offset=start)
            view = view.reshape(*dims[:-1], t.n_bytes // rows if rows else 0)
        out.append(GGUFTensor(t.name, kind, np.array(t.dims, dtype=np.uint64), n, t.n_bytes, start, view))
    return out


def read_gguf(path: str | os.PathLike) -> GGUFContents:
    """The checked contents of a GGUF file (WeightsError naming the rule a bad file breaks); the same
    object for the same unchanged file within a process."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError:
        raise WeightsError(f"{p}: file not found") from None
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)
    hit = _OPEN.get(key)
    if hit is not None:
        _OPEN.move_to_end(key)
        return hit
    data = mapped(p)
    header = read_gguf_header(p, data)
    fields = {k: GGUFField(k, vtype, value) for k, (vtype, value) in header.metadata.items()}
    contents = GGUFContents(str(p), header, fields, _tensors(header, data))
    _OPEN[key] = contents
    while len(_OPEN) > _OPEN_MAX:
        _OPEN.popitem(last=False)
    return contents


def open_gguf(path: str | os.PathLike) -> tuple[GGUFHeader, GGUFContents]:
    """The checked header and the contents (a reader of the memory-mapped file) of a GGUF file."""
    contents = read_gguf(path)
    return contents.header, contents
