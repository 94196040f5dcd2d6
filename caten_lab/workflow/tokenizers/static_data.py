"""Tokenizer tables as one binary blob that a C library links as read-only data.

Millions of table entries written as C array literals would make cc parse megabytes of numbers.
Instead the tables are packed into one aligned blob file, and the generated C pulls it in with the
assembler's ``.incbin``, so the linker copies the bytes and nothing is parsed. ``pack_static`` takes
``tokenizer.static_args()`` (the entry actions' table parameters by name); ``incbin_c`` writes the C
that declares the blob and a typed pointer, length and scalar value per parameter.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from caten_lab.errors import CatenError

C_TYPES = {"uint8": "uint8_t", "int32": "int32_t", "int64": "int64_t", "float32": "float", "float64": "double"}


@dataclass
class StaticBlob:
    """Packed tables: ``arrays[name] = (byte offset, dtype name, length)``; scalars kept by value."""

    data: bytes
    arrays: dict[str, tuple[int, str, int]] = field(default_factory=dict)
    scalars: dict[str, int | float] = field(default_factory=dict)

    def array(self, name: str) -> np.ndarray:
        """A read-only view of one packed table (for checks and for Python callers)."""
        offset, dtype, length = self.arrays[name]
        return np.frombuffer(self.data, dtype=dtype, count=length, offset=offset)


def pack_static(args: dict[str, object], align: int = 64) -> StaticBlob:
    """Pack every 1-D array of ``args`` (aligned to ``align`` bytes); ints and floats stay scalars."""
    parts: list[bytes] = []
    blob = StaticBlob(b"")
    offset = 0
    for name, value in args.items():
        if isinstance(value, np.ndarray):
            if value.ndim != 1 or value.dtype.name not in C_TYPES:
                raise CatenError(f"table {name!r} must be a 1-D array of {sorted(C_TYPES)}, got {value.dtype}"
                                 f" with shape {value.shape}")
            pad = -offset % align
            parts.append(b"\0" * pad)
            offset += pad
            raw = np.ascontiguousarray(value).tobytes()
            blob.arrays[name] = (offset, value.dtype.name, int(value.shape[0]))
            parts.append(raw)
            offset += len(raw)
        elif isinstance(value, bool | int | float | np.integer | np.floating):
            blob.scalars[name] = value.item() if isinstance(value, np.generic) else value
        else:
            raise CatenError(f"static argument {name!r} has unsupported type {type(value).__name__}")
    blob.data = b"".join(parts)
    return blob


def incbin_c(blob: StaticBlob, blob_path: Path, symbol: str) -> str:
    """C declarations for a blob written to ``blob_path``: ``<symbol>_<name>`` pointers and lengths."""
    if not symbol.isidentifier():
        raise CatenError(f"{symbol!r} is not a valid C identifier")
    path = str(Path(blob_path).resolve()).replace("\\", "\\\\").replace('"', '\\"')
    lines = [
        "#include <stdint.h>",
        f'__asm__(".section .rodata\\n.balign 64\\n.globl {symbol}\\n.hidden {symbol}\\n{symbol}:\\n'
        f'.incbin \\"{path}\\"\\n.previous\\n");',
        f"extern const unsigned char {symbol}[];",
    ]
    for name, (offset, dtype, length) in blob.arrays.items():
        ctype = C_TYPES[dtype]
        lines.append(f"#define {symbol}_{name} ((const {ctype} *)({symbol} + {offset}))")
        lines.append(f"#define {symbol}_{name}_len ((int64_t){length})")
    for name, value in blob.scalars.items():
        literal = repr(float(value)) if isinstance(value, float) else f"((int64_t){int(value)})"
        lines.append(f"#define {symbol}_{name} {literal}")
    return "\n".join(lines) + "\n"
