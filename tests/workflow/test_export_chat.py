"""Chat prompts in the exported library (c/chat_prompt.c + the assemble_prompt action), on the
bundled GPT-2 given a ChatML-like template whose turn markers are its one special token.

The reference is Python: the template rendered by jinja2, cut at the special token, each segment
tokenized by the GPT-2 tokenizer, assembled by ``assemble_prompt`` interpreted; then
``GPT2Runner.stream`` after those ids. The library's ``gpt2_chat_tokenize`` and the CLI's ``--chat``
(``--system``) must give the same ids and the same generated tokens.
"""

from __future__ import annotations

import ctypes
import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from export_helpers import run_cli

from caten_lab.models.sampling import SamplingOptions
from caten_lab.workflow.chat_layout import chat_layout
from caten_lab.workflow.prompt_actions import assemble_prompt

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "assets" / "tiny_gpt2"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

TEMPLATE = (
    "{% for m in messages %}{% if loop.first and m['role'] != 'system' %}<|endoftext|>system\n"
    "Thou art a player.<|endoftext|>\n{% endif %}<|endoftext|>{{ m['role'] }}\n{{ m['content'] }}<|endoftext|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}"
)
CHATS = [
    (None, "Speak, good king."),
    ("Answer as Romeo.", "What light through yonder window breaks?"),
    ("", "  two  spaces\n\nand lines"),
]


@pytest.fixture(scope="module")
def chat_export(tmp_path_factory):
    from caten_lab.workflow.export import export, generation_workflow

    layout = chat_layout(TEMPLATE, {"<|endoftext|>": 0})
    wf = dataclasses.replace(generation_workflow(MODEL), chat=layout)
    out = export(wf, tmp_path_factory.mktemp("chat"))
    lib = ctypes.CDLL(str(out.library))
    lib.gpt2_init.restype = ctypes.c_void_p
    lib.gpt2_init.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p]
    lib.gpt2_chat_tokenize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p,
                                       ctypes.c_int64, ctypes.c_void_p]
    lib.gpt2_last_error.restype = ctypes.c_char_p
    lib.gpt2_last_error.argtypes = [ctypes.c_void_p]
    lib.gpt2_free.argtypes = [ctypes.c_void_p]
    ctx = lib.gpt2_init(str(MODEL).encode(), None, None, None)
    assert ctx, lib.gpt2_last_error(None)
    yield layout, out, lib, ctx
    lib.gpt2_free(ctx)


@pytest.fixture(scope="module")
def py():
    from caten_lab.models.gpt2 import GPT2Runner
    from caten_lab.workflow.tokenizers import GPT2Tokenizer

    return GPT2Runner.from_pretrained(MODEL), GPT2Tokenizer.from_files(MODEL / "vocab.json", MODEL / "merges.txt")


def python_ids(layout, tok, system, user) -> list[int]:  # noqa: ANN001
    kinds, values, segs = layout.pieces(system, user)
    ids = [tok.encode(s) for s in segs]
    start = np.cumsum([0] + [len(x) for x in ids]).astype(np.int32)
    flat = np.asarray([t for x in ids for t in x] or [0], np.int32)
    out = np.zeros(1024, np.int32)
    n = assemble_prompt(np.asarray(kinds, np.int32), np.asarray(values, np.int32), len(kinds), flat, start,
                        tok.n_vocab, out, len(out))
    return out[:n].tolist()


@pytest.mark.parametrize(("system", "user"), CHATS)
def test_chat_ids_are_pythons(chat_export, py, system, user) -> None:
    layout, out, lib, ctx = chat_export
    runner, tok = py
    want = python_ids(layout, tok, system, user)
    rendered = layout.render(system, user, {0: "<|endoftext|>"})
    assert want.count(0) == rendered.count("<|endoftext|>") >= 5  # the markers are ids, never split text
    ids, n = np.zeros(512, np.int32), ctypes.c_int64()
    rc = lib.gpt2_chat_tokenize(ctx, None if system is None else system.encode(), user.encode(), ids.ctypes.data, 512,
                                ctypes.byref(n))
    assert rc == 0, lib.gpt2_last_error(ctx)
    assert ids[: n.value].tolist() == want
    gen = list(runner.stream(want, 12, SamplingOptions(), stop_tokens=[runner.config.eos_token_id]))
    args = ["--weights", str(MODEL), "--chat", "--prompt", user, "--tokens", "12", "--ids", "--no-eos-stop"]
    if system is not None:
        args += ["--system", system]
    r = run_cli(out.cli, *args)
    assert r.returncode == 0, r.stderr
    no_stop = list(runner.stream(want, 12, SamplingOptions(), stop_tokens=[]))
    assert [int(x) for x in r.stdout.split()] == no_stop
    assert no_stop[: len(gen)] == gen


def test_system_without_chat_is_refused(chat_export) -> None:
    _, out, _, _ = chat_export
    r = run_cli(out.cli, "--weights", str(MODEL), "--system", "x", "--prompt", "hi")
    assert r.returncode == 1 and "--system needs --chat" in r.stderr
