"""Speed beside a noisy neighbour: speculation's rows with 0, 1 and 2 busy processes.

A laptop is never idle. Each level starts that many background processes, each a plain Python
loop busy on one core, runs ``speculation.py``'s rounds (unconstrained, speculation off, on and
fast-forward, the same seeds, the mode order rotated) on the library's defaults (threads and
OpenMP's wait policy as ``localguide.runtime.threads`` chooses them), and always stops its processes.
Reported per model, case and level: defaults / unconstrained and defaults / ``speculate=False``,
each two ways: the median over rounds of the round's ratio (the two modes of a round run seconds
apart on one seed, so a moment that slows one round of one mode moves one ratio of several), and
tokens/s over all rounds (every second counted, such a moment too); tokens per decode and the
unconstrained tokens/s.

    python benchmarks/busy.py --models smollm2,gemma --levels 0,1,2 --rounds 3 [--server]

``--server``: also a real ``localguide serve --parallel 4`` on loopback with 16 streaming clients at
once (the openai client), against one client alone, with 0 and 1 busy processes: aggregate / lone
tokens/s, time to first token p50 / p99, and the server's RSS after each round of load.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import localguide  # noqa: E402  (before llama.cpp loads: the wait policy)
from common import log, model_paths  # noqa: E402
from speculation import cases, measure  # noqa: E402

WORDS = r"[a-z]+( [a-z]+){0,200}"
DEFAULT_CASES = "regex words,person schema,regex date,grammar json,grammar sql,grammar c"
_BUSY = "import time\nend = time.time() + {s}\nx = 0\nwhile time.time() < end:\n    x += 1\n"


class Neighbours:
    """``n`` busy processes for the ``with`` block (each ends by itself after ``limit`` seconds
    too, should this process die first)."""

    def __init__(self, n: int, limit: float = 3600.0):
        self.n, self.limit, self.procs = n, limit, []

    def __enter__(self):
        for _ in range(self.n):
            self.procs.append(subprocess.Popen([sys.executable, "-c", _BUSY.format(s=self.limit)]))
        time.sleep(0.5 if self.n else 0)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        return False


def _stream(client, i: int, schema: bool, tokens: int) -> tuple[int, float, float]:
    """(completion tokens, seconds to the first content, seconds in all) of one streamed request."""
    from common import PERSON_SCHEMA

    kw = {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": PERSON_SCHEMA}}} \
        if schema else {}
    t0 = time.perf_counter()
    first, n = None, 0
    for chunk in client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": f"Write about topic {i}."}], max_tokens=tokens,
            temperature=0.8, seed=i, stream=True, stream_options={"include_usage": True}, **kw):
        if chunk.choices and chunk.choices[0].delta.content and first is None:
            first = time.perf_counter() - t0
        if chunk.usage is not None:
            n = chunk.usage.completion_tokens
    end = time.perf_counter() - t0
    return n, first if first is not None else end, end


def server_rows(name: str, path, levels: list[int], clients: int, parallel: int, tokens: int, rounds: int) -> None:
    """The server (``--parallel``) with ``clients`` streaming at once against one alone, per busy level:
    aggregate / lone tokens/s, time to first token p50 / p99, and its RSS after each round."""
    import statistics
    import threading

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "server"))
    from test_server import Served

    def rss(pid: int) -> int:
        with open(f"/proc/{pid}/status") as f:
            return next(int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS"))

    s = Served(path, parallel=parallel)
    try:
        for w in (False, True):  # (warm: the first decode, the schema's compile)
            _stream(s.client, 0, w, tokens)
        print(f"### {name}: the server, --parallel {parallel}, {clients} streaming clients (half JSON Schema)\n")
        print("| busy | lone client tok/s | aggregate tok/s | aggregate / lone | TTFT p50 (s) | TTFT p99 (s) | "
              "RSS after each round (MB) |")
        print("|---|---|---|---|---|---|---|")
        for level in levels:
            with Neighbours(level):
                lone, agg, ttft, sizes = [], [], [], []
                for r in range(rounds):
                    n, _, t = _stream(s.client, 1000 + r, r % 2 == 1, tokens)
                    lone.append(n / t)
                    out = [None] * clients

                    def one(k, r=r):
                        out[k] = _stream(s.client, r * 100 + k, k % 2 == 1, tokens)

                    threads = [threading.Thread(target=one, args=(k,)) for k in range(clients)]
                    t0 = time.perf_counter()
                    for th in threads:
                        th.start()
                    for th in threads:
                        th.join()
                    agg.append(sum(o[0] for o in out) / (time.perf_counter() - t0))
                    ttft += [o[1] for o in out]
                    time.sleep(3)  # (the server idle again: what it keeps)
                    sizes.append(rss(s.proc.pid))
            ttft.sort()
            a, b = statistics.median(lone), statistics.median(agg)
            print(f"| {level} | {a:.1f} | {b:.1f} | {b / a:.2f} | {ttft[len(ttft) // 2]:.2f} | "
                  f"{ttft[min(len(ttft) - 1, int(0.99 * len(ttft)))]:.2f} | {', '.join(map(str, sizes))} |", flush=True)
        print()
    finally:
        s.close()


def main() -> None:
    # (a SIGTERM unwinds like Ctrl-C, so every ``with Neighbours`` stops its processes)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--cases", default=DEFAULT_CASES, help="comma separated case names or parts")
    ap.add_argument("--levels", default="0,1,2", help="busy processes beside the benchmark, per level")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--server", action="store_true", help="also the server: --clients at once on --parallel")
    ap.add_argument("--server-only", action="store_true", help="the server's rows alone")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--server-levels", default="0,1")
    args = ap.parse_args()
    notes: list[str] = []
    selected = [s.strip() for s in args.cases.split(",") if s.strip()]
    levels = [int(x) for x in args.levels.split(",")]
    others = [s for s in selected if s != "regex words"]
    all_cases = cases(others) if others else {}  # (cases([]) is every case)
    if "regex words" in selected:
        all_cases = {"regex words": ({"regex": WORDS}, "A few words about the sea:"), **all_cases}
    print(f"Command: `python benchmarks/busy.py {' '.join(sys.argv[1:])}` on {os.cpu_count()} CPUs\n")
    for name, path in model_paths(args.models.split(","), notes).items():
        if args.server or args.server_only:
            server_rows(name, path, [int(x) for x in args.server_levels.split(",")], args.clients, args.parallel,
                        args.tokens, args.rounds)
        if args.server_only:
            continue
        model = localguide.load(path, n_ctx=2048)
        t = model.threads
        print(f"### {name}: {t.n_threads} thread(s) per token, {t.n_threads_batch} per batch\n")
        print("| case | busy | defaults / unconstrained, median of rounds | defaults / speculate=False, median of "
              "rounds | the same two, all rounds | tokens per decode | unconstrained tok/s |")
        print("|---|---|---|---|---|---|---|")
        for case, (constraint, prompt) in all_cases.items():
            model.compile(**constraint)
            for level in levels:
                with Neighbours(level):
                    row = measure(model, case, constraint, prompt, args.rounds, args.tokens, args.warmup)
                tpd = row["tokens_per_decode"]
                print(f"| {case} | {level} | {row['paired_on']:.2f} | {row['paired_on_off']:.2f} | "
                      f"{row['ratio_on']:.2f} / {row['on_off']:.2f} | {'-' if tpd is None else f'{tpd:.2f}'} | "
                      f"{row['tps']['unconstrained']:.0f} |", flush=True)
                log(f"  {name} {case} busy {level}: on/unconstrained {row['paired_on']:.2f} "
                    f"(all rounds {row['ratio_on']:.2f}), on/off {row['paired_on_off']:.2f} (all rounds {row['on_off']:.2f})")
        print()
    for n in notes:
        log("note:", n)


if __name__ == "__main__":
    main()
