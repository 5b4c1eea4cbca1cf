"""The per-token guide cost section: in the loop, and the e2e token sequences replayed through each engine."""

from __future__ import annotations

import ctypes
import re
import time

import numpy as np

import llama_cpp
import localguide.engines.llamacpp.sampler as lg_sampler
import peers
from common import PATTERNS, PROMPTS, SAMPLING, log, note, pct


# --- per-token guide cost --------------------------------------------------------------

def _candidates(n_vocab):
    """An id-ordered llama_token_data array over the whole vocabulary (as llama.cpp builds it)."""
    rng = np.random.default_rng(0)
    cand = np.empty((n_vocab, 3), np.int32)
    cand[:, 0] = np.arange(n_vocab, dtype=np.int32)
    cand[:, 1] = rng.standard_normal(n_vocab).astype(np.float32).view(np.int32)
    cand[:, 2] = 0
    arr = llama_cpp.llama_token_data_array(
        data=cand.ctypes.data_as(ctypes.POINTER(llama_cpp.llama_token_data)), size=n_vocab,
        selected=-1, sorted=False)
    return cand, cand.copy(), arr


def replay_sampler(make_sampler, seqs, n_vocab, repeats):
    """A sampler's apply + accept through llama.cpp's API (llama_sampler_apply/accept), token by
    token along ``seqs``, on a fresh full-vocabulary candidate array each step."""
    cand, pristine, arr = _candidates(n_vocab)
    ref = ctypes.byref(arr)
    apply, accept = llama_cpp.llama_sampler_apply, llama_cpp.llama_sampler_accept
    times = []
    for rep in range(repeats + 1):
        for seq in seqs:
            owner, ptr = make_sampler()
            try:
                prepare = getattr(owner, "prepare", None)  # localguide: the guide's mask, before apply
                for tok in seq:
                    arr.size, arr.selected, arr.sorted = n_vocab, -1, False
                    t0 = time.perf_counter_ns()
                    if prepare is not None:
                        prepare()
                    apply(ptr, ref)
                    accept(ptr, tok)
                    dt = time.perf_counter_ns() - t0
                    touched = arr.size  # samplers compact in place: rows past the new size are intact
                    if hasattr(owner, "sync"):
                        owner.sync()  # localguide: raises what the callbacks recorded
                    elif owner.error is not None:
                        raise RuntimeError(f"sampler error in replay: {owner.error}")
                    cand[:touched] = pristine[:touched]
                    if rep:
                        times.append(dt)
            finally:
                llama_cpp.llama_sampler_free(ptr)
    return times


def replay_chain_delta(model, prompt_tokens, make_guide, seqs, repeats, sampling):
    """Per step: time of the whole sampler chain with the guide minus the same chain without it
    (top-k, top-p, min-p, temperature, dist), both on the same candidate array, paired.

    The logits are the model's own at each step of the generated sequences (the prompt and
    the sequence are decoded again), so the later samplers meet real distributions. This is
    what the guide adds to a token's sampling in llama.cpp: masking, advancing, and the
    later samplers' work on fewer candidates (less than without a guide: it can be < 0).
    """
    n_vocab = model.vocabulary.size
    cand, _, arr = _candidates(n_vocab)
    pristine = cand.copy()
    ref = ctypes.byref(arr)
    apply, accept = llama_cpp.llama_sampler_apply, llama_cpp.llama_sampler_accept
    ctx = model.llama.ctx
    steps = []  # (logits, token) per step, decoded once, replayed ``repeats`` times
    for seq in seqs:
        model._reset()
        model._decode(ctx, prompt_tokens)
        for tok in seq:
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
            steps.append((logits.copy(), tok))
            model._decode(ctx, [tok])
        steps.append(None)  # end of a sequence
    model._reset()

    def once(chain, tok):
        arr.size, arr.selected, arr.sorted = n_vocab, -1, False
        t0 = time.perf_counter_ns()
        if chain.guide_sampler is not None:
            chain.guide_sampler.prepare()
        apply(chain.pointer, ref)
        accept(chain.pointer, tok)
        dt = time.perf_counter_ns() - t0
        cand[:] = pristine  # top-k reorders the whole array
        return dt

    deltas = []
    for rep in range(repeats + 1):
        guided = free = None
        for i, step in enumerate(steps):
            if guided is None:
                guided, free = lg_sampler.SamplerChain(sampling, make_guide()), lg_sampler.SamplerChain(sampling)
            if step is None:
                guided.close()
                free.close()
                guided = free = None
                continue
            logits, tok = step
            pristine[:, 1] = logits.view(np.int32)
            cand[:] = pristine
            # Alternate which chain goes first, so neither always meets a colder cache.
            if i % 2:
                t_free, t_guided = once(free, tok), once(guided, tok)
            else:
                t_guided, t_free = once(guided, tok), once(free, tok)
            guided.guide_sampler.sync()
            if rep:
                deltas.append(t_guided - t_free)
    return deltas


