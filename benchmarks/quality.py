#!/usr/bin/env python3
"""Minimal invasiveness, measured (DOMINO Def. 2.1): localguide against the peers, on both models.

    python benchmarks/quality.py                       # SmolLM2 and Gemma 3 (smollm2,gemma), every kind
    python benchmarks/quality.py --models smollm2 --kinds fields,midword --limit 10
    python benchmarks/quality.py --markdown            # and write the section into BENCHMARKS.md

Prompts: ``quality_prompts.py`` (four kinds, 30 or more each). For each prompt and engine:

* **identical** (greedy): where the unconstrained greedy text, cut at the end of its first
  complete match (its shortest prefix in the constraint's language), exists, the engine's
  greedy output cut the same way is that text. The rate is over those prompts. localguide
  with healing is compared with the unconstrained text of the healed prompt (the same
  model input), every other row with that of the prompt as written.
* at temperature 1 (top-k 40, top-p 0.95, min-p 0.05, ``--seeds`` seeds per prompt):
  **interventions per 100 tokens** (steps where the chain without the constraint, with the
  same random draw, would have taken a token the constraint refuses), the **added NLL**
  (mean NLL per token under the model alone, minus that of unconstrained sampling of the
  same prompt) and how many outputs are **complete** (in the language) within the token
  budget (40 tokens, 64 for midword). localguide's budget-aware ending intervenes to finish
  in time where a peer's text is cut off; on grammars, the row "not budget-aware" runs the
  same grammar on the peers' footing: no budget, no healing, and whitespace runs unbounded
  (localguide bounds a run of ``%ignore``d text to 32 bytes by default, ``max_ignored_run``).

localguide runs through ``Model.generate(stats=True)``; each peer as a llama.cpp sampler
first in the same chain (top-k, top-p, min-p, temperature, dist), measured by the same
``localguide.engines.llamacpp.invasiveness.Invasiveness`` in a loop here: llama.cpp's GBNF sampler
(the same language written as GBNF; not for sql, which has no GBNF here), llguidance (the
regex, or the same Lark grammar), outlines-core (regexes).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llama_cpp  # noqa: E402

import localguide  # noqa: E402
import peers  # noqa: E402
from common import md_table, model_paths  # noqa: E402
from localguide.engines.llamacpp.invasiveness import _TOKEN_DATA, Invasiveness  # noqa: E402
from localguide.protocol import MaskKind  # noqa: E402
from localguide.engines.llamacpp.sampler import SamplerChain, Sampling  # noqa: E402
from quality_prompts import prompts  # noqa: E402

MAX_TOKENS = {"json": 40, "fields": 40, "sql": 40, "midword": 64}  # (midword: room for the sentence)
WARM = Sampling(temperature=1.0, top_k=40, top_p=0.95, min_p=0.05)
GREEDY = Sampling(temperature=0.0)


# --- the language of each kind, for the cut ------------------------------------------------

def language(model, constraint: dict):
    if "grammar" in constraint:
        index = model.compile(grammar=constraint["grammar"])
        return lambda s: index.matches(s)
    rx = re.compile(constraint["regex"])
    return lambda s: rx.fullmatch(s) is not None


def first_match(text: str, ok) -> str | None:
    return next((text[:i] for i in range(1, len(text) + 1) if ok(text[:i])), None)


# --- peers as llama.cpp samplers, measured as localguide measures itself ------------------

class _PySampler:
    """A llama.cpp sampler from two Python functions: ``allowed() -> ids``, ``accept(token)``."""

    def __init__(self, allowed, accept):
        self._allowed_fn, self._accept_fn = allowed, accept
        self.error = None
        iface = llama_cpp.llama_sampler_i()
        self._apply_cb = llama_cpp.llama_sampler_i_apply(self._apply)
        self._accept_cb = llama_cpp.llama_sampler_i_accept(self._accept)
        iface.apply, iface.accept = self._apply_cb, self._accept_cb
        self._iface = iface
        self.pointer = llama_cpp.llama_sampler_init(ctypes.byref(iface), None)

    def _apply(self, smpl, cur_p) -> None:
        try:
            arr = cur_p.contents
            data = np.ctypeslib.as_array(ctypes.cast(arr.data, ctypes.POINTER(ctypes.c_float)),
                                         shape=(arr.size * 3,)).reshape(arr.size, 3)
            ids = data[:, 0].view(np.int32)
            ok = np.isin(ids, np.asarray(self._allowed_fn(), np.int32))
            data[~ok, 1] = -np.inf
        except BaseException as e:
            self.error = e

    def _accept(self, smpl, token) -> None:
        try:
            self._accept_fn(int(token))
        except BaseException as e:
            self.error = e


class _Native:
    """A llama.cpp sampler pointer, as the Python samplers here are held."""

    error = None

    def __init__(self, pointer):
        self.pointer = pointer


_OUTLINES_INDEX: dict = {}


def outlines_sampler(model, regex: str):
    key = (model.path, regex)
    if key not in _OUTLINES_INDEX:
        _OUTLINES_INDEX[key] = peers.OUTLINES.Index(regex, peers.outlines_vocabulary(model.vocabulary))
    guide = peers.OUTLINES.Guide(_OUTLINES_INDEX[key])
    return _PySampler(lambda: guide.get_tokens(), lambda t: guide.advance(t, return_tokens=False))


class _Allowed:
    """The ids a peer's sampler kept at one step, as the guide protocol's ``mask``/``accepts``."""

    def __init__(self, ids: np.ndarray):
        self.ids = ids

    def mask(self):
        return MaskKind.ALLOWED, self.ids

    def accepts(self, token: int) -> bool:
        i = np.searchsorted(self.ids, token)
        return bool(i < len(self.ids) and self.ids[i] == token)


def peer_allowed(ctx, sampler, n: int, data: np.ndarray) -> np.ndarray:
    """The sorted ids ``sampler`` keeps from the logits of the last position (applied to a copy)."""
    data["id"] = np.arange(n, dtype=np.int32)
    data["logit"] = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n,))
    data["p"] = 0.0
    arr = llama_cpp.llama_token_data_array(
        data=ctypes.cast(data.ctypes.data, ctypes.POINTER(llama_cpp.llama_token_data)),
        size=n, selected=-1, sorted=False)
    llama_cpp.llama_sampler_apply(sampler.pointer, ctypes.byref(arr))
    _raise(sampler)
    kept = data[:arr.size]
    return np.sort(kept["id"][np.isfinite(kept["logit"])])


def _raise(sampler) -> None:
    err = getattr(sampler, "error", None)
    if err is not None:
        sampler.error = None
        raise err


def peer_generate(model, prompt: str, sampler, sampling: Sampling, seed: int, max_tokens: int):
    """(text, interventions, mass removed per step, NLL per step) of one generation with a peer's
    llama.cpp ``sampler`` first in the chain, measured by localguide's own ``Invasiveness``."""
    ctx, voc, n = model.llama.ctx, model.vocabulary, model.vocabulary.size
    stops = set(voc.stop_ids.tolist())
    sampling = dataclasses.replace(sampling, seed=seed)
    data = np.empty(n, _TOKEN_DATA)
    out = []
    model._reset()
    with SamplerChain(sampling, extra=[sampler.pointer]) as chain:  # (the chain frees the sampler)
        report = Invasiveness(sampling, chain, n)
        try:
            model._decode(ctx, model.tokenize_prompt(prompt))
            for _ in range(max_tokens):
                allowed = peer_allowed(ctx, sampler, n, data)
                if np.isin(allowed, voc.stop_ids).all():
                    break  # only stopping is left: the end, unsampled (as localguide's loop ends)
                report.before(ctx, -1, _Allowed(allowed))
                token = chain.sample(ctx)
                _raise(sampler)
                report.after(token)
                if token in stops:
                    break
                out.append(token)
                model._decode(ctx, [token])
        finally:
            model._reset()
            report.close()
    return voc.decode(out).decode("utf-8", "replace"), report.interventions, report.mass, report.nll


