"""JSON Schema coverage on MaskBench: how many of the 500 schemas compile, and how their valid and
invalid instances fare (a valid one rejected is a subset at work; an invalid one accepted is a bug).

Each schema gets ``--limit`` seconds (an alarm; a schema past it counts as a timeout). To compare
with another checkout, run it from there: ``PYTHONPATH=<checkout> python benchmarks/schema_coverage.py``.

    python benchmarks/schema_coverage.py [--limit 20] [--budget 20000]
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MASKBENCH = ROOT.parent / "shared" / "corpora" / "maskbench"


class _Alarm(Exception):
    pass


def _on_alarm(*_):
    raise _Alarm()


def _is_alarm(e: BaseException | None) -> bool:
    while e is not None:
        if isinstance(e, _Alarm):
            return True
        e = e.__cause__ or e.__context__
    return False


def sweep(files, limit: int, budget: int):
    from localguide.json_schema.schema import build_dfa
    from localguide.errors import SchemaError

    res = collections.Counter()
    where = collections.defaultdict(list)
    signal.signal(signal.SIGALRM, _on_alarm)
    for f in files:
        d = json.loads(Path(f).read_text())
        signal.alarm(limit)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # (a loosened schema: counted below)
                dfa, compiled = build_dfa(d["schema"], max_states=budget)
        except (_Alarm, SystemError) as e:
            if not _is_alarm(e):  # (numba wraps an exception raised inside a kernel's call)
                raise
            res["timeout"] += 1
            where["timeout"].append(Path(f).name)
            continue
        except SchemaError as e:
            res["refused"] += 1
            if "accepts no document" in str(e):
                res["refused: the subset accepts no document"] += 1
            continue
        finally:
            signal.alarm(0)
        res["compiled"] += 1
        res["loosened"] += bool(getattr(compiled, "loosened", None))
        for t in d["tests"]:
            got = dfa.matches(json.dumps(t["data"]).encode())
            k = ("valid " if t["valid"] else "invalid ") + ("accepted" if got else "rejected")
            res[k] += 1
            if got and not t["valid"]:
                where["invalid accepted"].append(Path(f).name)
    return res, where


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=20, help="seconds per schema")
    ap.add_argument("--budget", type=int, default=20_000, help="automaton states (build_dfa's max_states)")
    args = ap.parse_args()
    files = sorted(MASKBENCH.glob("*/*.json"))
    if not files:
        sys.exit(f"no MaskBench schemas under {MASKBENCH}")
    t0 = time.time()
    res, where = sweep(files, args.limit, args.budget)
    print(f"| schemas | compiled | loosened | refused (of which: subset empty) | timeouts | valid rejected "
          f"| invalid accepted | seconds |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| {len(files)} | {res['compiled']} | {res['loosened']} | {res['refused']} "
          f"({res['refused: the subset accepts no document']}) | {res['timeout']} | {res['valid rejected']} of "
          f"{res['valid rejected'] + res['valid accepted']} | {res['invalid accepted']} of "
          f"{res['invalid accepted'] + res['invalid rejected']} | {time.time() - t0:.0f} |")
    for k, names in where.items():
        print(f"{k}: {', '.join(names[:12])}")


if __name__ == "__main__":
    main()
