"""Chat templates rendered by caten_lab against transformers' apply_chat_template(..., tokenize=False)."""

import os

import pytest

from caten_lab.workflow.chat_template import ChatTemplate, ChatTemplateError, apply_chat_template

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# A Llama-3 style template: BOS token, a system header with a date default, trimmed contents.
LLAMA3 = """{{- bos_token }}
{%- if not date_string is defined %}{%- set date_string = "26 Jul 2024" %}{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{{- "Today Date: " + date_string + "\\n\\n" }}
{%- if tools is not none %}
    {{- "You may call these functions:\\n" }}
    {%- for t in tools %}{{- t | tojson(indent=2) }}{{- "\\n" }}{%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

# A default system message when none is given, a namespace counter and loop controls.
WITH_DEFAULT_SYSTEM = """{% set ns = namespace(turns=0) %}
{% if messages[0]['role'] != 'system' %}
<<SYS>>You are terse.<</SYS>>
{% endif %}
{% for m in messages %}
  {% if m['role'] == 'system' %}
<<SYS>>{{ m['content'] }}<</SYS>>
  {% elif m['role'] == 'user' %}
    {% set ns.turns = ns.turns + 1 %}
[INST {{ ns.turns }}] {{ m['content'] }} [/INST]
  {% else %}
    {% if m['content'] == '' %}{% continue %}{% endif %}
 {{ m['content'] }}{{ eos_token }}
  {% endif %}
{% endfor %}
{% if add_generation_prompt %}
ANSWER:{% endif %}"""

# Refuses a conversation whose roles do not alternate user/assistant.
ALTERNATING = """{{ bos_token }}{% for message in messages %}
{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{% endif %}
{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% else %}{{ message['content'] + eos_token }}{% endif %}
{% endfor %}"""

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [
        {"role": "system", "content": "  You answer in French.  "},
        {"role": "user", "content": "Hello!"},
        {"role": "assistant", "content": "Bonjour ! Ça va ?"},
        {"role": "user", "content": "Tell me about Zürich — in 2 lines. 日本語も"},
    ],
    [
        {"role": "user", "content": "x"},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "<|im_start|> is only text here"},
    ],
]
TOOLS = [{"type": "function", "function": {"name": "weather", "description": "Wetter für <Ort> & Zeit",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]


@pytest.fixture(scope="module")
def hf_tokenizer(smollm2_gguf):
    transformers = pytest.importorskip("transformers")
    return transformers.AutoTokenizer.from_pretrained(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)


@pytest.fixture(scope="module")
def smollm2_template(smollm2_gguf):
    return ChatTemplate.from_gguf(smollm2_gguf)


def hf_render(tok, messages, template=None, **kw):
    return tok.apply_chat_template(messages, chat_template=template, tokenize=False, **kw)


@pytest.mark.parametrize("gen", [True, False])
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_smollm2_template_matches_transformers(hf_tokenizer, smollm2_template, conv, gen):
    msgs = CONVERSATIONS[conv]
    ours = smollm2_template.render(msgs, add_generation_prompt=gen)
    assert ours == hf_render(hf_tokenizer, msgs, add_generation_prompt=gen)
    assert ours.endswith("<|im_start|>assistant\n") == gen


def test_smollm2_template_from_gguf_metadata(smollm2_template, hf_tokenizer):
    assert smollm2_template.source == hf_tokenizer.chat_template
    assert smollm2_template.special_tokens == hf_tokenizer.special_tokens_map
    assert smollm2_template.end_of_turn == ["<|im_end|>"]


@pytest.mark.parametrize("name", ["llama3", "default_system", "alternating"])
@pytest.mark.parametrize("conv", range(len(CONVERSATIONS)))
def test_other_templates_match_transformers(hf_tokenizer, name, conv):
    source = {"llama3": LLAMA3, "default_system": WITH_DEFAULT_SYSTEM, "alternating": ALTERNATING}[name]
    msgs = CONVERSATIONS[conv]
    if name == "alternating" and conv == 1:  # starts with a system message: refused by both
        msgs = msgs[1:]
    tmpl = ChatTemplate(source, special_tokens=hf_tokenizer.special_tokens_map)
    for gen in (True, False):
        assert tmpl.render(msgs, add_generation_prompt=gen) == hf_render(hf_tokenizer, msgs, source, add_generation_prompt=gen)


def test_tools_tojson_and_variables_match_transformers(hf_tokenizer):
    tmpl = ChatTemplate(LLAMA3, special_tokens=hf_tokenizer.special_tokens_map)
    msgs = CONVERSATIONS[1]
    ours = tmpl.render(msgs, tools=TOOLS, add_generation_prompt=True, date_string="1 Dec 2026")
    ref = hf_render(hf_tokenizer, msgs, LLAMA3, tools=TOOLS, add_generation_prompt=True, date_string="1 Dec 2026")
    assert ours == ref
    assert "Wetter für <Ort> & Zeit" in ours  # tojson keeps non-ASCII and does not escape HTML characters
    assert "1 Dec 2026" in ours


def test_raise_exception_is_a_clear_error_naming_the_line(hf_tokenizer):
    msgs = [{"role": "assistant", "content": "I speak first"}]
    jinja2 = pytest.importorskip("jinja2")
    with pytest.raises(jinja2.exceptions.TemplateError, match="must alternate"):
        hf_render(hf_tokenizer, msgs, ALTERNATING)
    with pytest.raises(ChatTemplateError, match="refused the conversation: Conversation roles must alternate") as e:
        apply_chat_template(ALTERNATING, msgs)
    assert "line 3: {{ raise_exception(" in str(e.value)


def test_syntax_error_names_the_template_line():
    bad = "{% for m in messages %}\n{{ m['content'] }\n{% endfor %}"
    with pytest.raises(ChatTemplateError, match="does not compile") as e:
        ChatTemplate(bad)
    assert "line 2: {{ m['content'] }" in str(e.value)


def test_runtime_failure_names_the_template_line():
    with pytest.raises(ChatTemplateError, match="failed") as e:
        apply_chat_template("ok\n{{ messages[5]['content'] + 1 }}", [{"role": "user", "content": "a"}])
    assert "line 2" in str(e.value)


def test_sandbox_refuses_python_internals():
    with pytest.raises(ChatTemplateError, match="failed"):
        apply_chat_template("{{ messages.__class__.__mro__[1].__subclasses__() }}", [{"role": "user", "content": "a"}])
    with pytest.raises(ChatTemplateError, match="_x"):
        apply_chat_template("{% set ns = namespace(_x=1) %}{{ ns }}", [{"role": "user", "content": "a"}])
    with pytest.raises(ChatTemplateError, match="failed"):  # immutable: no list.append
        apply_chat_template("{{ messages.append(1) }}", [{"role": "user", "content": "a"}])


@pytest.mark.parametrize("messages", ["hello", [{"content": "no role"}], [{"role": "user", "content": object()}], None])
def test_bad_messages_are_refused(messages):
    with pytest.raises(ChatTemplateError, match="messages"):
        apply_chat_template("{{ messages }}", messages)


def test_empty_template_and_gguf_without_template(tmp_path):
    with pytest.raises(ChatTemplateError, match="empty"):
        ChatTemplate("   ")
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "no_template.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_tensor("x", __import__("numpy").zeros(4, dtype="float32"))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(ChatTemplateError, match="no tokenizer.chat_template"):
        ChatTemplate.from_gguf(path)
    (tmp_path / "junk.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(ChatTemplateError, match="cannot read GGUF"):
        ChatTemplate.from_gguf(tmp_path / "junk.gguf")
