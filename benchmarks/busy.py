"""Speed beside a noisy neighbour: speculation's rows with 0, 1 and 2 busy processes.

A laptop is never idle. Each level starts that many background processes, each a plain Python
loop busy on one core, runs ``speculation.py``'s rounds (unconstrained, speculation off, on and
fast-forward, the same seeds, the mode order rotated) on the library's defaults (threads and
OpenMP's wait policy as ``localguide.threads`` chooses them), and always stops its processes.
Reported per model, case and level: defaults / unconstrained, defaults / ``speculate=False``
(tokens/s over all rounds), tokens per decode and the unconstrained tokens/s.

    python benchmarks/busy.py --models smollm2,gemma --levels 0,1,2 --rounds 3
"""

from __future__ import annotations

import argparse
import os
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--cases", default=DEFAULT_CASES, help="comma separated case names or parts")
    ap.add_argument("--levels", default="0,1,2", help="busy processes beside the benchmark, per level")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=2)
    args = ap.parse_args()
    notes: list[str] = []
    selected = [s.strip() for s in args.cases.split(",") if s.strip()]
    levels = [int(x) for x in args.levels.split(",")]
    all_cases = cases([s for s in selected if s != "regex words"])
    if "regex words" in selected:
        all_cases = {"regex words": ({"regex": WORDS}, "A few words about the sea:"), **all_cases}
    print(f"Command: `python benchmarks/busy.py --models {args.models} --cases \"{args.cases}\" "
          f"--levels {args.levels} --rounds {args.rounds} --tokens {args.tokens}` on {os.cpu_count()} CPUs\n")
    for name, path in model_paths(args.models.split(","), notes).items():
        model = localguide.load(path, n_ctx=2048)
        t = model.threads
        print(f"### {name}: {t.n_threads} thread(s) per token, {t.n_threads_batch} per batch\n")
        print("| case | busy | defaults / unconstrained | defaults / speculate=False | tokens per decode | "
              "unconstrained tok/s |")
        print("|---|---|---|---|---|---|")
        for case, (constraint, prompt) in all_cases.items():
            model.compile(**constraint)
            for level in levels:
                with Neighbours(level):
                    row = measure(model, case, constraint, prompt, args.rounds, args.tokens, args.warmup)
                tpd = row["tokens_per_decode"]
                print(f"| {case} | {level} | {row['ratio_on']:.2f} | {row['on_off']:.2f} | "
                      f"{'-' if tpd is None else f'{tpd:.2f}'} | {row['tps']['unconstrained']:.0f} |", flush=True)
                log(f"  {name} {case} busy {level}: on/unconstrained {row['ratio_on']:.2f}, "
                    f"on/off {row['on_off']:.2f}")
        print()
    for n in notes:
        log("note:", n)


if __name__ == "__main__":
    main()
