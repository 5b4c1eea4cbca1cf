"""Tool calls on both models: every call parses and its arguments are valid for its tool."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from localguide.llama.tools import ToolError, call_schema, check_tools, prepare

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


def test_fifty_calls_at_temperature_one_are_valid(model):
    names = set()
    for seed in range(50):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="required", max_tokens=64, temperature=1.0, seed=seed)
        assert msg.tool_calls and len(msg.tool_calls) == 1, msg
        names.add(_valid(msg.tool_calls[0]))
    assert len(names) >= 2  # (the draws reach more than one tool)


def test_a_named_tool_is_the_one_called(model):
    for seed in range(5):
        msg = model.chat(ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "set_alarm"}},
                         max_tokens=64, temperature=1.0, seed=seed)
        assert [_valid(c) for c in msg.tool_calls] == ["set_alarm"]


def test_none_calls_nothing_and_auto_calls_validly(model):
    msg = model.chat(ASK, tools=TOOLS, tool_choice="none", max_tokens=24, temperature=1.0, seed=1)
    assert msg.tool_calls is None and isinstance(msg.content, str)
    calls = 0
    for seed in range(6):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="auto", max_tokens=96, temperature=1.0, seed=seed)
        assert msg.content or msg.tool_calls
        for c in msg.tool_calls or []:
            _valid(c)
            calls += 1
        assert "<tool_call>" not in (msg.content or "")


def test_a_call_and_its_result_go_back_into_the_conversation(model):
    first = model.chat(ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                       max_tokens=64, temperature=0)
    call = first.tool_calls[0]
    msgs = ASK + [first.to_dict(), {"role": "tool", "tool_call_id": call["id"], "content": "5"}]
    again = model.chat(msgs, tools=TOOLS, tool_choice="none", max_tokens=16, temperature=0)
    assert isinstance(again.content, str)
    assert model.last_stats.cached_tokens > 0


def test_streamed_calls(model):
    deltas = list(model.chat_stream(ASK, tools=TOOLS, tool_choice="required", max_tokens=64, temperature=1.0, seed=3))
    calls = [c for d in deltas for c in d.tool_calls]
    assert len(calls) == 1 and _valid(calls[0])
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
    from localguide.llama.template import ChatTemplate

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
