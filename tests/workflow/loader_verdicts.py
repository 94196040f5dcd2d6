"""Verdicts of the Python loaders and of the exported C loader on one file, for the corpus and the fuzzers.

A verdict is the name of the rule of caten_lab/formats/rules.h the file breaks, or None for a valid
file. The C side is ``tests/corpus/loader_driver.c`` (the library's loader files compiled on their
own) through ctypes.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

from caten_lab.formats.rules import RULE_BY_ID, FormatError

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "corpus"
C_DIR = REPO / "caten_lab" / "workflow" / "c"
RULES_DIR = REPO / "caten_lab" / "formats"
DRIVER = CORPUS / "loader_driver.c"
# the model and vocabulary the C fuzz target (loader_driver.c, DRV_FUZZ) checks against
FUZZ_EXPECTED = {"transformer.wte.weight": (4, 2), "transformer.ln_f.bias": (2,)}
FUZZ_VOCAB = 257
MODES = ("safetensors", "vocab", "merges", "gguf", "config", "spm")  # byte 0 of a fuzz input picks one


def driver_sources() -> list[Path]:
    return [DRIVER, *sorted(C_DIR.glob("*.c")), RULES_DIR / "rules.h"]


def build_driver(out: Path, extra: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The driver as a shared library (with the given extra flags, e.g. sanitizers)."""
    cc = shutil.which("cc") or "cc"
    so = out / "loader_driver.so"
    r = subprocess.run([cc, "-O1", "-g", "-shared", "-fPIC", f"-I{C_DIR}", f"-I{RULES_DIR}", *extra, "-o", str(so),
                        str(DRIVER)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    lib = ctypes.CDLL(str(so))
    lib.drv_msg.restype = ctypes.c_char_p
    lib.drv_st.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.drv_st_read.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    lib.drv_vocab.argtypes = [ctypes.c_char_p, ctypes.c_int64]
    lib.drv_gguf.argtypes = [ctypes.c_char_p]
    return lib


class Expected:
    """The expected tensors (name -> shape) as the driver's C arrays."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]) -> None:
        self.shapes = shapes
        self._names = [n.encode() for n in shapes]
        self.names = (ctypes.c_char_p * len(shapes))(*self._names)
        self.ndims = np.array([len(s) for s in shapes.values()], np.int32)
        self.dims = np.zeros((len(shapes), 8), np.int64)
        for i, s in enumerate(shapes.values()):
            self.dims[i, : len(s)] = s


def _c_rule(v: int, lib: ctypes.CDLL) -> str | None:
    if v == 0:
        return None
    if v < 0:
        return f"error-code-{-v}: {lib.drv_msg().decode(errors='replace')}"
    return RULE_BY_ID[v].name


def c_safetensors(lib: ctypes.CDLL, path: Path, ex: Expected) -> str | None:
    v = lib.drv_st(str(path).encode(), len(ex.shapes), ex.names, ex.ndims.ctypes.data, ex.dims.ctypes.data)
    return _c_rule(v, lib)


def c_vocab(lib: ctypes.CDLL, path: Path, n_vocab: int) -> str | None:
    return _c_rule(lib.drv_vocab(str(path).encode(), n_vocab), lib)


def c_gguf(lib: ctypes.CDLL, path: Path) -> str | None:
    return _c_rule(lib.drv_gguf(str(path).encode()), lib)


def py_gguf(path: Path) -> str | None:
    """The strict GGUF reader's verdict (formats/gguf_header.py: header walk, then layout)."""
    from caten_lab.formats.gguf_header import read_gguf_header

    try:
        read_gguf_header(path)
    except FormatError as e:
        return e.rule
    return None


def py_safetensors(path: Path, expected: dict[str, tuple[int, ...]]) -> str | None:
    from caten_lab.models.gpt2_weights import open_checked

    try:
        open_checked(path, expected)
    except FormatError as e:
        return e.rule
    return None


def py_vocab(path: Path, n_vocab: int) -> str | None:
    from caten_lab.formats.vocab_check import check_vocab

    try:
        check_vocab(path.read_bytes(), str(path), n_vocab)
    except FormatError as e:
        return e.rule
    return None


def c_tensor(lib: ctypes.CDLL, path: Path, name: str, shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(shape, np.float32)
    dims = np.array(list(shape) + [0] * (4 - len(shape)), np.int64)
    rc = lib.drv_st_read(str(path).encode(), name.encode(), len(shape), dims.ctypes.data, out.ctypes.data)
    assert rc == 0, lib.drv_msg()
    return out


def rule_of(path: Path) -> str | None:
    """The verdict a corpus file's name states."""
    head = path.stem.split("-", 1)[0]
    return None if head == "valid" else head
