"""A model split across two ``localguide worker`` processes on loopback, against the same model local.

Per model: the main process's resident memory after the runs (local, then through the workers, each
in a fresh process; anonymous memory apart from the model file's pages, which loading reads once to
send them and the kernel may drop), tokens/s unconstrained and constrained (a regex, a JSON Schema) greedy with
speculation off (one decode a token: the round trips per token are the decode's), the three modes
taking turns prompt by prompt; the ratio of constrained to unconstrained; and the guide's own cost:
the host's milliseconds per token outside ``llama_decode`` (each decode timed to its end), constrained
minus unconstrained, as a share of an unconstrained token's time. Then, through a counting proxy in
front of each worker (a third process, not timed): the round trips per decode (a request answered)
and the bytes each way.

    python benchmarks/rpc.py --models smollm2,gemma
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import log, model_paths  # noqa: E402

CHILD = r"""
import json, sys, time
import localguide
import llama_cpp
path, workers, sync = sys.argv[1], [w for w in sys.argv[2].split(",") if w], sys.argv[3] == "sync"
m = localguide.load(path, n_ctx=1024, **({"workers": workers} if workers else {}))
def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) / 1024
decoding = [0.0]
real = llama_cpp.llama_decode
def timed(ctx, batch):
    t = time.perf_counter()
    rc = real(ctx, batch)
    llama_cpp.llama_synchronize(ctx)
    decoding[0] += time.perf_counter() - t
    return rc
llama_cpp.llama_decode = timed
person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
          "city": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "city", "age"], "additionalProperties": False}
modes = {"free": {}, "regex": {"regex": "[a-z]+( [a-z]+){0,60}"}, "schema": {"json_schema": person}}
out = {k: {"tokens": 0, "seconds": 0.0, "host": 0.0, "decodes": 0} for k in modes}
for kw in modes.values():
    m.generate("Warm up:", max_tokens=32, temperature=0, speculate=False, **kw)
prompts = ("A person:", "Tell me about a city:", "Write:") * (1 if sync else 2)
for i, prompt in enumerate(prompts):
    names = list(modes)[i % 3:] + list(modes)[:i % 3]  # (each mode first in turn: the machine drifts)
    for name in names:
        if sync:
            print("ready", flush=True)
            sys.stdin.readline()
        before = decoding[0]
        m.generate(prompt, max_tokens=48, temperature=0, speculate=False, **modes[name])
        s = m.last_stats
        if sync:
            print("done", name, s.decode_calls + 1, flush=True)  # (and the prompt's decode)
            sys.stdin.readline()
        o = out[name]
        o["tokens"] += s.tokens
        o["seconds"] += s.seconds
        o["host"] += s.seconds + s.prompt_seconds - (decoding[0] - before)
        o["decodes"] += s.decode_calls
result = {k: v["tokens"] / v["seconds"] for k, v in out.items()}
result["host_ms"] = {k: 1e3 * v["host"] / v["tokens"] for k, v in out.items()}
result["anon_mb"], result["file_mb"] = status("RssAnon"), status("RssFile")
print(json.dumps(result))
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_workers(n: int) -> list:
    from localguide.engines.llamacpp import rpc

    procs = []
    for _ in range(n):
        port = free_port()
        p = subprocess.Popen([sys.executable, "-m", "localguide.cli", "worker", "--port", str(port), "--threads", "1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(300):
            try:
                rpc.check_worker(f"127.0.0.1:{port}", timeout=1)
                break
            except rpc.WorkerError:
                time.sleep(0.2)
        procs.append((p, f"127.0.0.1:{port}"))
    return procs


def child(path: Path, workers: list[str]) -> dict:
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), ",".join(workers), "timed"], capture_output=True,
                       text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


class Counting:
    """A TCP proxy in front of one worker: round trips (a request, then its answer) and bytes each way."""

    def __init__(self, endpoint: str):
        host, port = endpoint.split(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.trips = self.sent = self.received = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def counts(self) -> tuple[int, int, int]:
        with self._lock:
            return self.trips, self.sent, self.received

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            for s in (conn, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            last = ["w"]
            threading.Thread(target=self._pump, args=(conn, upstream, "m", last), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, conn, "w", last), daemon=True).start()

    def _pump(self, src, dst, side: str, last: list) -> None:
        try:
            while True:
                data = src.recv(1 << 16)
                if not data:
                    break
                with self._lock:
                    if side == "m":
                        self.sent += len(data)
                    else:
                        self.received += len(data)
                        self.trips += last[0] == "m"
                    last[0] = side
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def round_trips(path: Path, workers: list[str]) -> dict:
    """Per mode: round trips and kilobytes each way per decode, through counting proxies (not timed)."""
    proxies = [Counting(w) for w in workers]
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(path), ",".join(p.endpoint for p in proxies), "sync"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    per: dict[str, list] = {}
    try:
        while True:
            line = proc.stdout.readline().split()
            if not line or line[0].startswith("{"):
                break
            if line[0] == "ready":
                before = [p.counts() for p in proxies]
            else:
                time.sleep(0.05)  # (the last answer's bytes through the proxy)
                after = [p.counts() for p in proxies]
                got = [sum(a[i] - b[i] for a, b in zip(after, before)) for i in range(3)]
                per.setdefault(line[1], []).append((int(line[2]), *got))
            proc.stdin.write("\n")
            proc.stdin.flush()
    finally:
        proc.kill()
        proc.wait()
    out = {}
    for mode, rows in per.items():
        decodes = sum(r[0] for r in rows)
        out[mode] = (sum(r[1] for r in rows) / decodes, sum(r[2] for r in rows) / decodes / 1024,
                     sum(r[3] for r in rows) / decodes / 1024)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    args = ap.parse_args()
    paths = model_paths(args.models.split(","), [])
    log("| model | where | main process memory MB (anonymous + file pages) | free tok/s | regex tok/s | schema tok/s "
        "| regex / free | schema / free | host ms per token (free, regex, schema) | the guide's cost per token "
        "(regex, schema), of a free token's time |")
    log("|---|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        procs = start_workers(2)
        try:
            for where, workers in (("local", []), ("2 loopback workers", [e for _, e in procs])):
                r = child(paths[name], workers)
                h = r["host_ms"]
                token_ms = 1e3 / r["free"]
                log(f"| {name} | {where} | {r['anon_mb']:.0f} + {r['file_mb']:.0f} | {r['free']:.1f} | {r['regex']:.1f} | "
                    f"{r['schema']:.1f} | {r['regex'] / r['free']:.3f} | {r['schema'] / r['free']:.3f} | "
                    f"{h['free']:.2f}, {h['regex']:.2f}, {h['schema']:.2f} | "
                    f"{(h['regex'] - h['free']) / token_ms:+.1%}, {(h['schema'] - h['free']) / token_ms:+.1%} |")
            trips = round_trips(paths[name], [e for _, e in procs])
            log(f"{name}, through 2 workers, per decode: " + "; ".join(
                f"{mode}: {t:.1f} round trips, {up:.1f} KiB sent, {down:.1f} KiB received"
                for mode, (t, up, down) in trips.items()))
        finally:
            for p, _ in procs:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
