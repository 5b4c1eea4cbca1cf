"""Token healing at the prompt boundary and the invasiveness report, on both real models."""

from __future__ import annotations

import json
import re

import llama_cpp
import numpy as np
import pytest

from localguide.guides.healing import HealGuide, extensions, heal_point
from localguide.engines.llamacpp.sampler import Sampling

MID_WORD = ["The capital of Fran", "My favourite programming language is Pyt", "She opened the windo",
            "The answer is: "]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
KINDS = {
    "regex": ({"regex": r"[a-z]{2,8}( [a-z]{2,8}){0,2}\."}, lambda s: re.fullmatch(r"[a-z]{2,8}( [a-z]{2,8}){0,2}\.", s)),
    "choice": ({"choice": ["nce", "nkfurt", "Paris"]}, lambda s: s in ("nce", "nkfurt", "Paris")),
    "json_schema": ({"json_schema": SCHEMA}, lambda s: isinstance(json.loads(s)["city"], str)),
    "grammar": ({"grammar": "arithmetic"}, lambda s: re.fullmatch(r"[-+*/(). 0-9]+", s)),
}


def _healed_prompt(model, prompt):
    toks = model.tokenize_prompt(prompt)
    n = heal_point(model.vocabulary, toks)
    return toks, (model.vocabulary[toks[-1]] if n else b"")


def test_mid_word_prompts_are_healed(model):
    for prompt in MID_WORD:
        toks, healed = _healed_prompt(model, prompt)
        assert healed and prompt.encode().endswith(healed), (prompt, healed)


def test_the_output_never_repeats_the_healed_bytes(model):
    for prompt in MID_WORD:
        toks, healed = _healed_prompt(model, prompt)
        guide = None
        out = list(model.generate_tokens(toks[:-1], guide, 6, Sampling(temperature=0), healed=healed,
                                         cache_prompt=False))
        assert model.vocabulary[out[0]].startswith(healed)
        text = model.generate(prompt, temperature=0, max_tokens=6, speculate=False, cache_prompt=False)
        assert model.last_stats.healed_bytes == len(healed)
        assert text.encode() == model.vocabulary.decode(out)[len(healed):]
        unhealed = model.generate(prompt, temperature=0, max_tokens=6, heal=False, speculate=False)
        assert model.last_stats.healed_bytes == 0
        assert unhealed  # (a text of its own, from the prompt's own split)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_constraint_kind_works_with_healing(model, kind):
    options, valid = KINDS[kind]
    for prompt in ("The capital of Fra", "Result: "):
        for seed in (1, 2, 3):
            out = model.generate(prompt, temperature=1.0, seed=seed, max_tokens=24, **options)
            assert valid(out), (prompt, seed, out)
            assert model.last_stats.healed_bytes > 0


def test_a_spanning_token_advances_the_constraint(model):
    """With the choice "nce", after " Fra" the model may take " France": the healing token
    spans the healed bytes and the constraint's first bytes."""
    toks, healed = _healed_prompt(model, "The capital of Fra")
    index = model.compile(choice=["nce", "nkfurt"])
    g = HealGuide(model.vocabulary, healed, index.guide(max_tokens=8), model._tokenize_text)
    allowed = {model.vocabulary[int(t)] for t in g.allowed_token_ids()}
    assert healed in allowed
    rests = [b[len(healed):] for b in allowed if len(b) > len(healed)]
    assert rests and all(b"nce".startswith(r) or b"nkfurt".startswith(r) for r in rests), rests


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_candidates_are_dropped_by_their_first_byte_only_where_the_check_would_refuse_them(model, kind):
    """A prompt ending in a space has tens of thousands of healing candidates; those whose rest
    starts with a byte no allowed token starts with are dropped untried. None of them passes the
    full check (its rest tokenized and walked through the constraint)."""
    import random

    toks, healed = _healed_prompt(model, "Result: ")
    assert healed == b" "
    options, _ = KINDS[kind]
    g = HealGuide(model.vocabulary, healed, model.compile(**options).guide(max_tokens=24), model._tokenize_text)
    every = extensions(model.vocabulary, healed)
    kept = set(g.candidates.tolist())
    assert kept < set(every.tolist())
    dropped = sorted(set(every.tolist()) - kept)
    for t in random.Random(0).sample(dropped, min(400, len(dropped))):
        assert not g._check(t), model.vocabulary[t]
    assert any(g._check(t) for t in sorted(kept)[:400]), "some kept candidate must pass"


def test_control_tokens_and_unextendable_tokens_are_not_healed(model):
    v = model.vocabulary
    assert heal_point(v, [v.eos_id, v.eos_id]) == 0  # (no bytes: control and stop tokens)
    assert heal_point(v, model.tokenize_prompt("x")[-1:]) == 0  # (the only token: nothing before it)
    lone = next(t for t in range(v.size) if v[t] and len(extensions(v, v[t], longer=True)) == 0)
    assert heal_point(v, [model.tokenize_prompt("Hi")[0], lone]) == 0
    assert heal_point(v, model.tokenize_prompt("-- SQL for: all users\n")) == 0  # (a line end)
    model.generate("Say hi", chat=True, max_tokens=4, temperature=0)
    assert model.last_stats.healed_bytes == 0


