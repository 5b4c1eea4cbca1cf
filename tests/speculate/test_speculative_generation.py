"""Speculative decoding through real llama.cpp, on both models: exact, and the KV cache clean.

What "exact" means here, and how it is checked without trusting the implementation:

- *Replay*: every logits vector the speculative loop sampled from is recorded; a fresh
  classic sampler chain (same seed, fresh guide) fed those vectors one by one picks the
  same tokens. So given the logits, the speculative loop samples exactly as the classic
  loop; the only way the two can differ is the logits themselves.
- *Same seed*: speculation on and off give the same text: a position's logits are bitwise the
  same in a batch as alone (``load``'s default, ``localguide.engines.llamacpp.reproducible``).
- *Distribution*: at temperature 1, where drafts are often rejected, the outputs' frequencies
  with and without speculation pass a chi-square test of homogeneity at significance 0.001.
- *KV cache*: after a rejected draft, the next logits are bitwise a fresh one-token-at-a-time
  decode's of the same text (one draft left in the cache moves them by a KL divergence of 0.1 to
  8 nats at the next token).
"""

from __future__ import annotations

import ctypes
import json
import math
import re
import time

import llama_cpp
import numpy as np
import pytest

import localguide
from localguide.runtime import cache
from localguide.engines.llamacpp.sampler import SamplerChain, Sampling
from localguide.speculate import CountModel, DecodeCost
from localguide.engines.llamacpp import engine, loop
from localguide.speculate.counts import MIN_PAUSE, PROBE_DRAFTS, Calibration
from conftest import FreeDecodes, costing

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120},
                                           "city": {"type": "string", "maxLength": 20}},
          "required": ["name", "age", "city"], "additionalProperties": False}
CONSTRAINTS = {
    "regex": ({"regex": r"(Monday|Tuesday|Wednesday), the (1st|2nd|3rd) of (May|June), at [0-9]{1,2} o'clock"},
              "A date and time for the meeting:"),
    "schema": ({"json_schema": SCHEMA}, "A JSON object describing a person:\n"),
    "grammar": ({"grammar": "json"}, "A JSON list of three small numbers:"),
}


class RecordingChain(SamplerChain):
    """A sampler chain that keeps a copy of every logits vector it samples from."""

    logits: list[np.ndarray] = []

    def sample(self, ctx, idx: int = -1) -> int:
        if self.guide_sampler is not None:  # the guided chain (not the opportunistic free one)
            n = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx)))
            RecordingChain.logits.append(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, idx),
                                                               (n,)).copy())
        return SamplerChain.sample(self, ctx, idx)


def run(model, constraint, prompt, *, speculate, seed, max_tokens=40, temperature=0.8, counts=None,
        fast_forward=False, record=False):
    """(tokens, recorded logits) of one generation through ``generate_tokens``."""
    index = model.compile(**constraint)
    guide = index.guide(max_tokens=max_tokens)
    RecordingChain.logits = []
    tokens = list(model.generate_tokens(model.tokenize_prompt(prompt), guide, max_tokens,
                                        Sampling(temperature=temperature, seed=seed),
                                        chain=RecordingChain if record else SamplerChain,
                                        speculate=speculate, fast_forward=fast_forward, counts=counts))
    return tokens, RecordingChain.logits


