"""Where a generation's time goes, decode by decode: speculation on, off and unconstrained.

Runs ``speculation.py``'s rounds (the same modes, seeds and rotation; each mode warmed up first) for a
few constraints, with every ``llama_decode`` timed to the end of its kernels (``llama_synchronize``
after it: a GPU backend returns before them). Per mode it reports, averaged over the timed
generations: generation ms (``Model.last_stats.seconds``, from the end of the prompt's decode),
the first decode after the prompt's and the later ones (ms, by their length), and the host's ms
(the generation's time outside the decodes: sampling, the guide, drafting, Python), per
generation and per decode. Where a decode costs about a millisecond (a small model on a GPU), the
host's share per decode is what speculation's ratio turns on.

It is the tool for a cost that lands once per generation, which ``speculation.py``'s ratios only
show on short texts (on a GPU: a date or an IP address). Run it again with
``GGML_CUDA_DISABLE_GRAPHS=1`` to see what CUDA graphs change.

    python benchmarks/decode_trace.py [--models smollm2,gemma] [--cases "regex date,person"]
        [--rounds 6] [--warmup 3] [--tokens 96] [--n-gpu-layers -1] [--threads N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections import defaultdict

from common import fmt, log, md_table, model_paths

import llama_cpp

import localguide
from localguide.speculate import CountModel
from speculation import cases, one

MODES = ("unconstrained", "off", "on")


class DecodeTimer:
    """Wraps ``llama_cpp.llama_decode`` (which ``localguide.engines.llamacpp.loop`` calls through the module):
    each call waits for its kernels and is recorded as (tokens, seconds)."""

    def __init__(self):
        self.events: list[tuple[int, float]] = []
        self._real = llama_cpp.llama_decode

    def __enter__(self):
        real = self._real

        def timed(ctx, batch):
            t = time.perf_counter()
            rc = real(ctx, batch)
            llama_cpp.llama_synchronize(ctx)
            self.events.append((batch.n_tokens, time.perf_counter() - t))
            return rc

        llama_cpp.llama_decode = timed
        return self

    def __exit__(self, *exc):
        llama_cpp.llama_decode = self._real


def trace(model, constraint: dict, prompt: str, rounds: int, max_tokens: int, warmup: int) -> dict:
    """mode -> per generation: [(seconds, tokens, [(n, seconds) of the decodes after the prompt's])]."""
    prompt_tokens = model.tokenize_prompt(prompt)
    counts = CountModel()
    # Every mode warms up: the first visits of an index's states build their masks (lazily), and the
    # first speculative generation times the widths; neither belongs to a generation's steady cost.
    for w in range(warmup):
        for mode in MODES:
            one(model, constraint, prompt_tokens, max_tokens, 500 + w, mode, counts)
    out = defaultdict(list)
    n_batch = max(1, llama_cpp.llama_n_batch(model.llama.ctx))
    with DecodeTimer() as timer:
        for r in range(rounds):
            for mode in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                timer.events.clear()
                _, s = one(model, constraint, prompt_tokens, max_tokens, 1000 + r, mode, counts)
                # The prompt's decodes come first; a fully cached prompt still decodes its last token.
                n_prompt = max(1, -(-(s.prompt_tokens - s.cached_tokens) // n_batch))
                out[mode].append((s.seconds, s.tokens, list(timer.events[n_prompt:])))
    return out


def summarize(gens: list) -> list:
    secs = [g[0] for g in gens]
    toks = [g[1] for g in gens]
    firsts = [g[2][0][1] for g in gens if g[2]]
    later: dict[int, list[float]] = defaultdict(list)
    for g in gens:
        for n, t in g[2][1:]:
            later[n].append(t)
    host = [g[0] - sum(t for _, t in g[2]) for g in gens]
    decodes = [len(g[2]) for g in gens]
    widths = ", ".join(f"{n}: {statistics.mean(v) * 1e3:.2f} ({len(v)})" for n, v in sorted(later.items()))
    first_n = statistics.mode([g[2][0][0] for g in gens if g[2]]) if firsts else None
    return [fmt(statistics.mean(toks)), fmt(statistics.mean(decodes)), fmt(statistics.mean(secs) * 1e3, 2),
            fmt(statistics.mean(toks) / statistics.mean(secs) if statistics.mean(secs) else None),
            f"{fmt(statistics.mean(firsts) * 1e3, 2) if firsts else '–'} (n={first_n})", widths or "–",
            fmt(statistics.mean(host) * 1e3, 2),
            fmt(sum(host) / sum(decodes) * 1e3 if sum(decodes) else None, 3)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--cases", default="regex date,regex ipv4,person")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-gpu-layers", type=int, default=0)
    ap.add_argument("--short-tokens", type=int, default=None,
                    help="with one decode width (a GPU): generations likely shorter than this do not draft "
                         "(default: the library's)")
    args = ap.parse_args()
    if args.short_tokens is not None:
        from localguide.engines.llamacpp import loop

        loop.SHORT_TOKENS = args.short_tokens
    selected = [s.strip() for s in args.cases.split(",") if s.strip()]
    head = ["constraint", "mode", "tokens", "decodes", "ms per generation", "tok/s", "first decode ms",
            "later decodes: length: ms (count)", "host ms", "host ms per decode"]
    print(f"GGML_CUDA_DISABLE_GRAPHS={os.environ.get('GGML_CUDA_DISABLE_GRAPHS', '(unset)')}, "
          f"n_gpu_layers={args.n_gpu_layers}\n")
    for name, path in model_paths(args.models.split(","), []).items():
        kw = {"n_gpu_layers": args.n_gpu_layers, "n_ctx": 2048}
        if args.threads:
            kw.update(n_threads=args.threads, n_threads_batch=args.threads)
        model = localguide.load(path, **kw)
        rows = []
        for case, (constraint, prompt) in cases(selected).items():
            log(f"  {name}: {case}")
            got = trace(model, constraint, prompt, args.rounds, args.tokens, args.warmup)
            rows += [[case, mode, *summarize(got[mode])] for mode in MODES]
        print(f"### {name}: `{path.name}`\n\n" + md_table(head, rows) + "\n", flush=True)
        del model


if __name__ == "__main__":
    main()
