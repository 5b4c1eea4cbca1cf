"""What one sample costs in the generation loop, by the way its candidates are built: llama.cpp's
array of the whole vocabulary, against ``SamplerChain``'s own paths (the allowed tokens' records,
``_sample_allowed``; the k highest allowed logits, ``_sample_top``).

For each model and constraint, generations go in rounds with the same seeds, the chain's paths on
and off (``_sample_allowed`` and ``_sample_top`` returning -1: every sample through
``llama_sampler_sample``), speculation off, so both sample the same tokens at the same steps
(checked). Each ``SamplerChain.sample`` is timed, right after its decode as in any generation;
the table gives µs per sample, median and mean, over all samples and over those the chain took
each way (as the run with the paths on took them), and which share that was.

    python benchmarks/sampler_paths.py [--models gemma,smollm2] [--rounds 4] [--tokens 48]
        [--cases words,person,json,date] [--n-gpu-layers -1] [--any-vocabulary]

The paths are taken with a vocabulary of ``DIRECT_MIN_VOCAB`` tokens or more; ``--any-vocabulary``
takes them on SmolLM2 too (what set that bound).
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import PATTERNS, PERSON_SCHEMA, PROMPTS, SAMPLING, log, md_table, model_paths

import localguide
from localguide.engines.llamacpp import sampler as sampler_mod
from localguide.engines.llamacpp.sampler import SamplerChain, Sampling

CASES = {
    "words": ({"regex": PATTERNS["words"]}, PROMPTS["words"]),
    "person": ({"json_schema": PERSON_SCHEMA}, PROMPTS["json"]),
    "json": ({"grammar": "json"}, PROMPTS["json"]),
    "date": ({"regex": PATTERNS["date"]}, PROMPTS["date"]),
}
_ALLOWED, _TOP, _SAMPLE = SamplerChain._sample_allowed, SamplerChain._sample_top, SamplerChain.sample


def measure(model, constraint: dict, prompt: str, rounds: int, tokens: int) -> dict:
    index = model.compile(**constraint)
    prompt_tokens = model.tokenize_prompt(prompt)
    times: list[int] = []
    took: list[str] = []  # per sample: "allowed", "top" or "llama.cpp"

    def timed(self, ctx, idx=-1):
        took.append("llama.cpp")
        t0 = time.perf_counter_ns()
        token = _SAMPLE(self, ctx, idx)
        times.append(time.perf_counter_ns() - t0)
        return token

    def allowed(self, *a):
        token = _ALLOWED(self, *a)
        if token >= 0:
            took[-1] = "allowed"
        return token

    def top(self, *a):
        token = _TOP(self, *a)
        if token >= 0:
            took[-1] = "top"
        return token

    def run(seed: int) -> list[int]:
        s = SAMPLING
        return list(model.generate_tokens(prompt_tokens, index.guide(max_tokens=tokens), tokens,
                                          Sampling(s.temperature, s.top_k, s.top_p, s.min_p, seed), speculate=False))

    got = {"paths": [], "llama.cpp": []}
    ways: list[str] = []
    texts = {"paths": [], "llama.cpp": []}
    SamplerChain.sample = timed
    try:
        for seed in range(3):  # (the guide's masks computed once, before any timing)
            run(seed)
        for r in range(rounds):
            for mode in ("paths", "llama.cpp") if r % 2 == 0 else ("llama.cpp", "paths"):
                if mode == "paths":
                    SamplerChain._sample_allowed, SamplerChain._sample_top = allowed, top
                else:
                    SamplerChain._sample_allowed = SamplerChain._sample_top = lambda self, *a: -1
                times.clear()
                took.clear()
                for seed in range(3):
                    texts[mode].append(run(100 + 3 * r + seed))
                got[mode] += times
                if mode == "paths":
                    ways += took
    finally:
        SamplerChain._sample_allowed, SamplerChain._sample_top, SamplerChain.sample = _ALLOWED, _TOP, _SAMPLE
    same = texts["paths"] == texts["llama.cpp"]
    row = {"same": same, "n": len(ways)}
    for way in ("all", "allowed", "top", "llama.cpp"):
        at = [i for i, w in enumerate(ways) if way == "all" or w == way]
        row[way] = {m: (statistics.median([got[m][i] / 1e3 for i in at]), statistics.mean([got[m][i] / 1e3 for i in at]))
                    for m in got} if at and same else None
        row[way + " share"] = len(at) / len(ways) if ways else 0.0
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="gemma,smollm2")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--any-vocabulary", action="store_true", help="the chain's paths with SmolLM2's vocabulary too")
    ap.add_argument("--n-gpu-layers", type=int, default=0, help="-1: every layer on the GPU (a CUDA or Metal build)")
    args = ap.parse_args()
    if args.any_vocabulary:
        sampler_mod.DIRECT_MIN_VOCAB = 0
    paths = model_paths(args.models.split(","), [])
    for name, path in paths.items():
        model = localguide.load(path, n_gpu_layers=args.n_gpu_layers)
        rows = []
        for case in args.cases.split(","):
            log(f"{name} {case}")
            r = measure(model, *CASES[case], args.rounds, args.tokens)
            cells = [case, "yes" if r["same"] else "NO", r["n"]]
            for way in ("all", "allowed", "top", "llama.cpp"):
                v = r[way]
                cells.append("–" if v is None else
                             f"{v['paths'][0]:.0f} / {v['paths'][1]:.0f} against {v['llama.cpp'][0]:.0f} / "
                             f"{v['llama.cpp'][1]:.0f}" + ("" if way == "all" else f" ({r[way + ' share']:.0%})"))
            rows.append(cells)
        print(f"\n#### {name}: `{path.name}` ({model.vocabulary.size:,} tokens)\n")
        print(md_table(["constraint", "same tokens", "samples", "all samples: paths on, µs median / mean",
                        "allowed tokens' records (share)", "k highest allowed logits (share)",
                        "left to llama.cpp (share)"], rows))
        del model


if __name__ == "__main__":
    main()
