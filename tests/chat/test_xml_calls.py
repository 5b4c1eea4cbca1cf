"""Qwen3-Coder's XML-style calls (``<function=...><parameter=...>``): a syntax whose calls are not
JSON, one module of ``localguide.chat.tools`` and one registration. On both models through a
template of that family's form; the constraint, the reader and the stream checked against the
text the syntax writes."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localguide.chat.template import ChatTemplate
from localguide.chat.tools import HERMES, XML, ToolError, check_tools, prepare, tool_format
from localguide.errors import SchemaError
from localguide.json_schema.parameters import call_node
from localguide.regex.ast_dfa import ast_to_dfa

from test_tools import ASK, TOOLS, _valid

TEMPLATES = Path(__file__).parent / "chat_templates"
SOURCE = (TEMPLATES / "qwen3-coder-tools.jinja").read_text()

NOTE = {"type": "function", "function": {"name": "note", "parameters": {
    "type": "object", "properties": {"text": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}},
                                     "level": {"type": "integer"}, "extra": {"type": ["object", "null"]}},
    "required": ["text"]}}}


def _json(value) -> str:
    """A value as the syntax writes it in JSON: "<" as \\u003c."""
    return json.dumps(value).replace("<", "\\u003c")


def _body(name: str, args: dict, raw: set, newline: bool = True) -> str:
    """One call as the syntax writes it (after ``<tool_call>``)."""
    params = "".join(f"<parameter={k}>\n{v if k in raw else _json(v)}{chr(10) if newline else ''}</parameter>\n"
                     for k, v in args.items())
    return f"\n<function={name}>\n{params}</function>\n"


def test_the_family_is_told_from_its_template():
    assert tool_format(ChatTemplate(SOURCE)) is XML
    assert tool_format(ChatTemplate((TEMPLATES / "chatml-tools.jinja").read_text())) is HERMES


def test_the_constraint_takes_what_the_syntax_writes_and_nothing_invalid():
    constraint, _ = XML.call_constraint(check_tools(TOOLS + [NOTE]), parallel=True)
    dfa = ast_to_dfa(call_node(constraint.source))
    ok = lambda text: dfa.matches(text.encode())  # noqa: E731
    assert ok(_body("get_weather", {"city": "Paris", "unit": "C"}, {"city"}))
    assert ok(_body("note", {"text": "a <b> </param c\n\n"}, {"text"}))  # (any text but "</parameter>")
    assert ok(_body("get_weather", {"city": "a <b> c", "unit": "F"}, {"city"}))
    # (a string of bounded length holds no "</" and no line break: a subset, documented)
    assert not ok(_body("get_weather", {"city": "a </b>", "unit": "F"}, {"city"}))
    assert not ok(_body("get_weather", {"city": "a\nb", "unit": "F"}, {"city"}))
    assert ok(_body("note", {"text": "x\n"}, {"text"}, newline=False))  # (read as "x")
    assert ok(_body("note", {"text": "", "tags": ["a", "</parameter>"], "level": 3, "extra": None}, {"text"}))
    assert ok(_body("set_alarm", {"time": "07:30", "days": ["mon"]}, {"time"}))
    assert ok(_body("send_email", {"to": "a@b.org", "subject": "Hi", "urgent": True}, {"to", "subject"}))
    assert not ok(_body("note", {"text": "a</parameter>b"}, {"text"}))  # (ends the value)
    assert not ok(_body("get_weather", {"city": "Paris", "unit": "K"}, {"city"}))  # (not in the enum)
    assert not ok(_body("get_weather", {"city": "Paris"}, {"city"}))  # (unit is required)
    assert not ok(_body("get_weather", {"unit": "C", "city": "Paris"}, {"city"}))  # (the schema's order)
    assert not ok(_body("get_weather", {"city": "x" * 31, "unit": "C"}, {"city"}))  # (maxLength 30)
    assert not ok(_body("set_alarm", {"time": "7:30"}, {"time"}))  # (the pattern)
    assert not ok(_body("add", {"a": 1, "b": 2.5}, set()))  # (an integer)
    assert not ok(_body("add", {"a": 1, "b": 2, "c": 3}, set()))  # (no other parameters)
    assert not ok(_body("nope", {}, set()))


def test_a_json_value_writes_angle_brackets_escaped_and_reads_back():
    """A value written as JSON never holds "</parameter>" (which ends it): "<" is written \\u003c, the same
    value; a string of a least length alone is any text; what validates nothing is left alone."""
    tools = check_tools([{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "x-meta": 1, "properties": {
            "x": {"type": ["string", "null"]}, "code": {"type": "string", "minLength": 1}, "gone": False},
        "required": ["x", "code"]}}}])
    constraint, _ = XML.call_constraint(tools, True)
    dfa = ast_to_dfa(call_node(constraint.source))
    raw = '\n<function=f>\n<parameter=x>\n"</parameter>"\n</parameter>\n<parameter=code>\na\nb\n</parameter>\n</function>\n'
    assert not dfa.matches(raw.encode())
    escaped = raw.replace('"</parameter>"', '"\\u003c/parameter>"')
    assert dfa.matches(escaped.encode())
    (call,) = XML.parse(escaped, tools)
    assert json.loads(call["function"]["arguments"]) == {"x": "</parameter>", "code": "a\nb"}
    assert not dfa.matches(escaped.replace("a\nb\n</parameter>", "</parameter>").encode())  # (minLength 1)
    with pytest.raises(ToolError):
        XML.parse(escaped, None)


def test_what_it_cannot_follow_is_refused_by_name():
    def refused(params, name="t"):
        with pytest.raises((ToolError, SchemaError)) as e:
            constraint, _ = XML.call_constraint(
                check_tools([{"type": "function", "function": {"name": name, "parameters": params}}]), True)
            call_node(constraint.source)  # (what compiling it builds)
        return str(e.value)

    assert "'minProperties'" in refused({"type": "object", "properties": {"a": {}}, "minProperties": 1})
    assert "'anyOf'" in refused({"anyOf": [{"type": "object"}]})
    assert "'b' is required" in refused({"type": "object", "properties": {"a": {}}, "required": ["b"]})
    assert "tools[0].function.name" in refused({"type": "object"}, name="a<b")
    assert "tools[0].function.parameters#/properties" in refused({"type": "object", "properties": {"a>": {}}})
    assert "tools[0].function.parameters#/properties/a" in refused(
        {"type": "object", "properties": {"a": {"type": "string", "minLength": 3, "maxLength": 2}}})


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).filter(lambda s: "</parameter>" not in s)
_ARGS = st.fixed_dictionaries({"text": _TEXT}, optional={
    "tags": st.lists(st.text(max_size=8), max_size=3), "level": st.integers(-10**6, 10**6),
    "extra": st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=st.lists(_ARGS, min_size=1, max_size=3), cuts=st.lists(st.integers(1, 7), min_size=1, max_size=40),
       newline=st.booleans())
def test_the_stream_and_the_reader_give_back_the_arguments_written(calls, cuts, newline):
    tools = check_tools([NOTE])
    order = list(NOTE["function"]["parameters"]["properties"])
    bodies = [_body("note", {k: a[k] for k in order if k in a}, {"text"}, newline) for a in calls]
    text = XML.sep.join(bodies)
    constraint, _ = XML.call_constraint(tools, parallel=True)
    dfa = ast_to_dfa(call_node(constraint.source))
    assert all(dfa.matches(b.encode()) for b in bodies)
    stream, pos, deltas, i = XML.stream(tools), 0, [], 0
    while pos < len(text):  # (the text in pieces of every size)
        step = cuts[i % len(cuts)]
        deltas += stream.feed(text[pos:pos + step])
        pos, i = pos + step, i + 1
    final = stream.calls()
    want = [{k: a[k] for k in order if k in a} for a in calls]
    for w in want:  # (without the separator's line break, the value's own last one is read as it)
        if not newline and w["text"].endswith("\n"):
            w["text"] = w["text"][:-1]
    assert [json.loads(c["function"]["arguments"]) for c in final] == want
    joined = {}
    for d in deltas:
        joined.setdefault(d["index"], []).append(d["function"]["arguments"])
    assert ["".join(joined[j]) for j in range(len(calls))] == [c["function"]["arguments"] for c in final]
    assert [c["function"]["name"] for c in final] == ["note"] * len(calls)
    assert [json.loads(c["function"]["arguments"]) for c in XML.parse(text, tools)] == want


def test_past_calls_reach_the_template_as_mappings():
    history = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "5"}]
    template = ChatTemplate(SOURCE)
    text = template.render(prepare(history, check_tools(TOOLS), template, XML), tools=check_tools(TOOLS))
    assert "<function=add>\n<parameter=a>\n2\n</parameter>\n<parameter=b>\n3\n</parameter>\n</function>" in text
    # (a template without words for calls gets them written in the syntax)
    plain = ChatTemplate("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}")
    out = prepare(history, None, plain, XML)
    assert "<tool_call>\n<function=add>\n<parameter=a>\n2\n</parameter>" in out[2]["content"]


@pytest.mark.parametrize("model", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)], indirect=True)
def test_calls_on_the_real_models_are_valid_and_stream_as_written(model):  # (Gemma 3's: half a minute, slow)
    for seed in range(2):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="required", chat_template=SOURCE, max_tokens=96,
                         temperature=1.0, seed=seed)
        assert msg.tool_calls and all(_valid(c) for c in msg.tool_calls)
    for seed in range(1):
        msg = model.chat(ASK, tools=TOOLS, tool_choice="auto", chat_template=SOURCE, max_tokens=64,
                         temperature=1.0, seed=seed)
        assert all(_valid(c) for c in msg.tool_calls or [])
        assert "<function=" not in (msg.content or "")
    deltas = list(model.chat_stream(ASK, tools=TOOLS, tool_choice="required", chat_template=SOURCE, max_tokens=96,
                                    temperature=1.0, seed=11))
    final = [c for d in deltas for c in d.tool_calls]
    assert final and all(_valid(c) for c in final)
    joined: dict = {}
    for d in deltas:
        for x in d.tool_call_deltas:
            joined.setdefault(x["index"], []).append(x["function"]["arguments"])
            if "id" in x:
                assert x["id"] == final[x["index"]]["id"]
    assert ["".join(joined[i]) for i in range(len(final))] == [c["function"]["arguments"] for c in final]
    # the call and its result back into the conversation, written by the template from the arguments
    first = model.chat(ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "add"}},
                       chat_template=SOURCE, max_tokens=64, temperature=0)
    assert first.tool_calls[0]["function"]["name"] == "add"
    history = ASK + [first.to_dict(), {"role": "tool", "tool_call_id": first.tool_calls[0]["id"], "content": "5"}]
    again = model.chat(history + [{"role": "user", "content": "Thanks."}], tools=TOOLS, tool_choice="none",
                       chat_template=SOURCE, max_tokens=8, temperature=0)
    assert isinstance(again.content, str)


def test_nested_models_with_defs(model):
    pydantic = pytest.importorskip("pydantic")

    class Item(pydantic.BaseModel):
        sku: str
        quantity: int

    class Order(pydantic.BaseModel):
        customer: str
        items: list[Item]

    params = Order.model_json_schema()
    tools = [{"type": "function", "function": {"name": "place_order", "parameters": params}}]
    ask = [{"role": "user", "content": "Order two apples for Ann."}]
    for seed in range(1):
        msg = model.chat(ask, tools=tools, tool_choice="required", chat_template=SOURCE, max_tokens=80,
                         temperature=1.0, seed=seed)
        assert msg.tool_calls
        for call in msg.tool_calls:
            args = json.loads(call["function"]["arguments"])
            jsonschema.validate(args, params)
            Order.model_validate(args)

