"""The Llama workflow exported from a GGUF file: the library reads that file (quantized blocks kept),
tokenizes with the file's tokenizer, lays out its chat template and stops where the Python chat stops.

References: the Python API on the same file, which the other tests hold to transformers and llama.cpp
(tests/models/test_llama_real.py, tests/workflow/test_gguf_tokenizer.py): ``LlamaRunner.from_pretrained``
(greedy and seeded sampled tokens must be equal), ``tokenizer_from_gguf`` (token ids must be equal on
varied text), ``ChatSession`` (the chat prompt's ids and the answer's tokens must be equal). Files: tiny
random Llamas carrying real tokenizers (GPT-2's BPE under the llama3 pre-tokenizer with BOS, and a
SentencePiece unigram model with byte fallback; tests/workflow/gguf_tokenizer_files.py), and the real
SmolLM2-135M-Instruct Q4_1.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from gguf_tokenizer_files import gpt2_vocab_gguf, spm_vocab_gguf

from caten_lab.models.sampling import SamplingOptions
from caten_lab.workflow.model_tables import ExportError
from caten_lab.workflow.tokenizers.corpus import local_text

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

TEXTS = [
    "Hello world",
    "  leading spaces,\ttabs\n\nand newlines  ",
    "digits 1234567 and 3.14159, x=42",
    "<|im_start|>user\nspecial tokens in text<|im_end|>",
    "unicode: café naïve 日本語 Ελληνικά 😀👍🏽",
    "def f(x):\n    return x ** 2  # code",
]
SAMPLED = SamplingOptions(temperature=0.9, top_k=20, seed=9)


def cli(exe: Path, *args: str, text: bool = True) -> subprocess.CompletedProcess:
    """The exported CLI with no environment but a passive OpenMP wait (a loaded machine)."""
    return subprocess.run(
        [str(exe), *args], capture_output=True, text=text, env={"OMP_WAIT_POLICY": "PASSIVE"}, timeout=300
    )


def ids_of(r: subprocess.CompletedProcess) -> list[int]:
    assert r.returncode == 0, r.stderr
    return [int(x) for x in r.stdout.split()]


class Lib:
    """The exported library through ctypes: tokenize and chat_tokenize."""

    def __init__(self, library: Path, name: str, weights: Path) -> None:
        self.lib = lib = ctypes.CDLL(str(library))
        self.name = name
        self.fn("init").restype = ctypes.c_void_p
        self.fn("init").argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
        self.fn("last_error").restype = ctypes.c_char_p
        self.fn("last_error").argtypes = [ctypes.c_void_p]
        self.fn("free").argtypes = [ctypes.c_void_p]
        self.fn("tokenize").argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_void_p,
        ]
        self.fn("chat_tokenize").argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_void_p,
            ctypes.c_int64,
            ctypes.c_void_p,
        ]
        self.fn("weight_format").restype = ctypes.c_char_p
        err = ctypes.c_int()
        self.ctx = self.fn("init")(str(weights).encode(), None, None, ctypes.byref(err))
        assert self.ctx, self.fn("last_error")(None)
        del lib

    def fn(self, what: str):  # noqa: ANN201
        return getattr(self.lib, f"{self.name}_{what}")

    def tokenize(self, text: str) -> list[int]:
        data = text.encode("utf-8")
        cap = 8 * len(data) + 8
        ids, n = np.zeros(cap, np.int32), ctypes.c_int64()
        rc = self.fn("tokenize")(self.ctx, data, ids.ctypes.data, cap, ctypes.byref(n))
        assert rc == 0, self.fn("last_error")(self.ctx)
        return ids[: n.value].tolist()

    def chat_tokenize(self, system: str | None, user: str) -> list[int]:
        ids, n = np.zeros(4096, np.int32), ctypes.c_int64()
        rc = self.fn("chat_tokenize")(
            self.ctx,
            None if system is None else system.encode(),
            user.encode(),
            ids.ctypes.data,
            4096,
            ctypes.byref(n),
        )
        assert rc == 0, self.fn("last_error")(self.ctx)
        return ids[: n.value].tolist()

    def close(self) -> None:
        self.fn("free")(self.ctx)


# ------------------------------------------------------------------------------ tiny random Llamas


@pytest.fixture(scope="module")
def tiny_files(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("llama_tok")
    files = {"bpe-llama3": gpt2_vocab_gguf(root / "bpe.gguf", "llama3", add_bos=True)}
    spm = pytest.importorskip("sentencepiece")
    corpus = root / "corpus.txt"
    corpus.write_text(local_text(60_000, seed=5) + " ".join(TEXTS * 20), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(root / "uni"),
        model_type="unigram",
        vocab_size=800,
        character_coverage=0.9995,
        byte_fallback=True,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        num_threads=1,
        minloglevel=2,
    )
    files["spm-unigram"] = spm_vocab_gguf(root / "spm.gguf", root / "uni.model")
    return files


@pytest.fixture(scope="module", params=["bpe-llama3", "spm-unigram"])
def tiny(request, tiny_files, tmp_path_factory):
    """(file, Exported, Lib, the Python runner, the Python tokenizer) of one tiny Llama."""
    from caten_lab.models.llama import LlamaRunner
    from caten_lab.workflow.export import export, generation_workflow
    from caten_lab.workflow.tokenizers.gguf_vocab import tokenizer_from_gguf

    path = tiny_files[request.param]
    out = export(generation_workflow(path, n_ctx=128), tmp_path_factory.mktemp(f"x_{request.param}"))
    lib = Lib(out.library, "llama", path)
    yield path, out, lib, LlamaRunner.from_pretrained(path, n_ctx=128), tokenizer_from_gguf(path)
    lib.close()


def test_tokenize_is_the_python_tokenizers(tiny) -> None:
    _, _, lib, _, tok = tiny
    for text in TEXTS:
        want = tok.encode(text)  # BOS / EOS as the file says, special-token text parsed
        assert lib.tokenize(text) == want, text
    assert tok.add_bos and lib.tokenize("x")[0] == tok.bos_id


def test_greedy_and_sampled_tokens_are_the_python_runners(tiny) -> None:
    path, out, _, runner, tok = tiny
    prompt = "The quick brown fox"
    ids = tok.encode(prompt)
    want = runner.generate(ids, 24)[len(ids) :]
    got = ids_of(
        cli(out.cli, "--model", str(path), "--prompt", prompt, "--tokens", "24", "--ids", "--no-eos-stop")
    )
    assert got == want
    sampled = runner.generate(ids, 16, SAMPLED)[len(ids) :]
    args = ["--temperature", "0.9", "--top-k", "20", "--seed", "9"]
    got = ids_of(
        cli(
            out.cli,
            "--model",
            str(path),
            "--prompt",
            prompt,
            "--tokens",
            "16",
            "--ids",
            "--no-eos-stop",
            *args,
        )
    )
    assert got == sampled and len(set(sampled)) > 1
    text = cli(
        out.cli, "--model", str(path), "--prompt", prompt, "--tokens", "24", "--no-eos-stop", text=False
    )
    streamed = b"".join(
        tok.decode_bytes([t], strip=False) for t in want
    )  # each piece as llama.cpp streams it
    assert text.returncode == 0 and text.stdout == prompt.encode() + streamed + b"\n"


def test_library_reads_the_files_tokenizer_only(tiny, tiny_files, tmp_path) -> None:
    path, out, lib, _, _ = tiny
    assert lib.fn("weight_format")() == b"gguf"
    r = cli(out.cli, "--model", str(path), "--vocab", str(path), "--prompt", "x")
    assert r.returncode == 2 and "tokenizer is its GGUF file's" in r.stderr
    other = next(p for p in tiny_files.values() if p != path)
    r = cli(out.cli, "--model", str(other), "--prompt", "x")
    assert r.returncode == 2 and "error (" in r.stderr, r.stderr


def test_weight_format_is_refused_for_a_llama(tiny_files) -> None:
    from caten_lab.workflow.export import generation_workflow

    with pytest.raises(ExportError, match="exported as it stores its weights"):
        generation_workflow(tiny_files["bpe-llama3"], weight_format="int8")


# ---------------------------------------------------------------------------------------- SmolLM2


@pytest.fixture(scope="module")
def smollm2_export(smollm2_gguf, tmp_path_factory):
    from caten_lab.workflow.export import export, generation_workflow

    wf = generation_workflow(smollm2_gguf, n_ctx=512)
    return wf, export(wf, tmp_path_factory.mktemp("smollm2"))


@pytest.fixture(scope="module")
def smollm2_session(smollm2_gguf):
    from caten_lab.workflow.chat import open_chat

    return open_chat(smollm2_gguf, max_tokens=32)  # the default n_ctx: the program test_chat_real compiles


@pytest.mark.parametrize("system", [None, "You are a geography teacher. Answer in one sentence."])
def test_smollm2_chat_is_the_python_chats(smollm2_gguf, smollm2_export, smollm2_session, system) -> None:
    """The exported CLI answers the chat prompt with the Python chat's tokens (greedy, 32 at most,
    stopping at the same end-of-turn token, which the Python chat does not yield), and the chat
    prompt's ids are the Python chat's."""
    wf, out = smollm2_export
    question = "What is the capital of Germany?"  # (France: the 8-bit path answers as llama.cpp, at length)
    session = smollm2_session
    session.system = system
    session.reset()
    session.messages.append({"role": "user", "content": question})
    want_prompt, _ = session.prompt_ids()
    session.reset()
    answer = list(session.reply_tokens(question))
    want = [t for t, _ in answer if t >= 0]
    lib = Lib(out.library, "llama", smollm2_gguf)
    try:
        assert lib.chat_tokenize(system, question) == want_prompt
        assert lib.fn("weight_format")() == b"gguf"
    finally:
        lib.close()
    args = ["--model", str(smollm2_gguf), "--chat", "--prompt", question, "--tokens", "32"]
    args += ["--system", system] if system is not None else []
    got = ids_of(cli(out.cli, *args, "--ids"))
    assert session.last.stop_reason == "end_of_turn" and len(want) >= 5
    assert got[:-1] == want and got[-1] in wf.stops  # the library emits the stop token (text: none)
    text = cli(out.cli, *args)
    assert text.returncode == 0 and "Berlin" in text.stdout
    assert text.stdout.strip() == "".join(piece for _, piece in answer).strip()


def test_caten_lab_export_takes_a_llama_gguf(tiny_files, tmp_path, capsys) -> None:
    """``caten-lab export DIR --model FILE.gguf``: the library is named ``llama``; this file has no chat
    template, so ``--chat`` is refused with the reason."""
    from caten_lab.cli import main

    path = tiny_files["bpe-llama3"]
    assert main(["export", str(tmp_path), "--model", str(path), "--n-ctx", "64"]) == 0
    printed = capsys.readouterr().out
    assert "libllama.so" in printed and "the file's own weights" in printed and "try:" in printed
    assert len(ids_of(cli(tmp_path / "llama", "--model", str(path), "--prompt", "hi", "--tokens", "3", "--ids"))) == 3
    r = cli(tmp_path / "llama", "--model", str(path), "--chat", "--prompt", "hi")
    assert r.returncode == 2 and "without a chat template" in r.stderr
    assert main(["export", str(tmp_path / "q"), "--model", str(path), "--weight-format", "int8"]) == 2
    assert "exported as it stores its weights" in capsys.readouterr().err
