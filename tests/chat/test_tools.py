"""Tool calls on both models: every call parses and its arguments are valid for its tool."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from localguide.chat.tools import (HERMES, LLAMA3, MISTRAL, ToolError, ToolFormat, call_schema, calls_maker,
                                    check_tools, control_token, parse_calls, prepare, tool_format)
from localguide.chat.template import ChatTemplate

TEMPLATES = Path(__file__).parent / "chat_templates"

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
                                      "parameters": {"type": "object", "properties": {
                                          "city": {"type": "string", "maxLength": 30},
                                          "unit": {"enum": ["C", "F"]}}, "required": ["city", "unit"]}}},
    {"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
    {"type": "function", "function": {"name": "send_email", "description": "Send an e-mail", "parameters": {
        "type": "object", "properties": {"to": {"type": "string", "format": "email"},
                                         "subject": {"type": "string", "maxLength": 40},
                                         "urgent": {"type": "boolean"}}, "required": ["to", "subject"]}}},
    {"type": "function", "function": {"name": "search", "description": "Search the web", "parameters": {
        "type": "object", "properties": {"query": {"type": "string", "minLength": 1, "maxLength": 40},
                                         "limit": {"type": "integer", "minimum": 1, "maximum": 10}},
        "required": ["query"]}}},
    {"type": "function", "function": {"name": "set_alarm", "description": "Set an alarm", "parameters": {
        "type": "object", "properties": {"time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"},
                                         "days": {"type": "array", "items": {"enum": ["mon", "tue", "wed"]},
                                                  "maxItems": 3}}, "required": ["time"]}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "system", "content": "You are an assistant that uses tools."},
       {"role": "user", "content": "What is the weather in Paris? And add 2 and 3."}]


def _valid(call):
    assert call["type"] == "function" and call["id"].startswith("call_")
    fn = call["function"]
    args = json.loads(fn["arguments"])
    jsonschema.validate(args, SCHEMAS[fn["name"]], format_checker=jsonschema.FormatChecker())
    extra = set(args) - set(SCHEMAS[fn["name"]]["properties"])
    assert not extra, f"arguments the tool does not list: {extra}"
    return fn["name"]


@pytest.mark.parametrize("seeds", [range(12), pytest.param(range(12, 50), marks=pytest.mark.slow)],
                         ids=["first-12", "next-38"])
def test_fifty_calls_at_temperature_one_are_valid(model, seeds):
    # (the suite draws 12; ``-m slow`` the other 38)
    names = set()
    for seed in seeds:
        msg = model.chat(ASK, tools=TOOLS, tool_choice="required", parallel_tool_calls=False, max_tokens=64,
                         temperature=1.0, seed=seed)
        assert msg.tool_calls and len(msg.tool_calls) == 1, msg
        names.add(_valid(msg.tool_calls[0]))
    assert len(names) >= 2  # (the draws reach more than one tool)


def test_a_named_tool_is_the_one_called(model):
    for seed in range(5):
        msg = model.chat(ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "set_alarm"}},
                         parallel_tool_calls=False, max_tokens=64, temperature=1.0, seed=seed)
        assert [_valid(c) for c in msg.tool_calls] == ["set_alarm"]


def test_none_calls_nothing_and_auto_calls_validly(model):
    msg = model.chat(ASK, tools=TOOLS, tool_choice="none", max_tokens=24, temperature=1.0, seed=1)
    assert msg.tool_calls is None and isinstance(msg.content, str)
    calls = 0
    for seed in range(3):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="auto", max_tokens=96, temperature=1.0, seed=seed)
        assert msg.content or msg.tool_calls
        for c in msg.tool_calls or []:
            _valid(c)
            calls += 1
        assert "<tool_call>" not in (msg.content or "")


def test_a_call_and_its_result_go_back_into_the_conversation(model):
    first = model.chat(ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                       parallel_tool_calls=False, max_tokens=64, temperature=0)
    call = first.tool_calls[0]
    msgs = ASK + [first.to_dict(), {"role": "tool", "tool_call_id": call["id"], "content": "5"}]
    again = model.chat(msgs, tools=TOOLS, tool_choice="none", max_tokens=16, temperature=0)
    assert isinstance(again.content, str)
    assert model.last_stats.cached_tokens > 0


def test_streamed_calls(model):
    deltas = list(model.chat_stream(ASK, tools=TOOLS, tool_choice="required", max_tokens=64, temperature=1.0, seed=3))
    calls = [c for d in deltas for c in d.tool_calls]
    assert len(calls) >= 1 and all(_valid(c) for c in calls)
    assert all("<tool_call>" not in d.content for d in deltas)


@pytest.mark.parametrize("tools,choice,where", [
    ([], "auto", "non-empty"), ([{"type": "function"}], "auto", r"tools\[0\]"),
    ([{"function": {"name": ""}}], "auto", r"tools\[0\]\.function\.name"),
    (TOOLS[:1] + TOOLS[:1], "auto", "twice"), (TOOLS, "sometimes", "tool_choice"),
    (TOOLS, {"type": "function", "function": {"name": "nope"}}, "'nope'"),
])
def test_bad_tools_are_named(smollm2, tools, choice, where):
    with pytest.raises(ToolError, match=where):
        smollm2.chat(ASK, tools=tools, tool_choice=choice, max_tokens=8)


def test_tools_and_a_constraint_do_not_mix(smollm2):
    with pytest.raises(ToolError, match="constraint"):
        smollm2.chat(ASK, tools=TOOLS, regex="[a-z]+", tool_choice="required", max_tokens=8)


def test_templates_without_tools_get_them_described():
    from localguide.chat.template import ChatTemplate

    plain = ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    out = prepare(ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "add", "arguments": '{"a": 1, "b": 2}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "3"}], check_tools(TOOLS), plain)
    assert "send_email" in out[0]["content"] and out[0]["content"].startswith("You are an assistant")
    assert out[-2]["content"] == '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
    assert out[-1] == {"role": "user", "content": "Tool result: 3"}
    hermes = ChatTemplate((Path(__file__).parent / "chat_templates" / "chatml-tools.jinja").read_text())
    assert prepare(ASK, check_tools(TOOLS), hermes) == ASK  # (its template shows them itself)


def test_a_hundred_tools_compile_fast(model):
    import time

    many = check_tools([{"type": "function", "function": {"name": f"tool_{i}", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}, "s": {"type": "string", "maxLength": 8},
                                         f"k{i}": {"enum": ["a", "b"]}}, "required": ["x"]}}} for i in range(100)])
    t = time.perf_counter()
    index = model.compile(json_schema=call_schema(many), strict=True)
    first = time.perf_counter() - t
    guide = index.guide(max_tokens=64)
    assert len(guide.allowed_token_ids()) > 0
    # (not a timing test: a bound ten times the target, so that a pathological compile shows)
    assert first < 10.0


# --- parallel calls, the families' syntaxes, reasoning first ---------------------------------------

def test_parallel_calls_at_temperature_one_are_valid_and_fit_the_budget(model):
    counts = []
    for seed in range(5):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="required", max_tokens=80, temperature=1.0, seed=seed)
        assert msg.tool_calls, msg
        for c in msg.tool_calls:
            _valid(c)
        assert model.last_stats.tokens <= 80
        counts.append(len(msg.tool_calls))
    assert min(counts) >= 1


def _walk(guide, vocab, rng, limit):
    """A random walk of allowed tokens to a stop (or ``limit``): the text written."""
    text = b""
    for _ in range(limit):
        allowed = guide.allowed_token_ids()
        assert len(allowed), "a guide that allows nothing"
        stops = set(vocab.stop_ids.tolist())
        t = int(rng.choice(allowed))
        if t in stops:
            assert guide.is_accepting()
            return text, True
        guide.advance(t)
        text += vocab[t]
    return text, False


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3], ids=lambda f: f.name)
def test_random_walks_of_calls_parse_and_validate(model, fmt):
    """Any path the guide allows, with the budget at the end, parses into calls whose arguments
    validate (the separators of several calls included)."""
    import numpy as np

    made, _, _ = calls_maker(model, check_tools(TOOLS), fmt, "required", parallel=True)
    rng = np.random.default_rng(7)
    seen = set()
    for walk in range(12):
        budget = 60 + 20 * (walk % 3)
        guide = made.guide(max_tokens=budget)
        text, stopped = _walk(guide, model.vocabulary, rng, budget)
        assert stopped or guide.is_finished() or guide.is_accepting(), text
        body = text.decode()
        assert body.startswith(fmt.open)
        calls = parse_calls(body[len(fmt.open):], fmt)
        assert calls and all(_valid(c) for c in calls)
        seen.add(len(calls))
        if not fmt.parallel:
            assert len(calls) == 1
    if fmt.parallel:
        assert max(seen) >= 2, seen  # (random walks reach the separator)


def test_a_second_call_needs_room_for_a_whole_call(smollm2):
    """The separator is allowed only where another whole call still fits the budget."""
    made, _, _ = calls_maker(smollm2, check_tools(TOOLS[1:2]), HERMES, "required", parallel=True)
    one = '<tool_call>{"name":"add","arguments":{"a":1,"b":2}}'
    ids = smollm2.llama.tokenize(one.encode(), add_bos=False, special=False)
    for budget, room in ((len(ids) + 12, False), (len(ids) + 60, True)):
        guide = made.guide(max_tokens=budget)
        for t in ids:
            guide.advance(t)
        assert guide.is_accepting()
        sep_first = smollm2.llama.tokenize(b"</", add_bos=False, special=False)[0]
        assert guide.accepts(sep_first) == room
        c = guide.copy()
        if room:  # (a copy rolls back across the separator on its own)
            sep = smollm2.llama.tokenize(b"</tool_call>\n<tool_call>", add_bos=False, special=False)
            for t in sep:
                c.advance(t)
            assert not c.is_accepting()
            c.rollback(len(sep))
            assert c.is_accepting() and guide.checkpoint() == len(ids)


def test_parse_calls_reads_each_json_whole():
    text = '{"name": "s", "arguments": {"q": "a </tool_call><tool_call> b"}}</tool_call>\n<tool_call>{"name": "t", "arguments": {}}'
    calls = parse_calls(text, HERMES)
    assert [c["function"]["name"] for c in calls] == ["s", "t"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"q": "a </tool_call><tool_call> b"}
    assert len(parse_calls(' [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]', MISTRAL)) == 2
    (call,) = parse_calls('{"name": "a", "parameters": {"x": 1}}', LLAMA3)
    assert json.loads(call["function"]["arguments"]) == {"x": 1}


def test_the_family_is_told_from_the_template():
    read = lambda name: ChatTemplate((TEMPLATES / name).read_text())  # noqa: E731
    assert tool_format(read("chatml-tools.jinja")) is HERMES
    assert tool_format(read("mistral-tools.jinja")) is MISTRAL
    assert tool_format(read("llama31-tools.jinja")) is LLAMA3
    assert tool_format(read("llama3.jinja")) is HERMES  # (declares no tool syntax of its own)
    assert tool_format(read("mistral.jinja")) is HERMES  # (no tools at all: the described envelope)


@pytest.mark.parametrize("name,fmt", [("mistral-tools.jinja", MISTRAL), ("llama31-tools.jinja", LLAMA3)])
def test_a_familys_own_syntax_end_to_end(model, name, fmt):
    source = (TEMPLATES / name).read_text()
    template = ChatTemplate(source, "<s>", "</s>")
    prompt = template.render(ASK, tools=check_tools(TOOLS))
    assert "send_email" in prompt
    for seed in range(2):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="required", chat_template=source, max_tokens=96,
                         temperature=1.0, seed=seed)
        assert msg.tool_calls and all(_valid(c) for c in msg.tool_calls)
        if fmt is LLAMA3:
            assert len(msg.tool_calls) == 1
    for seed in range(2):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="auto", chat_template=source, max_tokens=64,
                         temperature=1.0, seed=seed)
        for c in msg.tool_calls or []:
            _valid(c)
        assert "[TOOL_CALLS]" not in (msg.content or "")
        if fmt is LLAMA3 and msg.tool_calls is None:
            assert not msg.content.lstrip().startswith("{")
    # the call and its result back into the conversation, in the family's own words
    first = model.chat(ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                       chat_template=source, max_tokens=64, temperature=0)
    history = ASK + [first.to_dict(), {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "5"}]
    text = template.render(history, tools=check_tools(TOOLS))
    assert f'"{fmt.args_key}": {first.tool_calls[0]["function"]["arguments"]}' in text
    again = model.chat(history + [{"role": "user", "content": "Thanks."}], tools=TOOLS, tool_choice="none",
                       chat_template=source, max_tokens=8, temperature=0)
    assert isinstance(again.content, str)


def test_reasoning_then_calls(model):
    for seed in range(2):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="required", after="</think>", max_reasoning_tokens=12,
                         max_tokens=96, temperature=1.0, seed=seed)
        assert isinstance(msg.reasoning, str) and "</think>" not in msg.reasoning
        assert msg.tool_calls and all(_valid(c) for c in msg.tool_calls)
        assert "<tool_call>" not in (msg.content or "")
    msg = model.chat(ASK, tools=TOOLS, tool_choice="auto", after="</think>", max_reasoning_tokens=8,
                     max_tokens=96, temperature=1.0, seed=5)
    assert isinstance(msg.reasoning, str)
    for c in msg.tool_calls or []:
        _valid(c)


def test_a_control_token_opens_the_calls(smollm2):
    """An opening that is one control token (as [TOOL_CALLS] in Mistral's vocabulary) is matched
    by its id: forced in "required", and the calls follow it."""
    token = control_token(smollm2, "<|im_start|>")
    assert token is not None and not smollm2.vocabulary[token]
    assert control_token(smollm2, "[TOOL_CALLS]") is None  # (text in this vocabulary)
    fmt = ToolFormat("test", "<|im_start|>", "", "", array=True)
    made, key, opened = calls_maker(smollm2, check_tools(TOOLS), fmt, "required", parallel=True)
    assert opened == token
    guide = made.guide(max_tokens=64)
    assert guide.allowed_token_ids().tolist() == [token]
    prompt = smollm2.tokenize_chat(smollm2.chat_template().render(ASK))
    from localguide.engines.llamacpp.sampler import Sampling

    out = list(smollm2.generate_tokens(prompt, guide, 64, Sampling(temperature=1.0, seed=2)))
    assert out[0] == token
    text = b"".join(smollm2.vocabulary[t] for t in out[1:]).decode()
    assert all(_valid(c) for c in parse_calls(text, fmt))


def test_lead_guide_decides_by_the_first_token(smollm2):
    from localguide.guides.tool_guides import Lead

    made, _, _ = calls_maker(smollm2, check_tools(TOOLS), LLAMA3, "auto", parallel=True)
    assert isinstance(made, Lead)
    tok = lambda s: smollm2.llama.tokenize(s.encode(), add_bos=False, special=False)  # noqa: E731
    g = made.guide(max_tokens=64)
    assert not g.accepts(tok(" ")[0]) and not g.accepts(tok("\n")[0])
    assert g.accepts(tok("{")[0]) and g.accepts(tok("Sure")[0])
    c = g.copy()
    g.advance(tok("Sure")[0])
    assert not g.is_call and g.is_accepting() and g.accepts(tok("{")[0])
    c.advance(tok("{")[0])
    assert c.is_call and not c.is_accepting() and not c.accepts(tok("Sure")[0])
    c.rollback(1)
    assert c.accepts(tok("Sure")[0]) and not g.is_call


# -- parameters are whole JSON Schemas: $defs, $ref (recursive too), $id -------------------------

def _pydantic_tools():
    from typing import List

    import openai
    import pydantic

    class Item(pydantic.BaseModel):
        sku: str
        qty: int

    class Order(pydantic.BaseModel):
        id: int
        items: List[Item]

    class Node(pydantic.BaseModel):
        name: str
        children: List["Node"]

    return [openai.pydantic_function_tool(Order), openai.pydantic_function_tool(Node)]


def _valid_for(tools, call):
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}[call["function"]["name"]]
    jsonschema.validate(json.loads(call["function"]["arguments"]), params)


def test_tools_of_nested_and_recursive_pydantic_models(model):
    tools = _pydantic_tools()
    assert all("$defs" in t["function"]["parameters"] for t in tools)
    ask = [{"role": "user", "content": "Order two apples (sku A1), then draw a tree of two nodes."}]
    for seed in range(2):
        msg = model.chat(ask, tools=tools, tool_choice="required", max_tokens=96, temperature=1.0, seed=seed)
        assert msg.tool_calls
        for call in msg.tool_calls:
            _valid_for(tools, call)
    for name in ("Order", "Node"):
        msg = model.chat(ask, tools=tools, tool_choice={"type": "function", "function": {"name": name}},
                         parallel_tool_calls=False, max_tokens=96, temperature=1.0, seed=5)
        assert [c["function"]["name"] for c in msg.tool_calls] == [name]
        _valid_for(tools, msg.tool_calls[0])


@pytest.mark.parametrize("fmt", [HERMES, MISTRAL, LLAMA3], ids=lambda f: f.name)
def test_parameters_refs_resolve_against_them_in_every_syntax(model, fmt):
    import numpy as np

    tools = _pydantic_tools() + [{"type": "function", "function": {"name": "tagged", "parameters": {
        "$id": "tagged.json", "type": "object", "properties": {"tag": {"$ref": "#/definitions/tag"}},
        "required": ["tag"], "definitions": {"tag": {"enum": ["a", "b"]}}}}}]
    made, _, _ = calls_maker(model, check_tools(tools), fmt, "required", parallel=True)
    rng = np.random.default_rng(3)
    for walk in range(6):
        guide = made.guide(max_tokens=120)
        text, _ = _walk(guide, model.vocabulary, rng, 120)
        for call in parse_calls(text.decode()[len(fmt.open):], fmt):
            _valid_for(tools, call)


def test_an_unresolvable_ref_in_parameters_is_named_there(smollm2):
    from localguide.errors import SchemaError

    tools = [TOOLS[1], {"type": "function", "function": {"name": "x", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}, "$defs": {}}}}]
    with pytest.raises(SchemaError) as e:
        smollm2.chat(ASK, tools=tools, tool_choice="required", max_tokens=8)
    assert "tools[1].function.parameters#/properties/a/$ref" in str(e.value)
    assert "no 'Missing' at tools[1].function.parameters#/$defs" in str(e.value)
    assert "anyOf" not in str(e.value)
