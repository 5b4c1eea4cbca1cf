"""Conversations: chat templates, Model.chat over several turns, reasoning first (after=)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from localguide.errors import BudgetError, TokenNotAllowedError
from localguide.chat.conversation import ChatError, normalize_messages
from localguide.chat.template import ChatTemplate, ChatTemplateError
from localguide.guides.trigger import TriggerGuide

TEMPLATES = Path(__file__).parent / "chat_templates"
CONVERSATION = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": "Cold, 2 °C."},
    {"role": "user", "content": "And tomorrow?"},
]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                          "required": ["city"]}}}]


def _template(name, **kw):
    return ChatTemplate((TEMPLATES / f"{name}.jinja").read_text(), name=name, **kw)


# --- templates ------------------------------------------------------------------------

@pytest.mark.parametrize("name,opening,closing", [
    ("chatml-tools", "<|im_start|>system\nBe brief.<|im_end|>\n", "<|im_start|>assistant\n"),
    ("llama3", "<|begin_of_text|><|start_header_id|>system<|end_header_id|>", "<|start_header_id|>assistant"
                                                                             "<|end_header_id|>\n\n"),
    ("mistral", "<s>[INST] Weather in Oslo?[/INST] Cold, 2 °C.</s>", "[INST] Be brief.\n\nAnd tomorrow?[/INST]"),
    ("phi", "<|system|>\nBe brief.<|end|>\n", "<|assistant|>\n"),
    ("gemma", "<bos><start_of_turn>user\nBe brief.\n\nWeather in Oslo?<end_of_turn>", "<start_of_turn>model\n"),
    ("deepseek-r1", "<｜begin▁of▁sentence｜>Be brief.<｜User｜>Weather in Oslo?", "<｜Assistant｜><think>\n"),
])
def test_family_templates_render(name, opening, closing):
    bos = {"llama3": "<|begin_of_text|>", "mistral": "<s>", "gemma": "<bos>",
           "deepseek-r1": "<｜begin▁of▁sentence｜>"}.get(name, "")
    t = _template(name, bos_token=bos, eos_token="</s>")
    text = t.render(CONVERSATION)
    assert text.startswith(opening), text
    assert text.endswith(closing), text
    assert "Cold, 2 °C." in text and "And tomorrow?" in text  # (non-ASCII text kept as is)


def test_tools_and_tool_messages_render():
    t = _template("chatml-tools")
    msgs = CONVERSATION[:2] + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "2 °C"}]
    text = t.render(normalize_messages(msgs), tools=TOOLS)
    assert '"name": "get_weather"' in text and "<tools>" in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>' in text
    assert "<tool_response>\n2 °C\n</tool_response>" in text
    assert _template("llama3").render(CONVERSATION, tools=TOOLS).count('"get_weather"') == 1


def test_template_variables_reach_the_template():
    t = _template("chatml-tools")
    assert t.render(CONVERSATION, enable_thinking=True).endswith("<|im_start|>assistant\n<think>\n")


def test_template_errors_say_where():
    with pytest.raises(ChatTemplateError, match="line 2"):
        ChatTemplate("hello\n{% for m in messages %}")
    with pytest.raises(ChatTemplateError, match="must alternate"):
        _template("mistral").render([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    with pytest.raises(ChatTemplateError):  # the sandbox refuses what a template must not reach
        ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}").render(CONVERSATION)


@pytest.mark.parametrize("messages,where", [
    ("hello", "list"), ([], "empty"), ([{"role": "bot", "content": "x"}], r"messages\[0\]\.role"),
    ([{"role": "user"}], r"messages\[0\]\.content"), ([{"role": "user", "content": 3}], "expected text"),
    ([{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}], r"content\[0\]"),
    (["user: hi"], r"messages\[0\]"),
])
def test_bad_messages_are_named(messages, where):
    with pytest.raises(ChatError, match=where):
        normalize_messages(messages)


def test_text_parts_and_developer_role():
    got = normalize_messages([{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                                {"type": "text", "text": "b"}]}])
    assert got == [{"role": "system", "content": "ab"}]


def test_the_models_own_templates(model):
    text = model.chat_template().render(CONVERSATION)
    if model.llama.metadata.get("tokenizer.chat_template"):  # SmolLM2: its GGUF's Jinja template
        assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWeather in Oslo?<|im_end|>\n"
                        "<|im_start|>assistant\nCold, 2 °C.<|im_end|>\n<|im_start|>user\nAnd tomorrow?<|im_end|>\n"
                        "<|im_start|>assistant\n")
    else:  # Gemma 3's file has none: llama.cpp's built-in template of its family
        assert text.startswith("<start_of_turn>user\nBe brief.") and text.endswith("<start_of_turn>model\n")
    tokens = model.tokenize_chat(text)
    assert tokens[:2] != [model.llama.token_bos()] * 2  # (no BOS of llama.cpp's before the template's)
    assert len(tokens) < len(text) // 2  # (the markers are single special tokens)


# --- conversations ----------------------------------------------------------------------

def test_a_conversation_decodes_only_each_turns_new_tokens(model):
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Name a colour."}]
    first = model.chat(msgs, max_tokens=12, temperature=0)
    n1 = model.last_stats.prompt_tokens
    msgs += [first.to_dict(), {"role": "user", "content": "Another one."}]
    second = model.chat(msgs, max_tokens=12, temperature=0)
    s = model.last_stats
    assert s.cached_tokens >= n1  # the whole first prompt, and the answer as far as it re-tokenizes alike
    assert s.prompt_tokens - s.cached_tokens < s.prompt_tokens - n1 + 8
    assert isinstance(second.content, str)


def test_a_turn_is_the_same_whatever_this_model_generated_before(model, model_paths):
    """The conversation is tokenized afresh each turn: a Model that wrote the last answers itself
    (its KV cache holding them in the tokens it sampled, often not the tokenizer's split) and a
    fresh Model given the same messages answer alike, greedy or seeded, constrained or free; the
    warm one decodes only part of the prompt."""
    import localguide

    from conftest import THREADS

    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer in one sentence."}]
    path = model_paths["smollm2" if "SmolLM2" in model.path.name else "gemma3"]
    fresh = localguide.load(path, n_ctx=1024, **THREADS)
    name = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16}}, "required": ["name"]}
    turns = [("Name a fruit, as JSON.", {"json_schema": name, "temperature": 0}),
             ("Why is the sky blue?", {"temperature": 1.0, "seed": 3}),
             ("Name a planet, as JSON.", {"json_schema": name, "temperature": 1.0, "seed": 4}),
             ("What is rain?", {"temperature": 1.0, "seed": 5}),
             ("And snow?", {"temperature": 0})]
    reused = 0
    for k, (q, kw) in enumerate(turns):
        msgs.append({"role": "user", "content": q})
        warm = model.chat(msgs, max_tokens=24, **kw)
        s = model.last_stats
        reused += k > 0 and 0 < s.cached_tokens < s.prompt_tokens
        again = fresh.chat(msgs, max_tokens=24, cache_prompt=False, **kw)
        assert again.content == warm.content, (k, warm.content, again.content)
        msgs.append(warm.to_dict())
    assert reused == len(turns) - 1


def test_chat_with_a_constraint(model):
    schema = {"type": "object", "properties": {"colour": {"type": "string", "maxLength": 12}},
              "required": ["colour"]}
    msg = model.chat([{"role": "user", "content": "Name a colour, as JSON."}], json_schema=schema,
                     max_tokens=30, temperature=1.0, seed=5)
    jsonschema.validate(json.loads(msg.content), schema)
    assert msg.reasoning is None and msg.to_dict()["role"] == "assistant"


SCHEMA = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]},
                                           "confidence": {"type": "integer", "minimum": 0, "maximum": 100}},
          "required": ["answer", "confidence"]}


@pytest.mark.parametrize("seed", range(4))
def test_reasoning_first_then_a_valid_document(model, seed):
    """Free text, the trigger, then a document valid for the schema, all within max_tokens;
    max_reasoning_tokens forces the trigger (the models here do not write it by themselves)."""
    msgs = [{"role": "user", "content": "Is 91 a prime number? Think first, then write </think> and answer in JSON."}]
    for max_tokens, reasoning in ((64, 20), (40, None)):
        deltas = list(model.chat_stream(msgs, json_schema=SCHEMA, after="</think>", max_reasoning_tokens=reasoning,
                                        max_tokens=max_tokens, temperature=1.0, seed=seed))
        assert model.last_stats.tokens <= max_tokens
        content = "".join(d.content for d in deltas)
        jsonschema.validate(json.loads(content), SCHEMA)
        thought = "".join(d.reasoning for d in deltas)
        assert "</think>" not in thought and "</think>" not in content
        # a delta holds reasoning until the trigger, then content only
        kinds = [("r" if d.reasoning else "") + ("c" if d.content else "") for d in deltas]
        assert "".join(kinds).replace("rc", "r c").lstrip("r").replace(" ", "").strip("c") == ""


def test_reasoning_message_and_a_template_that_opens_think(model):
    tmpl = (TEMPLATES / "chatml-tools.jinja").read_text()
    msg = model.chat([{"role": "user", "content": "Pick yes or no."}], choice=["yes", "no"], after="</think>",
                     max_reasoning_tokens=10, max_tokens=30, chat_template=tmpl,
                     template_variables={"enable_thinking": True}, temperature=0.8, seed=1)
    assert msg.content in ("yes", "no")
    assert isinstance(msg.reasoning, str) and "</think>" not in msg.reasoning
    assert msg.to_dict()["reasoning_content"] == msg.reasoning


def test_a_budget_too_small_for_trigger_and_constraint(model):
    with pytest.raises(BudgetError):
        model.chat([{"role": "user", "content": "x"}], json_schema=SCHEMA, after="</think>", max_tokens=5)


# --- the trigger guide ------------------------------------------------------------------

def test_trigger_guide_refuses_text_past_the_trigger(model):
    voc = model.vocabulary
    idx = model.compile(regex="[0-9]{2}")
    g = TriggerGuide(voc, b"the", idx, 40)
    over = [t for t in range(voc.size) if voc[t].find(b"the") not in (-1, len(voc[t]) - 3)]
    assert len(over) > 10, "the vocabulary has tokens that run past the trigger"
    for t in over[:50]:
        assert not g.accepts(t)
    for t in voc.stop_ids.tolist():
        assert not g.accepts(t)  # no ending before the trigger
    with pytest.raises(TokenNotAllowedError):
        g.advance(over[0])


def test_trigger_guide_rollback_and_copy(model):
    voc = model.vocabulary
    idx = model.compile(regex="[0-9]{2}")
    rng = np.random.default_rng(0)
    path = model._tokenize_text(b"so I think END\n42")
    g = TriggerGuide(voc, b"END", idx, 40, force_after=30)
    masks = []
    for t in path:
        masks.append(g.allowed_token_ids().copy())
        g.advance(t)
    assert g.is_accepting() and g.phase == "constraint"
    for _ in range(5):
        k = int(rng.integers(1, len(path) + 1))
        c = g.copy()
        c.rollback(k)
        assert np.array_equal(c.allowed_token_ids(), masks[len(path) - k])
        for t in path[len(path) - k:]:
            c.advance(t)
        assert c.is_accepting()
    assert g.is_accepting()


def test_forced_trigger(model):
    voc = model.vocabulary
    g = TriggerGuide(voc, b"</think>", model.compile(choice=["yes", "no"]), 20, force_after=2)
    a = model._tokenize_text(b" hm, hm")
    assert len(a) >= 2
    for t in a[:2]:
        g.advance(t)
    while g.phase == "free":
        allowed = g.allowed_token_ids()
        assert all(b"</think>".find(voc[t]) >= 0 for t in allowed.tolist())
        g.advance(int(allowed[np.argmax([len(voc[t]) for t in allowed.tolist()])]))
    assert g.phase == "gap"