def trained_counts(model, constraint, prompt, n=4):
    """A count model that has seen ``n`` generations of ``constraint``."""
    counts = CountModel()
    for seed in range(100, 100 + n):
        run(model, constraint, prompt, speculate=True, seed=seed, counts=counts)
    return counts


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``trained(model, kind)``: a count model that has seen 4 generations of ``CONSTRAINTS[kind]``,
    as ``trained_counts`` (with drafts free), trained once per model and kind and saved; each test
    loads its own copy from the file (counts and calibration, as another process would)."""
    folder = tmp_path_factory.mktemp("trained-counts")

    def get(model, kind: str) -> CountModel:
        path = folder / f"{model.path.stem}-{kind}.npz"
        if not path.exists():
            with costing(model, FreeDecodes()):
                counts = trained_counts(model, *CONSTRAINTS[kind])
            cache.save(path, counts.to_arrays())
        return CountModel(path)

    return get


def replay(model, constraint, logits, seed, max_tokens):
    """The tokens a classic chain (fresh guide, same seed) samples from ``logits``, one vector each."""
    guide = model.compile(**constraint).guide(max_tokens=max_tokens)
    n = model.vocabulary.size
    data = (llama_cpp.llama_token_data * n)()
    rows = np.ctypeslib.as_array(data)  # (a structured view: id, logit, p)
    out = []
    with SamplerChain(Sampling(temperature=0.8, seed=seed), guide) as chain:
        for vec in logits:
            rows["id"], rows["logit"], rows["p"] = np.arange(n), vec, 0.0
            arr = llama_cpp.llama_token_data_array(data, n, -1, False)
            chain.guide_sampler.prepare()
            llama_cpp.llama_sampler_apply(chain.pointer, ctypes.byref(arr))
            token = arr.data[arr.selected].id
            llama_cpp.llama_sampler_accept(chain.pointer, token)
            chain.guide_sampler.sync()
            out.append(token)
    return out


def fully_matches(model, constraint, tokens) -> bool:
    text = model.vocabulary.decode(tokens).decode("utf-8")
    if "regex" in constraint:
        return re.fullmatch(constraint["regex"], text) is not None
    if "json_schema" in constraint:
        value = json.loads(text)
        return set(value) == {"name", "age", "city"} and isinstance(value["age"], int)
    return model.compile(**constraint).is_prefix(text)


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_replay_of_the_recorded_logits_gives_the_same_tokens(eager, trained, kind):
    constraint, prompt = CONSTRAINTS[kind]
    counts = trained(eager, kind)
    for seed in (1, 2):
        tokens, logits = run(eager, constraint, prompt, speculate=True, seed=seed, counts=counts, record=True)
        stats = eager.last_stats
        assert stats.drafted > 0, "the trained count model must have drafted"
        assert len(logits) >= len(tokens)  # (one more when a stop token ended it)
        replayed = replay(eager, constraint, logits, seed, 40)
        assert replayed[:len(tokens)] == tokens


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_same_seed_same_text(eager, trained, kind):
    constraint, prompt = CONSTRAINTS[kind]
    counts = trained(eager, kind)
    drafted = 0
    for seed in range(6):
        plain, plain_logits = run(eager, constraint, prompt, speculate=False, seed=seed, record=True)
        spec, spec_logits = run(eager, constraint, prompt, speculate=True, seed=seed, counts=counts, record=True)
        drafted += eager.last_stats.drafted
        assert fully_matches(eager, constraint, spec) or len(spec) == 40
        assert spec == plain, seed
        assert all(np.array_equal(a, b) for a, b in zip(spec_logits, plain_logits)), seed
    assert drafted > 0


def chi_square_homogeneity(a: dict, b: dict) -> tuple[float, int]:
    """(statistic, degrees of freedom) of the two-sample chi-square test on outcome counts."""
    keys = sorted(set(a) | set(b))
    na, nb = sum(a.values()), sum(b.values())
    stat = 0.0
    for k in keys:
        total = a.get(k, 0) + b.get(k, 0)
        for n, obs in ((na, a.get(k, 0)), (nb, b.get(k, 0))):
            expected = total * n / (na + nb)
            stat += (obs - expected) ** 2 / expected
    return stat, len(keys) - 1


def chi_square_critical(df: int, alpha: float = 0.001) -> float:
    """The upper ``alpha`` quantile of chi-square(df), by Wilson-Hilferty (z for alpha=0.001: 3.0902)."""
    z = {0.001: 3.0902}[alpha]
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("model", ["smollm2", pytest.param("gemma3", marks=pytest.mark.slow)], indirect=True)
def test_distribution_unchanged_where_drafts_are_rejected(eager):  # (Gemma 3's: half a minute, a slow test)
    constraint = {"regex": r"(red|green|blue) (cat|dog|fox)"}
    prompt = "Name an animal and its color:"
    counts = trained_counts(eager, constraint, prompt, n=6)
    freq = {False: {}, True: {}}
    rejected = 0
    for speculate in (False, True):
        for seed in range(150):
            tokens, _ = run(eager, constraint, prompt, speculate=speculate, seed=1000 + seed, temperature=1.0,
                            counts=counts if speculate else None, max_tokens=12)
            text = eager.vocabulary.decode(tokens).decode("utf-8")
            freq[speculate][text] = freq[speculate].get(text, 0) + 1
            if speculate:
                rejected += eager.last_stats.drafted - eager.last_stats.accepted
    assert rejected > 20, "the test needs drafts that the sampler rejects"
    # Rare outcomes are pooled so that every expected count is large enough for the test.
    common = {k for k in set(freq[False]) | set(freq[True]) if freq[False].get(k, 0) + freq[True].get(k, 0) >= 10}
    pooled = {s: {(k if k in common else "other"): 0 for k in set(f)} for s, f in freq.items()}
    for s, f in freq.items():
        for k, n in f.items():
            pooled[s][k if k in common else "other"] += n
    stat, df = chi_square_homogeneity(pooled[False], pooled[True])
    assert df >= 1
    assert stat < chi_square_critical(df), (stat, df, freq)


def kl(x: np.ndarray, y: np.ndarray) -> float:
    """KL(softmax(x) || softmax(y)) in nats."""
    lx = x - x.max() - np.log(np.exp(x - x.max()).sum())
    ly = y - y.max() - np.log(np.exp(y - y.max()).sum())
    return float((np.exp(lx) * (lx - ly)).sum())


def test_kv_cache_holds_nothing_of_rejected_drafts(eager):
    constraint = {"regex": r"(red|green|blue) (cat|dog|fox)( and (red|green|blue) (cat|dog|fox))*"}
    prompt = "Name animals and their colors:"
    counts = trained_counts(eager, constraint, prompt, n=4)
    checked = 0
    for seed in range(40):
        if checked >= 2:
            break
        tokens, logits = run(eager, constraint, prompt, speculate=True, seed=seed, temperature=1.0,
                             counts=counts, record=True, max_tokens=24)
        stats = eager.last_stats
        if stats.accepted == stats.drafted:
            continue
        fresh = fresh_logits(eager, prompt, tokens)
        for i in range(len(tokens)):
            assert np.array_equal(logits[i], fresh[i]), (seed, i, kl(logits[i], fresh[i]))
        checked += 1
    assert checked >= 1, "no generation had a rejected draft"


class PaddedDecodes(DecodeCost):
    """Sixteen tokens or more cost one token's decode, fewer cost one each: every decode with
    drafts is padded to sixteen tokens at least, as far as the budget leaves room."""

    def relative(self, n: int) -> float:
        return 1.0 if n >= 16 else float(n)

    def known(self, n: int) -> bool:
        return True

    def stale(self) -> bool:
        return False  # (no one-token decode to time first: the first decode drafts, short, and is padded)

    def in_ones(self, seconds: float) -> None:
        return None


def fresh_logits(model, prompt, tokens) -> list[np.ndarray]:
    """The logits before each of ``tokens`` from a fresh decode, one token at a time."""
    ctx = model.llama.ctx
    model._reset()
    model._decode(ctx, model.tokenize_prompt(prompt))
    n = model.vocabulary.size
    out = [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), (n,)).copy()]
    for t in tokens:
        model._decode(ctx, [t])
        out.append(np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), (n,)).copy())
    model._reset()
    return out


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_padded_decodes_sample_as_the_classic_loop_and_leave_nothing_in_the_kv_cache(model, trained, kind):
    # Where a longer decode is cheaper, drafts are padded up to it: the padding's logits are
    # never sampled, and its KV cache entries go with the rejected drafts'.
    constraint, prompt = CONSTRAINTS[kind]
    counts = trained(model, kind)
    counts.calibration.paused = 0  # (training, at this machine's costs, may have paused drafting)
    with costing(model, PaddedDecodes()):
        tokens, logits = run(model, constraint, prompt, speculate=True, seed=5, counts=counts, record=True)
        stats = model.last_stats
    assert stats.padded > 0 and stats.drafted > 0
    assert stats.decode_calls < stats.tokens
    assert_as_classic(model, kind, tokens, logits, seed=5)


def assert_kv_clean(model, prompt, tokens, logits) -> None:
    """Each logits vector sampled from is a fresh one-token-at-a-time decode's, bitwise."""
    fresh = fresh_logits(model, prompt, tokens)
    for i in range(len(tokens)):
        assert np.array_equal(logits[i], fresh[i]), (i, kl(logits[i], fresh[i]))


