#!/usr/bin/env python3
"""Long prompts on reproducible logits: the time to decode a prompt cold, three ways side by side.

    python benchmarks/long_prompt.py [--models smollm2,gemma] [--tokens 1000,4000] [--rounds 2]

"reference": every position on llama.cpp's reference CPU kernels (what ``load(reproducible=True)``
did before whole chunks went fast); "default": ``load()`` today, a prompt's whole chunks of 128
tokens on the fastest kernels and its last 1 to 128 tokens on the reference ones (``localguide.engines.llamacpp.reproducible``); "fastest": ``load(reproducible=False)``, every batch on the
fastest kernels (logits that differ with the batch). Each is ``Model.generate`` of one token with
``cache_prompt=False`` (the whole prompt decoded), median of the rounds, the three interleaved in
each round; the prompt is numbered lines of text. The greedy token of the three is given too.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import log, md_table, model_paths  # noqa: E402

import localguide  # noqa: E402


def prompt_of(model, n: int) -> str:
    """Numbered lines of text, cut to about ``n`` tokens."""
    lines, text = [], ""
    i = 0
    while len(model.tokenize_prompt(text)) < n:
        lines.append(f"Item {i}: the {('red', 'blue', 'green')[i % 3]} box holds {i * 7 % 13} apples "
                     f"and {i * 5 % 11} pears.\n" * 8)
        text = "".join(lines)
        i += 8
    tokens = model.tokenize_prompt(text)[:n]
    return model.llama.detokenize(tokens[1:] if tokens[0] == model.llama.token_bos() else tokens).decode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--tokens", default="1000,4000")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--markdown", action="store_true", help="write the section into BENCHMARKS.md")
    args = ap.parse_args()
    notes: list = []
    rows = []
    sizes = [int(x) for x in args.tokens.split(",")]
    for name, path in model_paths(args.models.split(","), notes).items():
        ctx = max(sizes) + 64
        default = localguide.load(path, n_ctx=ctx)
        reference = localguide.load(path, n_ctx=ctx)
        reference._kernels = None  # (no switch: every position on the reference kernels)
        fastest = localguide.load(path, n_ctx=ctx, reproducible=False)
        ways = {"reference": reference, "default": default, "fastest": fastest}
        for m in ways.values():
            m.generate("Hi", max_tokens=1, cache_prompt=False)  # (warm: first decode)
        for n in sizes:
            prompt = prompt_of(default, n)
            times = {w: [] for w in ways}
            texts = {}
            for _ in range(args.rounds):
                for way, m in ways.items():
                    t0 = time.perf_counter()
                    texts[way] = m.generate(prompt, max_tokens=1, temperature=0, cache_prompt=False)
                    times[way].append(time.perf_counter() - t0)
            med = {w: statistics.median(t) for w, t in times.items()}
            tokens = len(default.tokenize_prompt(prompt))
            rows.append([name, str(tokens), f"{med['reference']:.1f} s", f"{med['default']:.1f} s",
                         f"{med['fastest']:.1f} s", f"{med['default'] / med['reference']:.2f}×",
                         f"{med['default'] / med['fastest']:.2f}×", " / ".join(repr(texts[w]) for w in ways)])
            log(name, n, {w: [round(x, 2) for x in t] for w, t in times.items()}, texts)
    text = (f"Command: `python benchmarks/long_prompt.py --models {args.models} --tokens {args.tokens} "
            f"--rounds {args.rounds}`. " + " ".join(__doc__.split("\n\n")[2].split()) + "\n\n"
            + md_table(["model", "prompt (tokens)", "reference", "default", "fastest", "default / reference",
                        "default / fastest", "greedy token (reference / default / fastest)"], rows) + "\n")
    print(text)
    if args.markdown:
        from report import replace_section

        replace_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", "## Long prompts", text)


if __name__ == "__main__":
    main()
