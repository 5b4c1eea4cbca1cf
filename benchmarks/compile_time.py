"""The compile section: cold index build and cached load, localguide beside outlines-core and llguidance."""

from __future__ import annotations

import gc
import os
import time

import numpy as np

import localguide
from localguide.regex import regex_to_dfa
import peers
import localguide.runtime.cache
from common import BENCH_ROOT, PATTERNS, log, median


# --- index build -----------------------------------------------------------------------

def timed(fn, repeats, budget_s=3.0):
    """Median time of ``fn()`` over ``repeats`` calls (fewer once ``budget_s`` is spent)."""
    ts = []
    for _ in range(repeats):
        localguide.runtime.cache.flush()  # no background cache write from the previous call overlaps
        gc.collect()
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
        if sum(ts) > budget_s:
            break
    return median(ts)


def bench_compile(model, cfg, notes, out):
    vocab = model.vocabulary
    res = {"one_off": {}}
    # The trie over a fresh copy of the vocabulary: built once per vocabulary per process.
    fresh = localguide.Vocabulary.from_gguf(model.path)
    t0 = time.perf_counter()
    fresh.trie
    res["one_off"]["localguide trie build (once per vocabulary)"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fresh.fingerprint
    res["one_off"]["localguide vocabulary fingerprint (once per vocabulary)"] = time.perf_counter() - t0
    vocab.trie  # the model's own vocabulary, used below and by the other sections
    ov = None
    if peers.OUTLINES is not None:
        t0 = time.perf_counter()
        ov = peers.outlines_vocabulary(vocab)
        res["one_off"]["outlines-core Vocabulary from raw bytes"] = time.perf_counter() - t0
    llg_tok = None
    if peers.LLG is not None:
        t0 = time.perf_counter()
        llg_tok = peers.llg_tokenizer(model)
        res["one_off"]["llguidance LLTokenizer from raw bytes"] = time.perf_counter() - t0

    rows = []
    counter = [0]

    def cold(pattern):
        counter[0] += 1
        os.environ["LOCALGUIDE_CACHE_DIR"] = str(BENCH_ROOT / f"cold-{counter[0]}")
        regex_to_dfa.cache_clear()
        return localguide.compile_regex(pattern, vocab)

    warm = str(BENCH_ROOT / "warm")
    for key, pattern in PATTERNS.items():
        row = {"pattern": key}
        try:
            row["lg_cold"] = timed(lambda: cold(pattern), cfg.compile_reps)
        finally:
            os.environ["LOCALGUIDE_CACHE_DIR"] = warm
        index = localguide.compile_regex(pattern, vocab)  # into the warm cache
        row["states"] = index.n_states
        row["dfa"] = timed(lambda: (regex_to_dfa.cache_clear(), regex_to_dfa(pattern)), cfg.compile_reps)

        def cached():
            localguide.runtime.cache.flush()  # on disk, not served from memory
            regex_to_dfa.cache_clear()  # as in a new process
            v = localguide.Vocabulary.from_gguf(model.path)  # fingerprint not computed yet
            t0 = time.perf_counter()
            localguide.compile_regex(pattern, v)
            return time.perf_counter() - t0

        row["lg_cached"] = median([cached() for _ in range(max(3, cfg.compile_reps))])
        if ov is not None:
            row["oc"] = timed(lambda: peers.OUTLINES.Index(pattern, ov), cfg.compile_reps)
        if llg_tok is not None:
            mask = np.zeros((vocab.size + 31) // 32, np.int32)

            def llg():
                m = peers.llg_matcher(llg_tok, pattern)
                m.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)

            row["llg"] = timed(llg, cfg.compile_reps)
        rows.append(row)
        log(f"  compile {key} done")
    res["rows"] = rows
    out["compile"] = res
    return ov, llg_tok