def assert_as_classic(model, kind, tokens, logits, seed: int, max_tokens: int = 40) -> None:
    """The speculative run's samples are the classic chain's given its logits, its text matches
    the constraint, and the KV cache held nothing of its drafts or padding."""
    constraint, prompt = CONSTRAINTS[kind]
    assert replay(model, constraint, logits, seed, max_tokens)[:len(tokens)] == tokens
    if kind != "grammar":
        assert fully_matches(model, constraint, tokens)
    assert_kv_clean(model, prompt, tokens, logits)


def one_width(width: int, ratio: float = 1.1) -> DecodeCost:
    """A DecodeCost as a GPU's probe leaves it: every decode with drafts ``width`` tokens wide."""
    cost = DecodeCost(probe=True)
    cost.width, cost.width_ratio, cost.one_seconds = width, ratio, 1e-3
    return cost


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_one_width_decodes_sample_as_the_classic_loop_and_leave_nothing_in_the_kv_cache(model, trained, kind):
    # As on a GPU replaying a captured graph: every decode of the generation is 8 tokens wide
    # (the sampled token, every draft, padding), its samples those of the classic loop.
    constraint, prompt = CONSTRAINTS[kind]
    counts = trained(model, kind)
    with costing(model, one_width(8)):
        tokens, logits = run(model, constraint, prompt, speculate=True, seed=5, counts=counts, record=True)
        stats = model.last_stats
    assert stats.drafted > 0 and stats.padded > 0
    assert stats.decode_calls + stats.drafted + stats.padded == 8 * stats.decode_calls
    assert_as_classic(model, kind, tokens, logits, seed=5)
    for max_tokens in (2, 5, 11, 17, 22):  # the budget holds, the width too, near its end
        try:
            with costing(model, one_width(8)):
                tokens, _ = run(model, constraint, prompt, speculate=True, seed=max_tokens, counts=counts,
                                max_tokens=max_tokens)
                stats = model.last_stats
        except localguide.BudgetError:
            continue
        assert len(tokens) <= max_tokens
        if max_tokens < loop.SHORT_TOKENS:  # (a few tokens would not pay for the wide shape's capture)
            assert stats.drafted == stats.padded == 0
        else:
            assert stats.decode_calls + stats.drafted + stats.padded == 8 * stats.decode_calls


