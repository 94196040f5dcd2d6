"""Chat with a model: messages -> chat template -> token ids -> streamed, UTF-8-safe text -> history.

:class:`ChatSession` keeps the conversation, renders it with the model's :class:`ChatTemplate` for each
turn, runs the runner (anything with ``stream(prompt_ids, max_new_tokens, options, stop_tokens=...)``,
e.g. ``GPT2Runner`` / ``LlamaRunner``) and yields the answer as text as the tokens arrive. A token
can end in the middle of a UTF-8 character: :class:`TextStream` holds the incomplete bytes back until
the character is complete. Generation stops at the tokenizer's EOS or at the template's end-of-turn
token (``<|im_end|>`` for ChatML); neither is part of the answer.

The tokenizer needs ``encode(text)`` (``parse_special=True`` and ``add_special=False`` are passed
when it takes them: the template already writes the special tokens) and ``decode_bytes(ids)`` or
``decode(ids)``; ``eos_id`` (or ``eos_token_id``) names its end-of-sequence token.
"""

from __future__ import annotations

import codecs
import inspect
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from caten_lab.errors import CatenError
from caten_lab.models import registry
from caten_lab.models.loader import load_model
from caten_lab.models.sampling import SamplingOptions
from caten_lab.type_words import a_type
from caten_lab.workflow.chat_template import ChatTemplate
from caten_lab.workflow.tokenizers import tokenizer_from_gguf

_HOLD_LIMIT = 4  # a UTF-8 character has at most 4 bytes: never hold more tokens than that


class TextStream:
    """Token ids in, text out: ``push(id)`` returns the text that is complete so far ("" while a
    character is still incomplete); ``flush()`` returns what is left (invalid bytes as U+FFFD)."""

    def __init__(self, tokenizer: Any) -> None:
        self._bytes = getattr(tokenizer, "decode_bytes", None)
        self._strip_arg = self._bytes is not None and _takes(self._bytes, "strip")
        self._text = tokenizer.decode
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending: list[int] = []

    def push(self, token: int) -> str:
        if self._bytes is not None:  # one token's piece as streamed: no leading space stripped
            piece = self._bytes([token], strip=False) if self._strip_arg else self._bytes([token])
            return self._utf8.decode(bytes(piece))
        self._pending.append(token)  # text-only tokenizer: hold while the text ends in a replacement char
        text = self._text(self._pending)
        if text.endswith("\ufffd") and len(self._pending) < _HOLD_LIMIT:
            return ""
        self._pending = []
        return text

    def flush(self) -> str:
        if self._bytes is not None:
            return self._utf8.decode(b"", final=True)
        text = self._text(self._pending) if self._pending else ""
        self._pending = []
        return text


