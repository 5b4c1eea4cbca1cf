"""Structured extraction over a dataset: ``Model.batch`` at ``parallel=4`` against ``parallel=1``.

40 items, each a shared instruction (about 250 tokens) and a short document of its own, through a
5-field JSON Schema, greedy. Per model and level of busy neighbour processes (``busy.py``), the
rounds alternate which parallelism goes first; reported: aggregate completion tokens/s of each
(over all rounds), their ratio (the median of the rounds' ratios, and each round's), the prompt
tokens decoded (the shared prefix decoded once, then copied), every output valid, and how many
texts of ``parallel=4`` are those of ``parallel=1`` (llama.cpp's batched logits allow exceptions).

    python benchmarks/batch.py --models smollm2,gemma --levels 0,1 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import localguide  # noqa: E402  (before llama.cpp loads: the wait policy)
import jsonschema  # noqa: E402
from busy import Neighbours  # noqa: E402
from common import log, model_paths  # noqa: E402

INSTRUCTION = """You are a careful data clerk. You read one short record about a customer of a small
bicycle repair shop and you write exactly one JSON object that describes the customer. The object has
five fields. "name" is the customer's full name as the record writes it. "city" is the town where the
customer lives, without the country. "bikes" is how many bicycles the customer brought to the shop, as
a whole number. "service" is the kind of work the customer asked for: one of "repair", "tune-up",
"rental" or "sale". "urgent" is true when the record says the customer needs the bicycle back within two
days, and false otherwise. Do not add any other field. Do not explain your answer. Do not repeat the
record. When the record does not say something, make the most likely guess from what it does say,
and never leave a field out. Numbers are written with digits. Names keep their capital letters.
Here is the record.
"""
FIRST = ["Anna", "Boris", "Carla", "Deniz", "Elif", "Femi", "Greta", "Hiro", "Ines", "Jonas"]
LAST = ["Berg", "Costa", "Dahl", "Eriksen", "Fischer", "Garcia", "Horvat", "Ito"]
CITIES = ["Utrecht", "Ghent", "Porto", "Graz", "Lund", "Turku", "Brno", "Cork"]
SERVICES = ["repair", "tune-up", "rental", "sale"]
SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "city", "bikes", "service", "urgent"],
          "properties": {"name": {"type": "string", "maxLength": 40}, "city": {"type": "string", "maxLength": 30},
                         "bikes": {"type": "integer", "minimum": 0, "maximum": 20},
                         "service": {"enum": SERVICES}, "urgent": {"type": "boolean"}}}


def items(n: int = 40) -> list[str]:
    out = []
    for i in range(n):
        name = f"{FIRST[i % len(FIRST)]} {LAST[(i * 3) % len(LAST)]}"
        when = "needs them back by tomorrow" if i % 3 == 0 else "is in no hurry"
        doc = (f"{name} from {CITIES[(i * 5) % len(CITIES)]} came in with {1 + i % 4} bicycle"
               f"{'s' if i % 4 else ''} for a {SERVICES[i % 4]} and {when}.")
        out.append(f"{INSTRUCTION}\nRecord: {doc}\nJSON: ")
    return out


def run_once(model, prompts: list[str], parallel: int) -> dict:
    t = time.perf_counter()
    texts, tokens, decoded, errors = {}, 0, 0, 0
    for r in model.batch(prompts, parallel=parallel, json_schema=SCHEMA, temperature=0, max_tokens=96):
        if r.error is not None:
            errors += 1
            continue
        jsonschema.validate(json.loads(r.text), SCHEMA)
        texts[r.index] = r.text
        tokens += r.stats.tokens
        decoded += r.stats.prompt_tokens - r.stats.cached_tokens
    return dict(seconds=time.perf_counter() - t, tokens=tokens, decoded=decoded, texts=texts, errors=errors)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--levels", default="0,1", help="busy processes beside the run, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--items", type=int, default=40)
    ap.add_argument("--parallel", type=int, default=4)
    args = ap.parse_args()
    paths = model_paths(args.models.split(","), [])
    prompts = items(args.items)
    p = args.parallel
    log(f"| model | busy | p1 tok/s | p{p} tok/s | p{p} / p1 (median of rounds) | rounds | prompt tokens decoded "
        f"p1 / p{p} (of {{total}}) | valid | same texts |")
    log("|---|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        model = localguide.load(paths[name])
        total = sum(len(model.tokenize_prompt(x)) for x in prompts)
        run_once(model, prompts[:4], 1)  # (kernels, the compiled schema, both engines made)
        run_once(model, prompts[:4], p)
        for level in map(int, args.levels.split(",")):
            got = {1: [], p: []}
            with Neighbours(level):
                for r in range(args.rounds):
                    for par in ((1, p) if r % 2 == 0 else (p, 1)):
                        got[par].append(run_once(model, prompts, par))
            rate = {k: sum(x["tokens"] for x in v) / sum(x["seconds"] for x in v) for k, v in got.items()}
            ratios = [(b["tokens"] / b["seconds"]) / (a["tokens"] / a["seconds"]) for a, b in zip(got[1], got[p])]
            same = sum(got[1][0]["texts"].get(i) == t for i, t in got[p][0]["texts"].items())
            valid = sum(len(x["texts"]) for v in got.values() for x in v)
            runs = sum(len(v) for v in got.values()) * len(prompts)
            log(f"| {name} | {level} | {rate[1]:.1f} | {rate[p]:.1f} | {statistics.median(ratios):.2f} | "
                f"{' '.join(f'{x:.2f}' for x in ratios)} | {got[1][0]['decoded']} / {got[p][0]['decoded']} "
                f"(of {total}) | {valid}/{runs} | {same}/{len(prompts)} |")
        model.close_engine()
        del model


if __name__ == "__main__":
    main()
