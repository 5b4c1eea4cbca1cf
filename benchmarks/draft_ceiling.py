"""How far drafts from the count model can go on this machine: an upper bound.

For each model and constraint, ``--runs`` speculative generations record every (constraint state,
tokens before, token taken) the count model is told of, learning as they go (as ``speculation.py``'s warm-up and
rounds do). This machine's decode cost curve T(n) / T(1) (n tokens with logits at each) is timed.
Then, over the runs after the first ``--warmup``, the *oracle*: every decode drafts exactly the
run of the count model's guesses (or, in the second column, the guesses from the text itself as
well, ``localguide.speculate.lookup``) that the model will take (known in hindsight), as far as it
pays under T (padded to a longer decode where that costs less); no draft is ever refused. Its
tokens per unit of T(1) is the speed-up over one token per decode that drafts from the counts
cannot beat on this machine (forced text adds only
where the counts have no guess yet; the prompt, sampling and the guide are left out). Compare
``speculation.py``'s "on / unconstrained".

    python benchmarks/draft_ceiling.py [--models smollm2,gemma] [--runs 8] [--warmup 3]
        [--cases person,maskbench] [--threads N]
"""

from __future__ import annotations

import argparse
import math
import time

from common import model_paths

import llama_cpp

import localguide
from localguide.engines.llamacpp.loop import _Batch, decode
from localguide.speculate import CountModel
from localguide.speculate.drafts import MAX_DRAFT
from localguide.speculate.lookup import Lookup

import speculation

LONGEST = MAX_DRAFT + 1  # the longest verifying decode


class Recording(CountModel):
    """A count model that also keeps each (state key, token, context) it is told of, per run."""

    def __init__(self):
        super().__init__()
        self.runs: list[list[tuple[int, int, tuple[int, ...]]]] = []

    def add(self, key: int, token: int, context: tuple[int, ...] = ()) -> None:
        self.runs[-1].append((key, token, context))
        super().add(key, token, context)


def cost_curve(model, reps: int = 7) -> list[float]:
    """T(n) / T(1) for n = 0..LONGEST (index 0 unused): the fastest of ``reps`` timings each.
    The model's KV cache is emptied before and after (and the Model told so)."""
    ctx = model.llama.ctx
    mem = llama_cpp.llama_get_memory(ctx)
    tokens = model.llama.tokenize(b"The quick brown fox jumps over the lazy dog. " * 3)
    model._reset()
    decode(ctx, tokens)
    pos = len(tokens)
    batch = _Batch(LONGEST)
    best = [math.inf] * (LONGEST + 1)
    try:
        for _ in range(reps):
            for n in range(1, LONGEST + 1):
                batch.fill([tokens[i % len(tokens)] for i in range(n)], pos, 0)
                t = time.perf_counter()
                llama_cpp.llama_decode(ctx, batch.b)
                best[n] = min(best[n], time.perf_counter() - t)
                llama_cpp.llama_memory_seq_rm(mem, 0, pos, -1)
    finally:
        batch.free()
        model._reset()
    return [1.0] + [b / best[1] for b in best[1:]]


def oracle(runs: list[list[tuple[int, int, tuple[int, ...]]]], T: list[float], warmup: int,
           prompt: list[int] | None = None) -> float:
    """Tokens per unit of T(1) when each decode drafts exactly the guesses that will be taken
    (padded, as the generation loop pads, where a longer decode costs less); with ``prompt``,
    the guesses from the text itself (``Lookup``) too."""
    T = [min(T[n:]) for n in range(len(T))]
    counts = CountModel()
    tokens = cost = 0.0
    for r, run in enumerate(runs):
        right = []
        seen = Lookup(prompt) if prompt is not None else None
        for key, token, context in run:
            guess = counts.guess(key, context)
            right.append(guess is not None and guess.token == token)
            if seen is not None:
                right[-1] = right[-1] or (seen.guess() or (None,))[0] == token
                seen.append(token)
            counts.add(key, token, context)
        if r < warmup:
            continue
        i = 1  # (the first token comes from the prompt's decode)
        while i < len(right):
            run_len = 0
            while i + run_len < len(right) and right[i + run_len] and run_len < LONGEST - 1:
                run_len += 1
            k = max(range(run_len + 1), key=lambda k: (k + 1) / T[k + 1])
            n = min(k + 1, len(right) - i)
            tokens += n
            cost += T[k + 1]
            i += n
    return tokens / cost if cost else 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--cases", default="person,maskbench")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--tokens", type=int, default=96)
    args = ap.parse_args()
    paths = model_paths(args.models.split(","), [])
    kw = {"n_ctx": 2048}
    if args.threads:
        kw.update(n_threads=args.threads, n_threads_batch=args.threads)
    for name, path in paths.items():
        model = localguide.load(path, **kw)
        T = cost_curve(model)
        print(f"\n{name}: T(n)/T(1) = " + ", ".join(f"{n}: {T[n]:.2f}" for n in (2, 3, 4, 6, 8, 12, 16)))
        print("| constraint | oracle, counts | oracle, counts and lookup |\n|---|---|---|")
        logs, logs2 = [], []
        for case, (constraint, prompt) in speculation.cases(args.cases.split(",")).items():
            prompt_tokens = model.tokenize_prompt(prompt)
            counts = Recording()
            for r in range(args.runs):
                counts.runs.append([])
                speculation.one(model, constraint, prompt_tokens, args.tokens, 500 + r, "on", counts)
            o = oracle(counts.runs, T, args.warmup)
            o2 = oracle(counts.runs, T, args.warmup, prompt_tokens)
            logs.append(math.log(o))
            logs2.append(math.log(o2))
            print(f"| {case} | {o:.2f} | {o2:.2f} |", flush=True)
        print(f"| geometric mean | {math.exp(sum(logs) / len(logs)):.2f} | {math.exp(sum(logs2) / len(logs2)):.2f} |")


if __name__ == "__main__":
    main()
