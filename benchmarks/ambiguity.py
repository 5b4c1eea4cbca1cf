#!/usr/bin/env python3
"""Lexically ambiguous grammars: the cost of following every reading, against a regex of the
same language and against unconstrained generation.

    python benchmarks/ambiguity.py                      # both models
    python benchmarks/ambiguity.py --models smollm2 --repeat 1

Grammars (``tests/grammar/test_ambiguity.py``): ``words``, names and strings of the same
letters (``item: NAME | STRING | NAME STRING``), whose tokens cut into terminals in more ways
than a subterminal tree holds, so they are walked byte by byte; its language is the regex
``[a-z]+( [a-z]+)*``, walked beside it. ``nested``: the same words in parentheses and lists,
where every depth is a new parser state and the byte walk runs again.

* masks: the model's tokenization of a sample text walked through a guide (``mask()``, then
  ``advance()``) on a fresh index loaded from the compiled one (``first``), and again
  (``warm``); CPU seconds per mask, p50/p99/max over the walk, medians of ``--repeat``;
* generate: ``Model.generate`` (defaults, seed 1, 48 tokens) against the same call without a
  constraint, side by side, wall time, medians of ``--repeat``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from pathlib import Path

from common import fmt, log, md_table, model_paths, pct

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "grammar"))
from test_ambiguity import NESTED, WORDS, WORDS_REGEX  # noqa: E402

import localguide  # noqa: E402
from localguide.grammar import compile_grammar  # noqa: E402
from localguide.grammar.compiled import GrammarIndex  # noqa: E402

TEXTS = {
    "words": "the quick brown fox jumps over the lazy dog and then the dog sleeps in the warm sun",
    "nested": "(alpha beta,(gamma delta epsilon,zeta),eta),(theta iota kappa),(lambda,(mu nu))",
}
PROMPTS = {"words": "Some words: ", "nested": "A list of lists of words: "}


def walk(guide, tokens) -> list[float]:
    out = []
    for t in tokens:
        t0 = time.process_time()
        guide.mask()
        out.append(time.process_time() - t0)
        guide.advance(t)
    return out


def masks(model, name: str, repeat: int) -> list:
    vocab = model.vocabulary
    tokens = [t for t in model.tokenize_prompt(TEXTS[name]) if vocab[t]]  # (no BOS)
    rows = []
    arrays = compile_grammar(WORDS if name == "words" else NESTED, vocab, lazy=False).arrays(seed=True)
    kinds = [("grammar", lambda: GrammarIndex.from_arrays(arrays, vocab, name))]
    if name == "words":
        kinds.append(("regex", lambda: localguide.compile_regex(WORDS_REGEX, vocab)))
    for kind, fresh in kinds:
        firsts, warms = [], []
        for _ in range(repeat):
            idx = fresh()
            firsts.append(walk(idx.guide(), tokens))
            warms.append(walk(idx.guide(), tokens))
        first = [statistics.median(x) for x in zip(*firsts)]
        warm = [statistics.median(x) for x in zip(*warms)]
        rows.append((kind, len(tokens), pct(first, 50), pct(first, 99), max(first), sum(first), sum(warm)))
    return rows


def generate(model, name: str, repeat: int) -> tuple:
    grammar = WORDS if name == "words" else NESTED
    model.generate(PROMPTS[name], grammar=grammar, max_tokens=4, seed=1)  # (compiled, kernels loaded)
    con, free = [], []
    out = ""
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = model.generate(PROMPTS[name], grammar=grammar, max_tokens=48, seed=1)
        con.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        model.generate(PROMPTS[name], max_tokens=48, seed=1)
        free.append(time.perf_counter() - t0)
    return statistics.median(con), statistics.median(free), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    notes: list = []
    mrows, grows = [], []
    for mname, path in model_paths(args.models.split(","), notes).items():
        model = localguide.load(path)
        for name in TEXTS:
            for kind, n, p50, p99, mx, first, warm in masks(model, name, args.repeat):
                log(f"{mname} {name} {kind}: p50 {p50 * 1e3:.2f} ms, p99 {p99 * 1e3:.1f} ms, first {first:.3f} s")
                mrows.append([mname, name, kind, n, fmt(p50 * 1e3, 2), fmt(p99 * 1e3, 1), fmt(mx * 1e3, 1),
                              fmt(first, 3), fmt(warm, 3)])
            con, free, out = generate(model, name, args.repeat)
            log(f"{mname} {name}: constrained {con:.2f} s, unconstrained {free:.2f} s: {out[:60]!r}")
            grows.append([mname, name, fmt(con, 2), fmt(free, 2), fmt(free / con, 2)])
    print(md_table(["model", "grammar", "guide", "tokens", "first p50 (ms)", "first p99 (ms)", "first max (ms)",
                    "first walk (s)", "warm walk (s)"], mrows))
    print()
    print(md_table(["model", "grammar", "constrained (s)", "unconstrained (s)", "speed ratio"], grows))
    for n in notes:
        print(f"\nnote: {n}")


if __name__ == "__main__":
    sys.exit(main())
