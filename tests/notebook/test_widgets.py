"""Widget state without a browser: a recording comm stands in for the front-end (as ipywidgets' own tests do)."""

from __future__ import annotations

import json
import time

import comm
import numpy as np
import pytest
import traitlets

from caten_lab.errors import CompileError
from caten_lab.notebook.inspector import Inspector
from caten_lab.notebook.runner import GeneratorWidget
from caten_lab.passes import FunctionPass

from .conftest import pipeline, small_graph


class RecordingComm:
    """Accepts what a widget sends and keeps it, like ipywidgets' DummyComm."""

    comm_id = "test-comm"
    kernel = "Truthy"

    def __init__(self, *args, **kwargs) -> None:
        self.messages: list[dict] = []
        self._msg_callback = None

    def open(self, *args, **kwargs) -> None:
        pass

    def on_msg(self, callback) -> None:
        self._msg_callback = callback

    def send(self, data=None, metadata=None, buffers=None) -> None:
        self.messages.append(data)

    def close(self, *args, **kwargs) -> None:
        pass


@pytest.fixture(autouse=True)
def recording_comm(monkeypatch):
    monkeypatch.setattr(comm, "create_comm", lambda *a, **k: RecordingComm())


def _from_front_end(widget, **state) -> None:
    """What the kernel receives when the browser calls model.set(...); model.save_changes()."""
    widget._handle_msg(
        {"content": {"data": {"method": "update", "state": state, "buffer_paths": []}}, "buffers": []}
    )


def _custom_from_front_end(widget, content) -> None:
    widget._handle_msg({"content": {"data": {"method": "custom", "content": content}}, "buffers": []})


def test_inspector_state_and_payload(program):
    insp = Inspector(program, title="t")
    data = json.loads(insp.data_json)
    assert data["title"] == "t" and len(data["passes"]) == 3
    assert insp.pass_index == 0  # const_fold is the first pass that changed something
    assert (
        data["c"]["text"].startswith("#include") and data["c"]["lines_html"] is None
    )  # highlighted in the browser
    assert insp.profile_png == ""  # drawn when the Profile tab asks for it
    _custom_from_front_end(insp, {"type": "need_profile_png"})
    assert insp.profile_png.startswith("iVBOR")  # a PNG, base64
    assert insp.panes == ["graph", "profile", "c", "result"]
    insp.goto("simplify", rewrite=1)
    assert (insp.pass_index, insp.rewrite_index) == (1, 1)
    insp.next_pass()
    assert insp.pass_index == 2 and insp.rewrite_index == -1
    insp.hide_unchanged = True
    insp.goto(0).next_pass()
    assert insp.pass_index == 1
    insp.next_pass()  # fold_views changed nothing: stays
    assert insp.pass_index == 1
    insp.pass_index = 99  # clamped
    assert insp.pass_index == 2
    with pytest.raises(traitlets.TraitError):
        insp.view = "sideways"


def test_inspector_syncs_with_the_front_end(program):
    insp = Inspector(program)
    sent = insp.comm.messages
    insp.pass_index = 2
    assert any(m.get("method") == "update" and m["state"].get("pass_index") == 2 for m in sent)
    _from_front_end(insp, pass_index=1, rewrite_index=2, view="diff", selected_node=5)
    assert (insp.pass_index, insp.rewrite_index, insp.view, insp.selected_node) == (1, 2, "diff", 5)
    _from_front_end(insp, status=json.dumps({"pass": 1, "rewrite": 2, "ms": 12}))
    assert json.loads(insp.status)["ms"] == 12


def test_inspector_panes_are_validated(program):
    assert Inspector(program, panes=["graph", "c"]).panes == ["graph", "c"]
    with pytest.raises(ValueError, match="unknown pane"):
        Inspector(program, panes=["graph", "asm"])


def test_inspector_shows_a_failed_compile():
    def boom(graph, ctx):
        raise ValueError("boom")

    pm = pipeline()
    pm.insert("simplify", FunctionPass("explode", "fails on purpose", boom))
    with pytest.raises(CompileError) as info:
        pm.run(small_graph(), trace=True)
    insp = Inspector(info.value)
    data = json.loads(insp.data_json)
    assert [p["name"] for p in data["passes"]] == ["const_fold", "simplify", "explode"]
    assert "boom" in data["passes"][-1]["error"]


def test_inspector_without_a_trace_is_a_clear_error():
    from caten_lab.errors import CatenError

    with pytest.raises(CatenError, match="no pass trace"):
        Inspector(object())


# ---- GPT-2 runner ---------------------------------------------------------------------------------


