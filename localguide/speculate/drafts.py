"""Drafts from the constraint: tokens likely to come next, proposed for one verifying decode.

Two sources, both read per guide state (``GuideProtocol.state_key``):

- the count model (``CountModel``): the token the model took most often in this state,
  with its estimated probability;
- forced text: where every continuation the constraint allows starts with the same bytes
  (a JSON key, ``":``, a closing bracket), those bytes as the model's tokenizer writes
  them. The last token is dropped where a longer allowed token could span the end of the
  forced text, so the model keeps that choice.

``Drafter.propose`` walks a copy of the guide, so the drafts are always allowed; how many
go to the model is ``choose_length``'s call (``DecodeCost``), which weighs the expected
accepted tokens against what a longer decode costs.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Callable

import numpy as np

from .counts import CountModel

MAX_DRAFT = 16
MAX_FORCED_BYTES = 256
# A draft whose chance of being reached (every draft before it accepted) is below this adds that
# little to the expected tokens, while its place in the decode costs 0.15-1 of a token's decode on
# the machines measured: proposing stops there. Walking the guide's copy further (masks and budget
# plans of states the text will likely never reach) took 4% of a token's time on the C grammar,
# where 4% of the steps drafted anything.
MIN_REACHED = 0.05
_MAX_ALLOWED = 1024  # a state allowing more tokens than this is taken to force nothing


class Drafter:
    """Proposes drafts for a guide's state (see the module docstring)."""

    def __init__(self, vocabulary, tokenize: Callable[[bytes], list[int]], counts: CountModel | None,
                 forced: bool = True, max_draft: int = MAX_DRAFT):
        self.vocabulary = vocabulary
        self.tokenize = tokenize
        self.counts = counts
        self.use_forced = forced
        self.max_draft = max_draft
        self._stops = set(vocabulary.stop_ids.tolist())
        self._lengths = np.diff(vocabulary.offsets)
        self._forced: dict[int, tuple[int, ...]] = {}
        # How often a forced draft is accepted (the model may tokenize the text otherwise), and
        # the counts' calibration (accepted / predicted), both learned from the verifications.
        self.forced_rate = 0.9
        self._hits = 1.0
        self._predicted = 1.0

    def propose(self, guide, limit: int, counts: bool = True) -> tuple[list[int], list[float], list[bool]]:
        """(drafts after the guide's state, the probability of each being accepted given the ones
        before it, whether each is forced text); at most ``limit``."""
        limit = min(limit, self.max_draft)
        out: list[int] = []
        probs: list[float] = []
        forced_flags: list[bool] = []
        if limit <= 0 or guide.is_finished():
            return out, probs, forced_flags
        g = guide.copy()
        scale = self._hits / self._predicted
        reached = 1.0
        while len(out) < limit and reached >= MIN_REACHED:
            key = g.state_key()
            if key < 0:
                break
            guess = self.counts.guess(key) if counts and self.counts is not None else None
            if guess is not None and guess[0] not in self._stops and g.accepts(guess[0]):
                g.advance(guess[0])
                out.append(guess[0])
                probs.append(min(0.99, guess[1] * scale))
                forced_flags.append(False)
                reached *= probs[-1]
                continue
            forced = self.forced_tokens(g, key) if self.use_forced else ()
            took = 0
            for t in forced:
                if len(out) >= limit or reached < MIN_REACHED or not g.accepts(t):
                    break
                g.advance(t)
                out.append(t)
                probs.append(self.forced_rate)
                forced_flags.append(True)
                reached *= self.forced_rate
                took += 1
            if took == 0:
                break
        return out, probs, forced_flags

    def verified(self, forced: bool, p: float, hit: bool) -> None:
        """Learn from one verified draft: ``p`` the probability it was proposed with."""
        if forced:
            self.forced_rate = 0.95 * self.forced_rate + 0.05 * hit
        else:
            self._hits = 0.98 * self._hits + 0.02 * hit
            self._predicted = 0.98 * self._predicted + 0.02 * p

    def forced_tokens(self, guide, key: int) -> tuple[int, ...]:
        """The forced text after ``guide``'s state, as the model's tokens (cached per state)."""
        got = self._forced.get(key)
        if got is None:
            got = self._forced[key] = self._compute_forced(guide)
        return got

    def _compute_forced(self, guide) -> tuple[int, ...]:
        text, open_end = forced_text(guide, self.vocabulary)
        if not text:
            return ()
        tokens = list(self.tokenize(text))
        # Keep the tokens that spell a prefix of the text (a tokenizer may add or change bytes).
        kept, at = [], 0
        for t in tokens:
            piece = self.vocabulary[t] if 0 <= t < self.vocabulary.size else b""
            if not piece or text[at:at + len(piece)] != piece:
                break
            kept.append(t)
            at += len(piece)
        if open_end and kept:
            # Back off the last token where a longer token could span the end of the forced text.
            g = guide.copy()
            for t in kept[:-1]:
                if not g.accepts(t):
                    return tuple(kept)
                g.advance(t)
            allowed = g.allowed_token_ids()
            if len(allowed) and int(self._lengths[allowed].max()) > len(self.vocabulary[kept[-1]]):
                kept.pop()
        return tuple(kept)


