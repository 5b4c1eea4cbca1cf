#!/usr/bin/env python3
"""The server under load: aggregate tokens/s of concurrent clients against a lone client.

    python benchmarks/server.py [--models smollm2,gemma] [--parallel 4] [--rounds 3] [--n-gpu-layers -1] [--markdown]

For each model a real ``localguide serve`` process on loopback (``--parallel N``); clients are
threads with the official ``openai`` client, each asking for 64 tokens (temperature 0.8, a seed
each, stop tokens allowed: tokens are counted from ``usage``). Per round: one client alone, then
N clients at once; aggregate tokens/s = all completion tokens / the wall time from the first
request to the last answer. Two workloads: free text, and a JSON Schema (the person schema).
The issue's target: with ``--parallel 4`` and 4 clients, aggregate ≥ 1.3× a lone client's.
A lone client on ``--parallel 1`` (speculation and the prompt cache) is given beside.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "server"))

from common import PERSON_SCHEMA, log, md_table, model_paths  # noqa: E402

TOKENS = 64
TOPICS = ["the sea", "a red fox", "winter", "an old clock", "the moon", "bread", "a river", "a city at night"]


def _ask(client, i: int, schema: bool) -> int:
    kw = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON_SCHEMA}}} \
        if schema else {}
    r = client.chat.completions.create(model="m", messages=[{"role": "user", "content": f"Write about {TOPICS[i % 8]}."}],
                                       max_tokens=TOKENS, temperature=0.8, seed=i, **kw)
    return r.usage.completion_tokens


def burst(client, clients: int, schema: bool, seed: int) -> float:
    """Aggregate tokens/s of ``clients`` requests sent at once."""
    counts = [0] * clients

    def one(k):
        counts[k] = _ask(client, seed * 100 + k, schema)

    threads = [threading.Thread(target=one, args=(k,)) for k in range(clients)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return sum(counts) / (time.perf_counter() - t)


def main() -> None:
    from test_server import Served

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--markdown", action="store_true", help="write the section into BENCHMARKS.md")
    args = ap.parse_args()
    extra = ("--n-gpu-layers", str(args.n_gpu_layers)) if args.n_gpu_layers else ()
    notes: list = []
    rows = []
    for name, path in model_paths(args.models.split(","), notes).items():
        serial = Served(path, parallel=1, extra=extra)
        try:
            for w in (False, True):  # (warm: the first decode, the schema's compile)
                burst(serial.client, 1, w, 99)
            lone_serial = {w: statistics.median(burst(serial.client, 1, w, r) for r in range(args.rounds))
                           for w in (False, True)}
        finally:
            serial.close()
        s = Served(path, parallel=args.parallel, extra=extra)
        try:
            for w in (False, True):
                burst(s.client, args.parallel, w, 98)
            for schema in (False, True):
                lone, many = [], []
                for r in range(args.rounds):
                    lone.append(burst(s.client, 1, schema, r))
                    many.append(burst(s.client, args.parallel, schema, r))
                a, b = statistics.median(lone), statistics.median(many)
                rows.append([name, "JSON Schema" if schema else "free text", f"{lone_serial[schema]:.1f}",
                             f"{a:.1f}", f"{b:.1f}", f"**{b / a:.2f}×**"])
                log(name, schema, lone, many)
        finally:
            s.close()
    text = (f"Command: `python benchmarks/server.py --models {args.models} --parallel {args.parallel} "
            f"--rounds {args.rounds}{' --n-gpu-layers ' + str(args.n_gpu_layers) if extra else ''}`. " + " ".join(__doc__.split("\n\n")[2].split()) + " Medians of the rounds.\n\n"
            + md_table(["model", "workload", "lone client, --parallel 1 (tok/s)",
                        f"lone client, --parallel {args.parallel} (tok/s)",
                        f"{args.parallel} clients, --parallel {args.parallel} (tok/s, aggregate)",
                        "aggregate / lone"], rows) + "\n")
    print(text)
    if args.markdown:
        from report import replace_section

        replace_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", "## Server", text)


if __name__ == "__main__":
    main()
