"""What a GGUF file's ``tokenizer.*`` metadata says, read into plain Python (no tables yet).

``read_vocab_meta(path or gguf.GGUFReader)`` gives a ``VocabMeta``: the token strings, their types
and scores, the merges, the special ids and flags, with llama.cpp's defaults and its by-name fixes
(end-of-turn, end-of-generation and fill-in-the-middle tokens found by their text). Anything the
tokenizers here do not implement is refused, naming the metadata key and its value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from caten_lab.errors import CatenError
from caten_lab.formats.gguf_file import read_gguf
from caten_lab.formats.rules import VocabError, WeightsError
from caten_lab.type_words import a_type

# tokenizer.ggml.token_type values (llama.cpp's LLAMA_TOKEN_TYPE_*)
UNDEFINED, NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 0, 1, 2, 3, 4, 5, 6


@dataclass(frozen=True)
class PreTokenizer:
    """One ``tokenizer.ggml.pre`` variant: which scanner, and the flags llama.cpp sets for it."""

    kind: int  # 0: GPT-2 scanner, 1: Llama-3 scanner
    split_digits: bool = False  # isolate every \p{N} first (SmolLM)
    max_digits: int = 3  # Llama-3 scanner: digits per number piece
    ignore_merges: bool = False  # a pre-token that is a token is emitted whole (llama3)
    add_bos: bool = False  # llama.cpp's default when the file does not say


_GPT2 = PreTokenizer(0)
_LLAMA3 = PreTokenizer(1, max_digits=3, ignore_merges=True, add_bos=True)
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    "gpt-2": _GPT2,
    "smollm": PreTokenizer(0, split_digits=True),
    "llama3": _LLAMA3,
    "llama-v3": _LLAMA3,
    "llama-bpe": _LLAMA3,
    "qwen2": PreTokenizer(1, max_digits=1),
}
MODELS = ("gpt2", "llama")

# Token texts llama.cpp treats as end of turn / end of generation / fill-in-the-middle, in the order
# we pick the end-of-turn id by (llama.cpp takes whichever its hash map yields first).
EOT_NAMES = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>",
             "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
EOG_NAMES = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
             "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
             "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
             "<｜end▁of▁sentence｜>", "[e~[")
FIM_EOG_NAMES = ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", "<|fim_repo|>", "<|repo_name|>",
                 "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>")


@dataclass
class VocabMeta:
    """The tokenizer part of a GGUF file's metadata."""

    where: str
    model: str  # tokenizer.ggml.model
    pre: str | None  # tokenizer.ggml.pre
    tokens: list[str]
    types: list[int]
    scores: list[float] | None
    merges: list[tuple[str, str]]
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    unk_id: int | None
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    eog_ids: frozenset[int] = field(default_factory=frozenset)

    @property
    def pre_tokenizer(self) -> PreTokenizer:
        return PRE_TOKENIZERS[self.pre or ""]


def _reader(source: Any) -> tuple[Any, str]:
    if isinstance(source, str | Path):
        try:
            return read_gguf(source), str(source)
        except WeightsError as err:
            raise CatenError(f"cannot read GGUF file {source}: {err}", hint="pass a .gguf file path") from None
    if not hasattr(source, "fields"):
        raise CatenError(f"expected a GGUF path, read_gguf() contents or gguf.GGUFReader, got {a_type(source)}")
    return source, str(getattr(source, "path", "<GGUFReader>"))


