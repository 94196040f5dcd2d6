"""ChatSession / TextStream / caten-lab chat with a scripted runner and a byte-level tokenizer.

The runner is fake (it replays token ids and records the prompts it is given) so the streaming,
UTF-8 holding, stop and history logic is checked exactly; the real SmolLM2 template renders the
prompts, and each prompt is compared with the template applied to the whole conversation.
"""

import io

import pytest

from caten_lab import cli
from caten_lab.errors import CatenError
from caten_lab.models.sampling import SamplingOptions
from caten_lab.workflow import chat
from caten_lab.workflow.chat_template import ChatTemplate

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
IM_START, IM_END, EOS = 256, 257, 258


class ByteTokenizer:
    """Token i < 256 is byte i; 256.. are the special tokens (parsed from text when parse_special)."""

    eos_id = EOS

    def __init__(self, with_bytes=True):
        if not with_bytes:
            self.decode_bytes = None

    def encode(self, text, *, add_special=None, parse_special=True):
        assert add_special is False and parse_special is True  # what the chat passes
        ids, i = [], 0
        while i < len(text):
            for k, s in enumerate(SPECIALS):
                if text.startswith(s, i):
                    ids.append(256 + k)
                    i += len(s)
                    break
            else:
                ids.extend(text[i].encode())
                i += 1
        return ids

    def decode_bytes(self, ids):
        return b"".join(bytes([t]) if t < 256 else SPECIALS[t - 256].encode() for t in ids)

    def decode(self, ids):
        return ByteTokenizer.decode_bytes(self, ids).decode("utf-8", errors="replace")


class TextOnlyTokenizer(ByteTokenizer):
    """Only ``decode(ids) -> str`` (no bytes): the stream must still never split a character."""

    def __getattribute__(self, name):
        if name == "decode_bytes":
            raise AttributeError(name)
        return super().__getattribute__(name)


class ScriptedRunner:
    """Yields the next scripted answer's ids (honouring stop_tokens as GPT2Runner.stream does)."""

    def __init__(self, answers, n_ctx=4096):
        self.answers = list(answers)
        self.prompts = []
        self.n_ctx = n_ctx
        self.calls = []

    def stream(self, prompt, max_new_tokens, options=None, *, stop_tokens=()):
        self.prompts.append(list(prompt))
        self.calls.append((max_new_tokens, options, sorted(stop_tokens)))
        stops = set(stop_tokens)
        for i, t in enumerate(self.answers.pop(0)):
            if i == max_new_tokens:
                return
            yield t
            if t in stops:
                return


def ids_of(text, end=IM_END):
    return list(text.encode()) + ([end] if end is not None else [])


@pytest.fixture(scope="module")
def template(smollm2_gguf):
    return ChatTemplate.from_gguf(smollm2_gguf)


ANSWER = "Bonjour ! Ça coûte 5 € — 日本語 🙂."


@pytest.mark.parametrize("tok_cls", [ByteTokenizer, TextOnlyTokenizer])
def test_stream_never_splits_a_character_and_stops_at_end_of_turn(template, tok_cls):
    tok = tok_cls()
    runner = ScriptedRunner([ids_of(ANSWER) + ids_of("never shown")])
    session = chat.ChatSession(runner, tok, template, max_tokens=500)
    pieces = list(session.reply("Salut"))
    assert "".join(pieces) == ANSWER
    assert all("\ufffd" not in p for p in pieces)
    assert len(pieces) == len(ANSWER)  # one piece per complete character, held while incomplete
    assert session.last.stop_reason == "end_of_turn"
    assert session.last.new_tokens == len(ANSWER.encode()) + 1  # the end-of-turn token counted, not shown
    assert runner.calls[0][2] == [IM_END, EOS]
    assert session.messages[-1] == {"role": "assistant", "content": ANSWER}


def test_history_is_rendered_by_the_template_each_turn(template):
    tok = ByteTokenizer()
    runner = ScriptedRunner([ids_of("Paris."), ids_of("About 2.1 million.", end=EOS)])
    session = chat.ChatSession(runner, tok, template, system="Be brief.")
    assert session.ask("Capital of France?") == "Paris."
    assert session.ask("Population?") == "About 2.1 million."
    assert session.last.stop_reason == "end_of_turn"  # EOS ends a turn too
    convo = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"},
             {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "Population?"}]
    assert runner.prompts[0] == tok.encode(template.render(convo[:2], add_generation_prompt=True),
                                           add_special=False, parse_special=True)
    expected = template.render(convo, add_generation_prompt=True)
    assert tok.decode(runner.prompts[1]) == expected
    assert expected.startswith("<|im_start|>system\nBe brief.<|im_end|>\n")
    assert runner.prompts[1][0] == IM_START  # the special text became the special token
    session.reset()
    runner.answers.append(ids_of("Hi"))
    session.ask("Hello")
    assert tok.decode(runner.prompts[2]).count("<|im_start|>user") == 1