def forced_text(guide, vocabulary) -> tuple[bytes, bool]:
    """(the bytes every continuation allowed after ``guide`` starts with, whether more text may
    follow them): walks a copy of the guide token by token while the allowed tokens share a prefix."""
    g = guide.copy()
    text = b""
    while len(text) < MAX_FORCED_BYTES:
        if g.is_accepting():
            return text, False  # the text may end here
        allowed = g.allowed_token_ids()
        if len(allowed) == 0 or len(allowed) > _MAX_ALLOWED:
            break
        pieces = [vocabulary[int(t)] for t in allowed]
        prefix = os.path.commonprefix(pieces)
        if not prefix:
            break
        text += prefix
        exact = next((int(t) for t, p in zip(allowed, pieces) if p == prefix), None)
        if exact is None:
            break
        g.advance(exact)
    return text, True


class DecodeCost:
    """What one ``llama_decode`` of n tokens with logits at each costs against one token, learned
    as it goes: the least of the last few times of each n (other work on the machine only ever
    slows a decode down: a background compile competing with llama.cpp's threads can make one
    take a hundred times as long). Where a length has not been timed it is interpolated between
    the timed ones, and beyond the longest it grows as it has so far (per token, within [0.15, ``slope``]:
    drafts grow past what has paid, and stop where it no longer does). No estimate exceeds ``1 + cap (n - 1)``, so
    that a length timed once at a bad moment is tried again.

    The curve depends on the machine and the threads: with llama-cpp-python's defaults a batch
    runs on more threads than one token, and 2 tokens can cost less than 1."""

    def __init__(self, slope: float = 0.5, cap: float = 0.75, window: int = 9, longest: int = MAX_DRAFT + 1):
        self.slope = slope
        self.cap = cap
        self._times: dict[int, deque] = {}
        self._window = window
        self._rel = [1.0 + slope * (n - 1) for n in range(longest + 1)]  # (index 0 unused)

    def observe(self, n: int, seconds: float) -> None:
        times = self._times.get(n)
        if times is None:
            times = self._times[n] = deque(maxlen=self._window)
        times.append(seconds)
        self._update()

    def _least(self, n: int) -> float | None:
        times = self._times.get(n)
        return min(times) if times else None

    def _update(self) -> None:
        t1 = self._least(1)
        if t1 is None or t1 <= 0:
            return
        known = sorted((k, self._least(k) / t1) for k in self._times if k > 1)
        rel = self._rel
        # Past the longest timed length, the growth seen so far (within [0.15, slope]) per token.
        grow = self.slope
        if known:
            k, r = known[-1]
            grow = min(self.slope, max(0.15, (r - 1.0) / (k - 1)))
        below = (1, 1.0)
        j = 0
        for n in range(2, len(rel)):
            while j < len(known) and known[j][0] < n:
                below = known[j]
                j += 1
            if j < len(known) and known[j][0] == n:
                rel[n] = known[j][1]
            elif j < len(known):
                (k0, r0), (k1, r1) = below, known[j]
                rel[n] = r0 + (r1 - r0) * (n - k0) / (k1 - k0)
            else:
                rel[n] = below[1] + grow * (n - below[0])
            rel[n] = min(rel[n], 1.0 + self.cap * (n - 1))

    def relative(self, n: int) -> float:
        """T(n) / T(1)."""
        rel = self._rel
        if n < len(rel):
            return rel[max(n, 1)]
        return rel[-1] + self.slope * (n - len(rel) + 1)


def choose_length(probs: list[float], cost: DecodeCost, fixed: int = 0) -> int:
    """How many drafts to decode: the k that maximizes expected tokens per unit of time,
    (1 + sum of the chance that the first i drafts are all accepted, i <= k) / T(1 + fixed + k).
    ``fixed`` tokens are decoded anyway (fast-forwarded text)."""
    best_k, best = 0, 1.0 / cost.relative(1 + fixed)
    expected, alive = 1.0, 1.0
    for k, p in enumerate(probs, 1):
        alive *= p
        expected += alive
        rate = expected / cost.relative(1 + fixed + k)
        if rate > best:
            best_k, best = k, rate
    return best_k
