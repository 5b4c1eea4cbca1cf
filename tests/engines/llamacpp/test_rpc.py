"""A model split across ``localguide worker`` processes (llama.cpp's RPC backend), on loopback, both
models: the same greedy constrained texts as a local model; a worker that is down at load is an
error naming it; a worker lost mid-generation ends the process with a line naming it; workers
listen on loopback unless told. Needs a llama-cpp-python built with ``GGML_RPC=ON``."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time

import pytest

from localguide.engines.llamacpp import rpc

pytestmark = pytest.mark.skipif(bool(rpc.available()), reason=rpc.available() or "")

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 16},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
CASES = [("Born in", dict(regex=r"(18|19|20)\d{2}")), ("A person:", dict(json_schema=PERSON)),
         ("2+2*3 =", dict(grammar="arithmetic"))]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Worker:
    """A ``localguide worker`` process on a free loopback port."""

    def __init__(self, *extra: str, port: int | None = None):
        self.port = port or _free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "localguide.cli", "worker", "--port", str(self.port),
                                      "--threads", "1", *extra], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        deadline = time.time() + 60
        while True:
            try:
                rpc.check_worker(self.endpoint, timeout=1)
                return
            except rpc.WorkerError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("the worker did not start: " + (self.proc.stdout.read() or ""))
                time.sleep(0.2)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def workers():
    ws = [Worker(), Worker()]
    yield ws
    for w in ws:
        w.close()


THROUGH = """
import json, sys, localguide
sys.path.insert(0, sys.argv[2])
from test_rpc import CASES
m = localguide.load(sys.argv[1], n_ctx=512, workers=sys.argv[3:])
print(json.dumps({"devices": m.worker_devices,
                  "texts": [m.generate(p, temperature=0, max_tokens=24, **kw) for p, kw in CASES]}))