# --- the engines -------------------------------------------------------------------------

def engines(model, kind: str, constraint: dict, llg_tok):
    """name -> run(prompt, sampling, seed) -> (text, interventions, masses, nlls), for this kind."""
    out = {}
    n = MAX_TOKENS[kind]
    lg = {"grammar": constraint["grammar"]} if "grammar" in constraint else {"regex": constraint["regex"]}

    def local(heal, opportunistic=False):
        def run(prompt, sampling, seed):
            text = model.generate(prompt, max_tokens=n, temperature=sampling.temperature,
                                  top_k=sampling.top_k, top_p=sampling.top_p, min_p=sampling.min_p, seed=seed,
                                  heal=heal, opportunistic=opportunistic, speculate=False, stats=True,
                                  cache_prompt=False, **lg)
            s = model.last_stats
            return text, s.interventions, [s.mass_removed_mean] * s.measured_tokens, [s.nll] * s.measured_tokens
        return run

    out["localguide"] = local(True)
    out["localguide, no healing"] = local(False)
    if "grammar" in constraint:
        out["localguide, opportunistic"] = local(True, True)

        def unbudgeted(prompt, sampling, seed):  # (the peers' footing: no budget, whitespace runs unbounded)
            guide = model.compile(**lg, max_ignored_run=None).guide(max_tokens=None)
            tokens = list(model.generate_tokens(model.tokenize_prompt(prompt), guide, n, dataclasses.replace(
                sampling, seed=seed), stats=True, cache_prompt=False))
            s = model.last_stats
            text = b"".join(model.vocabulary[t] for t in tokens).decode("utf-8", "replace")
            return text, s.interventions, [s.mass_removed_mean] * s.measured_tokens, [s.nll] * s.measured_tokens
        out["localguide, not budget-aware"] = unbudgeted
    if "gbnf" in constraint:
        out["llama.cpp GBNF"] = lambda p, s, seed: peer_generate(
            model, p, _Native(peers.gbnf_sampler(model, constraint["gbnf"])), s, seed, n)
    if llg_tok is not None:
        def llg(p, s, seed):
            m = (peers.llg_matcher(llg_tok, lark=localguide.grammar.sources.resolve(constraint["grammar"])[0])
                 if "grammar" in constraint else peers.llg_matcher(llg_tok, regex=constraint["regex"]))
            return peer_generate(model, p, peers.LLGuidanceSampler(m, model.vocabulary.size), s, seed, n)
        out["llguidance"] = llg
    if peers.OUTLINES is not None and "regex" in constraint:
        out["outlines-core"] = lambda p, s, seed: peer_generate(
            model, p, outlines_sampler(model, constraint["regex"]), s, seed, n)
    return out


