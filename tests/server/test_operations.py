"""What running ``localguide serve`` for others needs, on a real server process: CORS for browser
apps, ``/v1/models/{id}``, ``/metrics`` read by Prometheus' own parser, a log line per request,
compile and queue time apart from generation speed, and SIGTERM draining the streams under way."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request

import openai
import pytest

sys.path.insert(0, os.path.dirname(__file__))
from test_server import Served  # noqa: E402

APP = "http://app.example:3000"


@pytest.fixture(scope="module")
def served(smollm2_path):
    s = Served(smollm2_path, extra=("--cors", APP))
    yield s
    s.close()


def _request(s: Served, method: str, path: str, headers: dict, body: bytes | None = None):
    req = urllib.request.Request(s.url + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_a_browser_preflight_from_an_allowed_origin(served):
    status, headers, _ = _request(served, "OPTIONS", "/v1/chat/completions", {
        "Origin": APP, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert status == 200 and headers["access-control-allow-origin"] == APP
    assert "POST" in headers["access-control-allow-methods"]
    status, headers, _ = _request(served, "OPTIONS", "/api/chat", {
        "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
    assert status == 400 and "access-control-allow-origin" not in headers
    status, headers, body = _request(served, "POST", "/v1/completions", {"Origin": APP, "Content-Type":
                                     "application/json"}, json.dumps({"prompt": "Hi", "max_tokens": 2}).encode())
    assert status == 200 and headers["access-control-allow-origin"] == APP


def test_no_cors_without_the_option(smollm2_path):
    s = Served(smollm2_path)
    try:
        status, headers, _ = _request(s, "OPTIONS", "/v1/chat/completions", {
            "Origin": APP, "Access-Control-Request-Method": "POST"})
        assert status == 405 and "access-control-allow-origin" not in headers
    finally:
        s.close()


def test_models_retrieve(served):
    (entry,) = served.client.models.list().data
    assert served.client.models.retrieve(entry.id).id == entry.id
    with pytest.raises(openai.NotFoundError):
        served.client.models.retrieve("no-such-model")


def test_metrics_parse_and_count(served):
    from prometheus_client.parser import text_string_to_metric_families

    def read() -> dict:
        with urllib.request.urlopen(served.url + "/metrics", timeout=10) as r:
            assert r.headers["Content-Type"].startswith("text/plain")
            text = r.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    before = read()
    served.client.completions.create(model="m", prompt="Hi", max_tokens=3, temperature=0)
    _request(served, "GET", "/no/such/path/" + "x" * 50, {})
    after = read()
    key = ("localguide_requests_total", (("route", "/v1/completions"), ("status", "200")))
    assert after[key] == before.get(key, 0) + 1
    assert after[("localguide_generated_tokens_total", ())] >= before[("localguide_generated_tokens_total", ())] + 1
    assert after[("localguide_requests_total", (("route", "other"), ("status", "404")))] >= 1
    assert not any("no/such" in str(k) for k in after)
    assert after[("localguide_parallel", ())] == 1 and ("localguide_requests_waiting", ()) in after


def test_stats_keep_compile_and_queue_time_apart(served):
    r = served.client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "A code:"}], max_tokens=12,
        extra_body={"regex": "[A-Z]{3}-[0-9]{4}", "stats": True})
    st = r.model_extra["localguide"]
    assert st["compile_seconds"] >= 0 and st["queue_seconds"] >= 0 and st["prompt_seconds"] > 0
    assert st["tokens_per_second"] == pytest.approx(st["tokens"] / st["seconds"], rel=1e-3)


def test_a_log_line_per_request(smollm2_path):
    s = Served(smollm2_path)
    s.client.completions.create(model="m", prompt="Hi", max_tokens=2)
    _request(s, "GET", "/x%0A09:00:00%20POST%20/v1/chat/completions%20200%1B[31m", {})
    s.close()
    out = s.proc.stdout.read()
    assert "\x1b" not in out and not any(line.startswith("09:00:00 POST") for line in out.splitlines()), out
    assert "/x\\n09:00:00 POST" in out
    assert any(re.search(r"POST /v1/completions 200 [12] tokens [0-9.]+ s$", line) for line in out.splitlines()), out


def _streaming(s: Served, body: dict):
    """A streamed completion read in a thread: (the thread, its lines so far, set at the first)."""
    lines: list[str] = []
    first = threading.Event()

    def stream():
        req = urllib.request.Request(s.url + "/v1/completions", method="POST", headers={
            "Content-Type": "application/json"}, data=json.dumps({**body, "stream": True}).encode())
        with urllib.request.urlopen(req, timeout=120) as r:
            for raw in r:
                if raw.strip():
                    lines.append(raw.decode().strip())
                    first.set()

    t = threading.Thread(target=stream)
    t.start()
    return t, lines, first


def test_sigterm_drains_then_cuts_a_stream(smollm2_path):
    s = Served(smollm2_path, extra=("--drain-timeout", "1", "--compile-timeout", "300"))
    t, lines, first = _streaming(s, {"prompt": "Words:", "max_tokens": 1000, "regex": "[a-z ]{600}"})
    assert first.wait(300)  # (the first line comes once the constraint has compiled: up to a minute on 2 busy cores)
    started = time.time()
    s.proc.send_signal(signal.SIGTERM)
    t.join(30)
    assert not t.is_alive()
    assert s.proc.wait(30) in (0, -signal.SIGTERM) and time.time() - started < 15  # (uvicorn re-raises it)
    assert lines[-1] == "data: [DONE]"
    err = json.loads(lines[-2][len("data: "):])
    assert err["error"]["code"] == "shutting_down"
    assert len(lines) > 4  # (tokens went on streaming during the drain)


def test_sigterm_lets_a_short_answer_finish(smollm2_path):
    s = Served(smollm2_path, extra=("--drain-timeout", "30", "--compile-timeout", "300"))
    t, lines, first = _streaming(s, {"prompt": "Words:", "max_tokens": 40, "regex": "[a-z ]{40}"})
    assert first.wait(300)
    s.proc.send_signal(signal.SIGTERM)
    t.join(60)
    assert lines[-1] == "data: [DONE]"
    last = json.loads(lines[-2][len("data: "):])
    assert last["choices"][0]["finish_reason"] in ("stop", "length") and "error" not in last
    assert s.proc.wait(30) in (0, -signal.SIGTERM)


def test_a_host_name_that_is_not_loopback_is_refused(served):
    """DNS rebinding: a page whose name comes to point at 127.0.0.1 sends its own name as Host."""
    status, _, body = _request(served, "POST", "/v1/completions", {"Host": "attacker.example:8080",
                               "Content-Type": "application/json"}, json.dumps({"prompt": "Hi", "max_tokens": 1}).encode())
    assert status == 400
    for host in ("127.0.0.1", "localhost"):
        status, _, _ = _request(served, "GET", "/health", {"Host": f"{host}:{served.port}"})
        assert status == 200
