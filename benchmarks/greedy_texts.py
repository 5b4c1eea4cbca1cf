#!/usr/bin/env python3
"""Greedy texts of the quality benchmark's prompts, to show that a change left generation alone.

    python benchmarks/greedy_texts.py --out before.json      # at one commit (its checkout on PYTHONPATH)
    python benchmarks/greedy_texts.py --out after.json       # at another
    python benchmarks/greedy_texts.py --compare before.json after.json

Every prompt of every kind (``quality_prompts.py``), both models, temperature 0, speculation on and
off: one text each, keyed ``model/kind/index/speculate``. ``--compare`` prints how many differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def texts(models: list[str]) -> dict[str, str]:
    import localguide
    from common import model_paths
    from quality_prompts import prompts

    out = {}
    for name, path in model_paths(models, []).items():
        model = localguide.load(path, n_ctx=2048)
        for kind, items in prompts().items():
            for i, (prompt, constraint) in enumerate(items):
                c = {k: v for k, v in constraint.items() if k in ("regex", "grammar")}
                n = 64 if kind == "midword" else 40
                for speculate in (True, False):
                    out[f"{name}/{kind}/{i}/{speculate}"] = model.generate(
                        prompt, **c, max_tokens=n, temperature=0, seed=1, speculate=speculate)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path)
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(p.read_text("utf-8")) for p in args.compare)
        differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
        print(f"{len(a)} and {len(b)} texts; {len(differ)} differ")
        for k in differ[:20]:
            print(f"  {k}: {a.get(k)!r} -> {b.get(k)!r}")
        sys.exit(1 if differ else 0)
    got = texts(args.models.split(","))
    (args.out or Path("greedy_texts.json")).write_text(json.dumps(got, ensure_ascii=False, indent=0), "utf-8")
    print(f"{len(got)} texts")


if __name__ == "__main__":
    main()
