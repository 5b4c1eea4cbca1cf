"""The end-to-end section: tokens/s of the same generation loop, unconstrained and under each engine, in lockstep."""

from __future__ import annotations

import dataclasses
import gc
import time

import numpy as np

import localguide
from localguide.grammar import sources
import peers
from common import (
    JSON_GBNF, OPPORTUNISTIC, PATTERNS, PERSON_SCHEMA, PROMPTS, SAMPLING, WORDS_GBNF, TimedChain, log, median, note,
    pct, trimmed_mean,
)


def generate_lockstep(runs):
    """Step several generations in turn, one token each, each in its own llama.cpp context.

    ``runs``: (model, prompt tokens, guide, max tokens, sampling, extra samplers, opportunistic); every
    run samples through ``TimedChain``.
    Returns per run (tokens, seconds of each step after the first): one ``llama_decode`` of the
    previous token plus the sampling of the next, prompt processing left out. Steps of the runs
    alternate a few milliseconds apart, so their difference at the same step is free of the
    slow drift in load that a shared machine has.
    """
    gens = []
    for model, prompt_tokens, guide, max_tokens, sampling, extra, opportunistic in runs:
        kwargs = {"opportunistic": True} if opportunistic else {}
        gens.append(iter(model.generate_tokens(prompt_tokens, guide, max_tokens, sampling, extra, chain=TimedChain,
                                               **kwargs)))
    out = [([], []) for _ in gens]
    live = list(range(len(gens)))
    while live:
        for k in list(live):
            t0 = time.perf_counter()
            try:
                tok = next(gens[k])
            except StopIteration:
                live.remove(k)
                continue
            dt = time.perf_counter() - t0
            toks, steps = out[k]
            if toks:  # the first step includes the prompt
                steps.append(dt)
            toks.append(tok)
    return [(toks, np.array(steps)) for toks, steps in out]


