#!/usr/bin/env python3
"""Fidelity: how far masking and SMC sample from the model's distribution over valid texts.

    python benchmarks/fidelity.py [--models smollm2,gemma] [--particles 16] [--samples 400] [--cases 1,2]

Small finite constraints (a choice of two texts after a prompt), where every token path is
enumerated and scored (``localguide.engines.llamacpp.smc.exact``): the exact distribution over texts
(the model at temperature 1, its stopping included, conditioned on the constraint) and masking's
(each token renormalised over the allowed ones), their total variation distance; then
``--samples`` SMC generations with ``--particles`` particles (seeded), the sampled frequencies'
distance from the exact distribution, and SMC's median time per generation against one masked
generation's (``sampling="mask"``, temperature 1, no truncation, the same prompt; one after every
4th SMC generation, so that both see the same load). A case is one where
masking is visibly biased when its distance is >= 0.2.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import log, md_table, model_paths  # noqa: E402

import localguide  # noqa: E402
from localguide.engines.llamacpp import smc  # noqa: E402

CASES = [("The answer is", [" no", " yes!"]), ("My favourite colour is", [" blue!", " red"]),
         ("The cat sat on the", [" mat!", " sofa"]), ("I like", [" cats!", " dogs"]),
         ("The sky is", [" blue!", " clear"])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--particles", type=int, default=16)
    ap.add_argument("--samples", type=int, default=400)
    ap.add_argument("--cases", default="", help="comma separated case numbers, from 1 (default: all)")
    args = ap.parse_args()
    rows = []
    for name, path in model_paths(args.models.split(","), []).items():
        model = localguide.load(path, n_ctx=512)
        chosen = [CASES[int(k) - 1] for k in args.cases.split(",")] if args.cases else CASES
        for prompt, choice in chosen:
            exact = smc.exact(model, prompt, choice=choice)
            target = {t: p for t, (p, _) in exact.items()}
            masking = {t: q for t, (_, q) in exact.items()}
            tv_mask = 0.5 * sum(abs(target[t] - masking[t]) for t in target)
            counts: dict = {}
            smc_s, mask_s = [], []
            for seed in range(args.samples):  # (interleaved: both see the same load)
                t0 = time.perf_counter()
                text = model.generate(prompt, choice=choice, sampling="smc", particles=args.particles,
                                      temperature=1.0, seed=seed)
                smc_s.append(time.perf_counter() - t0)
                counts[text] = counts.get(text, 0) + 1
                if seed % 4 == 0:
                    t0 = time.perf_counter()
                    model.generate(prompt, choice=choice, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed,
                                   speculate=False)
                    mask_s.append(time.perf_counter() - t0)
            t_smc, t_mask = float(np.median(smc_s)), float(np.median(mask_s))
            freq = {t: counts.get(t, 0) / args.samples for t in target}
            tv_smc = 0.5 * sum(abs(target[t] - freq[t]) for t in target)
            show = lambda d: ", ".join(f"{t!r}: {d[t]:.3f}" for t in choice)  # noqa: E731
            rows.append([name, f"{prompt!r} → {' or '.join(map(repr, choice))}", show(target), show(masking),
                         f"{tv_mask:.3f}", show(freq), f"**{tv_smc:.3f}**",
                         f"{t_smc * 1e3:.0f} ms / {t_mask * 1e3:.0f} ms = {t_smc / t_mask:.1f}× "
                         f"({t_smc / t_mask / args.particles:.2f} × N)"])
            log(*rows[-1])
    print(f"Command: `python benchmarks/fidelity.py --models {args.models} --particles {args.particles} "
          f"--samples {args.samples}{' --cases ' + args.cases if args.cases else ''}`.\n")
    print(md_table(["model", "case", "exact (the model, conditioned)", "masking", "masking's distance",
                    f"SMC, {args.particles} particles, {args.samples} samples", "SMC's distance",
                    "time: SMC / one masked generation"], rows))


if __name__ == "__main__":
    main()