def fake_generate(prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
    words = ["Hello", ",", " world", "!"]
    for i in range(1000):
        yield i, words[i % 4], [(words[i % 4], 0.7), ("x", 0.3)]


def test_runner_streams_tokens_and_counts():
    r = GeneratorWidget(fake_generate, prompt="Say:", max_new_tokens=6)
    text = r.run()
    assert text == "Hello, world!Hello,"
    assert r.n_tokens == 6 and not r.running and r.tokens_per_s > 0 and r.error == ""
    tokens = [
        m["content"]
        for m in r.comm.messages
        if m.get("method") == "custom" and m["content"]["type"] == "token"
    ]
    assert [t["text"] for t in tokens] == ["Hello", ",", " world", "!", "Hello", ","]
    assert tokens[0]["probs"] == [["Hello", 0.7], ["x", 0.3]]


def test_runner_generate_and_stop_from_the_browser():
    def slow(prompt, **opts):
        for i in range(10_000):
            time.sleep(0.005)
            yield i, "a", None

    r = GeneratorWidget(slow, prompt="p", max_new_tokens=5000)
    _custom_from_front_end(r, {"type": "generate"})
    deadline = time.time() + 10
    while r.n_tokens < 3 and time.time() < deadline:
        time.sleep(0.01)
    _custom_from_front_end(r, {"type": "stop"})
    r.wait(10)
    assert not r.running and 3 <= r.n_tokens < 5000


def test_runner_passes_only_the_options_the_generator_takes_and_reports_errors():
    seen = {}

    def minimal(prompt, max_new_tokens):
        seen["max"] = max_new_tokens
        yield 1, "x", None
        raise RuntimeError("model exploded")

    r = GeneratorWidget(minimal, max_new_tokens=3)
    r.run()
    assert seen == {"max": 3} and r.generated == "x" and "model exploded" in r.error
    with pytest.raises(TypeError):
        GeneratorWidget("not callable")


def test_runner_over_a_real_caten_gpt2_step_function():
    """The adapter turns GPT2.step into the generator protocol; greedy output equals GPT2.generate."""
    from caten_lab.nn.gpt2 import GPT2, GPT2Config
    from caten_lab.notebook.runner import logits_generator

    model = GPT2(GPT2Config(vocab_size=32, n_positions=24, n_embd=16, n_layer=1, n_head=2))
    encode = lambda s: [ord(c) % 32 for c in s]  # noqa: E731 - a toy byte tokenizer
    decode = lambda ids: "".join(chr(65 + i) for i in ids)  # noqa: E731
    gen = logits_generator(model.step, encode, decode, reset=model.reset_cache, top_probs=3)
    r = GeneratorWidget(gen, prompt="hello", max_new_tokens=6, temperature=0.0)
    r.run()
    expected = model.generate(encode("hello"), 6)[len("hello") :]
    assert [t[0] for t in r.tokens] == expected and r.generated == decode(expected)
    assert len(r.tokens[0][2]) == 3 and abs(sum(p for _, p in r.tokens[0][2]) - 1) < 1


def test_inspector_display_carries_a_static_html_fallback(program):
    def data(bundle):
        return bundle[0] if isinstance(bundle, tuple) else bundle

    bundle = data(Inspector(program, title="fallback")._repr_mimebundle_())
    assert "application/vnd.jupyter.widget-view+json" in bundle
    assert "fallback" in bundle["text/html"] and "simplify" in bundle["text/html"]
    assert "text/html" not in data(Inspector(program, static_fallback=False)._repr_mimebundle_())


def test_logits_generator_stops_at_stop_tokens_and_the_context_limit():
    from caten_lab.notebook.runner import logits_generator

    vocab = 5

    def step(ids, pos):  # always prefers token (pos + len(ids)) % vocab
        logits = np.zeros((1, len(ids), vocab))
        logits[0, -1, (pos + len(ids)) % vocab] = 10.0
        return logits

    gen = logits_generator(
        step, lambda s: [0] * len(s), lambda ids: str(ids[0]), top_probs=0, stop_tokens=[3]
    )
    assert [t for t, _, _ in gen("ab", max_new_tokens=10, temperature=0.0)] == [2, 3]
    gen = logits_generator(step, lambda s: [0] * len(s), lambda ids: str(ids[0]), top_probs=0, max_context=4)
    assert len(list(gen("ab", max_new_tokens=10, temperature=0.0))) == 2


def test_logits_generator_emits_whole_characters_only():
    """A byte-level tokenizer may split a character over tokens: its text comes with the last piece."""
    from caten_lab.notebook.runner import logits_generator

    data = "é!".encode()  # 3 bytes: 0xC3 0xA9 '!'

    def step(ids, pos):
        logits = np.zeros((1, 1, 256))
        logits[0, -1, data[min(pos + len(ids) - 1, len(data) - 1)]] = 10.0
        return logits

    decode = lambda ids: bytes(ids).decode("utf-8", errors="replace")  # noqa: E731
    gen = logits_generator(step, lambda s: [0], decode, top_probs=0)
    assert [t for _, t, _ in gen("x", max_new_tokens=3, temperature=0.0)] == ["", "é", "!"]
