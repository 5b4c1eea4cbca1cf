#!/usr/bin/env python3
"""The added NLL of SMC against masking on the quality benchmark's JSON prompts, both models.

    python benchmarks/smc_quality.py [--models smollm2,gemma] [--limit 30] [--seeds 2] [--particles 16]

Each prompt of ``quality_prompts.py``'s ``json`` kind (a few-shot extraction into a JSON object,
its regex as the constraint, 40 tokens at most), at temperature 1 without truncation (top-k, top-p
and min-p off: the distribution SMC targets), ``--seeds`` seeds: unconstrained sampling, masking,
and SMC with ``--particles``. A text's NLL per token is the mean of -log p(token) under the model
alone (``Model.score``); "added" is that minus unconstrained sampling's for the same prompt and seed.
Lower is closer to what the model would write; SMC samples the model's own distribution over the
valid texts, masking renormalises token by token. Texts that did not end within the budget are
counted apart (SMC's only end: it keeps the ended texts).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import localguide  # noqa: E402
from common import md_table, model_paths  # noqa: E402
from quality_prompts import prompts  # noqa: E402

MAX_TOKENS = 40
FREE = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}


def nll(model, prompt: str, tokens: list[int]) -> float:
    s = model.score(prompt, tokens)
    return -float(np.mean(s.logprobs)) if s.logprobs else float("nan")


def measure(model, limit: int, seeds: int, particles: int, log) -> list:
    items = prompts()["json"][:limit]
    added = {"masking": [], "SMC": []}
    ended = {"masking": 0, "SMC": 0}
    seconds = {"masking": 0.0, "SMC": 0.0}
    runs = 0
    for j, (prompt, constraint) in enumerate(items):
        index = model.compile(regex=constraint["regex"])
        prompt_tokens = model.tokenize_prompt(prompt)
        for k in range(seeds):
            seed = 1000 + j + 100_000 * k
            free = list(model.generate_tokens(prompt_tokens, None, MAX_TOKENS, localguide.llama.Sampling(
                seed=seed, **FREE), cache_prompt=False))
            base = nll(model, prompt, free)
            t = time.perf_counter()
            masked = list(model.generate_tokens(prompt_tokens, index.guide(max_tokens=MAX_TOKENS), MAX_TOKENS,
                                                localguide.llama.Sampling(seed=seed, **FREE), speculate=False))
            seconds["masking"] += time.perf_counter() - t
            ended["masking"] += model.last_stats.finish_reason == "stop"
            t = time.perf_counter()
            try:
                drawn = model.sample_smc(prompt_tokens, lambda: index.guide(max_tokens=MAX_TOKENS), MAX_TOKENS,
                                         particles, 1.0, seed)
                ended["SMC"] += 1
            except localguide.LocalguideError as e:
                log(f"  prompt {j}, seed {seed}: SMC: {e}")
                drawn = None
            seconds["SMC"] += time.perf_counter() - t
            runs += 1
            added["masking"].append(nll(model, prompt, masked) - base)
            if drawn:
                added["SMC"].append(nll(model, prompt, drawn) - base)
        log(f"  {j + 1}/{len(items)}: masking {np.mean(added['masking']):+.3f}, SMC {np.mean(added['SMC']):+.3f}")
    return [[name, f"{np.mean(v):+.3f}", f"{np.median(v):+.3f}", f"{ended[name]}/{runs}",
             f"{1000 * seconds[name] / runs:.0f}"] for name, v in added.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--limit", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--particles", type=int, default=16)
    args = ap.parse_args()
    notes: list = []
    print(f"Command: `python benchmarks/smc_quality.py --models {args.models} --limit {args.limit} "
          f"--seeds {args.seeds} --particles {args.particles}`.\n")
    for name, path in model_paths(args.models.split(","), notes).items():
        model = localguide.load(path)
        rows = measure(model, args.limit, args.seeds, args.particles, lambda *a: print(*a, file=sys.stderr, flush=True))
        print(f"#### {name}\n")
        print(md_table(["sampling", "added NLL / token, mean", "median", "texts ended within 40 tokens",
                        "ms per generation"], rows) + "\n", flush=True)
    for n in notes:
        print(n)


if __name__ == "__main__":
    main()
