"""A GGUF chat template as data: the parts of a one-turn prompt, for code without jinja2 (C).

The file's ``tokenizer.chat_template`` is rendered once by :class:`~caten_lab.workflow.chat_template.ChatTemplate`
(as transformers renders it) with marker contents; the result is cut at the special tokens and at
the markers into parts: a special token (by id), literal text, or a slot (the system or the user
message). A template that does not put the contents in verbatim and once (a non-linear template: it
transforms or repeats the message) is refused naming the key, with chat_template's
``ChatTemplateError``. Two layouts exist, with and without a system message (a template may add a
default system prompt: SmolLM2's does).

``ChatLayout.pieces(system, user)`` gives the parts for real messages: special ids and text
segments (the text between two special tokens, tokenized on its own by the caller), which
``prompt_actions.assemble_prompt`` lays out: the template's special tokens are ids, never text; a
message's text goes through the segment tokenizer (which, as llama.cpp's and transformers', may
parse special-token text in it). The result is what transformers' ``apply_chat_template(...,
add_generation_prompt=True, tokenize=True)`` gives.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from caten_lab.workflow.chat_template import SPECIAL_TOKEN_KEYS, ChatTemplate, ChatTemplateError

__all__ = ["ChatLayout", "chat_layout", "gguf_chat_layout"]

TEMPLATE_KEY = "tokenizer.chat_template"
SYSTEM_SLOT, USER_SLOT = "\ue000caten-system\ue001", "\ue000caten-user\ue001"
PROBES = (("\ue002a\ue003", "\ue004b\ue005"), ("x", "y\n"))  # second renders check linearity


Part = tuple[str, Any]  # ("special", id) | ("text", str) | ("slot", "system" | "user")


def _split(text: str, specials: dict[str, int]) -> list[Part]:
    """``text`` cut at special tokens (longest match first, left to right) and the slot markers."""
    marks = {
        **{s: ("special", i) for s, i in specials.items()},
        SYSTEM_SLOT: ("slot", "system"),
        USER_SLOT: ("slot", "user"),
    }
    by_first: dict[str, list[str]] = {}
    for s in sorted(marks, key=len, reverse=True):
        if s:
            by_first.setdefault(s[0], []).append(s)
    parts: list[Part] = []
    buf: list[str] = []
    i = 0
    while i < len(text):
        hit = next((s for s in by_first.get(text[i], ()) if text.startswith(s, i)), None)
        if hit is None:
            buf.append(text[i])
            i += 1
            continue
        if buf:
            parts.append(("text", "".join(buf)))
            buf = []
        parts.append(marks[hit])
        i += len(hit)
    if buf:
        parts.append(("text", "".join(buf)))
    return parts


@dataclass(frozen=True)
class ChatLayout:
    with_system: tuple[Part, ...]
    without_system: tuple[Part, ...]

    def parts(self, system: str | None) -> tuple[Part, ...]:
        return self.with_system if system is not None else self.without_system

    def pieces(self, system: str | None, user: str) -> tuple[list[int], list[int], list[str]]:
        """The parts for these messages as ``assemble_prompt`` takes them: kinds (0 special, 1 segment),
        values (the token id, the segment index) and the segments' texts (to tokenize one by one)."""
        kinds: list[int] = []
        values: list[int] = []
        segs: list[str] = []
        in_text = False
        for kind, value in self.parts(system):
            if kind == "special":
                kinds.append(0)
                values.append(int(value))
                in_text = False
                continue
            if not in_text:
                kinds.append(1)
                values.append(len(segs))
                segs.append("")
                in_text = True
            segs[-1] += value if kind == "text" else (system if value == "system" else user) or ""
        return kinds, values, segs

    def render(self, system: str | None, user: str, id_to_text: dict[int, str]) -> str:
        """The prompt as text (special tokens written out), as the template renders it."""
        out = []
        for kind, value in self.parts(system):
            out.append(
                id_to_text[value]
                if kind == "special"
                else value
                if kind == "text"
                else (system if value == "system" else user)
            )
        return "".join(out)

    def tables(self) -> dict[str, np.ndarray]:
        """The layouts as flat arrays for a C runtime: per layout, parts (kind, value, text offset,
        text length) with kind 0 special (value: id), 1 text (its UTF-8 bytes in ``text``), 2 slot
        (value 0 system, 1 user)."""
        rows: list[list[int]] = []
        text = bytearray()
        starts = [0]
        for parts in (self.with_system, self.without_system):
            for kind, value in parts:
                if kind == "special":
                    rows.append([0, int(value), 0, 0])
                elif kind == "text":
                    raw = value.encode("utf-8")
                    rows.append([1, 0, len(text), len(raw)])
                    text += raw
                else:
                    rows.append([2, 0 if value == "system" else 1, 0, 0])
            starts.append(len(rows))
        return {
            "chat_parts": np.asarray(rows, dtype=np.int32).reshape(-1),
            "chat_starts": np.asarray(starts, dtype=np.int32),
            "chat_text": np.frombuffer(bytes(text) or b"\0", dtype=np.uint8),
        }