def bench_e2e(model, partner, cfg, notes, indexes, llg_tok, out):
    vocab = model.vocabulary
    n_vocab = vocab.size
    T, runs = cfg.tokens, cfg.runs
    T_gbnf = min(T, cfg.gbnf_tokens)  # llama.cpp's grammar sampler is slow: fewer tokens suffice
    stops = vocab.stop_ids.tolist()
    prompt = {k: model.tokenize_prompt(p) for k, p in PROMPTS.items()}
    json_gbnf = JSON_GBNF.read_text() if JSON_GBNF.is_file() else None
    if json_gbnf is None:
        note(notes, f"llama.cpp JSON grammar skipped: {JSON_GBNF} not found")

    def ban():
        return peers.ban_sampler(stops, n_vocab)

    # name -> (prompt key, engine, tokens, setup() -> (guide, extra samplers, timed Python sampler))
    configs = {}
    # Unconstrained against its unconstrained partner: the noise floor of the measure.
    configs["unconstrained"] = ("words", "none", T, lambda: (None, [ban()], None))

    configs["localguide words"] = ("words", "localguide", T, lambda: (
        indexes["words"].guide(max_tokens=T), [ban()], None))
    if llg_tok is not None:
        def llg_setup():
            s = peers.LLGuidanceSampler(peers.llg_matcher(llg_tok, PATTERNS["words"]), n_vocab)
            return None, [s.pointer, ban()], s
        configs["llguidance words"] = ("words", "llguidance", T, llg_setup)
    configs["llama.cpp GBNF words"] = ("words", "gbnf", T_gbnf, lambda: (
        None, [peers.gbnf_sampler(model, WORDS_GBNF), ban()], None))
    if json_gbnf is not None:
        # No stop-token ban here: once the object is closed only a stop token is allowed.
        configs["llama.cpp GBNF json"] = ("json", "gbnf", T_gbnf, lambda: (
            None, [peers.gbnf_sampler(model, json_gbnf)], None))
    for key in ("date", "email", "ipv4", "float"):
        try:
            indexes[key].guide(max_tokens=T)
        except localguide.BudgetError as e:
            note(notes, f"localguide {key} skipped: {e}")
            continue
        configs[f"localguide {key}"] = (key, "localguide", T, lambda key=key: (
            indexes[key].guide(max_tokens=T), [ban()], None))
    t0 = time.perf_counter()
    json_index = model.compile(json_schema=PERSON_SCHEMA)
    out["json_schema_compile"] = time.perf_counter() - t0
    configs["localguide JSON schema"] = ("json", "localguide", T, lambda: (json_index.guide(max_tokens=T), [], None))
    # localguide's own grammar engine on the same GBNF grammars, where this checkout has one.
    grammars = {"words": WORDS_GBNF, "json": json_gbnf}
    for key, text in grammars.items():
        if text is None:
            continue
        try:
            t0 = time.perf_counter()
            gindex = model.compile(grammar=text)
            gindex.complete()  # every subterminal tree: the whole compile, and nothing left to overlap the runs
            out.setdefault("grammar_compile", {})[key] = time.perf_counter() - t0
        except Exception as e:  # noqa: BLE001 - optional: the grammar engine may be absent
            note(notes, f"localguide grammar `{key}` skipped: {type(e).__name__}: {e}")
            continue
        bans = (lambda: [ban()]) if key == "words" else (lambda: [])
        # No token budget, as for llama.cpp's sampler (a budgeted grammar guide keeps a reserve).
        configs[f"localguide GBNF {key}"] = (key, "localguide", T_gbnf, lambda g=gindex, bans=bans: (
            g.guide(), bans(), None))
        if key == "json" and OPPORTUNISTIC:
            configs[f"localguide GBNF {key}, opportunistic"] = (
                key, "localguide", T_gbnf, lambda g=gindex: (g.guide(opportunistic=True), [], None), True)
    # The shipped Lark grammars of the numbers (no llama.cpp counterpart: its GBNF
    # examples are other languages). No budget and no stop ban: a run ends where the model
    # ends its query or function, or after T tokens.
    for key in ("sql", "c"):
        t0 = time.perf_counter()
        gindex = model.compile(grammar=key)
        gindex.complete()
        out.setdefault("grammar_compile", {})[key] = time.perf_counter() - t0
        configs[f"localguide grammar {key}"] = (key, "localguide", T, lambda g=gindex: (g.guide(), [], None))
        if OPPORTUNISTIC:
            configs[f"localguide grammar {key}, opportunistic"] = (
                key, "localguide", T, lambda g=gindex: (g.guide(opportunistic=True), [], None), True)
        if llg_tok is not None:  # the same Lark grammar through llguidance, in the same chain
            def llg_grammar(key=key):
                s = peers.LLGuidanceSampler(peers.llg_matcher(llg_tok, lark=sources.resolve(key)[0]), n_vocab)
                return None, [s.pointer], s
            configs[f"llguidance grammar {key}"] = (key, "llguidance", T, llg_grammar)

    res = {name: {"iv": [], "unc_iv": [], "ntok": [], "chain_ns": [], "unc_chain_ns": [], "guide_ns": [],
                  "seqs": [], "sample": None} for name in configs}
    # A short untimed warm-up run of each configuration, then `runs` rounds. Each run goes
    # in lockstep with an unconstrained run of the same prompt and length in a second
    # llama.cpp context (`partner`); the two contexts swap roles every round.
    names = list(configs)
    for r in range(-1, runs):
        sampling = dataclasses.replace(SAMPLING, seed=1000 + max(r, 0))
        # Each round starts with another configuration, so no one always runs first or last.
        shift = max(r, 0) % len(names)
        mine, theirs = (model, partner) if r % 2 == 0 else (partner, model)
        for name in names[shift:] + names[:shift]:
            pkey, engine, n_tok, setup, *opp = configs[name]
            guide, extra, holder = setup()
            n_tok = n_tok if r >= 0 else 8
            TimedChain.reset()
            gc.collect()
            (toks, iv), (_, unc_iv) = generate_lockstep([
                (mine, prompt[pkey], guide, n_tok, sampling, extra, bool(opp)),
                (theirs, prompt[pkey], None, n_tok, sampling, [ban()], False)])
            if holder is not None and holder.error is not None:
                raise RuntimeError(f"{name}: {holder.error}")
            if r < 0:
                continue
            d = res[name]
            d["iv"].append(iv)
            d["unc_iv"].append(unc_iv)
            d["ntok"].append(len(toks))
            d["seqs"].append(toks)
            if d["sample"] is None:
                d["sample"] = vocab.decode(toks).decode("utf-8", "replace")
            d["chain_ns"] += TimedChain.of(mine)
            d["unc_chain_ns"] += TimedChain.of(theirs)
            if holder is not None:
                d["guide_ns"] += holder.times_ns
        log(f"  e2e round {r + 1}/{runs} done" if r >= 0 else "  e2e warm-up done")

    # Step-paired: each step is compared with its partner's step (same prompt, same position,
    # a few ms apart). The per-token overhead is the median of those differences, which spikes
    # from other processes hardly move; tokens/s is the plain throughput of the runs.
    base_tok = float(np.median(np.concatenate([x for d in res.values() for x in d["unc_iv"]])))
    rows = []
    for name, d in res.items():
        tps, diffs = [], []
        for iv, unc_iv in zip(d["iv"], d["unc_iv"]):
            if len(iv) == 0:
                continue
            tps.append(len(iv) / float(np.sum(iv)))
            n = min(len(iv), len(unc_iv))
            diffs += (iv[:n] - unc_iv[:n]).tolist()
        over = median(diffs)
        chain_us = [x / 1e3 for x in d["chain_ns"]]
        d_sample = (trimmed_mean(d["chain_ns"]) - trimmed_mean(d["unc_chain_ns"])) / 1e9
        rows.append({"config": name, "tps": median(tps), "ratio": base_tok / (base_tok + over),
                     "guide_share": d_sample / (base_tok + d_sample),
                     "ratio_sampling": base_tok / (base_tok + d_sample),
                     "overhead_ms": over * 1e3,
                     "sample_us": (pct(chain_us, 50), pct(chain_us, 99), len(chain_us)),
                     "tokens": median(d["ntok"]), "runs": len(tps), "sample": (d["sample"] or "")[:60]})
    out["e2e"] = rows
    out["e2e_raw"] = res
    return res


