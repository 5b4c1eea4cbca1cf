"""Speculative decoding end to end: constrained tokens/s with speculation on, off and fast-forward,
against unconstrained generation of the same prompt, side by side in one process.

For each model and constraint, runs go in rounds: in every round each mode runs once with the
same seed (unconstrained, speculation off, on, fast-forward; each round starting one mode
later), so load drift hits all modes alike; a constraint whose texts are short runs more
rounds, until each mode generated ``--min-tokens``. tokens/s = generated tokens / generation
seconds (``Model.last_stats``: from the end of the prompt's decode to the last token), summed
over the rounds. The count model starts empty and learns from the speculative runs
(``warm-up runs`` of them come first, untimed, as an app that has been used a little;
``--warmup 0`` shows a first use). Also reported: acceptance (drafts the sampler confirmed /
drafted), tokens per decode call, how many speculative runs gave the same text as
speculation off with the same seed (all, with reproducible logits: ``load``'s default; with
``--not-reproducible`` the rest differ by llama.cpp's batched logits), and for
fast-forward how often the verified runs' model chose another tokenization of the forced text
than the one fast-forward imposes.

    python benchmarks/speculation.py [--models smollm2,gemma] [--rounds 5] [--tokens 96]
        [--warmup 3] [--min-tokens 250] [--cases person,maskbench,date,...] [--threads N]
        [--n-gpu-layers -1] [--full-candidates] [--not-reproducible] [--markdown]

``--full-candidates`` adds speculation off and on with llama.cpp's candidate array of the whole
vocabulary at every sample, as before ``SamplerChain._sample_allowed`` and ``_sample_top``: their
gain, paired.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from common import PATTERNS, PERSON_SCHEMA, PROMPTS, ROOT, SAMPLING, fmt, log, md_table, model_paths

import llama_cpp

import localguide
from localguide.engines.llamacpp.sampler import SamplerChain, Sampling
from localguide.speculate import CountModel, DecodeCost
from localguide.speculate.drafts import MAX_DRAFT

N_MASKBENCH = 10
MAX_ROUNDS = 10  # times --rounds, for --min-tokens
MASKBENCH_DIR = Path(os.environ.get("LOCALGUIDE_MASKBENCH", ROOT.parent / "shared" / "corpora" / "maskbench"))


def fixed_key_schemas(n: int) -> list[tuple[str, dict]]:
    """The first ``n`` MaskBench schemas (sorted by path) that are an object whose properties
    are all required, 2 to 8 of them, each a plain string, integer, number, boolean or enum:
    their keys are fixed (compiled with strict=True), their values short."""
    out = []
    for f in sorted(MASKBENCH_DIR.glob("*/*.json")):
        schema = json.loads(f.read_text())["schema"]
        props = schema.get("properties") if isinstance(schema, dict) else None
        if (not isinstance(props, dict) or schema.get("type") != "object" or not 2 <= len(props) <= 8
                or set(schema.get("required", [])) != set(props) or "$ref" in json.dumps(schema)):
            continue
        if not all(isinstance(p, dict) and (p.get("type") in ("string", "integer", "number", "boolean")
                                            or "enum" in p) for p in props.values()):
            continue
        out.append((f"{f.parent.name}/{f.stem}", schema))
        if len(out) == n:
            break
    return out


def cases(selected: list[str]) -> dict[str, tuple[dict, str]]:
    """name -> (constraint as ``Model.generate`` takes it, prompt)."""
    all_cases: dict[str, tuple[dict, str]] = {
        "person schema": ({"json_schema": PERSON_SCHEMA}, PROMPTS["json"]),
    }
    for name, schema in fixed_key_schemas(N_MASKBENCH):
        keys = ", ".join(schema["properties"])
        all_cases[f"maskbench {name}"] = ({"json_schema": schema, "strict": True},
                                          f"A JSON object with the keys {keys}:\n")
    for name in ("date", "email", "ipv4", "float"):
        all_cases[f"regex {name}"] = ({"regex": PATTERNS[name]}, PROMPTS[name])
    all_cases["free JSON"] = ({"json_schema": True}, PROMPTS["json"])
    for g in ("json", "sql", "c"):
        all_cases[f"grammar {g}"] = ({"grammar": g}, PROMPTS.get(g, PROMPTS["json"]))
    if not selected:
        return all_cases
    return {k: v for k, v in all_cases.items() if any(k.startswith(s) or s in k for s in selected)}


class _Free(DecodeCost):
    """Decodes of any length cost the same (every draft is tried): for the tokenization count."""

    def relative(self, n: int) -> float:
        return 1.0

    def in_ones(self, seconds: float) -> None:
        return None  # (nor does drafting ever pause for what a decode really cost)


def _ban_stops(model):
    """A logit-bias sampler that bans the stop tokens (unconstrained runs last the full length)."""
    stops = model.vocabulary.stop_ids.tolist()
    bias = (llama_cpp.llama_logit_bias * len(stops))()
    for i, t in enumerate(stops):
        bias[i].token, bias[i].bias = t, float("-inf")
    return llama_cpp.llama_sampler_init_logit_bias(model.vocabulary.size, len(stops), bias), bias


def one(model, constraint: dict, prompt_tokens, max_tokens: int, seed: int, mode: str, counts):
    """(tokens, stats) of one run; ``mode``: unconstrained, off, on or ff; "off full" and "on full":
    off and on with llama.cpp's candidate array of the whole vocabulary at every sample (the
    sampler before ``SamplerChain._sample_allowed`` and ``_sample_top``)."""
    if mode.endswith(" full"):
        saved = SamplerChain._sample_allowed, SamplerChain._sample_top
        SamplerChain._sample_allowed = SamplerChain._sample_top = lambda self, *a: -1
        try:
            return one(model, constraint, prompt_tokens, max_tokens, seed, mode[:-5], counts)
        finally:
            SamplerChain._sample_allowed, SamplerChain._sample_top = saved
    sampling = Sampling(SAMPLING.temperature, SAMPLING.top_k, SAMPLING.top_p, SAMPLING.min_p, seed)
    if mode == "unconstrained":
        smpl, keep = _ban_stops(model)
        tokens = list(model.generate_tokens(prompt_tokens, None, max_tokens, sampling, extra_samplers=[smpl]))
        return tokens, model.last_stats
    options = {k: v for k, v in constraint.items()}
    index = model.compile(**options)
    guide = index.guide(max_tokens=max_tokens)
    tokens = list(model.generate_tokens(prompt_tokens, guide, max_tokens, sampling, speculate=mode in ("on", "ff"),
                                        fast_forward=mode == "ff", counts=counts))
    return tokens, model.last_stats


def measure(model, name: str, constraint: dict, prompt: str, rounds: int, max_tokens: int, warmup: int,
            min_tokens: int = 0, full: bool = False) -> dict:
    prompt_tokens = model.tokenize_prompt(prompt)
    counts = CountModel()
    ff_counts = CountModel()
    full_counts = CountModel()
    for w in range(warmup):
        one(model, constraint, prompt_tokens, max_tokens, 500 + w, "on", counts)
        if full:
            one(model, constraint, prompt_tokens, max_tokens, 500 + w, "on full", full_counts)
    modes = ("unconstrained", "off", "on", "ff") + (("off full", "on full") if full else ())
    agg = {m: {"tokens": 0, "seconds": 0.0, "decodes": 0, "drafted": 0, "accepted": 0, "forced_drafted": 0,
               "forced_accepted": 0, "ff": 0} for m in modes}
    same = 0
    first_on = None
    per_round: list[dict[str, float]] = []  # each round's tokens/s per mode
    r = 0
    # A short constraint (an IP address: 11 tokens) goes on for more rounds: a few tens of
    # milliseconds per mode would be measured otherwise, where a scheduler hiccup moves the ratio 5%.
    while r < rounds or (r < MAX_ROUNDS * rounds and min(agg[m]["tokens"] for m in modes) < min_tokens):
        texts = {}
        speeds = {}
        # (each round starts with the next mode: the machine's speed drifts within a round too,
        # and no mode should always run after the same one)
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
            tokens, s = one(model, constraint, prompt_tokens, max_tokens, 1000 + r, mode,
                            {"ff": ff_counts, "on full": full_counts}.get(mode, counts))
            a = agg[mode]
            a["tokens"] += s.tokens
            a["seconds"] += s.seconds
            a["decodes"] += s.decode_calls
            a["drafted"] += s.drafted
            a["accepted"] += s.accepted
            a["forced_drafted"] += s.forced_drafted
            a["forced_accepted"] += s.forced_accepted
            a["ff"] += s.fast_forwarded
            texts[mode] = tokens
            speeds[mode] = s.tokens / s.seconds if s.seconds else 0.0
            if mode == "on" and first_on is None:
                first_on = s.tokens_per_second
        same += texts["on"] == texts["off"]
        per_round.append(speeds)
        r += 1
    timed = r
    # How often the model, verifying forced text, takes another tokenization than the canonical
    # one fast-forward would impose: forced drafts only, drafted wherever there are some.
    saved = model._cost
    model._cost = _Free()
    forced = {"drafted": 0, "accepted": 0}
    try:
        for r in range(rounds):
            _, s = one(model, constraint, prompt_tokens, max_tokens, 1000 + r, "on", CountModel(max_states=0))
            forced["drafted"] += s.forced_drafted
            forced["accepted"] += s.forced_accepted
    finally:
        model._cost = saved
    tps = {m: agg[m]["tokens"] / agg[m]["seconds"] for m in modes}
    on = agg["on"]

    def paired(a: str, b: str) -> float:
        # (a round's two modes ran a few seconds apart on the same seed: their ratio, and the
        # median of the rounds', leaves out a moment that slowed one round of one mode)
        return statistics.median(x[a] / x[b] for x in per_round if x[a] and x[b])

    return {
        "case": name, "tps": tps, "rounds": timed,
        "ratio_on": tps["on"] / tps["unconstrained"], "ratio_off": tps["off"] / tps["unconstrained"],
        "on_off": tps["on"] / tps["off"],
        "paired_on": paired("on", "unconstrained"), "paired_on_off": paired("on", "off"),
        "ratio_ff": tps["ff"] / tps["unconstrained"],
        "acceptance": on["accepted"] / on["drafted"] if on["drafted"] else None,
        "tokens_per_decode": on["tokens"] / on["decodes"] if on["decodes"] else None,
        "ff_tokens_per_decode": agg["ff"]["tokens"] / agg["ff"]["decodes"] if agg["ff"]["decodes"] else None,
        "same_seed": same,
        "forced_other": (1 - forced["accepted"] / forced["drafted"]) if forced["drafted"] else None,
        "forced_n": forced["drafted"],
        "tokens": {m: agg[m]["tokens"] / timed for m in modes},
        "full": {m: tps[m] / tps[f"{m} full"] for m in ("off", "on")} if full else None,
    }


def report(name: str, path: Path, rows: list[dict], args) -> str:
    head = ["constraint", "unconstrained tok/s", "off", "on", "fast-forward", "on / unconstrained",
            "off / unc.", "ff / unc.", "on / off", "acceptance", "tokens per decode (on, ff)", "same text as off",
            "forced text tokenized otherwise", "tokens per run"]
    table = []
    for x in rows:
        t = x["tps"]
        table.append([x["case"], fmt(t["unconstrained"]), fmt(t["off"]), fmt(t["on"]), fmt(t["ff"]),
                      f"**{x['ratio_on']:.2f}**", f"{x['ratio_off']:.2f}", f"{x['ratio_ff']:.2f}", f"{x['on_off']:.2f}",
                      "–" if x["acceptance"] is None else f"{x['acceptance']:.0%}",
                      f"{fmt(x['tokens_per_decode'], 2)}, {fmt(x['ff_tokens_per_decode'], 2)}",
                      f"{x['same_seed']}/{x['rounds']}",
                      "–" if x["forced_other"] is None else f"{x['forced_other']:.0%} of {x['forced_n']}",
                      fmt(x["tokens"]["on"], 0)])
    text = f"### {name}: `{path.name}`\n\n" + md_table(head, table)
    if args.full_candidates:
        text += "\n\n" + md_table(
            ["constraint", "off / off with every candidate", "on / on with every candidate", "on full / unconstrained"],
            [[x["case"], f"{x['full']['off']:.3f}", f"{x['full']['on']:.3f}",
              f"{x['tps']['on full'] / x['tps']['unconstrained']:.2f}"] for x in rows])
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--cases", default="", help="comma separated name prefixes or parts (default: all)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--warmup", type=int, default=3, help="untimed speculative runs that teach the counts first")
    ap.add_argument("--min-tokens", type=int, default=250,
                    help=f"more rounds (up to {MAX_ROUNDS}x) until each mode generated this many tokens")
    ap.add_argument("--threads", type=int, default=None, help="n_threads and n_threads_batch (default: llama-cpp-python's)")
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--full-candidates", action="store_true",
                    help="also off and on with llama.cpp's candidate array of the whole vocabulary at every sample")
    ap.add_argument("--not-reproducible", action="store_true",
                    help="load(reproducible=False): llama.cpp's fastest kernels for each batch")
    ap.add_argument("--short-tokens", type=int, default=None,
                    help="with one decode width (a GPU): generations likely shorter than this do not draft "
                         "(default: the library's)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.short_tokens is not None:
        from localguide.engines.llamacpp import loop

        loop.SHORT_TOKENS = args.short_tokens
    notes: list[str] = []
    selected = [s.strip() for s in args.cases.split(",") if s.strip()]
    out = []
    for name, path in model_paths(args.models.split(","), notes).items():
        kw = {"n_gpu_layers": args.n_gpu_layers, "n_ctx": 2048, "reproducible": not args.not_reproducible}
        if args.threads:
            kw.update(n_threads=args.threads, n_threads_batch=args.threads)
        model = localguide.load(path, **kw)
        ctx = model.llama.ctx
        log(f"== {name}: n_threads={llama_cpp.llama_n_threads(ctx)}, n_threads_batch={llama_cpp.llama_n_threads_batch(ctx)}, "
            f"n_gpu_layers={args.n_gpu_layers} (GPU offload built in: {llama_cpp.llama_supports_gpu_offload()}), "
            f"reproducible: {model.reproducible_why or True}")
        rows = []
        for case, (constraint, prompt) in cases(selected).items():
            t0 = time.perf_counter()
            try:
                model.compile(**constraint)
            except Exception as e:  # noqa: BLE001
                log(f"  {case}: skipped ({e})")
                continue
            row = measure(model, case, constraint, prompt, args.rounds, args.tokens, args.warmup, args.min_tokens,
                          args.full_candidates)
            rows.append(row)
            log(f"  {case}: on {row['ratio_on']:.2f}x, off {row['ratio_off']:.2f}x, ff {row['ratio_ff']:.2f}x, "
                f"acceptance {row['acceptance']}, tokens/decode {row['tokens_per_decode']:.2f}, "
                f"same {row['same_seed']}/{row['rounds']} ({time.perf_counter() - t0:.0f} s)")
        cost = model._cost
        if cost.width and cost.width > 1:
            log(f"  {name}: every decode with drafts {cost.width} tokens wide, {cost.width_ratio:.2f}x one token "
                f"({cost.one_seconds * 1e3:.2f} ms), steady")
        if cost.widths:
            log(f"  {name}: steady decode of n tokens, ms: "
                + ", ".join(f"{n}: {t * 1e3:.2f}" for n, t in sorted(cost.widths.items())))
        else:
            log(f"  {name}: one decode of n tokens with logits at each, against one token (timed lengths): "
                + ", ".join(f"{n}: {cost.relative(n):.2f}" for n in range(2, MAX_DRAFT + 2) if cost.known(n)))
        out.append(report(name, path, rows, args))
        print(out[-1] + "\n", flush=True)  # (each model's table as soon as it is measured)
    for n in notes:
        log("note:", n)


if __name__ == "__main__":
    sys.exit(main())