def replay_outlines(index, seqs, n_vocab, repeats):
    """outlines-core Guide.write_mask_into (bitmask) + advance(return_tokens=False).

    Returns (times, [(sequence, position)] of the tokens outlines-core refused)."""
    mask = np.zeros((n_vocab + 31) // 32, np.int32)
    ptr, numel = mask.ctypes.data, mask.size
    times, rejected = [], []
    for rep in range(repeats + 1):
        for seq in seqs:
            g = peers.OUTLINES.Guide(index)
            for pos, tok in enumerate(seq):
                t0 = time.perf_counter_ns()
                g.write_mask_into(ptr, numel, 4)
                try:
                    g.advance(tok, return_tokens=False)
                except ValueError:
                    if rep == 0:
                        rejected.append((seq, pos))
                    break
                dt = time.perf_counter_ns() - t0
                if rep:
                    times.append(dt)
    return times, rejected


def replay_llguidance(matcher, seqs, n_vocab, repeats):
    """llguidance mask fill (unsafe_compute_mask_ptr, as llguidance.numpy does) + consume_token."""
    mask = np.zeros((n_vocab + 31) // 32, np.int32)
    ptr, nbytes = mask.ctypes.data, mask.nbytes
    times, rejected = [], 0
    for rep in range(repeats + 1):
        for seq in seqs:
            matcher.reset()
            for tok in seq:
                t0 = time.perf_counter_ns()
                matcher.unsafe_compute_mask_ptr(ptr, nbytes)
                ok = matcher.consume_token(tok)
                dt = time.perf_counter_ns() - t0
                if not ok:
                    rejected += rep == 0
                    break
                if rep:
                    times.append(dt)
    return times, rejected


def replay_localguide_api(index, seqs, budget, repeats):
    """localguide's Python API alone: allowed_token_ids() + advance()."""
    times = []
    for rep in range(repeats + 1):
        for seq in seqs:
            g = index.guide(max_tokens=budget)
            for tok in seq:
                t0 = time.perf_counter_ns()
                g.allowed_token_ids()
                g.advance(tok)
                dt = time.perf_counter_ns() - t0
                if rep:
                    times.append(dt)
    return times


def bench_guide(model, cfg, notes, indexes, ov, llg_tok, e2e, out):
    n_vocab = model.vocabulary.size
    rows = []

    def stats(ns):
        us_ = [x / 1e3 for x in ns]
        return (pct(us_, 50), pct(us_, 99), len(us_))

    for key, pattern in PATTERNS.items():
        d = e2e.get(f"localguide {key}")
        if d is None:
            continue
        seqs = d["seqs"]
        row = {"pattern": key, "steps": sum(len(s) for s in seqs)}
        unc = d["unc_chain_ns"]
        if d["chain_ns"] and unc:
            row["lg_loop"] = (pct(d["chain_ns"], 50) / 1e3 - pct(unc, 50) / 1e3, len(d["chain_ns"]))

        def lg_sampler_for(index=indexes[key]):
            s = lg_sampler.GuideSampler(index.guide(max_tokens=cfg.tokens))
            return s, s.pointer

        row["lg_replay"] = stats(replay_sampler(lg_sampler_for, seqs, n_vocab, cfg.replays))
        row["lg_chain"] = stats(replay_chain_delta(
            model, model.tokenize_prompt(PROMPTS[key]),
            lambda index=indexes[key]: index.guide(max_tokens=cfg.tokens), seqs, cfg.replays, SAMPLING))
        row["lg_api"] = stats(replay_localguide_api(indexes[key], seqs, cfg.tokens, cfg.replays))
        if ov is not None:
            oidx = peers.OUTLINES.Index(pattern, ov)
            t, rej = replay_outlines(oidx, seqs, n_vocab, cfg.replays)
            row["oc"] = stats(t)
            if rej:
                vocab = model.vocabulary
                seq, pos = rej[0]
                note(notes, f"{model.path.name}: outlines-core refused a token localguide generated in "
                            f"{len(rej)} of {len(seqs)} `{key}` sequences (its replay stops there), e.g. "
                            f"{vocab[seq[pos]]!r} after {vocab.decode(seq[:pos])[-24:]!r}")
        complete = sum(re.fullmatch(pattern, model.vocabulary.decode(q).decode("utf-8", "replace"), re.ASCII)
                       is not None for q in seqs)
        row["complete"] = (complete, len(seqs))
        if llg_tok is not None:
            t, rej = replay_llguidance(peers.llg_matcher(llg_tok, pattern), seqs, n_vocab, cfg.replays)
            row["llg"] = stats(t)
            if rej:
                note(notes, f"{model.path.name}: llguidance refused a token localguide generated in "
                            f"{rej} of {len(seqs)} `{key}` sequences (its replay stops there)")
            else:
                def llg_sampler_for(pattern=pattern):
                    s = peers.LLGuidanceSampler(peers.llg_matcher(llg_tok, pattern), n_vocab)
                    return s, s.pointer

                row["llg_replay"] = stats(replay_sampler(llg_sampler_for, seqs, n_vocab, cfg.replays))
            lw = e2e.get("llguidance words")
            if key == "words" and lw is not None:
                row["llg_loop"] = stats(lw["guide_ns"])
                if lw["chain_ns"] and lw["unc_chain_ns"]:
                    row["llg_loop_delta"] = (pct(lw["chain_ns"], 50) / 1e3 - pct(lw["unc_chain_ns"], 50) / 1e3,
                                             len(lw["chain_ns"]))
        rows.append(row)
        log(f"  guide cost {key} done")
    out["guide"] = rows