def _takes(fn: Callable, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """``text`` (a rendered template) as token ids: special-token text becomes the special tokens, and no
    BOS is added (the template writes it when the model wants one)."""
    kwargs = {k: v for k, v in (("parse_special", True), ("add_special", False)) if _takes(tokenizer.encode, k)}
    return [int(t) for t in tokenizer.encode(text, **kwargs)]


def stop_ids(tokenizer: Any, template: ChatTemplate) -> list[int]:
    """EOS, end-of-turn and end-of-generation ids the tokenizer names (``eos_id``, ``eot_id``,
    ``eog_ids``), plus the tokens of the template's end-of-turn markers (when each is one token)."""
    ids: list[int] = []
    for attr in ("eos_id", "eos_token_id", "eot_id"):
        v = getattr(tokenizer, attr, None)
        if isinstance(v, int) and v >= 0:
            ids.append(v)
    for v in getattr(tokenizer, "eog_ids", None) or ():
        ids.append(int(v))
    for marker in template.end_of_turn:
        toks = encode_prompt(tokenizer, marker)
        if len(toks) == 1:
            ids.append(toks[0])
    return sorted(set(ids))


@dataclass
class ReplyStats:
    """One answer: its tokens, timings and why it stopped."""

    prompt_tokens: int = 0
    new_tokens: int = 0
    first_token_s: float = 0.0  # prefill (and any lazy compile) until the first token
    decode_s: float = 0.0  # from the first token to the last
    stop_reason: str = ""  # "end_of_turn", "max_tokens", or what the runner reports
    dropped_messages: int = 0  # oldest messages left out so the conversation fits the context

    @property
    def tokens_per_s(self) -> float:
        """Decode speed: the tokens after the first over the time since it."""
        return (self.new_tokens - 1) / self.decode_s if self.new_tokens > 1 and self.decode_s > 0 else 0.0

    def summary(self) -> str:
        return (f"{self.new_tokens} tokens, {self.tokens_per_s:.1f} tokens/s "
                f"(prompt {self.prompt_tokens} tokens, first token after {self.first_token_s:.2f} s; {self.stop_reason})")


class ChatSession:
    """A conversation with a model: ``for piece in session.reply("Hi"): print(piece, end="")``."""

    def __init__(self, runner: Any, tokenizer: Any, template: ChatTemplate, *, system: str | None = None,
                 options: SamplingOptions | None = None, max_tokens: int = 256,
                 n_ctx: int | None = None) -> None:
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise CatenError(f"max_tokens must be a positive int, got {max_tokens!r}")
        self.runner = runner
        self.tokenizer = tokenizer
        self.template = template
        self.system = system
        self.options = options or SamplingOptions()
        self.max_tokens = max_tokens
        self.n_ctx = n_ctx if n_ctx is not None else getattr(runner, "n_ctx", None)
        self.stop_tokens = stop_ids(tokenizer, template)
        self.messages: list[dict[str, str]] = []
        self.last = ReplyStats()

    def reset(self) -> None:
        """Forget the conversation (the system message stays)."""
        self.messages = []

    def conversation(self) -> list[dict[str, str]]:
        """The messages the template sees: the system message (if any) and the turns so far."""
        head = [{"role": "system", "content": self.system}] if self.system is not None else []
        return head + self.messages

    def prompt_ids(self) -> tuple[list[int], int]:
        """The token ids of the conversation with the assistant's turn opened, and how many of the oldest
        messages are left out so that it and ``max_tokens`` new tokens fit the context (the history is
        only shortened when the newest message fits)."""
        turns = list(self.messages)
        dropped = 0
        head = [{"role": "system", "content": self.system}] if self.system is not None else []
        while True:
            text = self.template.render(head + turns, add_generation_prompt=True)
            ids = encode_prompt(self.tokenizer, text)
            if self.n_ctx is None or len(ids) + self.max_tokens <= self.n_ctx or len(turns) <= 1:
                if self.n_ctx is not None and len(ids) >= self.n_ctx:
                    raise CatenError(f"the message is {len(ids)} tokens with the template; the context holds "
                                     f"{self.n_ctx}", hint="send a shorter message (or load the model with a larger n_ctx)")
                del self.messages[:dropped]
                return ids, dropped
            drop = 2 if len(turns) > 2 and turns[1]["role"] == "assistant" else 1
            del turns[:drop]
            dropped += drop

    def reply(self, text: str) -> Iterator[str]:
        """Add the user's ``text`` and stream the answer's text; the answer joins the history at the end."""
        for _tok, piece in self.reply_tokens(text):
            if piece:
                yield piece

    def reply_tokens(self, text: str) -> Iterator[tuple[int, str]]:
        """:meth:`reply` token by token: (token id, the text it completes — often "" inside a character).
        Bytes still incomplete when the answer ends come last as (-1, text with U+FFFD)."""
        if not isinstance(text, str):
            raise CatenError(f"a chat message is text, got {a_type(text)}")
        self.messages.append({"role": "user", "content": text})
        try:
            ids, dropped = self.prompt_ids()
        except CatenError:
            self.messages.pop()
            raise
        st = self.last = ReplyStats(prompt_tokens=len(ids), dropped_messages=dropped)
        stops = set(self.stop_tokens)
        out = TextStream(self.tokenizer)
        answer: list[str] = []
        t0 = time.perf_counter()
        t_first = t0
        st.stop_reason = "max_tokens"
        tokens = self.runner.stream(ids, self.max_tokens, self.options, stop_tokens=self.stop_tokens)
        try:
            for tok in tokens:
                now = time.perf_counter()
                if st.new_tokens == 0:
                    t_first = now
                    st.first_token_s = now - t0
                st.new_tokens += 1
                st.decode_s = now - t_first
                if tok in stops:
                    st.stop_reason = "end_of_turn"
                    break
                piece = out.push(tok)
                answer.append(piece)
                yield tok, piece
            else:
                reason = getattr(getattr(self.runner, "stats", None), "stop_reason", "")
                if reason and reason != "max_new_tokens":
                    st.stop_reason = reason
        finally:
            close = getattr(tokens, "close", None)
            if close is not None:
                close()
            tail = out.flush()
            if tail:
                answer.append(tail)
            self.messages.append({"role": "assistant", "content": "".join(answer)})
        if tail:
            yield -1, tail

    def generator(self) -> Callable[..., Iterator[tuple[int, str, None]]]:
        """This chat in the generator widget's protocol (caten_lab.notebook.GeneratorWidget): each Generate is one
        turn of the conversation, with the widget's sampling options."""

        def generate(prompt: str, *, max_new_tokens: int = 256, temperature: float = 0.0, top_k: int = 0,
                     top_p: float = 1.0, seed: int = 0) -> Iterator[tuple[int, str, None]]:
            self.options = SamplingOptions(temperature=max(0.0, temperature), top_k=max(0, top_k),
                                           top_p=top_p if 0 < top_p <= 1 else 1.0, seed=seed)
            self.max_tokens = max(1, max_new_tokens)
            for tok, piece in self.reply_tokens(prompt):
                yield tok, piece, None

        return generate

    def ask(self, text: str) -> str:
        """The whole answer to ``text`` at once."""
        return "".join(self.reply(text))


def _open_parts(path: Any, **runner_options: Any) -> tuple[Any, Any, ChatTemplate]:
    """The runner (``runner_options``: ``n_ctx``, ``weight_format``, ...), tokenizer and chat template of
    a GGUF file."""
    return load_model(path, **runner_options), tokenizer_from_gguf(path, compiled=True), ChatTemplate.from_gguf(path)


def open_chat(path: Any, *, system: str | None = None, options: SamplingOptions | None = None,
              max_tokens: int = 256, **runner_options: Any) -> ChatSession:
    """A :class:`ChatSession` over a GGUF file: its model (``runner_options`` such as ``n_ctx`` go to
    the runner), its tokenizer and its chat template."""
    runner, tokenizer, template = _open_parts(path, **runner_options)
    return ChatSession(runner, tokenizer, template, system=system, options=options, max_tokens=max_tokens)


def run_turn(session: ChatSession, text: str, write: Callable[[str], Any], flush: Callable[[], Any]) -> ReplyStats:
    """Stream one answer through ``write`` and end it with its statistics line."""
    for piece in session.reply(text):
        write(piece)
        flush()
    st = session.last
    note = f"; left out the {st.dropped_messages} oldest messages to fit the context" if st.dropped_messages else ""
    write(f"\n[{st.summary()}{note}]\n")
    flush()
    return st


def repl(session: ChatSession, read: Callable[[str], str], write: Callable[[str], Any],
         flush: Callable[[], Any]) -> int:
    """An interactive chat: ``/reset`` forgets the conversation, ``/quit`` (or end of input) ends it."""
    write("chat: type a message; /reset forgets the conversation, /quit ends it\n")
    while True:
        try:
            line = read("you> ")
        except (EOFError, KeyboardInterrupt):
            write("\n")
            return 0
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            return 0
        if text == "/reset":
            session.reset()
            write("(conversation forgotten)\n")
            continue
        write("assistant> ")
        try:
            run_turn(session, line, write, flush)
        except KeyboardInterrupt:
            write("\n(interrupted)\n")


def chat_main(model: str, *, prompt: str | None = None, system: str | None = None, max_tokens: int = 256,
              temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, seed: int = 0,
              n_ctx: int | None = None, opener: Callable[..., tuple[Any, Any, ChatTemplate]] | None = None,
              read: Callable[[str], str] = input, write: Callable[[str], Any] | None = None,
              flush: Callable[[], Any] | None = None) -> int:
    """``caten-lab chat MODEL``: MODEL is a ``.gguf`` file or the name of a fetched model."""
    write = write or sys.stdout.write
    flush = flush or sys.stdout.flush
    path = registry.resolve(model)
    if not path.is_file():
        raise CatenError(f"{path} is not a file", hint="give a .gguf file or a fetchable model name")
    opts = SamplingOptions(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed)
    t0 = time.perf_counter()
    runner, tokenizer, template = (opener or _open_parts)(path, **({"n_ctx": n_ctx} if n_ctx else {}))
    load_s = time.perf_counter() - t0
    session = ChatSession(runner, tokenizer, template, system=system, options=opts, max_tokens=max_tokens)
    compiled = ""
    if callable(getattr(runner, "compile", None)):  # compile now, not inside the first answer's timing
        t0 = time.perf_counter()
        runner.compile()
        compiled = f", compiled in {time.perf_counter() - t0:.1f} s"
    write(f"loaded {path.name} in {load_s:.1f} s{compiled}\n")
    flush()
    if prompt is not None:
        run_turn(session, prompt, write, flush)
        return 0
    return repl(session, read, write, flush)


__all__ = ["ChatSession", "ReplyStats", "TextStream", "chat_main", "encode_prompt", "open_chat", "repl",
           "run_turn", "stop_ids"]
