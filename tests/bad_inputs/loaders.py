"""Bad inputs: loaders. See tests/bad_inputs/__init__.py for the case format.

Every corrupt file of tests/corpus/ (one or more per rule of caten_lab/formats/rules.h), through the
public Python loader (load_hf_dir, load_gguf, GPT2Tokenizer.from_files, the vocabulary check) and,
for safetensors and vocabularies, through the exported C loader (its .c files built with
tests/corpus/loader_driver.c; a C rejection becomes a CatenError with the C message here). The
message must name the rule.
"""

from __future__ import annotations

import functools
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from bad_inputs import Case
from caten_lab.errors import CatenError
from caten_lab.formats.rules import FormatError

CORPUS = Path(__file__).resolve().parents[1] / "corpus"
N_VOCAB = 257  # tests/corpus/make_corpus.py


def _files(kind: str) -> list[Path]:
    return [p for p in sorted((CORPUS / kind).iterdir()) if not p.name.startswith("valid-")]


def _rule(p: Path) -> str:
    return p.stem.split("-", 1)[0]


def _hf(weights: Path, config: Path = CORPUS / "config" / "valid-config.json") -> Callable[[], object]:
    def run() -> object:
        from caten_lab.models.gpt2_weights import load_hf_dir

        with tempfile.TemporaryDirectory(prefix="bad_loader_") as tmp:
            d = Path(tmp)
            shutil.copy(config, d / "config.json")
            shutil.copy(weights, d / "model.safetensors")
            return load_hf_dir(d)

    return run


def _gguf(p: Path) -> Callable[[], object]:
    def run() -> object:
        from caten_lab.models.gpt2_weights import load_gguf

        return load_gguf(p)

    return run


def _vocab(p: Path) -> Callable[[], object]:
    def run() -> object:
        from caten_lab.formats.vocab_check import check_vocab

        return check_vocab(p.read_bytes(), str(p), N_VOCAB)

    return run


def _spm(p: Path) -> Callable[[], object]:
    def run() -> object:
        from caten_lab.workflow.tokenizers.sentencepiece import SentencePieceTokenizer

        return SentencePieceTokenizer.from_model_file(p)

    return run


def _merges(p: Path) -> Callable[[], object]:
    def run() -> object:
        from caten_lab.workflow.tokenizers import GPT2Tokenizer

        return GPT2Tokenizer.from_files(CORPUS / "vocab" / "valid-byte-vocab.json", p)

    return run


@functools.lru_cache(maxsize=1)
def _driver():  # noqa: ANN202 - the standalone C loader (ctypes), built once per process
    sys.path.insert(0, str(CORPUS.parent / "workflow"))
    import loader_verdicts

    return loader_verdicts, loader_verdicts.build_driver(Path(tempfile.mkdtemp(prefix="bad_loader_c_")))


def _c(p: Path, kind: str) -> Callable[[], object]:
    def run() -> object:
        v, lib = _driver()
        if kind == "safetensors":
            sys.path.insert(0, str(CORPUS))
            import make_corpus

            verdict = v.c_safetensors(lib, p, v.Expected(make_corpus.expected()))
        else:
            verdict = v.c_vocab(lib, p, N_VOCAB)
        if verdict is not None:
            raise CatenError(lib.drv_msg().decode(errors="replace"))
        return verdict

    return run


CASES: list[Case] = []
for _p in _files("safetensors"):
    CASES.append((f"loaders: safetensors {_p.stem}", _hf(_p), FormatError, (f"[rule {_rule(_p)}]",)))
    CASES.append((f"loaders: C safetensors {_p.stem}", _c(_p, "safetensors"), CatenError, (f"[rule {_rule(_p)}]",)))
for _p in _files("vocab"):
    CASES.append((f"loaders: vocab {_p.stem}", _vocab(_p), FormatError, (f"[rule {_rule(_p)}]",)))
    CASES.append((f"loaders: C vocab {_p.stem}", _c(_p, "vocab"), CatenError, (f"[rule {_rule(_p)}]",)))
for _p in _files("merges"):
    CASES.append((f"loaders: merges {_p.stem}", _merges(_p), FormatError, (f"[rule {_rule(_p)}]",)))
for _p in _files("gguf"):
    CASES.append((f"loaders: gguf {_p.stem}", _gguf(_p), FormatError, (f"[rule {_rule(_p)}]",)))
for _p in _files("config"):
    _st = CORPUS / "safetensors" / "valid-f32.safetensors"
    CASES.append((f"loaders: config {_p.stem}", _hf(_st, _p), FormatError, (f"[rule {_rule(_p)}]",)))
for _p in _files("spm"):
    CASES.append((f"loaders: sentencepiece {_p.stem}", _spm(_p), FormatError, (f"[rule {_rule(_p)}]",)))


def spm_piece_not_utf8() -> None:
    """Found by the atheris run: a piece that is not UTF-8 raised UnicodeDecodeError from parse_model."""
    from caten_lab.workflow.tokenizers.spm_model import parse_model

    parse_model(b"\x0a\x03\x0a\x01\xff")


CASES.append(("loaders: sentencepiece piece not UTF-8", spm_piece_not_utf8, CatenError,
              ("not a valid SentencePiece model",)))