def unconstrained(model, prompt, sampling, seed, heal, max_tokens):
    text = model.generate(prompt, max_tokens=max_tokens, temperature=sampling.temperature, top_k=sampling.top_k,
                          top_p=sampling.top_p, min_p=sampling.min_p, seed=seed, heal=heal, stats=True,
                          cache_prompt=False)  # (every engine decodes the prompt alike: no rounding apart)
    return text, model.last_stats.nll


def measure(model, kinds, limit, log, seeds=1):
    llg_tok = peers.llg_tokenizer(model) if peers.LLG is not None else None
    rows = []
    for kind, items in prompts().items():
        if kind not in kinds:
            continue
        items = items[:limit] if limit else items
        stats: dict[str, dict] = {}
        t0 = time.perf_counter()
        for j, (prompt, constraint) in enumerate(items):
            ok = language(model, constraint)
            seed = 1000 + j
            warm_seeds = [seed + 100_000 * k for k in range(seeds)]
            n = MAX_TOKENS[kind]
            free = {h: unconstrained(model, prompt, GREEDY, seed, h, n)[0] for h in (True, False)}
            free_warm = {(h, s): unconstrained(model, prompt, WARM, s, h, n)[1]
                         for h in (True, False) for s in warm_seeds}
            for name, run in engines(model, kind, constraint, llg_tok).items():
                st = stats.setdefault(name, {"eligible": 0, "identical": 0, "inter": 0, "tokens": 0, "dnll": [],
                                             "runs": 0, "complete": 0})
                heal = name == "localguide" or name == "localguide, opportunistic"
                cut = first_match(free[heal], ok)
                try:
                    text = run(prompt, GREEDY, seed)[0]
                    if cut is not None:
                        st["eligible"] += 1
                        st["identical"] += first_match(text, ok) == cut
                    for s in warm_seeds:
                        text, inter, _, nll = run(prompt, WARM, s)
                        st["inter"] += inter
                        st["tokens"] += len(nll)
                        st["runs"] += 1
                        st["complete"] += ok(text)
                        if nll:
                            st["dnll"].append(float(np.mean(nll)) - free_warm[heal, s])
                except Exception as e:  # noqa: BLE001 - a peer that fails on a prompt is counted as such
                    st.setdefault("errors", []).append(f"{type(e).__name__}: {e}"[:120])
                    continue
        log(f"{model.path.name} {kind}: {len(items)} prompts in {time.perf_counter() - t0:.0f} s")
        for name, st in stats.items():
            rows.append({"kind": kind, "engine": name, "prompts": len(items), "eligible": st["eligible"],
                         "identical": st["identical"], "inter_per_100": 100 * st["inter"] / max(1, st["tokens"]),
                         "added_nll": float(np.mean(st["dnll"])) if st["dnll"] else float("nan"),
                         "complete": st["complete"], "runs": st["runs"],
                         "errors": len(st.get("errors", [])), "error": (st.get("errors") or [""])[0]})
    return rows


