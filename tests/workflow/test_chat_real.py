"""The real SmolLM2 chat against transformers: same prompt tokens, same greedy answer, turn after turn.

transformers dequantizes the GGUF to float32 (``from_pretrained(dir, gguf_file=...)``), renders the
same chat template and generates greedily; caten_lab's chat must produce the same tokens and text,
stop at ``<|im_end|>``, and keep the first turn in the second turn's prompt.
"""

import os

import pytest

from caten_lab import cli
from caten_lab.models.sampling import SamplingOptions
from caten_lab.workflow import chat

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

MAX_TOKENS = 24
TURNS = ["What is the capital of France?", "And of Germany?"]


@pytest.fixture(scope="module")
def reference(smollm2_gguf):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    tok = transformers.AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name, dtype=torch.float32).eval()

    def answer(messages):
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True,
                                      return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(ids, max_new_tokens=MAX_TOKENS, do_sample=False, eos_token_id=tok.eos_token_id,
                                 pad_token_id=tok.eos_token_id)
        new = out[0, ids.shape[1]:].tolist()
        return ids[0].tolist(), new, tok

    return answer


@pytest.fixture(scope="module")
def session(smollm2_gguf):
    # float activations: transformers is the reference (8-bit ones follow llama.cpp: test_llamacpp_agreement)
    return chat.open_chat(smollm2_gguf, max_tokens=MAX_TOKENS, options=SamplingOptions(temperature=0.0),
                          activations="f32")


def test_two_turns_match_transformers(session, reference):
    messages = []
    for text in TURNS:
        messages.append({"role": "user", "content": text})
        session.messages.append({"role": "user", "content": text})
        ours_prompt, _ = session.prompt_ids()
        session.messages.pop()
        ref_prompt, ref_new, tok = reference(messages)
        assert ours_prompt == ref_prompt
        got = list(session.reply_tokens(text))
        ours_ids = [t for t, _ in got]
        ended = ref_new[-1] == tok.eos_token_id
        assert ours_ids == (ref_new[:-1] if ended else ref_new)
        assert session.last.stop_reason == ("end_of_turn" if ended else "max_tokens")
        answer = "".join(piece for _, piece in got)
        assert answer == tok.decode(ours_ids)
        messages.append({"role": "assistant", "content": answer})
        assert session.messages == messages
    assert "Paris" in messages[1]["content"]


def test_cli_chat_once_streams_the_answer(session, smollm2_gguf, monkeypatch, capsys):
    monkeypatch.setattr(chat, "_open_parts", lambda path, **_: (session.runner, session.tokenizer, session.template))
    assert cli.main(["chat", str(smollm2_gguf), "--prompt", TURNS[0], "--max-tokens", str(MAX_TOKENS)]) == 0
    out = capsys.readouterr().out
    assert "Paris" in out and "tokens/s" in out and "end_of_turn" in out
    assert "<|im_end|>" not in out