def test_with_one_width_a_short_generation_does_not_draft(model, trained):
    # Where every decode with drafts has one width (a GPU), a generation of a few tokens does not
    # draft: by its budget, or by how long this constraint's generations were. The classic
    # loop's text all the same; one decode width on the CPU (no probe) drafts as before.
    constraint, prompt = {"regex": r"[0-9]{4}-[0-9]{2}-[0-9]{2}"}, "The date, as YYYY-MM-DD:"
    counts = CountModel()
    with costing(model, one_width(4)):
        first, _ = run(model, constraint, prompt, speculate=True, seed=1, counts=counts)  # (length not known yet)
        assert model.last_stats.drafted + model.last_stats.padded > 0
        assert 0 < counts.calibration.length == len(first) < loop.SHORT_TOKENS
        for seed in (2, 3):
            tokens, _ = run(model, constraint, prompt, speculate=True, seed=seed, counts=counts)
            assert model.last_stats.drafted == model.last_stats.padded == 0
            assert tokens == run(model, constraint, prompt, speculate=False, seed=seed)[0]
    schema, schema_prompt = CONSTRAINTS["schema"]
    long_counts = trained(model, "schema")
    with costing(model, one_width(4)):
        run(model, schema, schema_prompt, speculate=True, seed=4, counts=long_counts, max_tokens=14)
        assert model.last_stats.drafted == model.last_stats.padded == 0  # (its budget: 14 tokens)
        long_counts.calibration.width_gain = 1.5  # (drafts that pay)
        run(model, schema, schema_prompt, speculate=True, seed=4, counts=long_counts)
        assert model.last_stats.drafted > 0
    with costing(model, FreeDecodes()):
        run(model, constraint, prompt, speculate=True, seed=5, counts=counts)
        assert model.last_stats.drafted > 0


def test_with_one_width_a_generation_that_does_not_draft_guesses_whether_it_should(model, trained):
    # Where drafting lost, a generation decodes one token at a time throughout (another shape
    # would cost a graph capture), and guesses what drafts would have given: where the model
    # takes them, the next generations draft again.
    constraint, prompt = CONSTRAINTS["schema"]
    counts = trained(model, "schema")
    counts.calibration.width_gain = 0.0
    with costing(model, one_width(8, ratio=1.0)):
        tokens, _ = run(model, constraint, prompt, speculate=True, seed=1, counts=counts)
        stats = model.last_stats
        assert stats.drafted == 0 and stats.padded == 0 and stats.decode_calls == len(tokens) - 1
        assert 0.0 < counts.calibration.width_gain
        for seed in range(2, 40):
            if counts.calibration.width_gain >= 1.0:
                break
            run(model, constraint, prompt, speculate=True, seed=seed, counts=counts)
        assert counts.calibration.width_gain >= 1.0
        tokens, _ = run(model, constraint, prompt, speculate=True, seed=41, counts=counts)
        stats = model.last_stats
        assert stats.drafted > 0 and stats.decode_calls + stats.drafted + stats.padded == 8 * stats.decode_calls
        assert fully_matches(model, constraint, tokens)


def test_the_widths_are_timed_once_where_a_gpu_would_be(model):
    # The probe runs where layers are offloaded (not on this CPU: forced here); what it leaves
    # in the KV cache is nothing, so the text is what the classic loop writes.
    constraint, prompt = CONSTRAINTS["schema"]
    assert model._cost.width == 1  # (no layers offloaded: no probe, lengths chosen per decode)
    with costing(model, DecodeCost(probe=True)) as cost:
        tokens, logits = run(model, constraint, prompt, speculate=True, seed=3, record=True)
        assert set(cost.widths) == {1, 2, 4, 8, 16} and cost.width in cost.widths
        assert cost.one_seconds == cost.widths[1] > 0
        assert cost.width_ratio == pytest.approx(cost.widths[cost.width] / cost.widths[1])
        timed = cost.widths
        run(model, constraint, prompt, speculate=True, seed=4)
        assert cost.widths is timed  # (once per model)
    assert_kv_clean(model, prompt, tokens, logits)


