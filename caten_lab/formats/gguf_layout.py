"""GGUF tensor layout checks (rules ALIGNMENT, BOUNDS, OVERLAP, NBYTES, DTYPE) on a ``gguf.GGUFReader``.

The ``gguf`` package reads each tensor at the offset the file states, for the byte count its type
implies, and checks neither against the others: a misaligned offset or a tensor relabelled F32 ->
Q4_0 loads and computes garbage. Here, before any tensor is dequantized, in this order:
  1. ALIGNMENT: every offset is a multiple of ``general.alignment``.
  2. DTYPE: a quantized type's row length is a whole number of its blocks.
  3. BOUNDS: every tensor ends inside the file.
  4. OVERLAP: no two tensors share a byte.
  5. NBYTES: the tensors lie back to back from the data start, each padded to the alignment, and
     only padding follows the last one (what the type and shape imply is what the file holds).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from caten_lab.formats.rules import WeightsError


def _align(n: int, a: int) -> int:
    return (n + a - 1) // a * a


def reader_error(path: str, exc: Exception) -> WeightsError:
    """The gguf package's own refusal, under the rule it amounts to."""
    text = f"{type(exc).__name__}: {exc}"
    low = text.lower()
    rule = ("DUPLICATE_KEY" if "duplicate" in low else
            "DTYPE" if "ggmlquantizationtype" in low or "block size" in low else
            "BOUNDS" if "cannot reshape" in low else "HEADER")  # a tensor's data cut off by the end of file
    return WeightsError(f"{path}: cannot read GGUF ({text[:200]})", rule=rule, hint="truncated or not a GGUF file")


class TensorSpan(NamedTuple):
    """What the layout checks read of one tensor: its name, type name, row length (the first GGUF
    dim), offset in the data section and byte count."""

    name: str
    type_name: str
    row: int
    offset: int
    n_bytes: int


def check_gguf_layout(path: str, reader: Any, size: int, quant_sizes: dict) -> None:
    """Raise WeightsError unless the tensors of ``reader`` are laid out as a GGUF writer lays them out;
    ``quant_sizes``: ``gguf.GGML_QUANT_SIZES`` (type -> (block values, block bytes))."""
    tensors = list(reader.tensors)
    if not tensors:
        return
    start = tensors[0].data_offset - int(tensors[0].field.parts[-1][0])
    spans = [TensorSpan(t.name, t.tensor_type.name, int(t.shape[0]) if len(t.shape) else 1,
                        int(t.field.parts[-1][0]), int(t.n_bytes)) for t in tensors]
    sizes = {t.name: quant_sizes[t] for t in {x.tensor_type for x in tensors}}
    check_tensor_layout(path, spans, start, int(getattr(reader, "alignment", 32)), size, sizes)


def check_tensor_layout(path: str, spans: list[TensorSpan], start: int, align: int, size: int,
                        quant_sizes: dict[str, tuple[int, int]]) -> None:
    """The checks 1-5 of the module doc on tensors whose data section starts at byte ``start`` of a
    file of ``size`` bytes; ``quant_sizes``: type name -> (block values, block bytes)."""
    if not spans:
        return
    for t in spans:
        if t.offset % align:
            raise WeightsError(f"{path}: tensor {t.name!r} starts at data offset {t.offset}, not a multiple of the "
                               f"alignment {align}", rule="ALIGNMENT", hint="the file is corrupt")
    for t in spans:
        block, _ = quant_sizes[t.type_name]
        if t.row % block:
            raise WeightsError(f"{path}: tensor {t.name!r} of type {t.type_name} has rows of {t.row} values, "
                               f"not a multiple of its block of {block}", rule="DTYPE")
    for t in spans:
        if start + t.offset + t.n_bytes > size:
            raise WeightsError(f"{path}: tensor {t.name!r} ends at byte {start + t.offset + t.n_bytes} but the file "
                               f"has {size} bytes", rule="BOUNDS", hint="the file is truncated")
    ordered = sorted(spans, key=lambda s: (s.offset, s.n_bytes))
    reach, owner = 0, ""
    for t in ordered:
        if t.n_bytes and t.offset < reach:
            raise WeightsError(f"{path}: tensors {owner!r} and {t.name!r} share bytes", rule="OVERLAP")
        if t.offset + t.n_bytes > reach:
            reach, owner = t.offset + t.n_bytes, t.name
    at = 0
    for t in ordered:
        if t.offset != at:
            raise WeightsError(
                f"{path}: tensor {t.name!r} starts at data offset {t.offset}, but the tensors before it end at {at}: "
                f"a type or shape does not match the bytes the file holds", rule="NBYTES",
                hint="a tensor relabelled to another type (e.g. F32 -> Q4_0) reads garbage")
        at = _align(t.offset + t.n_bytes, align)
    if size - start - reach >= align:
        raise WeightsError(f"{path}: {size - start - reach} bytes follow the last tensor: a type or shape does not "
                           f"match the bytes the file holds", rule="NBYTES")