def test_max_tokens_and_sampling_options_reach_the_runner(template):
    runner = ScriptedRunner([ids_of("abcdefgh")])
    opts = SamplingOptions(temperature=0.7, top_k=5, seed=3)
    session = chat.ChatSession(runner, ByteTokenizer(), template, options=opts, max_tokens=3)
    assert session.ask("x") == "abc"
    assert session.last.stop_reason == "max_tokens" and session.last.new_tokens == 3
    assert runner.calls[0][:2] == (3, opts)


def test_incomplete_character_at_the_limit_is_flushed_as_replacement(template):
    runner = ScriptedRunner([list("é".encode())])
    session = chat.ChatSession(runner, ByteTokenizer(), template, max_tokens=1)
    assert session.ask("x") == "\ufffd"  # a half character is never silently dropped


def test_oldest_turns_are_dropped_to_fit_the_context(template):
    tok = ByteTokenizer()
    runner = ScriptedRunner([ids_of("A" * 60), ids_of("B" * 60), ids_of("C")], n_ctx=330)
    session = chat.ChatSession(runner, tok, template, max_tokens=64)
    session.ask("first question")
    session.ask("second question")
    assert session.last.dropped_messages == 0
    session.ask("third question")
    assert session.last.dropped_messages == 2
    text = tok.decode(runner.prompts[2])
    assert "first question" not in text and "second question" in text and len(runner.prompts[2]) + 64 <= 330
    with pytest.raises(CatenError, match="the context holds 330"):
        session.ask("x" * 500)
    assert session.messages[-1]["content"] == "C"  # the refused message is not kept


def test_repl_and_cli_once(template, smollm2_gguf, monkeypatch, capsys):
    runner = ScriptedRunner([ids_of("Paris."), ids_of("Lyon."), ids_of("Hi.")])
    opened = []

    def opener(path, **options):
        opened.append((path, options))
        return runner, ByteTokenizer(), template

    inputs = iter(["Capital?", "", "Second city?", "/reset", "Hello", "/quit"])
    out = io.StringIO()
    assert chat.chat_main(str(smollm2_gguf), opener=opener, read=lambda _p: next(inputs), write=out.write,
                          flush=out.flush) == 0
    text = out.getvalue()
    assert "assistant> Paris.\n[7 tokens" in text and "assistant> Lyon." in text and "(conversation forgotten)" in text
    assert "tokens/s" in text
    assert runner.prompts[1].count(IM_START) == 5 and runner.prompts[2].count(IM_START) == 3  # reset forgot
    # caten-lab chat --prompt: one answer, then exit
    runner.answers.append(ids_of("Bonjour."))
    monkeypatch.setattr(chat, "_open_parts", opener)
    assert cli.main(["chat", str(smollm2_gguf), "--prompt", "Say hi", "--max-tokens", "20",
                     "--temperature", "0.5", "--system", "French only.", "--n-ctx", "512"]) == 0
    assert opened == [(smollm2_gguf, {}), (smollm2_gguf, {"n_ctx": 512})]
    assert "Bonjour.\n[" in capsys.readouterr().out
    assert runner.calls[-1][:2] == (20, SamplingOptions(temperature=0.5))
    assert "French only." in ByteTokenizer().decode(runner.prompts[-1])


def test_cli_chat_errors(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("CATEN_CACHE_DIR", str(tmp_path))
    assert cli.main(["chat", "smollm2", "--prompt", "hi"]) == 2
    assert "run `caten-lab models fetch smollm2`" in capsys.readouterr().err
    assert cli.main(["chat", str(tmp_path / "missing.gguf"), "--prompt", "hi"]) == 2
    assert "no model file" in capsys.readouterr().err
    with pytest.raises(CatenError, match="max_tokens"):
        chat.ChatSession(ScriptedRunner([]), ByteTokenizer(), ChatTemplate("{{ messages }}"), max_tokens=0)


def test_runner_widget_protocol(template):
    widgets = pytest.importorskip("caten_lab.notebook.runner")
    runner = ScriptedRunner([ids_of(ANSWER), ids_of("Second.")])
    session = chat.ChatSession(runner, ByteTokenizer(), template)
    ui = widgets.GeneratorWidget(session.generator(), prompt="Salut", max_new_tokens=100, temperature=0.0)
    assert ui.run() == ANSWER
    assert ui.n_tokens == len(ANSWER.encode())  # every token streamed, the end-of-turn token not shown
    assert [t[0] for t in ui.tokens] == list(ANSWER.encode())
    ui.prompt = "Encore"
    assert ui.run() == "Second."
    assert [m["role"] for m in session.messages] == ["user", "assistant", "user", "assistant"]
    assert runner.calls[-1][0] == 100



def test_stop_ids_take_every_end_token_the_tokenizer_names(template):
    class Named(ByteTokenizer):
        eot_id = 300
        eog_ids = frozenset({301, EOS})

    assert chat.stop_ids(Named(), template) == [IM_END, EOS, 300, 301]
    assert chat.stop_ids(ByteTokenizer(), ChatTemplate("{{ messages }}")) == [EOS]  # no end-of-turn marker
