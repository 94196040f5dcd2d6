"""Chat templates: turn a list of messages into the prompt text a chat model was trained on.

A model ships its template as Jinja source (GGUF metadata ``tokenizer.chat_template``, or
``chat_template`` in a Hugging Face ``tokenizer_config.json``). It is rendered here the way
``transformers``' ``apply_chat_template(..., tokenize=False)`` renders it, so the same messages give
the same text: an immutable sandboxed Jinja environment with ``trim_blocks`` and ``lstrip_blocks``,
the ``loopcontrols`` extension, a ``{% generation %}`` block tag (rendered as its body), the
template globals ``raise_exception(msg)``, ``strftime_now(fmt)``, ``dict`` and ``namespace`` (which
refuses ``_``-prefixed names), a ``tojson`` filter that does not escape HTML characters, and the
variables ``messages``, ``tools``, ``documents``, ``add_generation_prompt`` and the special tokens
(``bos_token``, ``eos_token``, ...).

Errors name the template line: a syntax error when the template is made, a ``raise_exception`` (the
template refusing a conversation) or any other failure when it is rendered.
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

from caten_lab.errors import CatenError
from caten_lab.formats.gguf_file import read_gguf
from caten_lab.formats.rules import WeightsError
from caten_lab.type_words import a_type

TEMPLATE_FILE = "<chat template>"

# Text that ends an assistant turn in the common template families; a template that contains one
# of them gets it as an end-of-turn marker (chat stops generating there).
END_OF_TURN_MARKERS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "</s>")

# The template variables a GGUF file's special tokens fill: tokenizer.ggml.<key>_token_id -> variable.
SPECIAL_TOKEN_KEYS = (
    ("bos", "bos_token"),
    ("eos", "eos_token"),
    ("unknown", "unk_token"),
    ("padding", "pad_token"),
)


class ChatTemplateError(CatenError):
    """A chat template that does not compile, or that fails (or refuses) to render a conversation."""


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: marks assistant text for training masks; renders its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    """Jinja's ``namespace()`` without ``_``-prefixed attributes (no way to reach Python internals)."""

    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 - jinja's own signature trick
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for key in attrs:
            _Namespace._check(key)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, key: str, value: Any) -> None:
        _Namespace._check(key)
        jinja2.utils.Namespace.__setitem__(self, key, value)

    @staticmethod
    def _check(key: object) -> None:
        if isinstance(key, str) and key.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"a chat template may not set the attribute {key!r} on a namespace"
            )


class _DictGlobal:
    """``dict(...)`` and ``dict.fromkeys(...)`` in a template, with nothing else of the type reachable."""

    def __call__(self, *args: Any, **kwargs: Any) -> dict:
        return dict(*args, **kwargs)

    def fromkeys(self, *args: Any, **kwargs: Any) -> dict:
        return dict.fromkeys(*args, **kwargs)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationTag, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _DictGlobal()
    env.globals["namespace"] = _Namespace
    return env


