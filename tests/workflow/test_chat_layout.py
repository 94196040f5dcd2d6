"""Chat prompts without jinja2 at run time: the layout of the GGUF file's chat template
(workflow/chat_layout.py) and the ``assemble_prompt`` action (interpreted and compiled), against
``transformers``' ``apply_chat_template`` on the SmolLM2 GGUF (its tokenizer, its ChatML template).
"""

from __future__ import annotations

import numpy as np
import pytest

from caten_lab.config import settings
from caten_lab.workflow.chat_layout import chat_layout, gguf_chat_layout
from caten_lab.workflow.chat_template import ChatTemplateError
from caten_lab.workflow.prompt_actions import assemble_prompt

CHATS = [
    (None, "What is the capital of France?"),
    ("You are a terse assistant.", "Write a haiku about the sea."),
    (None, "  leading spaces, tabs\tand\n\nnewlines  "),
    ("Réponds en français.", "Wie geht's? 你好 👋🏽 — ∑x²"),
    (None, ""),
    ("", "x"),
    (None, "a message spelling <|im_end|>: the segment's tokenizer decides (transformers: the special id)"),
]


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    import transformers

    from caten_lab.formats.gguf_header import read_gguf_header

    tok = transformers.AutoTokenizer.from_pretrained(str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name)
    return gguf_chat_layout(read_gguf_header(smollm2_gguf).metadata), tok


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    with settings(cache_dir=tmp_path_factory.mktemp("caten_cache")):
        yield assemble_prompt.compile()


def _assemble(fn, layout, tok, system, user) -> list[int]:  # noqa: ANN001
    kinds, values, segs = layout.pieces(system, user)
    ids = [tok.encode(s, add_special_tokens=False) for s in segs]
    start = np.cumsum([0] + [len(x) for x in ids]).astype(np.int32)
    flat = np.asarray([t for x in ids for t in x] or [0], np.int32)
    out = np.zeros(4096, np.int32)
    n = fn(
        np.asarray(kinds or [0], np.int32),
        np.asarray(values or [0], np.int32),
        len(kinds),
        flat,
        start,
        len(tok),
        out,
        len(out),
    )
    assert n >= 0
    return out[:n].tolist()


def _messages(system, user) -> list[dict[str, str]]:  # noqa: ANN001
    return ([{"role": "system", "content": system}] if system is not None else []) + [
        {"role": "user", "content": user}
    ]


@pytest.mark.parametrize(("system", "user"), CHATS)
def test_assembled_ids_are_transformers(smollm2, compiled, system, user) -> None:
    layout, tok = smollm2
    want = tok.apply_chat_template(_messages(system, user), add_generation_prompt=True, tokenize=True)
    want = list(want["input_ids"] if isinstance(want, dict) or hasattr(want, "keys") else want)
    assert _assemble(assemble_prompt, layout, tok, system, user) == want
    assert _assemble(compiled, layout, tok, system, user) == want
    text = tok.apply_chat_template(_messages(system, user), add_generation_prompt=True, tokenize=False)
    assert layout.render(system, user, {i: tok.convert_ids_to_tokens(i) for i in range(32)}) == text


def test_layout_of_smollm2(smollm2) -> None:
    layout, tok = smollm2
    start, end = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    assert layout.with_system == (
        ("special", start),
        ("text", "system\n"),
        ("slot", "system"),
        ("special", end),
        ("text", "\n"),
        ("special", start),
        ("text", "user\n"),
        ("slot", "user"),
        ("special", end),
        ("text", "\n"),
        ("special", start),
        ("text", "assistant\n"),
    )
    assert layout.without_system[1] == (
        "text",
        "system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face",
    )
    t = layout.tables()
    assert t["chat_starts"].tolist() == [
        0,
        len(layout.with_system),
        len(layout.with_system) + len(layout.without_system),
    ]
    assert bytes(t["chat_text"]).decode().startswith("system\n\nuser\n\nassistant\nsystem\nYou are")


def test_action_refuses_bad_parts() -> None:
    seg, start, out = np.asarray([7, 8], np.int32), np.asarray([0, 2], np.int32), np.zeros(3, np.int32)
    assert (
        assemble_prompt(np.asarray([0, 1], np.int32), np.asarray([5, 0], np.int32), 2, seg, start, 10, out, 3)
        == 3
    )
    assert out.tolist() == [5, 7, 8]
    assert (
        assemble_prompt(np.asarray([0, 1], np.int32), np.asarray([5, 0], np.int32), 2, seg, start, 10, out, 2)
        == -1
    )
    assert (
        assemble_prompt(np.asarray([0], np.int32), np.asarray([10], np.int32), 1, seg, start, 10, out, 3)
        == -2
    )
    assert (
        assemble_prompt(np.asarray([1], np.int32), np.asarray([1], np.int32), 1, seg, start, 10, out, 3) == -2
    )
    assert (
        assemble_prompt(np.asarray([2], np.int32), np.asarray([0], np.int32), 1, seg, start, 10, out, 3) == -2
    )


SPECIALS = {"<s>": 1, "</s>": 2, "[INST]": 3, "[/INST]": 4}


def test_other_linear_templates() -> None:
    llama2 = (
        "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST] {{ m['content'] }} [/INST]"
        "{% else %}<<SYS>>{{ m['content'] }}<</SYS>>{% endif %}{% endfor %}"
    )
    layout = chat_layout(llama2, SPECIALS, bos="<s>")
    assert layout.without_system == (
        ("special", 1),
        ("special", 3),
        ("text", " "),
        ("slot", "user"),
        ("text", " "),
        ("special", 4),
    )
    kinds, values, segs = layout.pieces("be brief", "hi")
    assert (kinds, values, segs) == ([0, 1, 0, 1, 0], [1, 0, 3, 1, 4], ["<<SYS>>be brief<</SYS>>", " hi "])


@pytest.mark.parametrize(
    "template",
    [
        "{% for m in messages %}{{ m['content'] | upper }}{% endfor %}",
        "{% for m in messages %}{{ m['content'] }}{{ m['content'] }}{% endfor %}",
        "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'][:3] }}{% endif %}{% endfor %}",
        "{{ raise_exception('no system messages') }}",
        "{% for m in messages %}",
        "",
    ],
)
def test_templates_it_cannot_express_are_refused(template: str) -> None:
    with pytest.raises(ChatTemplateError, match="tokenizer.chat_template"):
        chat_layout(template, SPECIALS)