def test_no_interventions_without_a_constraint(model):
    for heal in (True, False):
        model.generate("The capital of Fran", temperature=1.0, seed=4, max_tokens=12, stats=True, heal=heal)
        s = model.last_stats
        assert s.interventions == 0 and s.mass_removed_max == 0.0
        assert s.measured_tokens == s.tokens and s.nll > 0


def test_no_interventions_where_the_constraint_allows_the_model_its_choices(model):
    """Any text at all: what the model picks greedily is never refused."""
    model.generate("Once upon a time", regex=r"[\s\S]*", temperature=0, max_tokens=12, stats=True, heal=False)
    s = model.last_stats
    assert s.interventions == 0 and s.mass_removed_max < 1e-3


def test_interventions_where_the_constraint_refuses_the_models_choice(model):
    model.generate("Once upon a time", regex=r"[0-9]{3}", temperature=0, max_tokens=8, stats=True, heal=False)
    s = model.last_stats
    assert s.interventions >= 1 and s.mass_removed_max > 0.5


def test_stats_cost_nothing_unless_asked(model):
    model.generate("Once upon a time", regex=r"[0-9]{3}", temperature=0, max_tokens=8)
    s = model.last_stats
    assert s.interventions is None and s.nll is None and s.mass_removed_mean is None


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_mass_removed_matches_the_logits(model, temperature):
    prompt, pattern = "The Berlin wall fell in 19", r"[0-9]"  # (one token: one step)
    model.generate(prompt, regex=pattern, temperature=temperature, seed=1, max_tokens=1, stats=True,
                   heal=False, speculate=False)
    got = model.last_stats.mass_removed_mean
    toks = model.tokenize_prompt(prompt)
    model._reset()
    model._decode(model.llama.ctx, toks)
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(model.llama.ctx, -1),
                                   shape=(model.vocabulary.size,)).astype(np.float64)
    model._reset()
    t = temperature if temperature > 0 else 1.0
    p = np.exp((logits - logits.max()) / t)
    p /= p.sum()
    allowed = model.compile(regex=pattern).guide(max_tokens=1).allowed_token_ids()
    assert got == pytest.approx(1.0 - p[allowed].sum(), abs=1e-5)


GREEDY_CASES = [  # (prompt, constraint, its language) where the model's own greedy text may be in it
    ("Q: What is the capital of France?\nA: The capital of France is", {"choice": [" Paris", " Lyon", " Nice"]},
     lambda s: s in (" Paris", " Lyon", " Nice")),
    ("1, 2, 3, 4, 5, 6,", {"regex": r" [0-9]"}, lambda s: re.fullmatch(r" [0-9]", s)),
    ('{"name": "Alice", "age": 30}\n{"name": "Bob", "age":', {"regex": r" [0-9]{2}"},
     lambda s: re.fullmatch(r" [0-9]{2}", s)),
]


@pytest.mark.parametrize("case", range(len(GREEDY_CASES)))
def test_greedy_identity_where_the_model_is_valid(model, case):
    """DOMINO Def. 2.1: where the unconstrained greedy text, cut at its first complete match, is
    in the constraint's language, the constrained greedy output is that text."""
    prompt, constraint, language = GREEDY_CASES[case]
    free = model.generate(prompt, temperature=0, max_tokens=8, speculate=False)
    cut = next((free[:i] for i in range(1, len(free) + 1) if language(free[:i])), None)
    if cut is None:
        pytest.skip(f"{model.path.name} says something else alone: {free!r}")
    assert model.generate(prompt, temperature=0, max_tokens=8, speculate=False, **constraint) == cut


def _benchmark_prompts():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "quality_prompts.py"
    spec = importlib.util.spec_from_file_location("quality_prompts", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = mod.prompts()
    return p["json"][:2] + p["fields"][:2] + p["fields"][-1:] + p["midword"][:2]


@pytest.mark.parametrize("case", range(7))
def test_greedy_identity_on_the_quality_benchmarks_prompts(model, case):
    """``benchmarks/quality.py``'s identity, on a handful of its prompts (healing on, as by default)."""
    prompt, constraint = _benchmark_prompts()[case]
    rx = re.compile(constraint["regex"])

    def cut(s):
        return next((s[:i] for i in range(1, len(s) + 1) if rx.fullmatch(s[:i])), None)

    free = cut(model.generate(prompt, temperature=0, max_tokens=40, speculate=False))
    if free is None:
        pytest.skip(f"{model.path.name} says something else alone")
    assert cut(model.generate(prompt, regex=constraint["regex"], temperature=0, max_tokens=40,
                              speculate=False)) == free