def _plain(value: Any, where: str) -> Any:
    """A copy of ``value`` made of JSON types only (what a template may see); anything else is refused."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    for base in (bool, str, int, float):  # subclasses (enums, NumPy scalars) back to the base type
        if isinstance(value, base):
            return base(value)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    raise ChatTemplateError(
        f"{where} is {a_type(value)}; a chat template only sees str, numbers, "
        "bools, None, lists and dicts",
        hint="convert it to plain data first",
    )


def _reader(path_or_reader: Any) -> tuple[Any, str]:
    if isinstance(path_or_reader, str | os.PathLike):
        try:
            return read_gguf(path_or_reader), str(path_or_reader)
        except WeightsError as e:
            raise ChatTemplateError(
                f"{path_or_reader}: cannot read GGUF ({e})"[:300], hint="truncated or not a GGUF file"
            ) from None
    return path_or_reader, str(getattr(path_or_reader, "path", "GGUF"))


def _string_field(reader: Any, key: str, where: str) -> str | None:
    field = reader.fields.get(key)
    if field is None:
        return None
    try:
        value = field.contents()
    except (IndexError, UnicodeDecodeError) as e:
        raise ChatTemplateError(f"{where}: metadata {key} is not a UTF-8 string ({e})") from None
    if not isinstance(value, str):
        raise ChatTemplateError(f"{where}: metadata {key} is not a string but {a_type(value)}")
    return value


def _token_text(reader: Any, id_key: str, where: str) -> str | None:
    """The text of the token whose id the metadata key ``id_key`` holds (None if there is no such key)."""
    field = reader.fields.get(id_key)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if field is None or tokens is None:
        return None
    tid, texts = int(field.contents()), tokens.contents()
    if not 0 <= tid < len(texts):
        raise ChatTemplateError(f"{where}: {id_key} = {tid} is not a token id (the vocabulary has {len(texts)})")
    return str(texts[tid])


def check_messages(messages: object) -> list[dict[str, Any]]:
    """``messages`` as plain dicts, each with a string ``role``; anything else is a clear error."""
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence):
        raise ChatTemplateError(
            f"messages must be a list of {{'role': ..., 'content': ...}} dicts, got {a_type(messages)}",
            hint='e.g. [{"role": "user", "content": "Hello"}]',
        )
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ChatTemplateError(
                f"messages[{i}] is not a dict with a string 'role': {m!r}"[:200],
                hint='each message is {"role": "user"|"assistant"|"system", "content": "..."}',
            )
        out.append(_plain(m, f"messages[{i}]"))
    return out


class ChatTemplate:
    """A compiled chat template: ``ChatTemplate(source, bos_token=..., eos_token=...).render(messages)``."""

    def __init__(
        self,
        source: str,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        special_tokens: Mapping[str, str] | None = None,
        name: str = TEMPLATE_FILE,
    ) -> None:
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError(
                f"{name}: the chat template is empty or not text",
                hint="pass the Jinja source (GGUF key tokenizer.chat_template)",
            )
        self.source = source
        self.name = name
        tokens = dict(special_tokens or {})
        if bos_token is not None:
            tokens["bos_token"] = bos_token
        if eos_token is not None:
            tokens["eos_token"] = eos_token
        self.special_tokens = tokens
        try:
            self._template = _environment().from_string(source)
        except jinja2.exceptions.TemplateSyntaxError as e:
            raise ChatTemplateError(
                f"the chat template does not compile: {e.message}",
                where=self._line(e.lineno),
                hint="fix the template's Jinja syntax",
            ) from None

    @classmethod
    def from_gguf(cls, path_or_reader: Any) -> ChatTemplate:
        """The template of a GGUF file's ``tokenizer.chat_template``, with its BOS/EOS token texts."""
        reader, where = _reader(path_or_reader)
        source = _string_field(reader, "tokenizer.chat_template", where)
        if source is None:
            raise ChatTemplateError(
                f"{where} has no tokenizer.chat_template",
                hint="pass a template with --chat-template / ChatTemplate(source)",
            )
        specials = {}
        for key, var in SPECIAL_TOKEN_KEYS:
            text = _token_text(reader, f"tokenizer.ggml.{key}_token_id", where)
            if text is not None:
                specials[var] = text
        return cls(source, special_tokens=specials, name=f"{where}:tokenizer.chat_template")

    @property
    def end_of_turn(self) -> list[str]:
        """The end-of-turn markers this template writes (e.g. ``<|im_end|>``), in the order of the table."""
        return [m for m in END_OF_TURN_MARKERS if m in self.source]

    def _line(self, lineno: int | None) -> str:
        if not lineno:
            return self.name
        lines = self.source.splitlines()
        text = lines[lineno - 1].strip() if 0 < lineno <= len(lines) else ""
        return f"{self.name} line {lineno}: {text[:120]}"

    def _failing_line(self, exc: BaseException) -> int | None:
        """The template line the rendering stopped at (Jinja maps its frames to template lines)."""
        found = None
        for frame, lineno in traceback.walk_tb(exc.__traceback__):
            if frame.f_code.co_filename == "<template>":
                found = lineno
        return found

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = False,
        tools: list[dict] | None = None,
        documents: list[dict] | None = None,
        **variables: Any,
    ) -> str:
        """The prompt text for ``messages`` (``add_generation_prompt``: open the assistant's turn)."""
        chat = check_messages(messages)
        context = {**self.special_tokens, **_plain(variables, "template variables")}
        try:
            return self._template.render(
                messages=chat,
                tools=_plain(tools, "tools"),
                documents=_plain(documents, "documents"),
                add_generation_prompt=bool(add_generation_prompt),
                **context,
            )
        except jinja2.exceptions.TemplateError as e:
            refused = type(e) is jinja2.exceptions.TemplateError
            what = "the chat template refused the conversation" if refused else "the chat template failed"
            raise ChatTemplateError(
                f"{what}: {e.message or type(e).__name__}",
                where=self._line(self._failing_line(e)),
                hint="check the roles and order of the messages" if refused else None,
            ) from None
        except Exception as e:  # noqa: BLE001 - a template can fail in arbitrary Python (e.g. a bad index)
            raise ChatTemplateError(
                f"the chat template failed: {type(e).__name__}: {e}", where=self._line(self._failing_line(e))
            ) from None


def apply_chat_template(
    template: str | ChatTemplate,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool = False,
    **variables: Any,
) -> str:
    """``ChatTemplate(template).render(messages, ...)`` for a one-off call."""
    t = template if isinstance(template, ChatTemplate) else ChatTemplate(template)
    return t.render(messages, add_generation_prompt=add_generation_prompt, **variables)


__all__ = [
    "END_OF_TURN_MARKERS",
    "SPECIAL_TOKEN_KEYS",
    "ChatTemplate",
    "ChatTemplateError",
    "apply_chat_template",
    "check_messages",
]