def test_the_probe_restarts_the_watchdogs_clock_after_each_of_its_decodes(model):
    # A server with workers ends itself where one engine step has waited --worker-timeout seconds
    # on llama.cpp (a hung worker). The probe's 40 decodes run in one step: each must restart that
    # clock, or a first request whose decodes each take 0.1 s through a worker ends the server.
    constraint, prompt = CONSTRAINTS["schema"]
    e = model.engine
    clocks = []

    def answered():
        clocks.append(e.busy_since)
        type(e).answered(e)

    with costing(model, DecodeCost(probe=True)) as cost:
        e.busy_since = started = time.monotonic()
        e.answered = answered
        try:
            run(model, constraint, prompt, speculate=True, seed=3)
        finally:
            del e.answered
            e.busy_since = None
        assert set(cost.widths) == {1, *loop.PROBED_WIDTHS}
    assert len(clocks) == len(cost.widths) * loop.PROBE_REPEATS
    assert clocks[0] == started and all(a < b for a, b in zip(clocks, clocks[1:]))


def test_free_text_where_a_gpu_would_be_decodes_one_token_at_a_time(model):
    # (no drafter, so no probe: the width was never timed, and a decode is one token wide)
    with costing(model, DecodeCost(probe=True)) as cost:
        text = model.generate("Once upon a time", max_tokens=12, temperature=0)
        assert cost.width is None and model.last_stats.tokens > 0 and text
        assert model.last_stats.drafted == 0


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_budget_is_kept_with_drafts_near_its_end(eager, trained, kind):
    constraint, prompt = CONSTRAINTS[kind]
    counts = trained(eager, kind)
    for max_tokens in (3, 9, 17, 30):
        try:
            guide = eager.compile(**constraint).guide(max_tokens=max_tokens)
        except localguide.BudgetError:
            continue
        tokens = list(eager.generate_tokens(eager.tokenize_prompt(prompt), guide, max_tokens,
                                            Sampling(seed=max_tokens), speculate=True, counts=counts))
        assert len(tokens) <= max_tokens
        assert eager.last_stats.tokens == len(tokens)
        if kind != "grammar":  # the grammar's budget guarantee needs a plan; the others complete
            assert fully_matches(eager, constraint, tokens), eager.vocabulary.decode(tokens)


def test_stats_add_up(eager):
    constraint, prompt = CONSTRAINTS["schema"]
    text = eager.generate(prompt, **constraint, seed=3, max_tokens=60)
    s = eager.last_stats
    assert s.tokens == len(eager.llama.tokenize(text.encode(), add_bos=False)) or s.tokens > 0
    assert s.prompt_tokens == len(eager.tokenize_prompt(prompt)) - (1 if s.healed_bytes else 0)
    assert 0 <= s.accepted <= s.drafted
    assert s.forced_accepted <= s.forced_drafted <= s.drafted
    assert s.decode_calls <= s.tokens
    assert s.tokens_per_second > 0 and s.seconds > 0
    off = eager.generate(prompt, **constraint, seed=3, max_tokens=60, speculate=False)
    assert json.loads(off)
    assert eager.last_stats.drafted == 0 and eager.last_stats.decode_calls >= eager.last_stats.tokens - 1


class DearDecodes(DecodeCost):
    """Drafts look free when chosen, but every decode with drafts turns out to cost as much as
    50 one-token decodes: drafting never pays."""

    def relative(self, n: int) -> float:
        return 1.0

    def in_ones(self, seconds: float) -> float:
        return 50.0

    def known(self, n: int) -> bool:
        return True


class UntimedDearDecodes(DearDecodes):
    """As dear, but no length is ever timed enough: each decode explores what its length costs
    (and finds it dear)."""

    def known(self, n: int) -> bool:
        return False


def test_drafting_pauses_where_it_does_not_pay(model, trained, monkeypatch):
    # The same trained counts and seeds: with decodes that cost what they are expected to, the
    # drafts go on; where they turn out dear, drafting pauses after a few, and the texts are the
    # same. A decode of a length not timed yet is judged too: where another program holds a
    # core, trying one length after another is what costs. The decodes that probe after a pause
    # draft PROBE_DRAFTS tokens at most.
    constraint, prompt = CONSTRAINTS["schema"]
    counts = trained(model, "schema")
    saved = model._cost
    done = {}
    offered = []  # (probing, drafts offered to choose_length) per decode with drafts
    chosen = loop.choose_length

    def choose_length(probs, *args, **kwargs):
        offered.append((counts.calibration.probing, len(probs)))
        return chosen(probs, *args, **kwargs)

    monkeypatch.setattr("localguide.engines.llamacpp.loop.choose_length", choose_length)
    try:
        for name, cost in (("free", FreeDecodes()), ("dear", DearDecodes()), ("untimed", UntimedDearDecodes())):
            counts.calibration = Calibration(counts.calibration.forced_rate)
            model._cost = cost
            texts, drafted = [], 0
            for seed in range(11, 16):  # the calibration carries over from one generation to the next
                tokens, _ = run(model, constraint, prompt, speculate=True, seed=seed, counts=counts)
                texts.append(tokens)
                drafted += model.last_stats.drafted
            done[name] = (texts, drafted, counts.calibration)
    finally:
        model._cost = saved
    (free, d_free, c_free), (dear, d_dear, c_dear) = done["free"], done["dear"]
    assert d_free > 0 and c_free.pause == MIN_PAUSE and c_free.paused == 0
    _, d_untimed, c_untimed = done["untimed"]
    assert c_untimed.pause > MIN_PAUSE and d_untimed < d_free
    assert c_dear.pause > MIN_PAUSE, (d_free, d_dear)  # it paused at least once
    assert d_dear < d_free
    probes = [n for probing, n in offered if probing]
    assert probes and max(probes) <= PROBE_DRAFTS
    assert max(n for probing, n in offered if not probing) > PROBE_DRAFTS
    assert dear == free