def _get(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    return default if f is None else f.contents()


def _get_id(reader: Any, key: str, default: int | None, n: int) -> int | None:
    """A special token id; like llama.cpp, an id outside the vocabulary keeps the default."""
    value = _get(reader, key)
    if value is None:
        return default if default is not None and 0 <= default < n else None
    value = int(value)
    return value if 0 <= value < n else (default if default is not None and 0 <= default < n else None)


def _split_merge(line: str) -> tuple[str, str]:
    pos = line.find(" ", 1)  # llama.cpp splits at the first space after the first character
    return (line[:pos], line[pos + 1 :]) if pos >= 0 else ("", "")


def read_vocab_meta(source: Any) -> VocabMeta:
    """Read and check the ``tokenizer.*`` metadata of a GGUF file (path or ``gguf.GGUFReader``)."""
    reader, where = _reader(source)
    model = _get(reader, "tokenizer.ggml.model")
    if model is None:
        raise CatenError(f"{where}: no tokenizer.ggml.model in the metadata",
                         hint="this GGUF file carries no tokenizer; use the model's own tokenizer files")
    if model not in MODELS:
        raise CatenError(f"{where}: tokenizer.ggml.model = {model!r} is not supported",
                         hint=f"supported: {', '.join(MODELS)} (byte-level BPE and SentencePiece-style)")
    pre = _get(reader, "tokenizer.ggml.pre")
    if model == "gpt2" and pre not in PRE_TOKENIZERS:
        raise CatenError(f"{where}: tokenizer.ggml.pre = {pre!r} is not supported",
                         hint=f"supported pre-tokenizers: {', '.join(sorted(PRE_TOKENIZERS))}")
    tokens = _get(reader, "tokenizer.ggml.tokens")
    if not tokens:
        raise VocabError(f"{where}: tokenizer.ggml.tokens is missing or empty", rule="VOCAB_TOKEN")
    n = len(tokens)
    types = [int(t) for t in _get(reader, "tokenizer.ggml.token_type", [NORMAL] * n)]
    if len(types) < n:
        raise VocabError(f"{where}: tokenizer.ggml.token_type has {len(types)} entries for {n} tokens",
                         rule="VOCAB_ID")
    types = types[:n]
    allowed = {NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED} | ({BYTE} if model == "llama" else set())
    bad = next((i for i, t in enumerate(types) if t not in allowed), None)
    if bad is not None:
        raise VocabError(f"{where}: tokenizer.ggml.token_type[{bad}] = {types[bad]} (token {tokens[bad]!r}) is "
                         f"not supported for tokenizer.ggml.model {model!r}", rule="VOCAB_TOKEN",
                         hint=f"supported token types: {sorted(allowed)}")
    seen: dict[str, int] = {}
    for i, tok in enumerate(tokens):
        if tok in seen:
            raise VocabError(f"{where}: token {tok[:80]!r} is both id {seen[tok]} and id {i} in tokenizer.ggml.tokens",
                             rule="DUPLICATE_KEY", hint="llama.cpp refuses such a vocabulary too")
        seen[tok] = i
    scores = _get(reader, "tokenizer.ggml.scores")
    if model == "llama":
        if scores is None or len(scores) < n:
            raise VocabError(f"{where}: tokenizer.ggml.scores is missing or shorter than the {n} tokens",
                             rule="VOCAB_ID", hint="a SentencePiece-style vocabulary merges by these scores")
        scores = [float(s) for s in scores[:n]]
    merges: list[tuple[str, str]] = []
    if model == "gpt2":
        raw = _get(reader, "tokenizer.ggml.merges")
        if raw is None:
            raise VocabError(f"{where}: tokenizer.ggml.merges is missing", rule="VOCAB_TOKEN",
                             hint="byte-level BPE needs its merge list")
        merges = [_split_merge(m) for m in raw]
    spm = model == "llama"
    bos = _get_id(reader, "tokenizer.ggml.bos_token_id", 1 if spm else None, n)
    eos = _get_id(reader, "tokenizer.ggml.eos_token_id", 2 if spm else None, n)
    unk = _get_id(reader, "tokenizer.ggml.unknown_token_id", 0 if spm else None, n)
    eot = _get_id(reader, "tokenizer.ggml.eot_token_id", None, n)
    eom = _get_id(reader, "tokenizer.ggml.eom_token_id", None, n)
    default_bos = True if spm else PRE_TOKENIZERS[pre].add_bos
    add_bos = bool(_get(reader, "tokenizer.ggml.add_bos_token", default_bos))
    add_eos = bool(_get(reader, "tokenizer.ggml.add_eos_token", False))
    add_space_prefix = bool(_get(reader, "tokenizer.ggml.add_space_prefix", spm))
    for flag, tid, key in ((add_bos, bos, "bos"), (add_eos, eos, "eos")):
        if flag and tid is None:
            raise VocabError(f"{where}: tokenizer.ggml.add_{key}_token is true but tokenizer.ggml.{key}_token_id "
                             "is not set (or outside the vocabulary)", rule="VOCAB_ID")
    # llama.cpp's by-name fixes: these tokens become control tokens and end generation
    if eot is None:
        eot = next((seen[t] for t in EOT_NAMES if t in seen), None)
    eog = {seen[t] for t in EOG_NAMES + FIM_EOG_NAMES if t in seen}
    eog |= {t for t in (eos, eot, eom) if t is not None}
    for tid in {seen[t] for t in EOT_NAMES + EOG_NAMES + FIM_EOG_NAMES if t in seen} | {eot, eom} - {None}:
        if types[tid] == NORMAL:
            types[tid] = CONTROL
    return VocabMeta(where, model, pre, list(tokens), types, scores, merges, bos, eos, eot, unk, add_bos, add_eos,
                     add_space_prefix, frozenset(eog))
