"""Reading weight files, shared by the model loaders: safetensors (validated header, mapped data)
and GGUF (the ``gguf`` package's reader, the layout checked, typed fields, dequantized tensors)."""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.formats.gguf_file import open_gguf
from caten_lab.formats.model_check import check_model_tensors
from caten_lab.formats.rules import WeightsError
from caten_lab.formats.safetensors_header import SafetensorsHeader, TensorEntry, check_header

_ST_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4",
              "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?"}


def _open_safetensors(path: Path, f: object) -> tuple[SafetensorsHeader, mmap.mmap | None]:
    """The validated header (formats/safetensors_header.py) and a private map of the file."""
    size = os.fstat(f.fileno()).st_size  # type: ignore[attr-defined]
    header = check_header(str(path), f.read(8), f.read, size)  # type: ignore[attr-defined]
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY) if size else None  # type: ignore[attr-defined]
    return header, mm


def open_checked(path: str | os.PathLike, expected: dict[str, tuple[int, ...]], **names: Any
                 ) -> tuple[SafetensorsHeader, mmap.mmap | None, dict[str, TensorEntry]]:
    """A safetensors file checked by every rule the exported C loader checks too (the header, then its
    tensors against ``expected``: formats/safetensors_header.py, formats/model_check.py), mapped;
    ``names``: check_model_tensors' naming keywords (``prefix``, ``embedding``)."""
    p = Path(path)
    with open(p, "rb") as f:
        header, mm = _open_safetensors(p, f)
    return header, mm, check_model_tensors(str(p), header.entries, expected, lambda e: _raw(mm, header, e), **names)


def _raw(mm: mmap.mmap | None, header: SafetensorsHeader, e: TensorEntry) -> np.ndarray:
    if mm is None or e.nbytes == 0:
        return np.zeros(0, np.uint8)
    return np.frombuffer(mm, np.uint8, e.nbytes, header.data_start + e.begin)


def tensor_array(mm: mmap.mmap | None, header: SafetensorsHeader, e: TensorEntry, mapped: bool) -> np.ndarray:
    dt = np.dtype(_ST_DTYPES[e.dtype])
    count = e.nbytes // dt.itemsize
    if count == 0 or mm is None:
        arr = np.zeros(e.shape, dt)
    else:
        arr = np.frombuffer(mm, dt, count, header.data_start + e.begin).reshape(e.shape)
    if e.dtype == "BF16":
        return (arr.astype(np.uint32) << 16).view(np.float32)
    return arr if mapped else arr.copy()


def read_safetensors(path: str | os.PathLike, *, mapped: bool = False) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as NumPy arrays (bfloat16 is widened to float32).

    The header is validated first (rules HEADER .. OVERLAP: duplicate keys, integer offsets, dtype /
    size agreement, bounds, overlap); nothing is read from a file that breaks one.
    ``mapped=True``: views of a private (copy-on-write) memory map instead of copies, for a caller
    that converts every weight right away (the GPT-2 runner): reading ~0.5 GB into fresh memory
    first would be one more pass over the data for nothing. Writing to a view never changes the
    file, but the views must not outlive an in-place overwrite of it (that truncates the mapping).
    """
    p = Path(path)
    with open(p, "rb") as f:
        header, mm = _open_safetensors(p, f)
    return {e.name: tensor_array(mm, header, e, mapped) for e in header.entries}


# ---- GGUF --------------------------------------------------------------------------------


def import_gguf():  # noqa: ANN201 - the gguf module
    try:
        import gguf
    except ImportError:
        raise WeightsError("reading GGUF needs the gguf package", hint="pip install gguf (a caten_lab dependency)") from None
    return gguf


class GGUFFile:
    """A GGUF file opened by the ``gguf`` package, its layout checked (formats/gguf_layout.py:
    alignment, bounds, overlap, sizes) before anything else is read."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.gguf = import_gguf()
        self.path = Path(path)
        if not self.path.is_file():
            raise WeightsError(f"{self.path}: file not found")
        # the strict header walk and layout checks (formats/gguf_header.py), then the gguf package's reader
        self.header, self.reader = open_gguf(self.path)

    def field(self, key: str, default: object = None) -> object:
        """A metadata value as Python (numpy scalars unwrapped), or ``default`` when absent."""
        f = self.reader.fields.get(key)
        if f is None:
            return default
        try:
            v = f.contents()
        except Exception as exc:  # the gguf package decodes values lazily (UnicodeDecodeError, ...)
            raise WeightsError(f"{self.path}: GGUF field {key!r} cannot be read ({type(exc).__name__}: {exc})",
                               rule="HEADER", hint="the file is corrupt") from None
        return v.item() if isinstance(v, np.generic) else v

    def fields(self, prefix: str = "") -> dict[str, object]:
        """Every metadata value whose key starts with ``prefix``."""
        return {k: self.field(k) for k in self.reader.fields if k.startswith(prefix)}

    @staticmethod
    def shape(t: Any) -> tuple[int, ...]:
        """A tensor's NumPy shape (GGUF lists the fastest dimension first)."""
        return tuple(int(x) for x in reversed(t.shape))

    def dequantized(self, t: Any, keep_f16: bool = True) -> np.ndarray:
        """A tensor as float32 (float16 kept as float16 with ``keep_f16``), in its NumPy shape."""
        gguf = self.gguf
        try:
            arr = gguf.dequantize(t.data, t.tensor_type)
        except Exception as exc:
            raise WeightsError(
                f"{self.path}: tensor {t.name!r} of type {t.tensor_type.name} cannot be read ({exc})", rule="DTYPE"
            ) from None
        arr = np.asarray(arr).reshape(self.shape(t))
        if keep_f16 and t.tensor_type == gguf.GGMLQuantizationType.F16:
            return arr.astype(np.float16)
        return arr if arr.dtype == np.float32 else arr.astype(np.float32)
