"""Drafter.propose: drafts stay allowed, and stop where they are unlikely to be reached."""

from __future__ import annotations

import localguide
from localguide.speculate import CountModel, Drafter
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
    drafts, probs, forced = drafter.propose(guide, 16)
    assert drafts == [a] * len(drafts) and not any(forced)
    reached = [1.0]
    for p in probs:
        reached.append(reached[-1] * p)
    assert all(r >= MIN_REACHED for r in reached[:-1]) and reached[-1] < MIN_REACHED
    assert len(drafts) == 5  # (1/2)^4 >= 0.05 > (1/2)^5


def test_likely_drafts_go_to_the_limit(smollm2_vocab):
    drafter, guide, a = _drafter(smollm2_vocab, 9)  # p = 0.9: 0.9^16 > 0.05 would stop at 29
    drafts, probs, _ = drafter.propose(guide, 16)
    assert len(drafts) == 16 and all(p > 0.85 for p in probs)
    g = guide.copy()
    for t in drafts:  # every draft is allowed where it is proposed
        assert g.accepts(t)
        g.advance(t)
