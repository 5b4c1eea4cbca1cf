"""``serve --chat-template-file``: a template of another family (Qwen3-Coder's XML-style calls, whose
calls are not JSON) brings its tool-call syntax to the server; the openai client gets valid calls,
whole and streamed, and sends the results back. On both models."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_server import ARGS, Served  # noqa: E402

TEMPLATE = Path(__file__).parents[1] / "chat" / "chat_templates" / "qwen3-coder-tools.jinja"
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
         {"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
SCHEMAS = {**ARGS, "get_weather": TOOLS[1]["function"]["parameters"]}


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def served(request, model_paths):
    s = Served(model_paths[request.param], extra=["--chat-template-file", str(TEMPLATE)])
    yield s
    s.close()


def test_calls_in_the_templates_syntax_whole_and_streamed(served):
    ask = dict(model="m", messages=[{"role": "user", "content": "What is the weather in Oslo, and in Rome?"}],
               tools=TOOLS, tool_choice="required", max_tokens=96, temperature=1.0, seed=4)
    whole = served.client.chat.completions.create(**ask)
    assert whole.choices[0].finish_reason == "tool_calls"
    calls = whole.choices[0].message.tool_calls
    assert calls and all(c.function.name in SCHEMAS for c in calls)
    for c in calls:
        jsonschema.validate(json.loads(c.function.arguments), SCHEMAS[c.function.name])
    streamed: dict[int, dict] = {}
    for chunk in served.client.chat.completions.create(stream=True, **ask):
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            c = streamed.setdefault(d.index, {"name": None, "arguments": ""})
            if d.id:
                c["name"] = d.function.name
            c["arguments"] += (d.function.arguments or "") if d.function else ""
    assert [(c["name"], c["arguments"]) for _, c in sorted(streamed.items())] == \
        [(c.function.name, c.function.arguments) for c in calls]
    # the result back: the template reads the past call's arguments as a mapping
    history = ask["messages"] + [whole.choices[0].message.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": "12 C"} for c in calls]
    again = served.client.chat.completions.create(model="m", messages=history, tools=TOOLS, tool_choice="none",
                                                  max_tokens=8, temperature=0)
    assert isinstance(again.choices[0].message.content, str)


def test_a_template_file_that_cannot_be_used_is_named(tmp_path, smollm2_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}{{ m.content }")
    for path, said in ((bad, str(bad)), (tmp_path / "missing.jinja", "cannot read")):
        r = subprocess.run([sys.executable, "-m", "localguide.cli", "run", str(smollm2_path), "Hi",
                            "--chat-template-file", str(path), "--max-tokens", "2"],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode != 0 and said in r.stderr and "Traceback" not in r.stderr
