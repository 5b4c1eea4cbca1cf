"""The report: per-model tables, the targets table and BENCHMARKS.md."""

from __future__ import annotations

import os
import platform
import subprocess

import numpy as np
from pathlib import Path

import grammar_masks
import maskbench
import peers
from common import GRAMMAR_BUDGET, GUIDE_COST_PATTERNS, ROOT, TARGETS, fmt, md_table


# --- report ----------------------------------------------------------------------------

def machine() -> dict:
    cpu = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "?"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "localguide"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        commit += " (localguide/ modified)" if dirty else ""
    except OSError:
        commit = "?"
    return {
        "cpu": cpu, "cores": os.cpu_count(), "memory": mem, "os": platform.platform(),
        "python": platform.python_version(), "commit": commit,
        "versions": {k: peers.version(k) for k in
                     ("llama_cpp_python", "numpy", "numba", "outlines-core", "llguidance")},
        "load_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def us(t):
    return f"{fmt(t[0], 1)} / {fmt(t[1], 1)}" if t else "–"


def model_report(name: str, r: dict) -> str:
    parts = [f"## {name}: `{r['file']}` ({r['vocab']:,} tokens, llama.cpp n_threads={r['threads']}, "
             f"n_threads_batch={r.get('threads_batch', '?')})"]
    if "e2e" in r:
        parts.append("### End-to-end tokens/s (same loop, median of runs)")
        rows = [[x["config"], fmt(x["tps"], 1), fmt(x["ratio"], 3), fmt(x.get("ratio_sampling"), 3),
                 fmt(x["overhead_ms"], 2),
                 us(x.get("sample_us")), fmt(x["tokens"], 0), x["runs"], "`" + x["sample"].replace("|", "\\|").replace("\n", "⏎")
                 .replace("`", "'") + "`"] for x in r["e2e"]]
        parts.append(md_table(["configuration", "tokens/s", "ratio to unconstrained",
                               "ratio from sampling time", "overhead ms/token", "sampling µs/token p50 / p99", "tokens/run", "runs",
                               "first run's text"], rows))
        if r.get("grammar_compile"):
            parts.append("localguide grammar engine compile time, ms: " + "; ".join(
                f"{k} {v * 1e3:,.0f}" for k, v in r["grammar_compile"].items()) + ".")
    if "guide" in r:
        parts.append("### Per-token guide cost, µs p50 / p99\n\n"
                     "Guide cost in the chain = for each step of the generations, the time of the whole "
                     "llama.cpp sampler chain (guide, top-k, top-p, min-p, temperature, dist) through "
                     "`llama_sampler_apply` + `llama_sampler_accept` minus that of the same chain without the "
                     "guide, on the same fresh candidate array holding the model's own logits at that step, paired; p50 / p99 of those "
                     "differences: the per-token cost the guide adds, mask into the logits and advance "
                     "included. In loop, Δp50 = median sampling time per token (the whole llama.cpp sampler chain) "
                     "minus that of the unconstrained partner runs: it includes cache misses after each "
                     "`llama_decode`, and it goes negative when the smaller candidate set makes the later "
                     "samplers (top-k, top-p, softmax) cheaper than the guide costs. Sampler replay = `llama_sampler_apply` + `llama_sampler_accept` "
                     "through llama.cpp's API on a full, id-ordered candidate array, caches hot. "
                     "API = the engine's own calls, mask computation + advance only. Runs cut by the "
                     "token limit (words, float) need not end in a complete match.")
        rows = [[x["pattern"], us(x.get("lg_chain")), fmt(x["lg_loop"][0]) if "lg_loop" in x else "–",
                 us(x.get("lg_replay")),
                 us(x.get("lg_api")),
                 fmt(x["llg_loop_delta"][0]) if "llg_loop_delta" in x else "–", us(x.get("llg_loop")), us(x.get("llg_replay")),
                 us(x.get("llg")), us(x.get("oc")), x["lg_replay"][2],
                 "{} / {}".format(*x["complete"]) if "complete" in x else "–"] for x in r["guide"]]
        parts.append(md_table(["pattern", "localguide guide cost in the chain, Δ (paired replay)",
                               "localguide in loop, Δp50", "localguide sampler replay (mask alone)",
                               "localguide API (allowed_token_ids+advance)",
                               "llguidance in loop, Δp50", "llguidance sampler callbacks in loop",
                               "llguidance sampler replay", "llguidance API (mask fill+consume_token)",
                               "outlines-core API (write_mask_into+advance)", "steps",
                               "outputs that fully match (Python `re`, ASCII)"], rows))
    if "compile" in r:
        c = r["compile"]
        parts.append("### Index build, ms (median)")
        rows = []
        for x in c["rows"]:
            ratio = x["lg_cold"] / x["oc"] if "oc" in x else None
            rows.append([x["pattern"], x["states"], fmt(x["lg_cold"] * 1e3, 1), fmt(x["dfa"] * 1e3, 1),
                         fmt(x["lg_cached"] * 1e3, 1),
                         fmt(x.get("oc", float("nan")) * 1e3, 1), fmt(ratio, 3),
                         fmt(x.get("llg", float("nan")) * 1e3, 1)])
        parts.append(md_table(["pattern", "states", "localguide cold", "of which regex→DFA",
                               "localguide cached load",
                               "outlines-core Index", "localguide/outlines", "llguidance matcher+first mask"],
                              rows))
        parts.append("One-off costs per vocabulary, ms: " + "; ".join(
            f"{k} {v * 1e3:,.0f}" for k, v in c["one_off"].items()) + ".")
    if "maskbench" in r:
        parts.append(maskbench.report(name, r["maskbench"]))
    if r.get("grammar_masks"):
        parts.append(f"### Grammar engine: compile and per-token masks ({name})\n"
                     "`cold` = `compile_grammar` in a fresh process with an empty disk cache (numba's machine-code "
                     "cache warm) with every subterminal tree built (`cold to mask`: wall time to the first mask in another "
                     "fresh process and empty cache; the index builds trees when first needed), `cached` = the same loading the cache file (s and ms of CPU); masks = µs of CPU per "
                     "`mask()` while the model's own tokenization of sample texts (2-3 per grammar, "
                     "`benchmarks/grammar_masks.py`) is walked through a guide of the cached index: `first` is the "
                     "walk of a fresh index (every parser state and mask new, the arena only the cache file's seed; median of "
                     f"{r['grammar_masks'][0].get('repeat', 1)} walks, each of an index loaded again), `warm` the same walk again. "
                     "`first max` (the largest of all first walks) includes one-time pauses where a walk meets one "
                     "(Python's cycle collector, numba loading a kernel). "
                     "`llguidance` (when installed): the same token sequences through a fresh `LLMatcher` of the same "
                     "Lark grammar (median of as many walks), µs of CPU per `unsafe_compute_mask_ptr` (the bitmask "
                     "fill `llguidance.numpy` calls); `refused`: sample tokens its mask left out or `consume_token` "
                     "rejected (each sample is a sentence of the grammar), and whether it refuses the first sample after a "
                     "newline, which Lark's `%ignore` allows (Lark itself parses it; localguide accepts it).\n\n"
                     + grammar_masks.table(r["grammar_masks"]))
    if r.get("grammar_masks_budget"):
        parts.append(f"### Grammar masks with a token budget ({name})\n"
                     f"The same walks through guides made with `max_tokens={GRAMMAR_BUDGET}`, as `Model.generate` and "
                     "the CLI make them (budget-aware masks: each new state also gets an upper bound on the tokens "
                     "its completions need). `first guide ms` = making a fresh index's first guide, which builds "
                     "the budget tables (once per index).\n\n"
                     + grammar_masks.table(r["grammar_masks_budget"]))
    if "cli" in r:
        c = r["cli"]
        parts.append(f"### CLI, warm caches\n`{c['command']}`: first token after **{c['first']:.2f} s** "
                     f"(process total {c['total']:.2f} s; median of {c['runs']}). A bare "
                     f"`python -c 'import localguide, localguide.cli'` takes {c.get('imports', float('nan')):.2f} s.")
    return "\n\n".join(parts)


def targets_report(results: dict) -> str:
    rows = []
    for name, r in results.items():
        def ok(v, good):
            return "–" if v is None or not np.isfinite(v) else ("yes" if good(v) else "**no**")
        e2e = {x["config"]: x for x in r.get("e2e", [])}
        w = e2e.get("localguide words")
        if w:
            regex = {k: x for k, x in e2e.items()
                     if k.startswith("localguide") and "GBNF" not in k and "JSON" not in k and "grammar" not in k}
            long_runs = {k: x for k, x in regex.items() if x["tokens"] >= 30}
            short = [f"{k.split()[-1]} {x['ratio']:.3f}" for k, x in regex.items() if k not in long_runs]
            worst = min((x["ratio"] for x in long_runs.values()), default=float("nan"))
            worst_s = min((x.get("ratio_sampling", float("nan")) for x in regex.values()), default=float("nan"))
            rows.append([name, f"regex constrained/unconstrained tokens/s ≥ {TARGETS['ratio']} (runs of ≥ 30 "
                               "tokens)",
                         ", ".join(f"{k.split()[-1]} {x['ratio']:.3f}" for k, x in long_runs.items())
                         + (f" (short runs, noisier: {', '.join(short)})" if short else "")
                         + f"; from sampling time, worst pattern {worst_s:.3f}",
                         ok(worst, lambda v: v >= TARGETS["ratio"])])
        g = r.get("guide")
        js = e2e.get("localguide JSON schema")
        if js:
            rows.append([name, f"JSON schema constrained/unconstrained tokens/s ≥ {TARGETS['ratio']}",
                         f"{js['ratio']:.3f} (from sampling time {js['ratio_sampling']:.3f}; "
                         f"{js['tokens']:.0f} tokens/run)", ok(js["ratio"], lambda v: v >= TARGETS["ratio"])])
            rows.append([name, "JSON schema: guide share of the model's time ≤ 3%",
                         f"{100 * js['guide_share']:.2f}%", ok(js["guide_share"], lambda v: v <= 0.03)])
        gram = [(k, x) for k, x in e2e.items() if k in ("localguide GBNF json", "localguide grammar sql",
                                                          "localguide grammar c")]
        if gram:
            worst = min(x["ratio"] for _, x in gram)
            opp = [f"{k.split()[-1]} {e2e[k + ', opportunistic']['ratio']:.3f}" for k, _ in gram
                   if k + ", opportunistic" in e2e]
            rows.append([name, "grammar (json, sql, c) constrained/unconstrained tokens/s ≥ 0.95",
                         ", ".join(f"{k.split()[-1]} {x['ratio']:.3f} ({x['tokens']:.0f} tokens/run)"
                                   for k, x in gram) + (f"; opportunistic: {', '.join(opp)}" if opp else ""),
                         ok(worst, lambda v: v >= 0.95)])
        gm = r.get("grammar_masks")
        if gm:
            worst50 = max(gm, key=lambda x: x["first_p50"])
            worst99 = max(gm, key=lambda x: x["first_p99"])
            rows.append([name, "grammar masks (json, sql, c), first pass: p50 ≤ 50 µs, p99 ≤ 1 ms",
                         ", ".join(f"{x['grammar']} {x['first_p50']:,.0f} / {x['first_p99']:,.0f} µs" for x in gm)
                         + "; warm pass p50 ≤ " + f"{max(x['warm_p50'] for x in gm):.1f} µs",
                         ok(max(worst50["first_p50"] / 50, worst99["first_p99"] / 1000), lambda v: v <= 1)])
        gb = r.get("grammar_masks_budget")
        if gb:
            worst50 = max(gb, key=lambda x: x["first_p50"])
            worst99 = max(gb, key=lambda x: x["first_p99"])
            rows.append([name, f"grammar masks with max_tokens={GRAMMAR_BUDGET} (json, sql, c), first pass: "
                               "p50 ≤ 50 µs, p99 ≤ 1 ms (the issue's targets, applied to budget-aware guides)",
                         ", ".join(f"{x['grammar']} {x['first_p50']:,.0f} / {x['first_p99']:,.0f} µs" for x in gb)
                         + "; first guide ≤ " + f"{max(x['guide_ms'] for x in gb):.0f} ms",
                         ok(max(worst50["first_p50"] / 50, worst99["first_p99"] / 1000), lambda v: v <= 1)])
        if gm:
            cold = max(x["cold_s"] for x in gm)
            cached = max(x["cached_ms"] for x in gm)
            first = max(x.get("cold_first_s", x["cold_s"]) for x in gm)
            rows.append([name, "grammar compile (json, sql, c): ≤ 2 s cold, ≤ 50 ms cached",
                         f"cold ≤ {cold:.2f} s with every tree (to the first mask ≤ {first:.2f} s), "
                         f"cached ≤ {cached:.0f} ms",
                         ok(max(cold / 2, cached / 50), lambda v: v <= 1)])
        mb = r.get("maskbench")
        if mb:
            rows.append([name, "MaskBench time to first mask p50 ≤ 50 ms, p99 ≤ 2 s (cold)",
                         f"p50 {mb['cold_p50'] * 1e3:,.0f} ms, p99 {mb['cold_p99'] * 1e3:,.0f} ms",
                         ok(max(mb["cold_p50"] / 0.05, mb["cold_p99"] / 2.0), lambda v: v <= 1)])
            rows.append([name, "MaskBench time to first mask ≤ 20 ms with the cache warm (p50 / p99)",
                         f"{mb['warm_p50'] * 1e3:,.1f} / {mb['warm_p99'] * 1e3:,.1f} ms",
                         ok(mb["warm_p50"], lambda v: v <= 0.02)])
        g = [x for x in g or [] if x["pattern"] in GUIDE_COST_PATTERNS and "lg_chain" in x]
        if g:
            worst50 = max(g, key=lambda x: x["lg_chain"][0])
            worst99 = max(g, key=lambda x: x["lg_chain"][1])
            alone = max(g, key=lambda x: x["lg_replay"][0])
            loop = [x["lg_loop"] for x in g if "lg_loop" in x]
            extra = f"; in loop, Δp50 {max(t[0] for t in loop):.1f} µs" if loop else ""
            what = "guide cost in the chain, paired Δ, worst of date/email/ipv4/float"
            rows.append([name, f"{what}: p50 ≤ {TARGETS['p50_us']:.0f} µs",
                         f"{worst50['lg_chain'][0]:.1f} µs ({worst50['pattern']}; the mask alone, "
                         f"{alone['pattern']}: {alone['lg_replay'][0]:.1f} µs{extra})",
                         ok(worst50["lg_chain"][0], lambda v: v <= TARGETS["p50_us"])])
            rows.append([name, f"{what}: p99 ≤ {TARGETS['p99_us']:.0f} µs",
                         f"{worst99['lg_chain'][1]:.1f} µs ({worst99['pattern']})",
                         ok(worst99["lg_chain"][1], lambda v: v <= TARGETS["p99_us"])])
        c = r.get("compile")
        if c:
            ratios = [x["lg_cold"] / x["oc"] for x in c["rows"] if "oc" in x]
            if ratios:
                worst = max(ratios)
                rows.append([name, "cold compile ≤ ½ outlines-core (worst pattern)", f"{worst:.2f}×",
                             ok(worst, lambda v: v <= TARGETS["compile_vs_outlines"])])
            cached = max(x["lg_cached"] for x in c["rows"]) * 1e3
            rows.append([name, f"cached load ≤ {TARGETS['cached_ms']:.0f} ms (worst pattern)",
                         f"{cached:.1f} ms", ok(cached, lambda v: v <= TARGETS["cached_ms"])])
        if "cli" in r:
            f = r["cli"]["first"]
            rows.append([name, f"CLI first token ≤ {TARGETS['first_token_s']:.0f} s", f"{f:.2f} s",
                         ok(f, lambda v: v <= TARGETS["first_token_s"])])
    return md_table(["model", "target", "measured", "met"], rows)


def full_report(results, notes, mach, cfg, command, started, elapsed) -> str:
    v = mach["versions"]
    head = [
        "# Benchmarks",
        f"Generated by `{command}` on {started:%Y-%m-%d %H:%M} UTC ({elapsed / 60:.1f} min).",
        f"Machine: {mach['cpu']}, {mach['cores']} cores, {mach['memory']} RAM, {mach['os']}; "
        f"Python {mach['python']}; llama-cpp-python {v['llama_cpp_python']}, numpy {v['numpy']}, "
        f"numba {v['numba']}, outlines-core {v['outlines-core'] or 'not installed'}, "
        f"llguidance {v['llguidance'] or 'not installed'}; localguide commit {mach['commit']}. "
        f"Load average (1 min) at start {fmt(mach['load_start'], 2)}, at end {fmt(mach.get('load_end'), 2)}: "
        "other work on the machine shows up in every number.",
        f"Settings: {cfg.runs} runs × up to {cfg.tokens} tokens per configuration (each in lockstep "
        f"with an unconstrained partner run, after one warm-up run each), sampling temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, "
        f"seed 1000+run; {cfg.compile_reps} repetitions per compile; {cfg.replays} replays of the "
        "generated token sequences for the guide cost.",
        "## Targets",
        targets_report(results),
    ]
    body = [model_report(name, r) for name, r in results.items()]
    method = """## How it is measured

* **End to end**: every configuration goes through `Model.generate_tokens`, the same loop
  (`llama_decode` + one llama.cpp sampler chain); only the constraint differs: a localguide
  guide (its `GuideSampler`), llama.cpp's GBNF sampler (`llama_sampler_init_grammar`), or an
  llguidance sampler (`benchmarks/peers.py`: `LLMatcher` fills a bitmask, numpy expands it and
  compacts the candidate array). Stop tokens are banned with a logit-bias sampler except for
  JSON (a closed object allows only a stop token), so runs last their full length unless the
  constraint itself ends (date, email, IPv4, JSON). llama.cpp's grammar sampler is slow, so GBNF
  runs (both engines) are shorter. Each run goes in lockstep with an unconstrained *partner*
  run of the same prompt and length in a second llama.cpp context of the same model: one token
  of the run, one of the partner, and so on (the two contexts swap roles every round). A step
  is one `llama_decode` of the previous token plus the sampling of the next, timed around the
  loop's `next()`. overhead = median over all steps of (step − the partner's step at the same
  position, a few milliseconds apart); ratio = the unconstrained per-token time / (that +
  overhead). Pairing step by step cancels the drift in load that a shared machine has (timing
  whole runs apart moved this ratio by ±4–8% from run to run), and is fair to short runs, whose
  first tokens are slow for every engine; the `unconstrained` row, an unconstrained run against
  its unconstrained partner, shows the noise floor. tokens/s = steps / their time, median of
  runs: two contexts sharing the CPU caches make it lower than a lone loop's. ratio from
  sampling time = the same, with the overhead taken as the difference of mean chain sampling
  times (1% slowest left out) of the run and its partners: it isolates the constraint's own
  cost, but misses work outside the sampler (such as `guide.is_finished()` in the loop).
  sampling µs/token = time in the chain's `sample` (apply + accept of every sampler) per token. Grammars: `../shared/corpora/gbnf/json.gbnf` (llama.cpp's
  JSON grammar) and `root ::= [a-z]+ (" " [a-z]+)*`.
* **Guide cost**: "in loop" is the median chain sampling time per token minus that of the
  unconstrained partners. "Sampler replay" feeds the token sequences of the runs above back through a fresh
  sampler with `llama_sampler_apply` + `llama_sampler_accept` on an id-ordered candidate array
  of the whole vocabulary (as llama.cpp builds it), one ctypes call each. "API" rows use each
  engine's own calls: localguide `allowed_token_ids()` + `advance`; outlines-core
  `Guide.write_mask_into` + `advance(return_tokens=False)`; llguidance
  `LLMatcher.unsafe_compute_mask_ptr` (what `llguidance.numpy.fill_next_token_bitmask` calls) +
  `consume_token`. The peers' API numbers stop at a bitmask: applying it to the candidates costs
  more (the llguidance sampler columns show how much, from Python).
* **Index build**: localguide cold = `compile_regex` with an empty disk cache and an empty
  in-process DFA cache (trie built and numba kernels loaded: those one-off costs are listed
  apart); cached load = a disk-cache hit from a `Vocabulary` object whose fingerprint is not yet
  computed, as in a fresh process; outlines-core = `outlines_core.Index` over a `Vocabulary`
  built from the same raw token bytes; llguidance = `LLMatcher` construction + the first mask
  (llguidance builds lazily).
* **CLI**: wall time from starting the process to the first byte on stdout, caches warm
  (one untimed run first)."""
    tail = ["## Notes", "\n".join(f"* {n}" for n in notes) if notes else "None."]
    return "\n\n".join(head + body + [method] + tail) + "\n"




# Sections that other scripts write into BENCHMARKS.md (cold_start.py's); a full run keeps them.
KEPT_SECTIONS = ("## JSON Schema on the grammar route", "## Speculative decoding", "## Cold start", "## Quality",
                 "## Conversations", "## Server")


def keep_sections(report: str, old: str) -> str:
    """The report with the kept sections of the old file put back before "## How it is measured"."""
    kept = []
    for title in KEPT_SECTIONS:
        start = old.find("\n" + title)
        if start < 0:
            continue
        end = old.find("\n## ", start + 1)
        kept.append(old[start + 1:end if end >= 0 else len(old)].rstrip() + "\n\n")
    if not kept:
        return report
    at = report.find("## How it is measured")
    return report[:at] + "".join(kept) + report[at:]


def replace_section(path, title: str, body: str) -> None:
    """Write ``title`` and ``body`` into the markdown file ``path``: in place of that section, or
    before "## How it is measured" (a section another script keeps there, ``KEPT_SECTIONS``)."""
    from pathlib import Path

    path = Path(path)
    old = path.read_text("utf-8") if path.is_file() else ""
    section = f"{title}\n\n{body.rstrip()}\n\n"
    start = old.find("\n" + title + "\n")
    if start >= 0:
        end = old.find("\n## ", start + 1)
        new = old[:start + 1] + section + (old[end + 1:] if end >= 0 else "")
    else:
        at = old.find("## How it is measured")
        new = old[:at] + section + old[at:] if at >= 0 else old + "\n" + section
    path.write_text(new, "utf-8")