class SlowBatches:
    """``llama_cpp`` with every decode of several tokens held up after it returns by a real wait of
    ``times`` the last one-token decode (the processor kept busy, as a batch thread of llama.cpp
    waits at a barrier for one that another program has taken the core from)."""

    def __init__(self, times: float):
        self.times = times
        self.one = 0.0
        self.held = 0  # decodes held up (a wrapper that sees none would test nothing)

    def __getattr__(self, name):
        return getattr(llama_cpp, name)

    def llama_decode(self, ctx, batch):
        t = time.perf_counter()
        rc = llama_cpp.llama_decode(ctx, batch)
        if batch.n_tokens == 1:
            self.one = time.perf_counter() - t
        else:
            end = time.perf_counter() + self.times * self.one
            self.held += self.one > 0
            while time.perf_counter() < end:
                pass
        return rc


def test_drafting_stops_where_real_batches_turn_dear(model, trained, monkeypatch):
    # Real decodes timed as they happen (a fresh DecodeCost, nothing injected), every batch held
    # up as a busy neighbour holds up llama.cpp's batch threads, by more than the most tokens a
    # decode can give (MAX_DRAFT + 1) would save: drafting pauses within a few decodes with
    # drafts, few decodes draft at all, and the texts are those of no drafting. (Probes after a
    # pause: test_drafting_pauses_where_it_does_not_pay.)
    # (Busy against quiet, both real: the slow-marked test below, which needs the machine alone.)
    from localguide.speculate.counts import JUDGED
    from localguide.speculate.drafts import MAX_DRAFT

    constraint, prompt = CONSTRAINTS["schema"]
    counts = trained(model, "schema")
    counts.calibration = Calibration(counts.calibration.forced_rate)
    judged = []  # after each decode with drafts: whether drafting is paused
    settle = Calibration.settle

    def recording(self, tokens, cost):
        settle(self, tokens, cost)
        judged.append(self.paused > 0)

    monkeypatch.setattr(Calibration, "settle", recording)
    slow = SlowBatches(2 * (MAX_DRAFT + 1))
    monkeypatch.setattr(engine, "llama_cpp", slow)  # (where every decode is made)
    texts = []
    with costing(model, DecodeCost()):
        for seed in range(11, 17):
            texts.append(run(model, constraint, prompt, speculate=True, seed=seed, counts=counts)[0])
    monkeypatch.undo()
    assert slow.held > 0
    # Drafting stops within JUDGED decodes with drafts: the lengths timed dear decline every draft
    # after them (the floor makes the untimed dear too), or the judge pauses it.
    assert len(judged) <= JUDGED or True in judged[:JUDGED], judged
    assert len(judged) < sum(len(t) for t in texts) / 4, judged
    for seed, text in zip(range(11, 17), texts):
        assert run(model, constraint, prompt, speculate=False, seed=seed)[0] == text


@pytest.mark.slow
def test_a_busy_neighbour_makes_drafting_pause(model_paths, trained):
    # Real busy processes, one per core, beside a model whose batches run on every core (where a
    # neighbour holds batch threads up at their barriers): the same generations draft less than on
    # the machine alone. Slow-marked: "alone" needs no other test running beside it.
    import os
    import subprocess
    import sys

    cores = os.cpu_count() or 2
    for name, path in model_paths.items():
        model = localguide.load(path, n_ctx=1024, n_threads=1, n_threads_batch=cores)
        constraint, prompt = CONSTRAINTS["schema"]
        counts = trained(model, "schema")
        drafted = {}
        for busy in (0, cores):
            hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
            try:
                counts.calibration = Calibration(counts.calibration.forced_rate)
                drafted[busy] = 0
                with costing(model, DecodeCost()):
                    for seed in range(11, 17):
                        run(model, constraint, prompt, speculate=True, seed=seed, counts=counts)
                        drafted[busy] += model.last_stats.drafted
            finally:
                for h in hogs:
                    h.kill()
                    h.wait()
        assert drafted[cores] < drafted[0], (name, drafted)


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_fast_forward_output_still_matches(model, kind):
    constraint, prompt = CONSTRAINTS[kind]
    for seed in range(3):
        tokens, _ = run(model, constraint, prompt, speculate=True, seed=seed, fast_forward=True, max_tokens=60)
        assert len(tokens) <= 60
        if len(tokens) < 60:
            assert fully_matches(model, constraint, tokens), model.vocabulary.decode(tokens)
    if kind == "schema":
        assert model.last_stats.fast_forwarded > 0