def _layout(template: ChatTemplate, specials: dict[str, int], system: bool) -> tuple[Part, ...]:
    got = []
    for sys_probe, user_probe in ((SYSTEM_SLOT, USER_SLOT), *PROBES):
        messages = ([{"role": "system", "content": sys_probe}] if system else []) + [
            {"role": "user", "content": user_probe}
        ]
        got.append((template.render(messages, add_generation_prompt=True), sys_probe, user_probe))
    rendered = got[0][0]
    parts = tuple(_split(rendered, specials))
    slots = [v for k, v in parts if k == "slot"]
    if slots.count("user") != 1 or slots.count("system") != (1 if system else 0):
        raise ChatTemplateError(
            f"{TEMPLATE_KEY}: the rendered prompt holds the {'system and ' if system else ''}user "
            "message other than once and verbatim",
            hint="only linear chat templates are exported",
        )
    for text, sys_probe, user_probe in got[1:]:
        again = rendered.replace(SYSTEM_SLOT, sys_probe).replace(USER_SLOT, user_probe)
        if again != text:
            raise ChatTemplateError(
                f"{TEMPLATE_KEY}: the prompt depends on the message's content beyond inserting it",
                hint="only linear chat templates are exported",
            )
    return parts


def chat_layout(
    template: str | ChatTemplate, specials: dict[str, int], *, bos: str = "", eos: str = ""
) -> ChatLayout:
    """The layouts of ``template`` (the text of tokenizer.chat_template, or a ChatTemplate made from
    it); ``specials``: the special tokens' text -> id (the vocabulary's control tokens); ``bos`` /
    ``eos``: the texts a template given as text sees as ``bos_token`` / ``eos_token``."""
    if not isinstance(template, ChatTemplate):
        if not isinstance(template, str) or not template:
            raise ChatTemplateError(
                f"{TEMPLATE_KEY} is missing or empty",
                hint="the file has no chat template: use --prompt without --chat",
            )
        template = ChatTemplate(template, bos_token=bos, eos_token=eos, name=TEMPLATE_KEY)
    return ChatLayout(_layout(template, specials, True), _layout(template, specials, False))


CONTROL, USER_DEFINED = 3, 4  # tokenizer.ggml.token_type values of special tokens


def gguf_chat_layout(metadata: Mapping[str, tuple[int, Any]]) -> ChatLayout:
    """The layout of a GGUF file's chat template (``metadata``: ``GGUFHeader.metadata``), rendered with
    the token texts ``ChatTemplate.from_gguf`` gives it (bos, eos, unk, pad); its special tokens are
    the control and user-defined tokens of tokenizer.ggml.tokens."""

    def get(key: str) -> Any:
        return metadata.get(key, (None, None))[1]

    tokens, types = get("tokenizer.ggml.tokens"), get("tokenizer.ggml.token_type")
    if tokens is None or types is None or len(tokens[1]) != len(types[1]):
        raise ChatTemplateError(
            "tokenizer.ggml.tokens / tokenizer.ggml.token_type are missing or of different lengths"
        )
    names = tokens[1]
    specials = {
        t: i for i, (t, k) in enumerate(zip(names, types[1], strict=True)) if k in (CONTROL, USER_DEFINED)
    }
    source = get(TEMPLATE_KEY)
    if not isinstance(source, str) or not source:
        return chat_layout(source, specials)  # refused: missing or empty
    texts = {}
    for key, var in SPECIAL_TOKEN_KEYS:
        i = get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(i, int) and 0 <= i < len(names):
            texts[var] = names[i]
    return chat_layout(ChatTemplate(source, special_tokens=texts, name=TEMPLATE_KEY), specials)
