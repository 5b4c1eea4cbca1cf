"""A model split across two ``localguide worker`` processes on loopback, against the same model local.

Per model: the main process's resident memory after the runs (local, then through the workers, each
in a fresh process; anonymous memory apart from the model file's pages, which loading reads once to
send them and the kernel may drop), tokens/s unconstrained and constrained (a regex, a JSON Schema) greedy with
speculation off (one decode a token: the round trips per token are the decode's), and the ratio of
constrained to unconstrained through the workers (the guide's cost, as locally).

    python benchmarks/rpc.py --models smollm2,gemma
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import log, model_paths  # noqa: E402

CHILD = r"""
import json, sys, time
import localguide
path, workers = sys.argv[1], [w for w in sys.argv[2].split(",") if w]
m = localguide.load(path, n_ctx=1024, **({"workers": workers} if workers else {}))
def status(key):
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith(key)) / 1024
person = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
          "city": {"type": "string", "maxLength": 20}, "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "city", "age"], "additionalProperties": False}
out = {}
for name, kw in (("free", {}), ("regex", {"regex": "[a-z]+( [a-z]+){0,60}"}), ("schema", {"json_schema": person})):
    m.generate("Warm up:", max_tokens=32, temperature=0, speculate=False, **kw)
    toks = secs = 0
    for prompt in ("A person:", "Tell me about a city:", "Write:"):
        m.generate(prompt, max_tokens=48, temperature=0, speculate=False, **kw)
        toks += m.last_stats.tokens
        secs += m.last_stats.seconds
    out[name] = toks / secs
out["anon_mb"], out["file_mb"] = status("RssAnon"), status("RssFile")
print(json.dumps(out))
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
    r = subprocess.run([sys.executable, "-c", CHILD, str(path), ",".join(workers)], capture_output=True, text=True,
                       timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(r.stderr[-2000:])
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    args = ap.parse_args()
    paths = model_paths(args.models.split(","), [])
    log("| model | where | main process memory MB (anonymous + file pages) | free tok/s | regex tok/s | schema tok/s "
        "| regex / free | schema / free |")
    log("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        procs = start_workers(2)
        try:
            for where, workers in (("local", []), ("2 loopback workers", [e for _, e in procs])):
                r = child(paths[name], workers)
                log(f"| {name} | {where} | {r['anon_mb']:.0f} + {r['file_mb']:.0f} | {r['free']:.1f} | {r['regex']:.1f} | "
                    f"{r['schema']:.1f} | {r['regex'] / r['free']:.3f} | {r['schema'] / r['free']:.3f} |")
        finally:
            for p, _ in procs:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
