"""``localguide serve`` as a client meets it: a real server process on loopback, on a free port,
called with the official ``openai`` client and with plain HTTP; both models."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import jsonschema
import openai
import pydantic
import pytest

sys.path.insert(0, os.path.dirname(__file__))  # (browser.py)

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "add", "description": "Add two integers", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}},
         {"type": "function", "function": {"name": "get_weather", "parameters": {
             "type": "object", "properties": {"city": {"type": "string", "maxLength": 20}}, "required": ["city"]}}}]
ARGS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


class Served:
    """A server process and how to reach it."""

    def __init__(self, path, parallel: int = 1, api_key: str | None = None, extra=()):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if k != "LOCALGUIDE_COMPILE"}  # (a user's first use)
        cmd = [sys.executable, "-m", "localguide.cli", "serve", str(path), "--port", str(self.port),
               "--parallel", str(parallel), "--n-ctx", "2048", *extra]
        if api_key:
            cmd += ["--api-key", api_key]
        self.api_key = api_key or "none"
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        while True:
            try:
                self.get("/health")
                break
            except (urllib.error.URLError, ConnectionError):
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the server did not start: " + (self.proc.stdout.read() or ""))
                time.sleep(0.2)
        self.client = openai.OpenAI(base_url=self.url + "/v1", api_key=self.api_key, max_retries=0, timeout=120)

    def get(self, path: str) -> dict:
        with urllib.request.urlopen(self.url + path, timeout=10) as r:
            return json.loads(r.read())

    def post(self, path: str, body, headers=None) -> tuple[int, dict]:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST",
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.api_key}", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def served(request, model_paths):
    s = Served(model_paths[request.param])
    yield s
    s.close()


@pytest.fixture(scope="module")
def batched(smollm2_path):
    s = Served(smollm2_path, parallel=2, api_key="sekret")
    yield s
    s.close()


def _chat(s: Served, **kw):
    return s.client.chat.completions.create(model="m", **kw)


ASK = [{"role": "user", "content": "Give me a person as JSON."}]
SCHEMA_FORMAT = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}


# -- the official client --------------------------------------------------------------------------

def test_json_schema_answers_validate(served):
    for seed in range(4):
        r = _chat(served, messages=ASK, response_format=SCHEMA_FORMAT, max_tokens=48, temperature=1.0, seed=seed)
        jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
        assert r.choices[0].finish_reason == "stop"
        assert r.usage.completion_tokens > 0 and r.usage.prompt_tokens > 0
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_streamed_chunks_join_to_a_valid_document(served):
    chunks = list(_chat(served, messages=ASK, response_format=SCHEMA_FORMAT, max_tokens=48, temperature=1.0,
                        seed=3, stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), PERSON)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_tool_call_arguments_validate(served):
    for seed in range(3):
        r = _chat(served, messages=[{"role": "user", "content": "What is 2 plus 3?"}], tools=TOOLS,
                  tool_choice="required", max_tokens=64, temperature=1.0, seed=seed)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "tool_calls" and msg.tool_calls
        for call in msg.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), ARGS[call.function.name])
    r = _chat(served, messages=[{"role": "user", "content": "Weather?"}], tools=TOOLS,
              tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=48, temperature=0)
    assert [c.function.name for c in r.choices[0].message.tool_calls] == ["get_weather"]


def test_tool_call_arguments_stream_as_they_are_generated(served):
    ask = dict(messages=[{"role": "user", "content": "What is the weather in Oslo, and in Rome?"}], tools=TOOLS,
               tool_choice="required", max_tokens=96, temperature=1.0, seed=4)
    whole = _chat(served, **ask).choices[0].message.tool_calls
    calls: dict[int, dict] = {}
    pieces = 0
    for chunk in _chat(served, stream=True, **ask):
        for d in (chunk.choices[0].delta.tool_calls or []) if chunk.choices else []:
            c = calls.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
            if d.id:
                assert c["id"] is None and d.function.name  # (the first delta: id and name, no arguments)
                c["id"], c["name"] = d.id, d.function.name
            if d.function and d.function.arguments:
                assert c["id"] is not None
                c["arguments"] += d.function.arguments
                pieces += 1
    assert [(c["name"], c["arguments"]) for _, c in sorted(calls.items())] == \
        [(c.function.name, c.function.arguments) for c in whole]
    for c in calls.values():
        jsonschema.validate(json.loads(c["arguments"]), ARGS[c["name"]])
    assert pieces > len(calls)  # (the arguments came in pieces, not whole at the end)


def test_extension_fields_regex_choice_grammar(served):
    r = _chat(served, messages=[{"role": "user", "content": "A year?"}], max_tokens=8,
              extra_body={"regex": r"(19|20)\d{2}"})
    assert re.fullmatch(r"(19|20)\d{2}", r.choices[0].message.content)
    r = _chat(served, messages=[{"role": "user", "content": "Yes or no?"}], max_tokens=4,
              extra_body={"choice": ["yes", "no"]})
    assert r.choices[0].message.content in ("yes", "no")
    r = _chat(served, messages=[{"role": "user", "content": "Some JSON."}], max_tokens=40,
              extra_body={"grammar": "json"}, temperature=0)
    if r.choices[0].finish_reason == "stop":
        json.loads(r.choices[0].message.content)


def test_a_growing_conversation_keeps_its_history_cached(served):
    """A long first turn decodes its whole chunks on the fastest kernels; the next turn (an
    answer and a question of some hundred tokens after it) still finds the whole first prompt in
    the cache, and its answer is the one an emptied cache gives."""
    listing = "".join(f"Item {i}: the {('red', 'blue', 'green')[i % 3]} box holds {i * 7 % 13} apples.\n"
                      for i in range(14))
    msgs = [{"role": "system", "content": "Answer from this list.\n" + listing},
            {"role": "user", "content": "How many apples does item 3 hold?"}]
    first = _chat(served, messages=msgs, max_tokens=6, temperature=0, extra_body={"stats": True})
    msgs += [{"role": "assistant", "content": "Item 3 holds 8 apples. " + listing[:300]},
             {"role": "user", "content": "And item 4?"}]
    warm = _chat(served, messages=msgs, max_tokens=8, temperature=0, extra_body={"stats": True})
    _chat(served, messages=[{"role": "user", "content": "Hi"}], max_tokens=2)  # (the cache taken by another)
    cold = _chat(served, messages=msgs, max_tokens=8, temperature=0, extra_body={"stats": True})
    held = first.model_extra["localguide"]["prompt_tokens"]
    stats = warm.model_extra["localguide"]
    assert held > 128 and stats["prompt_tokens"] > held + 64, (held, stats)
    assert stats["cached_tokens"] >= held - 1, (held, stats)
    assert cold.model_extra["localguide"]["cached_tokens"] < 64
    assert warm.choices[0].message.content == cold.choices[0].message.content


def test_a_bad_schema_names_its_pointer(served):
    bad = {"type": "object", "properties": {"a": {"$dynamicRef": "#x"}}}
    with pytest.raises(openai.BadRequestError) as e:
        _chat(served, messages=ASK, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}})
    err = e.value.body
    assert "#/properties/a/$dynamicRef" in err["message"] and err["param"] == "response_format"
    assert err["type"] == "invalid_request_error"


def test_bad_regex_and_grammar_name_where(served):
    code, body = served.post("/v1/chat/completions", {"messages": ASK, "regex": "ab(c"})
    assert code == 400 and body["error"]["param"] == "regex" and "position" in body["error"]["message"]
    code, body = served.post("/v1/chat/completions", {"messages": ASK, "grammar": 'start: "a" |\n  | ) "b"'})
    assert code == 400 and body["error"]["param"] == "grammar" and "line" in body["error"]["message"]
    assert served.get("/health")["status"] == "ok"  # (and it keeps serving)


def test_reasoning_first_then_the_schema(served):
    r = _chat(served, messages=ASK, response_format=SCHEMA_FORMAT, max_tokens=64, temperature=1.0, seed=2,
              extra_body={"after": "</think>", "max_reasoning_tokens": 10})
    msg = r.choices[0].message
    jsonschema.validate(json.loads(msg.content), PERSON)
    assert isinstance(msg.model_extra.get("reasoning_content", ""), str)
    assert "</think>" not in msg.content


def test_completions_with_stop_strings(served):
    r = served.client.completions.create(model="m", prompt="One, two, three, four,", max_tokens=24, temperature=0,
                                         stop=[","])
    assert "," not in r.choices[0].text and r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens > 0
    # (inside constrained text a stop string counts only where the text before it is complete)
    r = served.client.completions.create(model="m", prompt="One, two, three, four,", max_tokens=24, temperature=0,
                                         stop=[","], extra_body={"regex": r"( [a-z]+,){1,6}"})
    assert re.fullmatch(r"( [a-z]+,){1,6}", r.choices[0].text), r.choices[0].text


class Person(pydantic.BaseModel):
    name: str
    city: str
    age: int


def test_stop_strings_never_cut_a_constrained_answer(served):
    for seed in range(3):
        r = served.client.chat.completions.parse(model="m", messages=ASK, response_format=Person, max_tokens=64,
                                                 temperature=1.0, seed=seed, stop=[".", ",", '"', "-"])
        assert isinstance(r.choices[0].message.parsed, Person) and r.choices[0].finish_reason == "stop"
    for seed in range(3):
        r = served.client.completions.create(model="m", prompt="Einstein was born on (YYYY-MM-DD)", max_tokens=16,
                                             temperature=1.0, seed=seed, stop=["-"],
                                             extra_body={"regex": r" \d{4}-\d{2}-\d{2}"})
        assert re.fullmatch(r" \d{4}-\d{2}-\d{2}", r.choices[0].text), r.choices[0].text
    r = _chat(served, messages=[{"role": "user", "content": "Where?"}], max_tokens=8, stop=[","],
              extra_body={"choice": ["Paris, France", "Rome, Italy"]})
    assert r.choices[0].message.content in ("Paris, France", "Rome, Italy")
    r = _chat(served, messages=[{"role": "user", "content": "Greet."}], max_tokens=24, stop=[",", "."],
              temperature=1.0, seed=1, extra_body={"grammar": 'start: "Hello, " NAME "."\nNAME: /[A-Z][a-z]{1,8}/\n'})
    assert re.fullmatch(r"Hello, [A-Z][a-z]{1,8}\.", r.choices[0].message.content), r.choices[0].message.content


class Item(pydantic.BaseModel):
    sku: str
    qty: int


class Order(pydantic.BaseModel):
    id: int
    items: list[Item]


class Node(pydantic.BaseModel):
    name: str
    children: list["Node"]


def test_tools_of_nested_and_recursive_pydantic_models(served):
    tools = [openai.pydantic_function_tool(Order), openai.pydantic_function_tool(Node)]
    params = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for seed in range(3):
        r = _chat(served, messages=[{"role": "user", "content": "Order two apples (sku A1)."}], tools=tools,
                  tool_choice="required", max_tokens=96, temperature=1.0, seed=seed)
        assert r.choices[0].finish_reason == "tool_calls"
        for call in r.choices[0].message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])
    bad = {"type": "function", "function": {"name": "x", "parameters": {"type": "object", "properties": {
        "a": {"$ref": "#/$defs/Missing"}}}}}
    code, body = served.post("/v1/chat/completions", {"messages": ASK, "tools": [*tools, bad]})
    assert code == 400 and body["error"]["param"] == "tools"
    assert "tools[2].function.parameters#/properties/a/$ref" in body["error"]["message"]


# -- errors are requests' answers, never a crash --------------------------------------------------

@pytest.mark.parametrize("body,status,param", [
    (b"{not json", 400, None),
    ([1, 2], 400, None),
    ({"messages": []}, 400, "messages"),
    ({"messages": ASK, "max_tokens": -3}, 400, "max_tokens"),
    ({"messages": ASK, "max_tokens": 10 ** 9}, 400, "max_tokens"),
    ({"messages": ASK, "temperature": "hot"}, 400, "temperature"),
    ({"messages": ASK, "top_p": 5}, 400, "top_p"),
    ({"messages": ASK, "n": 3}, 400, "n"),
    ({"messages": ASK, "logprobs": True}, 400, "logprobs"),
    ({"messages": ASK, "logprobs": 1}, 400, "logprobs"),
    ({"messages": ASK, "wibble": 1}, 400, "wibble"),
    ({"messages": ASK, "regex": "a", "choice": ["b"]}, 400, "choice"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": "x"}]}, ASK[0]]}, 400,
     "messages"),
    ({"messages": ASK, "tools": TOOLS, "regex": "a+"}, 400, "tools"),
    ({"messages": ASK, "max_tokens": 2, "response_format": SCHEMA_FORMAT}, 400, "max_tokens"),
    ({"messages": [{"role": "user", "content": "word " * 3000}]}, 400, "messages"),
])
def test_malformed_requests_are_400s(served, body, status, param):
    code, got = served.post("/v1/chat/completions", body)
    assert code == status, got
    assert got["error"]["param"] == param and got["error"]["message"]
    assert served.get("/health")["status"] == "ok"


def test_a_body_over_the_bound_is_refused(served):
    code, got = served.post("/v1/chat/completions", b'{"messages": "' + b"x" * (5 * 1024 * 1024) + b'"}')
    assert code == 413 and "bytes" in got["error"]["message"]


def test_models_and_health(served):
    models = served.client.models.list()
    assert len(models.data) == 1 and models.data[0].owned_by == "localguide"
    h = served.get("/health")
    assert h["status"] == "ok" and h["parallel"] == 1


# -- several sequences, a key, a client that goes away ---------------------------------------------

def test_an_api_key_is_needed_where_one_is_set(batched):
    code, body = batched.post("/v1/chat/completions", {"messages": ASK, "max_tokens": 2},
                              headers={"Authorization": "Bearer wrong"})
    assert code == 401 and body["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=batched.url + "/v1", api_key="wrong", max_retries=0).models.list()
    assert batched.get("/health")["status"] == "ok"  # (health needs no key)


def test_concurrent_requests_on_two_sequences_and_a_queue(batched):
    results, errors = {}, []

    def ask(i):
        try:
            kw = {"response_format": SCHEMA_FORMAT} if i % 2 else {"extra_body": {"regex": r"[A-Z][a-z]{2,8}"}}
            r = _chat(batched, messages=ASK, max_tokens=40, temperature=1.0, seed=i, **kw)
            results[i] = r.choices[0].message.content
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(5)]  # (5 on 2 sequences: 3 wait)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, text in results.items():
        if i % 2:
            jsonschema.validate(json.loads(text), PERSON)
        else:
            assert re.fullmatch(r"[A-Z][a-z]{2,8}", text), text
    assert len(results) == 5


def _rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_twenty_concurrent_clients(batched):
    """20 clients at once on 2 sequences (18 queue): every answer valid, some streamed and some
    dropped half-way, the server alive after, its memory bounded."""
    def ask(i):
        if i % 5 == 4:  # (a client that goes away mid-stream)
            stream = _chat(batched, messages=ASK, max_tokens=200, temperature=1.0, seed=i, stream=True)
            next(iter(stream))
            stream.close()
            return None
        if i % 5 == 3:
            chunks = _chat(batched, messages=ASK, response_format=SCHEMA_FORMAT, max_tokens=40, temperature=1.0,
                           seed=i, stream=True)
            return json.loads("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        r = _chat(batched, messages=ASK, response_format=SCHEMA_FORMAT, max_tokens=40, temperature=1.0, seed=i)
        return json.loads(r.choices[0].message.content)

    before = None
    for round_ in range(2):
        results, errors = {}, []

        def run(i):
            try:
                results[i] = ask(i)
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

        threads = [threading.Thread(target=run, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        for value in results.values():
            if value is not None:
                jsonschema.validate(value, PERSON)
        assert len(results) == 20
        rss = _rss_mb(batched.proc.pid)
        if before is None:
            before = rss
    assert rss < before + 100, (before, rss)  # (a second round of 20 leaves no trail)
    deadline = time.time() + 10
    while batched.get("/health")["active"] and time.time() < deadline:
        time.sleep(0.1)
    h = batched.get("/health")
    assert h["status"] == "ok" and h["active"] == 0 and h["waiting"] == 0


def test_batched_greedy_answers_keep_to_their_own_sequence(batched):
    """Two sequences decoded together each get an answer of their own request: the JSON one valid
    for its schema, the story free text. (Not always the text a lone request gets: with several
    sequences llama.cpp's fastest kernels round a position's logits by the batch, and greedy text
    parts where two tokens nearly tie: ``tests/engines/llamacpp/test_batch.py`` counts how often.)"""
    kw = dict(max_tokens=16, temperature=0, response_format=SCHEMA_FORMAT)
    alone = _chat(batched, messages=ASK, **kw).choices[0].message.content
    jsonschema.validate(json.loads(alone), PERSON)
    out = {}

    def ask(i):
        out[i] = _chat(batched, messages=ASK if i == 0 else [{"role": "user", "content": "Tell a long story."}],
                       **(kw if i == 0 else dict(max_tokens=40, temperature=0))).choices[0].message.content

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    jsonschema.validate(json.loads(out[0]), PERSON)
    assert not out[1].lstrip().startswith("{") and len(out[1]) > 20, out[1]


def test_a_client_that_goes_away_frees_its_sequence(batched):
    stream = _chat(batched, messages=[{"role": "user", "content": "Tell a long story."}], max_tokens=1000,
                   temperature=1.0, stream=True)
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    deadline = time.time() + 10
    while batched.get("/health")["active"] and time.time() < deadline:
        time.sleep(0.1)
    assert batched.get("/health")["active"] == 0
    r = _chat(batched, messages=ASK, response_format=SCHEMA_FORMAT, max_tokens=40)  # (and it goes on)
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)


# -- the playground, in a real browser -------------------------------------------------------------

def test_the_playground_streams_a_valid_answer_in_a_browser(smollm2_path, tmp_path):
    """The page at / in headless Chromium: the form filled from its link, the answer streamed
    into the page, valid for the schema, and the stats table beside it."""
    import urllib.parse

    from browser import Browser

    s = Served(smollm2_path)
    browser = Browser()
    try:
        query = urllib.parse.urlencode({"prompt": "A person:", "kind": "json_schema",
                                        "constraint": json.dumps(PERSON), "max_tokens": "40", "run": "1"})
        browser.open(f"{s.url}/?{query}")
        browser.wait_for("document.body.dataset.done === '1'")
        text = browser.evaluate("document.getElementById('output').textContent")
        jsonschema.validate(json.loads(text), PERSON)
        stats = browser.evaluate("document.getElementById('stats').textContent")
        assert "finish_reason" in stats and "tokens_per_second" in stats
        assert "compile_seconds" in stats and "queue_seconds" in stats
        assert browser.evaluate("document.getElementById('state').textContent") == "done"
        assert "json_schema" in browser.evaluate("document.getElementById('constraint-shown').textContent")
        # tools: the calls drawn as their deltas come, name first, arguments joined
        query = urllib.parse.urlencode({"prompt": "Weather in Oslo?", "kind": "tools", "constraint": json.dumps(TOOLS),
                                        "max_tokens": "64", "run": "1"})
        browser.evaluate("document.body.dataset.done = ''")
        browser.open(f"{s.url}/?{query}")
        browser.wait_for("document.body.dataset.done === '1'")
        text = browser.evaluate("document.getElementById('output').textContent").strip()
        for line in text.splitlines():  # (one line a call)
            name, _, args = line.partition("(")
            assert name in ARGS and args.endswith(")"), text
            jsonschema.validate(json.loads(args[:-1]), ARGS[name])
        browser.screenshot(tmp_path / "playground.png")
        assert (tmp_path / "playground.png").stat().st_size > 10_000
    finally:
        browser.close()
        s.close()


@pytest.mark.parametrize("parallel", [1, 2])
def test_warm_up_takes_each_path_then_sets_its_objects_aside(model, parallel):
    """``serve``'s warm-up answers a plain, a regex, a grammar and a JSON Schema chat request
    through the server's own path (compile workers, engine), none failing, then freezes what is
    alive for the cycle collector: a full collection after it walks only later objects."""
    import gc

    from localguide.server import make_server

    server = make_server(model, parallel=parallel, n_ctx=256)
    try:
        outcomes = server.warm_up()
        assert gc.get_freeze_count() > 10_000
        assert len(outcomes) == 4 and all(o in ("stop", "length") for o in outcomes), outcomes
        assert len(server.compiled) == 3
        gc.unfreeze()
        server._requests = 1  # (a request under way: its objects are not set aside for good)
        assert all(o in ("stop", "length") for o in server.warm_up(settle=0.3))
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        server.close()


def test_smc_extension_draws_a_valid_answer(served):
    # ``smc``: the answer drawn by sequential Monte Carlo in a context of its own, streamed or
    # whole, over the OpenAI and Ollama routes; what it cannot do is refused, naming the field.
    r = _chat(served, messages=ASK, response_format=SCHEMA_FORMAT, max_tokens=60, temperature=1.0, seed=3,
              extra_body={"smc": 4, "stats": True})
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
    st = r.model_extra["localguide"]["smc"]
    assert st["particles"] == 4 and len(st["ess"]) >= 2 and r.usage.completion_tokens > 0
    parts = [c.choices[0].delta.content or "" for c in _chat(
        served, messages=[{"role": "user", "content": "Yes or no?"}], max_tokens=4, stream=True,
        extra_body={"smc": 3, "choice": ["yes", "no"]}) if c.choices]
    assert "".join(parts) in ("yes", "no")
    status, body = served.post("/v1/completions", {"prompt": "The answer is", "choice": [" no", " yes!"], "smc": 2,
                                                   "max_tokens": 6})
    assert status == 200 and body["choices"][0]["text"] in (" no", " yes!"), body
    status, body = served.post("/api/chat", {"model": "m", "messages": ASK, "format": PERSON, "smc": 2, "stream": False,
                                             "options": {"num_predict": 60}})
    assert status == 200, body
    jsonschema.validate(json.loads(body["message"]["content"]), PERSON)
    for extra, param in (({"smc": 4}, "smc"), ({"smc": 1, "choice": ["a"]}, "smc"), ({"smc": 65, "choice": ["a"]}, "smc"),
                         ({"smc": "4", "choice": ["a"]}, "smc"), ({"smc": 4, "choice": ["a"], "stop": ["x"]}, "stop"),
                         ({"smc": 4, "choice": ["a"], "temperature": 0}, "temperature"),
                         ({"smc": 4, "choice": ["a"], "top_k": 5}, "top_k"),
                         ({"smc": 64, "choice": ["a"], "max_tokens": 1000}, "smc")):
        status, body = served.post("/v1/chat/completions", {"model": "m", "messages": ASK, **extra})
        assert status == 400 and body["error"]["param"] == param, (extra, body)
    assert served.get("/health")["status"] == "ok"
