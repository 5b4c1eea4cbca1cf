"""``localguide serve``'s Ollama routes as Ollama's own Python client meets them: a real server
process on loopback (``Served``), both models; plain HTTP for what the client hides (NDJSON lines,
error bodies)."""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request

import jsonschema
import pytest

ollama = pytest.importorskip("ollama")

sys.path.insert(0, os.path.dirname(__file__))
from test_server import ARGS, PERSON, TOOLS, Served  # noqa: E402

ASK = [{"role": "user", "content": "Give me a person as JSON."}]


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def served(request, model_paths):
    s = Served(model_paths[request.param], parallel=2)
    s.ollama = ollama.Client(host=s.url, timeout=120)
    yield s
    s.close()


def _lines(s: Served, path: str, body: dict) -> tuple[int, list[dict]]:
    req = urllib.request.Request(s.url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            assert r.headers["Content-Type"].startswith(
                "application/x-ndjson" if body.get("stream", True) else "application/json")
            return r.status, [json.loads(line) for line in r.read().decode().splitlines() if line]
    except urllib.error.HTTPError as e:
        return e.code, [json.loads(e.read())]


def test_chat_with_a_schema_validates(served):
    for seed in range(3):
        r = served.ollama.chat(model="anything", messages=ASK, format=PERSON, options={"seed": seed, "num_predict": 64})
        jsonschema.validate(json.loads(r.message.content), PERSON)
        assert r.done and r.done_reason == "stop" and r.eval_count > 0 and r.prompt_eval_count > 0
        assert r.model == "anything" and r.message.role == "assistant"


def test_streamed_chat_joins_to_a_valid_document(served):
    parts = list(served.ollama.chat(model="m", messages=ASK, format=PERSON, stream=True, options={"seed": 3}))
    assert all(not p.done for p in parts[:-1]) and parts[-1].done and parts[-1].done_reason == "stop"
    assert len(parts) > 3
    jsonschema.validate(json.loads("".join(p.message.content for p in parts)), PERSON)
    assert parts[-1].eval_duration > 0 and parts[-1].total_duration >= parts[-1].eval_duration


def test_format_json_is_an_object(served):
    r = served.ollama.chat(model="m", messages=ASK, format="json", options={"seed": 1, "num_predict": 200})
    assert isinstance(json.loads(r.message.content), dict)


def test_generate_templated_raw_and_streamed(served):
    r = served.ollama.generate(model="m", prompt="Is the sky blue?", options={"seed": 0},
                               format={"enum": ["yes", "no"]})
    assert json.loads(r.response) in ("yes", "no") and r.done
    raw = served.ollama.generate(model="m", prompt="The year the war ended: ", raw=True, format={
        "type": "integer", "minimum": 1900, "maximum": 2000}, options={"seed": 0, "num_predict": 8})
    assert 1900 <= json.loads(raw.response) <= 2000
    parts = list(served.ollama.generate(model="m", prompt="Count to three.", stream=True,
                                        options={"num_predict": 5, "temperature": 0}))
    assert parts[-1].done and parts[-1].done_reason == "length" and parts[-1].eval_count == 5


def test_extension_fields_over_ollama(served):
    status, lines = _lines(served, "/api/chat", {"model": "m", "messages": ASK, "stream": False,
                                                  "regex": "[a-z]{2,6}-[0-9]{3}", "options": {"seed": 2}})
    assert status == 200
    import re
    assert re.fullmatch("[a-z]{2,6}-[0-9]{3}", lines[0]["message"]["content"])
    status, lines = _lines(served, "/api/generate", {"model": "m", "prompt": "Pick one", "choice": ["red", "blue"]})
    assert status == 200 and "".join(x["response"] for x in lines) in ("red", "blue") and lines[-1]["done"]


def test_tools_in_ollamas_form(served):
    r = served.ollama.chat(model="m", messages=[{"role": "user", "content": "What is 2 plus 3? Use the tool."}],
                           tools=TOOLS, options={"seed": 1, "num_predict": 128})
    if r.message.tool_calls:
        for call in r.message.tool_calls:
            jsonschema.validate(dict(call.function.arguments), ARGS[call.function.name])
        # the conversation goes on with the call and its result (arguments as an object)
        follow = served.ollama.chat(model="m", tools=TOOLS, options={"seed": 1, "num_predict": 32}, messages=[
            {"role": "user", "content": "What is 2 plus 3? Use the tool."}, r.message,
            {"role": "tool", "content": "5", "tool_name": r.message.tool_calls[0].function.name}])
        assert follow.done
    else:
        assert r.message.content


def test_tags_show_version(served):
    tags = served.ollama.list()
    (m,) = tags.models
    assert m.model and len(m.digest) == 64 and m.size > 1_000_000 and m.details.format == "gguf"
    assert m.details.family and m.details.parameter_size and m.details.quantization_level
    shown = served.ollama.show(m.model)
    assert shown.details.family == m.details.family and shown.modelinfo["general.architecture"]
    with urllib.request.urlopen(served.url + "/api/version", timeout=10) as r:
        assert json.loads(r.read())["version"]


def test_pull_of_the_model_served_and_routes_not_offered(served):
    """Apps pull before they chat: the model served is there already; another name is a 404 (nothing is
    fetched); embeddings and model management answer in Ollama's error form, not a bare 404."""
    (m,) = served.ollama.list().models
    assert served.ollama.pull(m.model).status == "success"
    assert [p.status for p in served.ollama.pull(m.model, stream=True)] == ["success"]
    with pytest.raises(ollama.ResponseError) as e:
        served.ollama.pull("llama3.2:1b")
    assert e.value.status_code == 404 and "fetches nothing" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        served.ollama.embed(model=m.model, input="hello")
    assert e.value.status_code == 404 and "embeddings" in e.value.error
    with pytest.raises(ollama.ResponseError) as e:
        served.ollama.delete(m.model)
    assert e.value.status_code == 404 and "not offered" in e.value.error


@pytest.mark.parametrize("body, field", [
    ({"model": "m", "messages": ASK, "format": "yaml"}, "format"),
    ({"model": "m", "messages": ASK, "format": {"type": "objekt"}}, "format"),
    ({"model": "m", "messages": ASK, "options": {"temperature": "hot"}}, "options.temperature"),
    ({"model": "m", "messages": ASK, "options": {"repeat_penalty": 1.3}}, "options.repeat_penalty"),
    ({"model": "m", "messages": ASK, "options": {"colour": 1}}, "options.colour"),
    ({"model": "m", "messages": ASK, "options": {"num_predict": 0}}, "options.num_predict"),
    ({"model": "m", "messages": ASK, "options": {"num_ctx": 10 ** 6}}, "options.num_ctx"),
    ({"model": "m", "messages": ASK, "think": True}, "think"),
    ({"model": "m", "messages": ASK, "format": "json", "regex": "a"}, "format and regex"),
    ({"model": "m", "messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}, "images"),
    ({"model": "m", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "prompt": "x", "template": "{{ .Prompt }}"}, "template"),
    ({"model": "m", "prompt": ""}, "prompt"),
    ({"model": "m", "messages": ASK, "tools": TOOLS, "format": "json"}, "tools"),
    ({"model": "m", "messages": ASK, "stream": "yes"}, "stream"),
])
def test_bad_requests_are_400s_naming_the_field(served, body, field):
    path = "/api/generate" if "prompt" in body else "/api/chat"
    status, (err,) = _lines(served, path, body)
    assert status == 400, err
    assert set(err) == {"error"} and field in err["error"], err


def test_the_client_raises_the_servers_error(served):
    with pytest.raises(ollama.ResponseError) as e:
        served.ollama.chat(model="m", messages=ASK, format={"type": "string", "pattern": "(unclosed"})
    assert e.value.status_code == 400 and "(unclosed" in e.value.error


def test_a_budget_left_out_fills_the_context_and_no_more(served):
    # num_predict -1 (Ollama's default): up to serve --max-tokens, cut to the room the prompt leaves
    status, lines = _lines(served, "/api/generate", {"model": "m", "prompt": "word " * 1900, "raw": True,
                                                      "options": {"num_predict": -1, "temperature": 0}})
    assert status == 200 and lines[-1]["done"]
    assert lines[-1]["prompt_eval_count"] + lines[-1]["eval_count"] <= 2048
    status, (err,) = _lines(served, "/api/generate", {"model": "m", "prompt": "word " * 2100, "raw": True})
    assert status == 400 and "no room" in err["error"]
