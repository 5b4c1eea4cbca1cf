#!/usr/bin/env python3
"""Greedy identity on the defaults: the quality benchmark's prompts (``quality_prompts.py``), each
generated at temperature 0 with the prompt cache warm and cold and speculation on and off.

    python benchmarks/greedy_identity.py [--models smollm2,gemma] [--kinds json,fields,sql,midword]
        [--limit N] [--not-reproducible] [--markdown]

The prompts run in order, each after the one before (the few-shot prefix of a kind is cached).
For each prompt: the unconstrained text with the defaults (the cache holds the last prompt's
run), then the constrained text with the defaults (the cache holds this prompt's unconstrained
run, speculation on), the same with ``speculate=False``, and then, with the cache emptied first
(``cache_prompt=False``), the unconstrained text and the constrained text with speculation on and
off. Columns:

* **identical (greedy)**: as ``quality.py``: where the cold unconstrained text cut at the end of
  its first complete match exists, the constrained text cut the same way is that text (DOMINO
  Def. 2.1), per way of running it;
* **same text**: the constrained texts of the four ways are one text, and the unconstrained texts
  warm and cold are one text.

``--not-reproducible`` loads with ``reproducible=False`` (llama.cpp's fastest kernels per batch),
as before this measure existed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import localguide  # noqa: E402
from common import md_table, model_paths  # noqa: E402
from quality import MAX_TOKENS, first_match, language  # noqa: E402
from quality_prompts import prompts  # noqa: E402

WAYS = ("warm, speculation", "warm", "cold, speculation", "cold")


def measure(model, kinds, limit, log):
    rows, parted = [], []
    for kind, items in prompts().items():
        if kind not in kinds:
            continue
        items = items[:limit] if limit else items
        st = {"eligible": 0, "same": 0, "free same": 0, **{w: 0 for w in WAYS}}
        t0 = time.perf_counter()
        for prompt, constraint in items:
            lg = {"grammar": constraint["grammar"]} if "grammar" in constraint else {"regex": constraint["regex"]}
            ok = language(model, constraint)
            n = MAX_TOKENS[kind]
            free_warm = model.generate(prompt, max_tokens=n, temperature=0)
            texts = {"warm, speculation": model.generate(prompt, max_tokens=n, temperature=0, **lg),
                     "warm": model.generate(prompt, max_tokens=n, temperature=0, speculate=False, **lg)}
            free = model.generate(prompt, max_tokens=n, temperature=0, cache_prompt=False)
            texts["cold, speculation"] = model.generate(prompt, max_tokens=n, temperature=0, cache_prompt=False, **lg)
            texts["cold"] = model.generate(prompt, max_tokens=n, temperature=0, cache_prompt=False,
                                           speculate=False, **lg)
            st["free same"] += free_warm == free
            st["same"] += len(set(texts.values())) == 1
            if len(set(texts.values())) > 1 or free_warm != free:
                parted.append((kind, prompt, {"free warm": free_warm, "free cold": free, **texts}))
            cut = first_match(free, ok)
            if cut is not None:
                st["eligible"] += 1
                for w, text in texts.items():
                    st[w] += first_match(text, ok) == cut
        log(f"{model.path.name} {kind}: {len(items)} prompts in {time.perf_counter() - t0:.0f} s")
        rows.append({"kind": kind, "prompts": len(items), **st})
    return rows, parted


def table(rows) -> str:
    def rate(a, b):
        return f"{a}/{b} ({100 * a / b:.0f}%)" if b else "-"

    return md_table(["kind", *(f"identical (greedy), {w}" for w in WAYS), "same text (constrained)",
                     "same text (unconstrained)"],
                    [[r["kind"], *(rate(r[w], r["eligible"]) for w in WAYS), rate(r["same"], r["prompts"]),
                      rate(r["free same"], r["prompts"])] for r in rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--kinds", default="json,fields,sql,midword")
    ap.add_argument("--limit", type=int, default=0, help="prompts per kind (default: all)")
    ap.add_argument("--not-reproducible", action="store_true", help="load(reproducible=False)")
    ap.add_argument("--markdown", action="store_true", help="write the section into BENCHMARKS.md")
    args = ap.parse_args()
    notes: list = []
    sections = []
    for name, path in model_paths(args.models.split(","), notes).items():
        model = localguide.load(path, reproducible=not args.not_reproducible)
        rows, parted = measure(model, set(args.kinds.split(",")), args.limit,
                               lambda *a: print(*a, file=sys.stderr, flush=True))
        text = f"### {name} (reproducible: {model.reproducible})\n\n{table(rows)}\n"
        print(text, flush=True)
        for kind, prompt, texts in parted:
            print(f"parted ({kind}): {prompt[-60:]!r}", file=sys.stderr)
            for w, t in texts.items():
                print(f"    {w:18s} {t!r}", file=sys.stderr)
        sections.append(text)
    if args.markdown:
        from report import replace_section

        body = ("Command: `python benchmarks/greedy_identity.py" + (f" --limit {args.limit}" if args.limit else "")
                + f" --models {args.models}`. " + __doc__.split("\n\n", 2)[2].split("\n\n``--not")[0]
                .replace("\n", " ") + "\n\n" + "\n".join(sections))
        replace_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", "## Greedy identity", body)


if __name__ == "__main__":
    main()