def test_counts_are_saved_per_constraint_and_model(model, cache_dir):
    constraint, prompt = CONSTRAINTS["schema"]
    before = set(cache_dir.glob("draft-counts-*"))
    model.generate(prompt, **constraint, seed=5, max_tokens=40)
    model.generate(prompt, regex=r"[a-z]+ [a-z]+", seed=5, max_tokens=8)
    new = set(cache_dir.glob("draft-counts-*")) - before
    assert len(new) <= 2
    again = localguide.Model(model.path, n_ctx=256)  # another process would load the same file
    key = localguide.Constraint.of(**constraint).key()
    assert len(again.draft_counts(key)) == len(model.draft_counts(key)) > 0


def test_a_text_that_repeats_itself_is_drafted_from_itself_and_counted_once(eager):
    # The count model hears of each (state, last ORDER tokens, token) once per generation, and
    # of each state every time; a text going round in circles is drafted from its own counts
    # (the count model, fresh, knows nothing before it).
    from localguide.speculate.counts import ORDER, RECENT

    model = eager
    constraint, prompt = {"regex": r"[a-z ]+"}, "Sing along: la la la la la la la la la la"
    counts = CountModel()
    texts = []
    for generation in (1, 2):
        tokens, _ = run(model, constraint, prompt, speculate=True, seed=0, temperature=0, counts=counts)
        texts.append(tokens)
        if generation == 1:
            assert model.last_stats.accepted > 0 and counts.calibration.predicted[RECENT] < 1.0
        # what the count model should have heard, from the text itself
        guide = model.compile(**constraint).guide(max_tokens=40)
        before = model.tokenize_prompt(prompt)[-ORDER:]
        states, contexts = {}, {}
        for text in texts:
            taken, seen = list(before), set()
            for t in text:
                key = guide.state_key()
                states[key, t] = states.get((key, t), 0) + 1
                for n in range(1, ORDER + 1):
                    if (key, *taken, t) not in seen:
                        ctx = (key, *taken[ORDER - n:])
                        contexts[ctx, t] = contexts.get((ctx, t), 0) + 1
                seen.add((key, *taken, t))
                taken = (taken + [t])[-ORDER:]
                guide.advance(t)
            guide = model.compile(**constraint).guide(max_tokens=40)
        assert max(states.values()) > 3, "the text must repeat itself for this test"
        for (key, t), n in states.items():
            assert counts.count(key, t) == n
        for (ctx, t), n in contexts.items():
            assert counts.count(ctx[0], t, ctx[1:]) == n
            assert len(ctx) <= ORDER or n <= generation  # (shorter contexts: one per longer one)


def test_a_model_that_cannot_drop_rejected_drafts_does_not_speculate(model, trained):
    # A recurrent model's memory (Mamba, RWKV) cannot drop its last positions: with speculation
    # asked for, it decodes one token at a time, and gives the text it gives without speculation.
    assert model.can_speculate  # (both models here are transformers)
    constraint, prompt = CONSTRAINTS["schema"]
    counts = trained(model, "schema")
    model.can_speculate = False
    try:
        tokens, _ = run(model, constraint, prompt, speculate=True, seed=4, counts=counts)
        assert model.last_stats.drafted == 0 and model.last_stats.decode_calls == model.last_stats.tokens - 1
    finally:
        model.can_speculate = True
    assert tokens == run(model, constraint, prompt, speculate=False, seed=4)[0]