del m
"""


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_greedy_texts_through_two_workers_equal_the_local_ones(name, model_paths, workers):
    """(the model on workers lives in a child process: llama.cpp ends a process whose workers are
    gone, and the test's own process must outlive them)"""
    import json

    import localguide

    local = localguide.load(model_paths[name], n_ctx=512)
    want = [local.generate(p, temperature=0, max_tokens=24, **kw) for p, kw in CASES]
    r = subprocess.run([sys.executable, "-c", THROUGH, str(model_paths[name]), os.path.dirname(__file__),
                        *(w.endpoint for w in workers)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(got["devices"]) == 2
    # (the workers' CPU kernels are llama.cpp's own, as here: the texts are expected equal; a
    # difference would come from batched logits and is counted, not hidden)
    same = sum(a == b for a, b in zip(want, got["texts"]))
    assert same == len(CASES), list(zip(want, got["texts"]))


def test_a_worker_that_is_down_is_an_error_naming_it(smollm2_path):
    import localguide

    endpoint = f"127.0.0.1:{_free_port()}"
    with pytest.raises(rpc.WorkerError, match=endpoint.replace(".", r"\.") + ".*not reachable"):
        localguide.load(smollm2_path, workers=[endpoint])
    with pytest.raises(ValueError, match="host:port"):
        rpc.parse_endpoint("host:port:x")


def test_something_that_is_no_worker_is_told_apart(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        endpoint = f"127.0.0.1:{s.getsockname()[1]}"
        import threading

        def answer():
            conn, _ = s.accept()
            conn.recv(64)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            conn.close()

        t = threading.Thread(target=answer)
        t.start()
        with pytest.raises(rpc.WorkerError, match="not a llama.cpp RPC worker"):
            rpc.check_worker(endpoint)
        t.join(5)


def test_a_worker_lost_mid_generation_is_named(smollm2_path):
    a, b = Worker(), Worker()
    try:
        code = ("import localguide, sys; m = localguide.load(sys.argv[1], n_ctx=1024, workers=sys.argv[2:]); "
                "print('loaded', flush=True); "
                "[print(p, end='', flush=True) for p in m.stream('Words:', regex='[a-z ]{800}', "
                "max_tokens=900)]")
        child = subprocess.Popen([sys.executable, "-c", code, str(smollm2_path), a.endpoint, b.endpoint],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert child.stdout.readline().strip() == "loaded"
        child.stdout.read(20)  # (the generation is under way)
        b.proc.kill()
        _, err = child.communicate(timeout=120)
        assert child.returncode != 0
        assert f"worker {b.endpoint} is gone" in err and f"worker {a.endpoint}" not in err, err
    finally:
        a.close()
        b.close()


def test_a_batch_that_loses_a_worker_leaves_whole_lines_and_finishes_when_rerun(smollm2_path, tmp_path):
    # llama.cpp ends the process that loses a worker mid-decode: what the batch wrote before holds
    # whole lines only, and the same command, once the worker is back, finishes the rest (each id once).
    a, b = Worker(), Worker()
    again = None
    pattern = "[a-z]{3,10}( [a-z]{3,10}){5,9}"
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    n = 24  # (the kill comes after two lines; the rerun writes the rest)
    src.write_text("".join(json.dumps({"id": i, "prompt": f"Item {i}, some words:"}) + "\n" for i in range(n)))
    cmd = [sys.executable, "-m", "localguide.cli", "batch", str(smollm2_path), str(src), "-o", str(out),
           "--regex", pattern, "--workers", f"{a.endpoint},{b.endpoint}", "--parallel", "2", "--n-ctx", "1024",
           "--max-tokens", "48", "--seed", "3", "-q"]
    try:
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 240
        while not (out.exists() and out.read_bytes().count(b"\n") >= 2):
            assert child.poll() is None and time.time() < deadline, "two lines written"
            time.sleep(0.02)
        b.proc.kill()
        _, err = child.communicate(timeout=120)
        if child.returncode == 0:  # (a machine fast enough to finish every item before the kill)
            pytest.skip("the batch ended before its worker was killed")
        assert f"worker {b.endpoint} is gone" in err, err
        first = out.read_bytes()
        lines = first.split(b"\n")
        whole = [json.loads(x) for x in lines[:-1]]  # (every line ended is whole; a torn last one is cut on the rerun)
        assert 2 <= len(whole) < n and len({r["id"] for r in whole}) == len(whole)
        again = Worker(port=b.port)
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        rows = [json.loads(x) for x in out.read_text().splitlines()]
        assert sorted(r["id"] for r in rows) == list(range(n))
        assert all(re.fullmatch(pattern, r["text"]) for r in rows if r.get("finish_reason") == "stop"), rows
        assert out.read_bytes().startswith(b"\n".join(lines[:-1]))  # (the lines before kept as they were)
    finally:
        a.close()
        b.close()
        if again is not None:
            again.close()


def _call(url: str, body: dict | None = None, timeout: float = 120) -> tuple[int, dict, dict]:
    """(status, headers, JSON body) of a GET, or of a POST of ``body``."""
    import json
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


def _until(check, seconds: float, what: str):
    deadline = time.time() + seconds
    while True:
        try:
            got = check()
            if got:
                return got
        except OSError:
            pass
        if time.time() > deadline:
            raise AssertionError(f"{what} within {seconds} s")
        time.sleep(0.5)


def _told(failure: AssertionError | None, out: str) -> None:
    """Raise ``failure`` with what the server printed, the first thing to read where it failed."""
    if failure is not None:
        raise AssertionError(f"{failure}\n--- the server printed:\n{out[-8000:]}") from failure


def test_serve_answers_503_while_a_worker_is_down_and_serves_again(smollm2_path):
    # llama.cpp ends the process whose worker is lost: `serve` runs in a child that it starts
    # again; meanwhile every request gets a 503 naming the worker, in each API's own shape.
    import http.client
    import urllib.error

    w = Worker()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    ask = {"messages": [{"role": "user", "content": "Born in which year?"}], "max_tokens": 8,
           "response_format": {"type": "json_schema", "json_schema": {"name": "y", "schema": {
               "type": "object", "properties": {"year": {"type": "integer"}}, "required": ["year"]}}}}
    proc = subprocess.Popen([sys.executable, "-m", "localguide.cli", "serve", str(smollm2_path), "--port", str(port),
                             "--n-ctx", "512", "--workers", w.endpoint], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    again = failure = None
    try:
        _until(lambda: _call(url + "/health", timeout=2)[0] == 200, 120, "the server up")
        status, _, body = _call(url + "/v1/chat/completions", ask)
        assert status == 200 and body["choices"][0]["message"]["content"].startswith("{")
        w.proc.kill()
        w.proc.wait(10)
        try:  # (this request's decode finds the worker gone: the child ends, and the connection with it)
            lost = _call(url + "/v1/chat/completions", ask)[0]
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError):
            lost = None
        assert lost in (None, 503), lost
        status, headers, body = _until(lambda: (r := _call(url + "/v1/chat/completions", ask, 10))[0] == 503 and r,
                                       60, "a 503")
        assert headers["Retry-After"] == "5" and w.endpoint in body["error"]["message"], body
        status, _, body = _call(url + "/api/chat", {"model": "m", "messages": ask["messages"], "stream": False})
        assert status == 503 and w.endpoint in body["error"], body
        again = Worker(port=w.port)
        _until(lambda: _call(url + "/v1/chat/completions", ask, 30)[0] == 200, 180, "serving again")
        assert proc.poll() is None
    except AssertionError as e:
        failure = e
    finally:
        proc.terminate()
        out = proc.communicate(timeout=60)[0]
        w.close()
        if again is not None:
            again.close()
    _told(failure, out)
    assert f"worker {w.endpoint} is not reachable" in out and "serving again" in out, out


def test_serve_starts_again_where_a_worker_hangs(smollm2_path):
    # A worker that neither answers nor closes its connection (stopped here) would hold a decode
    # for good: past --worker-timeout the server's child ends, the parent answers 503s naming the
    # worker while its greeting goes unanswered, and serves again once it answers.
    import http.client
    import signal
    import urllib.error

    w = Worker()
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    ask = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 8, "choice": ["red", "blue"]}
    proc = subprocess.Popen([sys.executable, "-m", "localguide.cli", "serve", str(smollm2_path), "--port", str(port),
                             "--n-ctx", "512", "--workers", w.endpoint, "--worker-timeout", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    failure = None
    try:
        _until(lambda: _call(url + "/health", timeout=2)[0] == 200, 120, "the server up")
        # (a decode slower than the watchdog, on a loaded machine, ends the child, which the parent starts again)
        _until(lambda: _call(url + "/v1/chat/completions", ask)[0] == 200, 180, "a first answer")
        os.kill(w.proc.pid, signal.SIGSTOP)
        t = time.time()
        try:  # (its decode waits on the stopped worker until the watchdog ends the child)
            lost = _call(url + "/v1/chat/completions", ask, 60)[0]
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError):
            lost = None
        assert lost in (None, 503) and time.time() - t < 30, lost
        status, _, body = _until(lambda: (r := _call(url + "/v1/chat/completions", ask, 10))[0] == 503 and r,
                                 60, "a 503")
        assert w.endpoint in body["error"]["message"], body
        os.kill(w.proc.pid, signal.SIGCONT)
        _until(lambda: _call(url + "/v1/chat/completions", ask, 30)[0] == 200, 180, "serving again")
        assert proc.poll() is None
    except AssertionError as e:
        failure = e
    finally:
        os.kill(w.proc.pid, signal.SIGCONT)
        proc.terminate()
        out = proc.communicate(timeout=60)[0]
        w.close()
    _told(failure, out)
    assert "a decode has waited 4 s on the workers" in out and "serving again" in out, out


def test_workers_listen_on_loopback_unless_told():
    w = Worker()
    try:
        out = ""
        w.proc.kill()
        out = w.proc.stdout.read()
        assert f"localguide worker on 127.0.0.1:{w.port}" in out
    finally:
        w.proc.wait(10)
    port = _free_port()
    p = subprocess.Popen([sys.executable, "-m", "localguide.cli", "worker", "--host", "0.0.0.0", "--port", str(port)],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(3)
    finally:
        p.kill()
    out = p.stdout.read()
    assert "no authentication" in out and "0.0.0.0" in out


def test_info_lists_the_workers_devices():
    ws = [Worker(), Worker()]  # (a worker serves one main process at a time: fresh ones)
    try:
        r = subprocess.run([sys.executable, "-m", "localguide.cli", "info", "--workers",
                            ",".join(w.endpoint for w in ws)], capture_output=True, text=True, timeout=120)
    finally:
        for w in ws:
            w.close()
    assert r.returncode == 0, r.stderr
    assert "workers (RPC)" in r.stdout and "yes, RPC protocol 7.0.0" in r.stdout
    assert r.stdout.count("worker device RPC") == 2 and "GB free" in r.stdout, r.stdout
