"""Drafter.propose: drafts stay allowed, and stop where they are unlikely to be reached."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

import localguide
from localguide.speculate import CountModel, DecodeCost, Drafter
from localguide.speculate.drafts import MIN_REACHED


def _drafter(vocab, guesses: int):
    """A drafter whose counts say the model takes ``a`` ``guesses`` times in ``guesses + 1`` (the
    regex's one state), over an index of ``[ab]*``."""
    index = localguide.compile_regex(r"[ab]*", vocab)
    guide = index.guide()
    a = next(t for t in range(vocab.size) if vocab[t] == b"a")
    counts = CountModel()
    for _ in range(guesses):
        counts.add(guide.state_key(), a)
    return Drafter(vocab, lambda text: [], counts, forced=False), guide, a


def test_drafts_stop_where_they_are_unlikely_to_be_reached(smollm2_vocab):
    drafter, guide, a = _drafter(smollm2_vocab, 1)  # each draft: p = 1/2
    drafts, probs, forced, _ = drafter.propose(guide, 16)
    assert drafts == [a] * len(drafts) and not any(forced)
    reached = [1.0]
    for p in probs:
        reached.append(reached[-1] * p)
    assert all(r >= MIN_REACHED for r in reached[:-1]) and reached[-1] < MIN_REACHED
    assert len(drafts) == 5  # (1/2)^4 >= 0.05 > (1/2)^5


def test_likely_drafts_go_to_the_limit(smollm2_vocab):
    drafter, guide, a = _drafter(smollm2_vocab, 9)  # p = 0.9: 0.9^16 > 0.05 would stop at 29
    drafts, probs, _, _ = drafter.propose(guide, 16)
    assert len(drafts) == 16 and all(p > 0.85 for p in probs)
    g = guide.copy()
    for t in drafts:  # every draft is allowed where it is proposed
        assert g.accepts(t)
        g.advance(t)


def test_forced_text_the_counts_agree_with_is_drafted_as_forced(smollm2_vocab):
    # One observation gives the counts a probability of 1/2; the forced text's own tokenization
    # is as likely as forced text is (the calibration's forced rate), and learns as forced text.
    index = localguide.compile_regex(r"abcabcabc(x|y)", smollm2_vocab)
    guide = index.guide()
    pieces = {smollm2_vocab[t]: t for t in range(smollm2_vocab.size)}

    def greedy(text: bytes) -> list[int]:  # longest match first: a stand-in for the tokenizer
        out, at = [], 0
        while at < len(text):
            n = max(n for n in range(1, len(text) - at + 1) if text[at:at + n] in pieces)
            out.append(pieces[text[at:at + n]])
            at += n
        return out

    counts = CountModel()
    first = greedy(b"abcabcabc")[0]
    counts.add(guide.state_key(), first)
    drafter = Drafter(smollm2_vocab, greedy, counts)
    drafts, probs, forced, _ = drafter.propose(guide, 4)
    assert drafts[0] == first and forced[0] and probs[0] == counts.calibration.forced_rate > 0.5
    drafter.verified(True, probs[0], False)
    assert counts.calibration.forced_rate < probs[0]
    # the calibration lives with the counts: the next generation's drafter starts from it
    assert Drafter(smollm2_vocab, greedy, counts).calibration is counts.calibration


def test_decode_cost_tries_untimed_lengths_and_learns_an_uneven_curve():
    from localguide.speculate import DecodeCost

    cost = DecodeCost()
    assert cost.relative(8) == pytest.approx(1 + cost.explore * 7)  # untimed: optimistic
    times = {1: 10.0, 2: 19.0, 4: 27.0, 6: 44.0, 8: 33.0}  # ms: 8 tokens cheaper than 6
    for _ in range(3):
        for n, t in times.items():
            cost.observe(n, t / 1e3)
    cost.observe(6, 90 / 1e3)  # a slow moment is not what 6 costs
    for _ in range(5):  # the machine twice as slow for a while (a background compile): all alike
        cost.observe(1, 20 / 1e3)
    for _ in range(3):  # a length first timed then costs what it costs against its neighbours
        cost.observe(5, 70 / 1e3)
    assert cost.relative(5) == pytest.approx(3.5)
    assert cost.relative(6) == pytest.approx(4.4) and cost.relative(8) == pytest.approx(3.3)
    assert cost.relative(16) == pytest.approx(1 + cost.explore * 15)
    cost.observe(3, 1.0)  # timed once, at a very bad moment: capped, so it is tried again
    assert cost.relative(3) == pytest.approx(1 + cost.cap * 2)
    assert cost.relative(2) == pytest.approx(1.9) and 1.9 > 1 + cost.cap  # timed often: as it is



def test_drafts_follow_the_tokens_before_them(smollm2_vocab):
    # In [ab]*'s one state the model alternates a and b: the state alone says a or b half the
    # time each, the token before says which.
    index = localguide.compile_regex(r"[ab]*", smollm2_vocab)
    guide = index.guide()
    a, b = (next(t for t in range(smollm2_vocab.size) if smollm2_vocab[t] == x) for x in (b"a", b"b"))
    counts = CountModel()
    key = guide.state_key()
    for _ in range(9):
        counts.add(key, b, (a,))
        counts.add(key, a, (b,))
    drafter = Drafter(smollm2_vocab, lambda text: [], counts, forced=False)
    drafts, probs, _, orders = drafter.propose(guide, 6, context=(7, a))
    assert drafts == [b, a, b, a, b, a] and all(p == pytest.approx(0.99) for p in probs)  # (at most)
    assert orders[0] == 1 and all(o >= 1 for o in orders)
    alone = drafter.propose(guide, 6)  # without the context: the state's guess, 9 of 18
    assert alone.orders[0] == 0 and alone.probs[0] == pytest.approx((9 / 18) ** 2)
    # each length of context keeps its own calibration
    drafter.verified(False, probs[0], False, orders[0])
    assert counts.calibration.scale(1) < 1 and counts.calibration.scale(0) == 1


def test_the_generations_own_counts_draft_where_they_are_likelier(smollm2_vocab):
    from localguide.speculate.counts import RECENT

    index = localguide.compile_regex(r"[ab]*", smollm2_vocab)
    guide = index.guide()
    a, b = (next(t for t in range(smollm2_vocab.size) if smollm2_vocab[t] == x) for x in (b"a", b"b"))
    key = guide.state_key()
    counts = CountModel()
    drafter = Drafter(smollm2_vocab, lambda text: [], counts, forced=False)
    recent = {(key, a, a, b): {a: 3}, (key, a, b, a): {a: 3}, (key, b, a, a): {b: 3}}  # "aab" over and over
    got = drafter.propose(guide, 3, context=(a, a, b), recent=recent)
    assert got.tokens == [a, a, b] and got.orders == [RECENT] * 3 and got.probs[0] == pytest.approx(1 - 1 / 18)
    for _ in range(9):
        counts.add(key, b, (a, a, b))  # the count model is surer of b after "aab"
    got = drafter.propose(guide, 1, context=(a, a, b), recent=recent)
    assert got.tokens == [b] and got.orders == [3] and got.probs[0] == pytest.approx(0.99)
    assert drafter.propose(guide, 1, context=(a, b), recent=recent).orders != [RECENT]  # too short a context


def test_the_text_itself_drafts_what_followed_its_last_tokens_before(smollm2_vocab):
    from localguide.speculate.counts import LOOKUP
    from localguide.speculate.lookup import MIN_MATCH, Lookup

    index = localguide.compile_regex(r"[ab]*", smollm2_vocab)
    guide = index.guide()
    a, b = (next(t for t in range(smollm2_vocab.size) if smollm2_vocab[t] == x) for x in (b"a", b"b"))
    counts = CountModel()
    drafter = Drafter(smollm2_vocab, lambda text: [], counts, forced=False)
    seen = Lookup([a, b, b, a, a, b, b])  # "abba" then "abb": an "a" came after "abb", then "ab", ...
    got = drafter.propose(guide, 5, lookup=seen)
    assert got.tokens == [a, a, b, b, a] and got.orders[0] == LOOKUP + (3 - MIN_MATCH)
    assert got.probs[0] == counts.calibration.lookup[3 - MIN_MATCH]
    for _ in range(9):
        counts.add(guide.state_key(), b)  # the counts are surer of b: they draft it
    got = drafter.propose(guide, 1, lookup=seen)
    assert got.tokens == [b] and got.orders == [0]
    # each token taken teaches the rate of the match length that guessed it: lower where another came
    before = list(counts.calibration.lookup)
    drafter.taken(seen, b)
    lowered = counts.calibration.lookup[0]
    assert lowered < before[0] and counts.calibration.lookup[1:] == before[1:]
    drafter.taken(seen, b)  # each match teaches once per generation (a text going round in circles)
    assert counts.calibration.lookup[0] == lowered
    drafter.taken(Lookup(seen.tokens), a)
    assert counts.calibration.lookup[0] > lowered
    drafter.verified(False, before[0], False, LOOKUP)  # (drafts teach nothing more: counted once)
    assert counts.calibration.lookup[1:] == before[1:]
    assert drafter.propose(guide, 1).orders == [0]  # without the text, the counts alone


def test_choose_length_pads_a_decode_to_a_length_decoded_faster():
    from localguide.speculate import DecodeCost, choose_length

    cost = DecodeCost()
    for _ in range(3):  # Gemma 3 on a 2-core CPU: logits four positions at a time
        for n, t in {1: 10.0, 2: 19.0, 3: 24.0, 4: 27.0, 5: 39.0, 6: 43.0, 7: 47.0, 8: 32.0}.items():
            cost.observe(n, t / 1e3)
    probs = [0.95] * 4
    assert choose_length(probs, cost) == (3, 4)  # no room given: the 4th draft costs too much
    assert choose_length(probs, cost, longest=8) == (4, 8)  # 4 drafts and 3 positions of padding
    assert choose_length(probs, cost, longest=7) == (3, 4)  # 5 to 7 cost too much
    assert choose_length(probs + [0.9, 0.9, 0.9], cost, longest=8) == (7, 8)  # drafts before padding
    assert choose_length([], cost, longest=8) == (0, 1)  # no drafts: nothing to pad
    assert choose_length([0.3], cost, longest=8) == (0, 1)  # a draft unlikely even at T(8)
    # Untimed lengths look cheap (1 + 0.15 (n - 1)) so that drafts try them; padding does not.
    assert cost.relative(12) < cost.relative(8) and choose_length(probs, cost, longest=12) == (4, 8)
    for _ in range(2):
        cost.observe(12, 30 / 1e3)
    assert not cost.known(12) and choose_length(probs, cost, longest=12) == (4, 8)
    cost.observe(12, 30 / 1e3)
    assert cost.known(12) and choose_length(probs, cost, longest=12) == (4, 12)


class _Curve:
    """A cost curve given outright, each length timed or not."""

    def __init__(self, costs: list[float], timed: list[bool]):
        self.costs, self.timed = costs, timed

    def relative(self, n: int) -> float:
        return self.costs[n]

    def known(self, n: int) -> bool:
        return self.timed[n]


@settings(max_examples=300, deadline=None)
@given(probs=st.lists(st.floats(0.0, 1.0), max_size=16), fixed=st.integers(0, 3), room=st.integers(0, 17),
       costs=st.lists(st.floats(0.2, 8.0), min_size=40, max_size=40), timed=st.lists(st.booleans(), min_size=40,
                                                                                      max_size=40))
def test_choose_length_picks_the_best_plan_there_is(probs, fixed, room, costs, timed):
    # Against a plain search of every plan: k drafts (a prefix of them) in n tokens, n = 1 + fixed + k,
    # or padded (all the drafts, at least one, and a timed n up to ``longest``).
    from localguide.speculate import choose_length

    longest = 1 + fixed + room if fixed == 0 else 0
    curve = _Curve(costs, timed)
    expected = [1.0]
    for p in probs:
        expected.append(expected[-1] + (expected[-1] - expected[-2] if len(expected) > 1 else 1.0) * p)
    plans = [(expected[k] / costs[1 + fixed + k], k, 1 + fixed + k) for k in range(len(probs) + 1)]
    if probs:
        plans += [(expected[-1] / costs[n], len(probs), n)
                  for n in range(2 + fixed + len(probs), longest + 1) if timed[n]]
    k, n = choose_length(probs, curve, fixed, longest)
    assert k <= len(probs) and n >= 1 + fixed + k and (n == 1 + fixed + k or (k == len(probs) > 0 and timed[n]))
    # (drafts only where they promise MIN_GAIN times no drafts' rate)
    from localguide.speculate.drafts import MIN_GAIN

    none = plans[0][0]
    drafting = max((rate for rate, k_, _ in plans if k_ > 0), default=0.0)
    if drafting > MIN_GAIN * none * (1 + 1e-9):
        assert k > 0 and expected[k] / costs[n] == pytest.approx(drafting)
    elif drafting < MIN_GAIN * none * (1 - 1e-9):
        assert (k, n) == (0, 1 + fixed)


def test_a_width_is_chosen_where_it_decodes_nearly_as_fast_as_one_token():
    from localguide.speculate.drafts import choose_width

    # (an H100 replaying CUDA graphs, SmolLM2: ms per decode of n tokens, logits at each)
    assert choose_width({1: 1.07, 2: 1.25, 4: 1.49, 8: 1.69, 16: 3.22}) == 4
    assert choose_width({1: 1.05, 2: 1.14, 4: 1.38, 8: 1.67, 16: 2.69}) == 4  # (Gemma 3)
    assert choose_width({1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0, 16: 1.0}) == 16
    # a CPU: a batch costs nearly as much per token as one token
    assert choose_width({1: 13.5, 2: 24.0, 4: 34.0, 8: 51.0, 16: 84.0}) == 1
    # a width must promise MIN_WIDTH_GAIN over one token per decode
    assert choose_width({1: 1.0, 2: 1.5}) == 1
    assert choose_width({1: 1.0, 2: 1.3}) == 2
    assert choose_width({1: 1.0}) == 1


def test_decode_cost_one_dear_batch_makes_every_untimed_length_dear():
    from localguide.speculate.drafts import FLOOR

    c = DecodeCost()
    assert c.stale()  # (no one-token decode timed yet: the next decode is one)
    c.observe(1, 0.010)
    assert not c.stale()
    before = c.relative(6)
    c.observe(9, 0.120)  # a busy machine: 12 one-token decodes' time
    assert c.relative(6) >= FLOOR * 12.0 * 0.99 > before
    assert c.relative(2) >= FLOOR * 12.0 * 0.99
    assert not c.known(6)


def test_decode_cost_a_length_far_cheaper_than_its_times_drops_them():
    c = DecodeCost()
    c.observe(1, 0.010)
    for _ in range(5):
        c.observe(2, 0.100)  # 10x: dear, and trusted
    assert c.known(2) and c.relative(2) > 9
    c.observe(2, 0.012)  # the machine is quiet again
    assert c.relative(2) < 1.5 and not c.known(2)
    assert c.relative(5) < 1.5 * 1.2  # (the floor follows the cheapest length timed)


def test_decode_cost_forget_and_stale():
    from localguide.speculate.drafts import REFRESH_ONE

    c = DecodeCost()
    c.observe(1, 0.010)
    for _ in range(REFRESH_ONE - 1):
        c.observe(4, 0.030)
    assert not c.stale()
    c.observe(4, 0.030)
    assert c.stale()
    c.forget()
    assert not c.known(4) and c.relative(4) == 1.0 + c.explore * 3
    c.observe(1, 0.010)
    assert not c.stale()


def test_decode_cost_retimes_a_dear_length_less_often_while_it_stays_dear():
    from localguide.speculate.drafts import MAX_RETIME, RETIME

    def declined_until_retime(c: DecodeCost) -> int:
        n = 1
        while not c.retime(True, 0):
            n += 1
            assert n <= MAX_RETIME
        return n

    c = DecodeCost()
    c.observe(1, 0.010)
    gaps = []
    for _ in range(7):
        gaps.append(declined_until_retime(c))
        c.observe(2, 0.030)  # the retime's decode: as dear as before
    assert gaps == [RETIME, 2 * RETIME, 4 * RETIME, 8 * RETIME, MAX_RETIME, MAX_RETIME, MAX_RETIME]
    assert not c.retime(False, 0)  # (a decode with nothing proposed neither declines nor takes)
    c.observe(2, 0.011)  # quiet again: far cheaper than its times, which go, and so does the long wait
    assert declined_until_retime(c) == RETIME
    for _ in range(3):
        declined_until_retime(c)
    c.forget()
    assert declined_until_retime(c) == RETIME
    for _ in range(RETIME - 1):
        assert not c.retime(True, 0)
    assert not c.retime(True, 2)  # a draft worth its decode: the declined streak starts again
    assert declined_until_retime(c) == 2 * RETIME


def test_an_untimed_length_is_guessed_by_the_kernels():
    from localguide.engines.llamacpp.model import explore_guess
    from localguide.speculate.drafts import EXPLORE, REFERENCE_EXPLORE

    # the reference kernels: each row its own dot product, the weights read once a batch
    assert explore_guess(True) == REFERENCE_EXPLORE > EXPLORE
    # llama.cpp's fast kernels (``reproducible=False``) and GPUs
    assert explore_guess(False) == EXPLORE
    c = DecodeCost(explore=0.5)
    assert c.relative(8) == pytest.approx(4.5)
    c.forget()
    assert c.relative(3) == pytest.approx(2.0)
