"""Where an exported library's weights come from: a GGUF file, read by the library itself.

A model's program has input buffers; model_tables.py writes one record per input that says how the
library fills it. For an HF safetensors file that is the ``ct_weight`` table of model_tables.py
(the GPT-2 layout). For a GGUF file it is a ``ct_bind`` record (``BIND_FIELDS``, read by
c/gguf_weights.c), one of three modes, chosen from the input's name:

- ``W#u8``, ``W#f16``, ... (``RAW_VIEWS``): the bytes of GGUF tensor ``W`` viewed as that dtype,
  e.g. a quantized tensor's blocks: the buffer *is* the memory-mapped file (no copy); the tensor
  must have the ggml type the library was exported for, and exactly the buffer's byte count.
- ``W`` / ``W.fp16`` / ``W.int8`` + ``W.scale`` (``FLOAT``): tensor ``W`` (F32, F16, BF16 or Q8_0)
  as float values in the program's layout, stored as the workflow's weight format; an F32 tensor
  stored as fp32 is a view of the file too.
- a name of ``constants`` (``CONST``): a table derived at export (RoPE cos/sin, ...), shipped in the
  library's data blob and copied into the buffer at init.

``tensor_name`` maps a program input's base name to the file's tensor name (the model's naming to
llama.cpp's); ``arch`` is the ``general.architecture`` the library accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from caten_lab.formats.gguf_header import GGUFHeader, read_gguf_header
from caten_lab.workflow.model_tables import (
    FORMAT_CODES,
    MAX_WEIGHT_DIMS,
    STORED_SUFFIXES,
    ExportError,
    no_weight_tables,
)

__all__ = ["BIND_FIELDS", "CONVERTIBLE", "RAW_VIEWS", "Bind", "GGUFSource"]

# a ct_bind record of c/gguf_weights.c: twelve int64 fields
BIND_FIELDS = ("buf", "name", "mode", "gtype", "ndim", "dim0", "dim1", "dim2", "dim3", "fmt", "scale", "nbytes")
MODES = {"float": 0, "raw": 1, "const": 2}
SOURCE_CODES = {"safetensors": 0, "gguf": 1}  # ct_m_source
# the dtype a raw view of a tensor's bytes may take (the suffix after '#')
RAW_VIEWS = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "f16": np.float16,
             "u32": np.uint32, "i32": np.int32, "f32": np.float32}
# the ggml types c/gguf_weights.c converts to float (F32, F16, Q8_0, BF16)
CONVERTIBLE = {0: "F32", 1: "F16", 8: "Q8_0", 30: "BF16"}


@dataclass
class Bind:
    buf: int
    mode: str
    name: str  # the GGUF tensor (float, raw) or the program input (const)
    gtype: int = -1
    dims: tuple[int, ...] = ()
    fmt: str = "fp32"
    nbytes: int = 0
    base: str = ""  # the program input's base name (float: an int8 weight and its scale share it)


@dataclass
class GGUFSource:
    """The weights of a program read from one GGUF file by the exported library."""

    path: Path
    tensor_name: Callable[[str], str | None]
    arch: str
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    header: GGUFHeader | None = None

    def __post_init__(self) -> None:
        self.path = Path(self.path)
        if self.header is None:
            self.header = read_gguf_header(self.path)
        got = self.header.metadata.get("general.architecture", (None, None))[1]
        if got != self.arch:
            raise ExportError(f"{self.path}: general.architecture is {got!r}, the model is {self.arch!r}")

    def _tensor(self, input_name: str, base: str) -> Any:
        gname = self.tensor_name(base)
        t = self.header.tensor(gname) if gname is not None else None
        if t is None:
            raise ExportError(f"model input {input_name!r}: the GGUF file {self.path.name} has no tensor "
                              f"{gname if gname else base!r}", hint="the model's tensor_name map and the file disagree")
        return t

    def bind(self, b: int, name: str, info: Any, weight_format: str) -> Bind:
        """How the library fills program input ``name`` (buffer ``b``, its ``info``: shape, dtype)."""
        shape, dtype = tuple(int(d) for d in info.shape), np.dtype(info.dtype.np)
        if name in self.constants:
            arr = np.ascontiguousarray(self.constants[name])
            if arr.shape != shape or arr.dtype != dtype:
                raise ExportError(f"constant {name!r} is {arr.shape} {arr.dtype}, the program input {shape} {dtype}")
            return Bind(b, "const", name, nbytes=arr.nbytes)
        if "#" in name:
            base, view = name.rsplit("#", 1)
            if view not in RAW_VIEWS:
                raise ExportError(f"model input {name!r}: unknown raw view {view!r}", hint=f"one of {sorted(RAW_VIEWS)}")
            t = self._tensor(name, base)
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if dtype != np.dtype(RAW_VIEWS[view]) or nbytes != t.n_bytes:
                raise ExportError(f"model input {name!r} ({shape} {dtype}) is not the {t.n_bytes} bytes of tensor "
                                  f"{t.name!r} viewed as {view}")
            return Bind(b, "raw", t.name, t.type_id, t.dims, nbytes=nbytes, base=base)
        base, fmt, want_dtype = name, "fp32", np.dtype(np.float32)
        for suffix, (stored, sd) in STORED_SUFFIXES.items():
            if name.endswith(suffix):
                base, fmt, want_dtype = name[: -len(suffix)], stored, np.dtype(sd)
        t = self._tensor(name, base)
        if t.type_id not in CONVERTIBLE:
            raise ExportError(f"model input {name!r}: tensor {t.name!r} has ggml type {t.type_id}, which the library "
                              f"does not convert to float ({', '.join(CONVERTIBLE.values())})",
                              hint="bind quantized tensors as raw views (input names W#u8, W#f16)")
        if fmt in ("fp16", "int8") and fmt != weight_format:
            raise ExportError(f"weight {name!r} is stored as {fmt}, but the workflow's weight_format is {weight_format}")
        want = tuple(reversed(t.dims))  # numpy order
        if fmt == "scale":
            want = (want[0], 1) if len(want) == 2 else (1, 1)
        if shape != want or dtype != want_dtype:
            raise ExportError(f"weight {name!r}: program buffer {shape} {dtype} does not match tensor {t.name!r} "
                              f"{want} stored as {fmt}")
        if len(t.dims) > MAX_WEIGHT_DIMS:
            raise ExportError(f"weight {name!r} has {len(t.dims)} dimensions; export supports {MAX_WEIGHT_DIMS}")
        return Bind(b, "float", t.name, t.type_id, t.dims, fmt, base=base)

    def tables(self, inputs: list[tuple[int, str, Any]], weight_format: str) -> dict[str, object]:
        """The model blob's weight tables for the program inputs (buffer, name, info)."""
        binds = [self.bind(b, name, info, weight_format) for b, name, info in inputs]
        scales = {x.base: x.buf for x in binds if x.mode == "float" and x.fmt == "scale"}
        rows: list[list[int]] = []
        text, consts = bytearray(), bytearray()
        for x in binds:
            if x.mode == "float" and x.fmt == "scale":
                continue
            scale = scales.pop(x.base, -1) if x.fmt == "int8" else -1
            if x.fmt == "int8" and scale < 0:
                raise ExportError(f"int8 weight {x.base!r} has no scale buffer in the program")
            if x.mode == "const":
                consts += bytes(-len(consts) % 64)
                at = len(consts)
                consts += np.ascontiguousarray(self.constants[x.name]).tobytes()
            else:
                at = len(text)
                text += x.name.encode("utf-8") + b"\0"
            dims = [*x.dims] + [0] * (MAX_WEIGHT_DIMS - len(x.dims))
            rows.append([x.buf, at, MODES[x.mode], x.gtype, len(x.dims), *dims,
                         FORMAT_CODES[x.fmt] if x.mode == "float" else -1, scale, x.nbytes])
        if scales:
            raise ExportError(f"scale buffers without an int8 weight: {sorted(scales)}")
        return {
            **no_weight_tables(),
            "source": SOURCE_CODES["gguf"],
            "binds": np.asarray(rows, dtype=np.int64).reshape(-1),
            "nbinds": len(rows),
            "bind_names": np.frombuffer(bytes(text) or b"\0", dtype=np.uint8),
            "consts": np.frombuffer(bytes(consts) or b"\0", dtype=np.uint8),
            "arch": np.frombuffer(self.arch.encode() + b"\0", dtype=np.uint8),
        }