def table(rows) -> str:
    out = []
    for r in rows:
        rate = f"{r['identical']}/{r['eligible']} ({100 * r['identical'] / r['eligible']:.0f}%)" if r["eligible"] else "-"
        complete = f"{100 * r['complete'] / r['runs']:.0f}%" if r["runs"] else "-"
        out.append([r["kind"], r["engine"], rate, f"{r['inter_per_100']:.1f}", f"{r['added_nll']:+.3f}", complete,
                    str(r["errors"]) + (f" ({r['error']})" if r["errors"] else "")])
    return md_table(["kind", "engine", "identical (greedy)", "interventions / 100 tokens (T=1)",
                     "added NLL / token (T=1)", "complete (T=1)", "failed runs"], out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,gemma")
    ap.add_argument("--kinds", default="json,fields,sql,midword")
    ap.add_argument("--limit", type=int, default=0, help="prompts per kind (default: all)")
    ap.add_argument("--seeds", type=int, default=1, help="samples at temperature 1 per prompt (default 1)")
    ap.add_argument("--markdown", action="store_true", help="write the section into BENCHMARKS.md")
    args = ap.parse_args()
    notes: list = []
    sections = []
    for name, path in model_paths(args.models.split(","), notes).items():
        model = localguide.load(path)
        rows = measure(model, set(args.kinds.split(",")), args.limit,
                       lambda *a: print(*a, file=sys.stderr, flush=True), args.seeds)
        text = f"### {name}\n\n{table(rows)}\n"
        print(text, flush=True)
        sections.append(text)
    if args.markdown:
        from report import replace_section

        body = ("Command: `python benchmarks/quality.py" + (f" --limit {args.limit}" if args.limit else "") +
                (f" --seeds {args.seeds}" if args.seeds != 1 else "") +
                f" --models {args.models}`. " + __doc__.split("\n\n", 2)[2].split("\n\nlocalguide runs")[0]
                .replace("\n", " ") + "\n\n" + "\n".join(sections))
        replace_section(Path(__file__).resolve().parent.parent / "BENCHMARKS.md", "## Quality", body)


if __name__ == "__main__":
    main()