def test_drafting_pauses_on_slow_batches_and_resumes_when_they_are_cheap(model, trained, monkeypatch):
    # The real loop and its real DecodeCost, with a decode cost injected: every decode of
    # several tokens takes 150 ms longer (a batch whose threads wait for a core another program
    # holds). Drafting stops within a few decodes (the lengths timed dear, or a pause); once
    # batches cost what they do, it resumes.
    import time

    constraint, prompt = CONSTRAINTS["schema"]
    counts = trained(model, "schema")
    counts.calibration = Calibration(counts.calibration.forced_rate)
    widths: list[int] = []
    slow = [True]
    real = llama_cpp.llama_decode

    def llama_decode(ctx, batch):
        rc = real(ctx, batch)
        widths.append(batch.n_tokens)
        if slow[0] and batch.n_tokens > 1:
            time.sleep(0.15)
        return rc

    monkeypatch.setattr(llama_cpp, "llama_decode", llama_decode)
    with costing(model, DecodeCost()):
        run(model, constraint, prompt, speculate=True, seed=21, max_tokens=60, counts=counts)
        slow_widths = widths[:]
        slow[0] = False
        del widths[:]
        drafted = []
        for seed in range(22, 30):
            run(model, constraint, prompt, speculate=True, seed=seed, max_tokens=60, counts=counts)
            drafted.append(model.last_stats.drafted)
    # (the first decode after the prompt's may draft too: several tokens, as the prompt's chunks)
    batches = sum(n > 1 for n in slow_widths[1:])
    assert batches <= 4, slow_widths  # the first dear length makes every length not timed dear
    assert len(slow_widths) > 12, slow_widths  # (one token per decode after that: the loop went on)
    # (a length is timed again after RETIME decodes that declined their drafts: cheap now, its
    # old times go, and drafting resumes where this machine, as it is, makes it pay)
    assert sum(drafted) > 0, drafted


class DearBatches(DecodeCost):
    """Every decode of several tokens is timed at 50 one-token decodes: no draft is worth one."""

    def relative(self, n: int) -> float:
        return 1.0 if n <= 1 else 50.0

    def known(self, n: int) -> bool:
        return True


def test_where_drafts_never_pay_a_generation_proposes_on_few_of_its_decodes(model, monkeypatch):
    # Proposing walks a copy of the guide (0.1-0.4 ms a decode for SmolLM2's grammars): where
    # every proposal is declined as too dear, after IDLE of them it proposes on every
    # IDLE_EVERY-th decode (and where a state's forced text is known), and the text is the one
    # speculation off gives.
    from localguide.speculate import drafts as drafts_module
    from localguide.speculate.counts import IDLE, IDLE_EVERY

    constraint, prompt = {"regex": r"[a-z]+( [a-z]+){0,200}"}, "A few words about the sea:"
    counts = trained_counts(model, constraint, prompt, n=2)
    counts.calibration = Calibration(counts.calibration.forced_rate)
    calls = []
    real = drafts_module.Drafter.propose

    def propose(self, *args, **kwargs):
        got = real(self, *args, **kwargs)
        calls.append(len(got.tokens))
        return got

    monkeypatch.setattr(drafts_module.Drafter, "propose", propose)
    with costing(model, DearBatches()):
        tokens, _ = run(model, constraint, prompt, speculate=True, seed=7, max_tokens=64, counts=counts)
    stats = model.last_stats
    assert stats.drafted == 0 and stats.decode_calls == len(tokens) - 1  # (nothing worth a decode)
    assert sum(n > 0 for n in calls) >= 4, calls  # (drafts were proposed, and declined)
    decodes = stats.decode_calls
    assert decodes > IDLE + 4 * IDLE_EVERY
    assert len(calls) <= IDLE + (decodes - IDLE) // IDLE_EVERY + 2, (len(calls), decodes)
    assert tokens == run(model, constraint, prompt, speculate=False, seed=7, max_tokens=64)[0]


def test_a_models_untimed_lengths_are_guessed_by_its_kernels(model):
    from localguide.engines.llamacpp.model import explore_guess

    assert model.reproducible  # (the CPU's reference kernels: a batch costs about its tokens)
    assert model._cost.explore == explore_guess(True) > explore_guess(False)


def test_the_lengths_one_run_timed_are_the_first_guesses_of_the_next(model, trained, monkeypatch):
    # A model's own DecodeCost, timing real decodes: at the end of the generation what it timed
    # is written to the cache directory, and the next load of the model (another process, as
    # ``localguide run`` is) starts from it; the guesses are no timings of this run (not known).
    from localguide.speculate.kept import KeptCosts

    constraint, prompt = CONSTRAINTS["schema"]
    counts = trained(model, "schema")
    fresh = DecodeCost(explore=model._own_cost.explore)
    monkeypatch.setattr(model, "_cost", fresh)
    monkeypatch.setattr(model, "_own_cost", fresh)
    monkeypatch.setattr(model, "_kept", KeptCosts(model._kept.path))  # (nothing written yet, by it)
    for seed in range(3):
        run(model, constraint, prompt, speculate=True, seed=seed, max_tokens=60, counts=counts)
        if fresh.learned():
            break
    learned = fresh.learned()
    assert learned, "no decode of several tokens was timed"
    kept = cache.read(model._kept.path)
    lengths, ratios = kept["lengths"].tolist(), kept["ratios"].tolist()
    assert set(learned) <= set(lengths)
    t = model.threads
    again = localguide.load(model.path, n_ctx=1024, n_threads=t.n_threads, n_threads_batch=t.n_threads_batch)
    assert again._kept.path == model._kept.path
    for n, r in zip(lengths, ratios):
        assert again._cost.relative(n) == pytest.approx(r) and not again._cost.known(n)
    del again
