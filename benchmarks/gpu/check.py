#!/usr/bin/env python3
"""Correctness where the benchmarks run: every output valid, and greedy text with speculation on
against off.

    python benchmarks/gpu/check.py [--models smollm2,gemma] [--n-gpu-layers -1] [--seeds 3] [--cases ...]

Per model and ``speculation.py`` case: ``--seeds`` generations at temperature 0.8 with the defaults
(speculation on), each checked by a judge outside localguide where there is one (Python's ``re``
for the regexes, the ``jsonschema`` package for schemas, ``json`` for free JSON and the JSON grammar,
lark for the SQL and C grammars, which are Lark files), else by replaying its tokens through a fresh
guide; then the same prompt at temperature 0 with speculation on and off (the same text? where not,
the token where they part). Last, one ``Model.batch`` at ``parallel=4`` on the person schema. A text
cut by ``max_tokens`` counts as valid only where it is a prefix of one (replayed), and is counted.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import PERSON_SCHEMA, log, md_table, model_paths  # noqa: E402
from speculation import cases  # noqa: E402

import jsonschema  # noqa: E402

import localguide  # noqa: E402

GRAMMARS = Path(__file__).resolve().parents[2] / "grammars"
MAX_TOKENS = 160


def lark_judge(name: str):
    import lark

    path = GRAMMARS / f"{name}.lark"
    try:
        parser = lark.Lark(path.read_text(), parser="earley", lexer="dynamic")
    except Exception as e:  # noqa: BLE001 (a Lark file with localguide's own extensions: say so)
        log(f"  lark cannot load {path.name} ({type(e).__name__}): replayed instead")
        return None
    return lambda text: parser.parse(text) is not None


def _parses(text: str) -> bool:
    json.loads(text)  # (a parse error: not valid)
    return True


def judge_for(constraint: dict):
    """text -> bool, the constraint's judge outside localguide, or None (replay the tokens)."""
    if "regex" in constraint:
        pattern = re.compile(constraint["regex"])
        return lambda text: pattern.fullmatch(text) is not None
    if "json_schema" in constraint:
        schema = constraint["json_schema"]
        if schema is True:
            return _parses
        return lambda text: jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
    if constraint.get("grammar") == "json":
        return _parses
    return lark_judge(constraint["grammar"])


def replayed(model, constraint: dict, text: str, finished: bool) -> bool:
    """The text's tokens walk a fresh guide of the constraint (and end it where ``finished``)."""
    guide = model.compile(**constraint).guide()
    for t in model.tokenize_plain(text.encode()):  # (any tokenization of a valid text walks a byte-level guide)
        if not guide.accepts(t):
            return False
        guide.advance(t)
    return guide.is_accepting() or not finished


def valid(model, constraint, judge, text: str, finished: bool) -> bool:
    if finished and judge is not None:
        try:
            return bool(judge(text))
        except Exception:  # noqa: BLE001 (a judge's parse error: not valid)
            return False
    return replayed(model, constraint, text, finished)


def check_model(name, path, args) -> list[list]:
    model = localguide.load(path, n_gpu_layers=args.n_gpu_layers, n_ctx=2048)
    log(f"== {name}: offloaded={args.n_gpu_layers}, reproducible={model.reproducible_why or True}")
    rows = []
    selected = [s.strip() for s in args.cases.split(",") if s.strip()]
    for case, (constraint, prompt) in cases(selected).items():
        t0 = time.perf_counter()
        judge = judge_for(constraint)
        ok = cut = 0
        bad = []
        for seed in range(args.seeds):
            text = model.generate(prompt, **constraint, temperature=0.8, seed=seed, max_tokens=MAX_TOKENS)
            finished = model.last_stats.finish_reason != "length"
            cut += not finished
            if valid(model, constraint, judge, text, finished):
                ok += 1
            else:
                bad.append(text[:80])
        greedy = {}
        for spec in (True, False):
            greedy[spec] = model.generate(prompt, **constraint, temperature=0, max_tokens=MAX_TOKENS, speculate=spec)
            finished = model.last_stats.finish_reason != "length"
            if valid(model, constraint, judge, greedy[spec], finished):
                ok += 1
            else:
                bad.append(greedy[spec][:80])
        same = greedy[True] == greedy[False]
        part = next((i for i, (a, b) in enumerate(zip(greedy[True], greedy[False])) if a != b),
                    min(len(greedy[True]), len(greedy[False])))
        rows.append([name, case, f"{ok}/{args.seeds + 2}", str(cut), "yes" if same else f"no (char {part})",
                     "; ".join(repr(b) for b in bad) or "–"])
        log(f"  {case}: valid {ok}/{args.seeds + 2}, cut {cut}, greedy same: {same} ({time.perf_counter() - t0:.1f} s)")
    prompts = [f"Write a JSON object about a person named {n}, {a} years old:\n"
               for n, a in (("Alice", 31), ("Bob", 45), ("Chen", 28), ("Dana", 52), ("Eve", 39), ("Farid", 61))]
    results = list(model.batch(prompts, parallel=4, json_schema=PERSON_SCHEMA, temperature=0.8, seed=1,
                               max_tokens=MAX_TOKENS))
    judge = judge_for({"json_schema": PERSON_SCHEMA})
    ok = sum(r.error is None and valid(model, {"json_schema": PERSON_SCHEMA}, judge, r.text, r.finish_reason != "length")
             for r in results)
    rows.append([name, "batch, parallel=4, person schema", f"{ok}/{len(results)}",
                 str(sum(r.finish_reason == "length" for r in results)), "–",
                 "; ".join(repr((r.error or r.text)[:80]) for r in results if r.error) or "–"])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--cases", default="", help="comma separated name prefixes or parts (default: all)")
    args = ap.parse_args()
    notes: list = []
    rows = []
    for name, path in model_paths(args.models.split(","), notes).items():
        rows += check_model(name, path, args)
    print(md_table(["model", "case", "valid", "cut by max_tokens", "greedy: on = off", "invalid texts"], rows))
    for n in notes:
        log("note:", n)
    invalid = [r for r in rows if r[2].split("/")[0] != r[2].split("/")[1]]
    sys.exit(1 if invalid else 0)


if __name__ == "__main__":
    main()
