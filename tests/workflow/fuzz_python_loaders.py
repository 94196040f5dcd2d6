"""atheris target: the Python loaders (safetensors, vocabulary, merges, GGUF, config, SentencePiece), coverage-guided.

Run by tests/workflow/test_fuzz_loaders.py as ``python fuzz_python_loaders.py DRIVER_SO WORKDIR
-runs=N -max_total_time=T CORPUS_DIR``. Byte 0 of an input picks the loader, the rest is the file.
A finding is any exception but a CatenError (a crash of the loader), or a safetensors, vocabulary or
GGUF verdict that differs from the exported C loader's (the driver, through ctypes): both raise here, so
atheris stops and exits non-zero with the input saved.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports():
    from caten_lab.errors import CatenError
    from caten_lab.formats import (  # noqa: F401
        gguf_header,
        gguf_layout,
        model_check,
        safetensors_header,
        strict_json,
        vocab_check,
    )
    from caten_lab.formats.rules import WeightsError
    from caten_lab.models import gpt2_weights
    from caten_lab.workflow.tokenizers import spm_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
import loader_verdicts as V  # noqa: E402
from loader_verdicts import FUZZ_EXPECTED, FUZZ_VOCAB, MODES  # noqa: E402

LIB = None  # the C driver and the work directory: set from the command line below
WORK = Path(".")
EXPECTED = V.Expected(FUZZ_EXPECTED)
VOCAB = vocab_check.check_vocab((V.CORPUS / "vocab" / "valid-byte-vocab.json").read_bytes(), "vocab")


def verdict(fn) -> str | None:  # noqa: ANN001
    try:
        fn()
    except CatenError as e:  # a clean refusal (FormatError names its rule)
        return getattr(e, "rule", None) or "refused"
    return None


def one(data: bytes) -> None:
    if not data:
        return
    mode, body = MODES[data[0] % len(MODES)], data[1:]
    path = WORK / f"input-{os.getpid()}"
    path.write_bytes(body)
    if mode == "safetensors":
        py, c = V.py_safetensors(path, FUZZ_EXPECTED), V.c_safetensors(LIB, path, EXPECTED)
        if py != c:
            raise AssertionError(f"safetensors verdicts differ: python {py}, C {c}")
    elif mode == "vocab":
        py, c = V.py_vocab(path, FUZZ_VOCAB), V.c_vocab(LIB, path, FUZZ_VOCAB)
        if py != c:
            raise AssertionError(f"vocabulary verdicts differ: python {py}, C {c}")
    elif mode == "merges":
        verdict(lambda: vocab_check.check_merges(body, "merges", VOCAB))
    elif mode == "gguf":
        py, c = V.py_gguf(path), V.c_gguf(LIB, path)
        if py != c:
            raise AssertionError(f"GGUF verdicts differ: python {py}, C {c}")
        verdict(lambda: gpt2_weights.load_gguf(path))
    elif mode == "config":
        verdict(lambda: gpt2_weights.config_from_dict(strict_json.loads_strict(body, "config", WeightsError, "config")))
    else:
        verdict(lambda: spm_model.parse_model(body))


if __name__ == "__main__":
    so_dir, WORK = Path(sys.argv[1]), Path(sys.argv[2])
    LIB = V.build_driver(so_dir)
    atheris.Setup([sys.argv[0], *sys.argv[3:]], one)
    atheris.Fuzz()
