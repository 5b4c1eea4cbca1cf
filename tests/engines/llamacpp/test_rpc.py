"""A model split across ``localguide worker`` processes (llama.cpp's RPC backend), on loopback, both
models: the same greedy constrained texts as a local model; a worker that is down at load is an
error naming it; a worker lost mid-generation ends the process with a line naming it; workers
listen on loopback unless told. Needs a llama-cpp-python built with ``GGML_RPC=ON``."""

from __future__ import annotations

import os
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

    def __init__(self, *extra: str):
        self.port = _free_port()
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
