"""Drafts from the constraint: tokens likely to come next, proposed for one verifying decode.

Three sources, the first and the last read per guide state (``GuideProtocol.state_key``):

- the count model (``CountModel``): the token the model took most often in this state after
  the last few tokens (or in this state at all, where those were never seen before it), with
  its estimated probability; and the same counts of the generation itself, where they are
  likelier (a text that repeats itself: a list, a loop);
- the text itself (``Lookup``): the token that followed the last few tokens where they came
  before, in the prompt or the generation, whatever the state, at the rate such guesses were
  right, where likelier than the counts' guess (a date written twice, a name repeated);
- forced text: where every continuation the constraint allows starts with the same bytes
  (a JSON key, ``":``, a closing bracket), those bytes as the model's tokenizer writes
  them. The last token is dropped where a longer allowed token could span the end of the
  forced text, so the model keeps that choice.

``Drafter.propose`` walks a copy of the guide, so the drafts are always allowed; how many
go to the model is ``choose_length``'s call (``DecodeCost``), which weighs the expected
accepted tokens against what a longer decode costs (and pads a decode to a length the machine
computes faster); whether to draft at all is
``Calibration.settle``'s, from what the timed decodes with drafts really gained.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Callable, NamedTuple

import numpy as np

from .counts import LOOKUP, ORDER, RECENT, Calibration, CountModel, Guess, best
from .lookup import MIN_MATCH, Lookup

MAX_DRAFT = 16
MAX_FORCED_BYTES = 256
# A draft whose chance of being reached (every draft before it accepted) is below this adds that
# little to the expected tokens, while its place in the decode costs 0.15-1 of a token's decode on
# the machines measured: proposing stops there. Walking the guide's copy further (masks and budget
# plans of states the text will likely never reach) would cost time on steps that seldom draft.
MIN_REACHED = 0.05
TRUSTED_TIMES = 3  # timings of a decode length before DecodeCost takes them as they are
# Decodes with drafts between two one-token decodes timed: the yardstick of every decode's cost
# is the machine as it is now (another program may have taken a core since), not as it was.
REFRESH_ONE = 32
FLOOR = 0.8  # of the cheapest length timed: what a length not timed enough costs at least
EXPLORE = 0.15  # what an untimed length is guessed to cost a token past the first (``DecodeCost``)
REFERENCE_EXPLORE = 0.4  # the same on llama.cpp's reference kernels (``model.explore_guess``)
CHANGED = 0.5  # a length timed at under this share of its estimate: its earlier times are dropped
# Decodes in a row whose drafts were declined as too dear before one is decoded anyway, to time
# a length again (the machine may be quiet again): at most a two-token decode in this many. Each
# such decode doubles the wait, up to MAX_RETIME, until a length is timed at under CHANGED of its
# estimate: where drafts never pay (SmolLM2 on the reference kernels of a 2-core CPU: two tokens
# cost 2-4 of one), a decode of two tokens every 48 added 2-4% to the generation's time.
RETIME, MAX_RETIME = 48, 512
MAX_FORCED_STATES = 1 << 14  # the forced tokens cached per count model
_MAX_ALLOWED = 1024  # a state allowing more tokens than this is taken to force nothing


class Drafts(NamedTuple):
    """What ``Drafter.propose`` proposes, one entry per draft: the token, the probability of it
    being accepted given the drafts before it, whether it is forced text, and how many tokens
    of context the counts' guess came from (``RECENT``: the generation's own counts; -1: forced
    text the counts had no say in; ``LOOKUP + i``: a match of ``MIN_MATCH + i`` tokens earlier in
    the text)."""

    tokens: list[int]
    probs: list[float]
    forced: list[bool]
    orders: list[int]


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
        # Learned from the verifications, kept with the counts: it carries over from one
        # generation to the next, as the counts do.
        self.calibration = counts.calibration if counts is not None else Calibration()

    def propose(self, guide, limit: int, counts: bool = True, context: tuple[int, ...] = (),
                recent: dict | None = None, lookup: Lookup | None = None) -> Drafts:
        """At most ``limit`` drafts after the guide's state; ``context``: the tokens taken before
        it, oldest first (the counts' guesses depend on the last few); ``recent``: this
        generation's own counts, (state key, the last ``ORDER`` tokens) -> {token: count}, which
        guess where they are likelier than the count model (a text repeating itself); ``lookup``:
        the prompt and the tokens taken so far, whose guesses likewise."""
        limit = min(limit, self.max_draft)
        out: list[int] = []
        probs: list[float] = []
        forced_flags: list[bool] = []
        orders: list[int] = []
        drafts = Drafts(out, probs, forced_flags, orders)
        if limit <= 0 or guide.is_finished():
            return drafts
        g = guide.copy()
        cal = self.calibration
        context = tuple(context[len(context) - ORDER:]) if len(context) > ORDER else tuple(context)
        reached = 1.0
        while len(out) < limit and reached >= MIN_REACHED:
            key = g.state_key()
            if key < 0:
                break
            guess = None
            if counts and self.counts is not None:
                ctx = context + tuple(out)
                guess = self.counts.guess(key, ctx)
                here = recent.get((key, *ctx[len(ctx) - ORDER:])) if recent and len(ctx) >= ORDER else None
                if here:
                    t, p = best(here)
                    if guess is None or p * cal.scale(RECENT) > guess.p * cal.scale(guess.order):
                        guess = Guess(t, p, RECENT)
                if lookup is not None:
                    seen = lookup.guess(out)
                    if seen is not None:
                        rate = cal.lookup[seen[1] - MIN_MATCH]
                        if (guess is None or rate > guess.p * cal.scale(guess.order)) \
                                and seen[0] not in self._stops and g.accepts(seen[0]):
                            guess = Guess(seen[0], rate, LOOKUP + seen[1] - MIN_MATCH)
            forced = self.forced_tokens(g, key) if self.use_forced else ()
            if guess is not None and guess.token not in self._stops and g.accepts(guess.token):
                g.advance(guess.token)
                out.append(guess.token)
                orders.append(guess.order)
                p = min(0.99, guess.p * cal.scale(guess.order))
                agrees = bool(forced) and forced[0] == guess.token
                if agrees:
                    # The model took the forced text's own tokenization here before: as likely as
                    # forced text is, whatever the few counts so far say.
                    p = max(p, cal.forced_rate)
                probs.append(p)
                forced_flags.append(agrees)
                reached *= p
                continue
            took = 0
            for t in forced:
                if len(out) >= limit or reached < MIN_REACHED or not g.accepts(t):
                    break
                g.advance(t)
                out.append(t)
                probs.append(cal.forced_rate)
                forced_flags.append(True)
                orders.append(-1)
                reached *= cal.forced_rate
                took += 1
            if took == 0:
                break
        return drafts

    def proposing(self, guide, decode: int) -> bool:
        """Whether to propose drafts after ``guide``'s state at a generation's ``decode``-th decode
        (``Calibration.proposing``)."""
        cal = self.calibration
        # (the state's key only where the rest says no: it costs a walk of the guide)
        return cal.proposing(False, decode) or (self.use_forced and bool(cal.forced.get(guide.state_key())))

    def verified(self, forced: bool, p: float, hit: bool, order: int = 0) -> None:
        """Learn from one verified draft: ``p`` the probability it was proposed with, ``order``
        the length of context its guess came from. The calibration of guesses with context
        moves faster than the state's: how far they hold changes with the text (a run of
        whitespace the model went round in, and then leaves: a slow calibration keeps drafting
        long runs the model has stopped taking). ``predicted``
        averages ``p`` as proposed, already scaled: the scale settles at sqrt(hits / estimate), a
        damped correction; dividing the scale out measured no faster (BENCHMARKS.md)."""
        cal = self.calibration
        if forced:
            cal.forced_rate = 0.95 * cal.forced_rate + 0.05 * hit
        elif order >= LOOKUP:
            return  # (learned from every token taken: ``taken``)
        else:
            w = 0.02 if order == 0 else 0.1
            cal.hits[order] = (1 - w) * cal.hits[order] + w * hit
            cal.predicted[order] = (1 - w) * cal.predicted[order] + w * p

    def taken(self, lookup: Lookup, token: int) -> None:
        """Learn how often the text's own guess is right, from each token taken (``token``, before
        ``lookup`` has it), drafted or not, each match once per generation: learned from its
        drafts alone, the rate would hardly move where they sit behind an unlikely guess, which
        refuses them first."""
        seen = lookup.guess()
        if seen is not None and lookup.first(seen[1]):
            i = seen[1] - MIN_MATCH
            self.calibration.lookup[i] = 0.95 * self.calibration.lookup[i] + 0.05 * (seen[0] == token)

    def forced_tokens(self, guide, key: int) -> tuple[int, ...]:
        """The forced text after ``guide``'s state, as the model's tokens (cached per state)."""
        cache = self.calibration.forced
        got = cache.get(key)
        if got is None:
            if len(cache) >= MAX_FORCED_STATES:
                cache.clear()
            got = cache[key] = self._compute_forced(guide)
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
    as it goes: each decode of n > 1 tokens is timed against the median of the last few
    one-token decodes, and the estimate is the median of the last few such ratios. A ratio,
    because other work on the machine slows both alike (a background compile competing with
    llama.cpp's threads can make a decode take a hundred times as long, and an absolute time
    taken then would make that length look dear long after); a median, because a moment that
    slows one decode and not its neighbours moves the ratio either way.

    A length not timed yet is taken to cost ``1 + explore (n - 1)``, an optimistic guess (the
    model's is ``model.explore_guess``'s, by its kernels and threads), so that
    it gets tried once drafts likely enough come along, and timed: the curve is no smooth
    function of n (on one 2-core CPU, 8 tokens with logits cost less than 6 tokens do, as llama.cpp's
    matrix kernels change with the batch), so neither interpolating nor
    extrapolating the timed lengths tells what the others cost. Until a length has been timed
    ``TRUSTED_TIMES`` times its estimate stays within ``1 + cap (n - 1)``, so that a length timed
    once at a bad moment is tried again; after that, the ratios are trusted (a cap would make
    2 tokens look cheaper than they are where they cost 1.9 times one).

    The curve depends on the machine and the threads: with llama-cpp-python's defaults a batch
    runs on more threads than one token, and 2 tokens can cost less than 1."""

    def __init__(self, slope: float = 0.5, cap: float = 0.75, window: int = 9, longest: int = MAX_DRAFT + 1,
                 explore: float = EXPLORE, probe: bool = False):
        # A backend that replays a captured graph of a decode's shape (llama.cpp's CUDA backend)
        # decodes n tokens nearly as fast as one once it sees the same n again and again, and
        # slower than both where the lengths alternate: there every decode with drafts has one
        # width (``choose_width``), and ``probe`` says to time the widths once (``timed_widths``).
        self.probe = probe
        self.width = None if probe else 1  # (None: not probed yet; 1: lengths chosen per decode)
        self.width_ratio = 1.0  # T(width) / T(1), steady
        self.one_seconds = 0.0  # T(1), steady
        self.widths: dict[int, float] = {}  # the probe's timings, n -> seconds
        self.slope = slope
        self.cap = cap
        self.explore = explore
        self._ones: deque = deque(maxlen=3)  # the last one-token decodes, seconds
        self._since_one = 0  # decodes of several tokens timed since the last one-token decode
        self._ratios: dict[int, deque] = {}  # n -> the last ``window`` times / the one-token median
        self._window = window
        self._prior: dict[int, float] = {}  # n -> T(n) / T(1) as an earlier run learned it (``start_from``)
        self._rel = self._guesses(longest + 1)  # (index 0 unused)
        # What a decode of several tokens costs at least, from the lengths timed: a length not
        # timed enough is taken to cost no less. Where another program holds a core, every
        # decode of several tokens pays about the same wait at each of its barriers, whatever
        # its length; on a quiet machine this is below the optimistic guess and changes nothing.
        self._floor = 0.0
        self._declined = 0  # decodes in a row whose drafts all cost more than they promised
        self._retime_after = RETIME  # declined decodes before the next retime (``retime``)

    def observe(self, n: int, seconds: float) -> None:
        if n == 1:
            if seconds > 0:
                self._ones.append(seconds)
                self._since_one = 0
            return
        self._since_one += 1
        if not self._ones or n >= len(self._rel):
            return
        self._add(n, seconds / self._one())

    def forget(self) -> None:
        """Drop what the lengths were timed at (drafting resumes after a pause: the machine that
        made them dear may have changed); the one-token decodes stay."""
        self._ratios.clear()
        self._prior = {}  # (an earlier run's costs too: the machine that made them is gone as well)
        self._rel = self._guesses(len(self._rel))
        self._floor = 0.0
        self._retime_after = RETIME

    def _guesses(self, size: int) -> list[float]:
        """What each length not timed yet is taken to cost: what an earlier run learned of it
        (``start_from``), else ``1 + explore (n - 1)``."""
        return [self._prior.get(n, 1.0 + self.explore * (n - 1)) for n in range(size)]

    def learned(self) -> dict[int, float]:
        """The lengths timed here: n -> T(n) / T(1), as estimated now (for ``start_from`` in a
        later run; a one-shot run times few lengths more than once)."""
        return {n: self._rel[n] for n in sorted(self._ratios) if self._ratios[n]}

    def start_from(self, prior: dict[int, float]) -> None:
        """Guess the lengths of ``prior`` (``learned()`` of an earlier run of this model on this
        machine and threads) at what it says, until they are timed here: each length's first try
        at an optimistic guess is a loss where batches are dear (a one-shot run has few decodes to
        win it back); the first decode of a length here replaces its guess, as before (and a
        pause forgets them: ``forget``)."""
        self._prior = {n: float(r) for n, r in prior.items() if 1 < n < len(self._rel) and r > 0}
        for n, r in self._prior.items():
            if n not in self._ratios:
                self._rel[n] = r

    def retime(self, proposed: bool, chosen: int) -> bool:
        """Whether to decode one draft although none was ``chosen`` from what was ``proposed``:
        after ``RETIME`` decodes in a row that declined drafts as too dear (a decode with
        nothing proposed neither declines nor takes any), so that dear lengths are timed again;
        twice as many after each such decode, up to ``MAX_RETIME``, until a length is timed at
        under ``CHANGED`` of its estimate or the times are forgotten."""
        if not proposed:
            return False
        self._declined = self._declined + 1 if chosen == 0 else 0
        if self._declined >= self._retime_after:
            self._declined = 0
            self._retime_after = min(2 * self._retime_after, MAX_RETIME)
            return True
        return False

    def stale(self) -> bool:
        """Whether the next decode should be one token, timed: no one-token decode was timed
        yet, or ``REFRESH_ONE`` decodes of several tokens came since the last."""
        return not self._ones or self._since_one >= REFRESH_ONE

    def in_ones(self, seconds: float) -> float | None:
        """``seconds`` in one-token decodes (the median of the last few), or None before the first."""
        return seconds / self._one() if self._ones else None

    def _one(self) -> float:
        return sorted(self._ones)[len(self._ones) // 2]

    def _add(self, n: int, ratio: float) -> None:
        ratios = self._ratios.get(n)
        if ratios is None:
            ratios = self._ratios[n] = deque(maxlen=self._window)
        elif ratio < CHANGED * self._rel[n]:
            ratios.clear()  # far cheaper than it was: the machine changed, its old times no longer hold
            self._retime_after = RETIME
        ratios.append(ratio)
        mid = sorted(ratios)[len(ratios) // 2]
        self._rel[n] = mid if len(ratios) >= TRUSTED_TIMES else min(mid, 1.0 + self.cap * (n - 1))
        self._floor = FLOOR * min(sorted(r)[len(r) // 2] for r in self._ratios.values())

    def known(self, n: int) -> bool:
        """Whether T(n) is timed enough to be taken as it is (padding goes to such lengths only:
        every length looks cheap before it is timed)."""
        ratios = self._ratios.get(n)
        return ratios is not None and len(ratios) >= TRUSTED_TIMES

    def relative(self, n: int) -> float:
        """T(n) / T(1)."""
        rel = self._rel
        if n < len(rel):
            if n > 1 and self._floor > rel[n] and not self.known(n):
                return self._floor
            return rel[max(n, 1)]
        return max(rel[-1] + self.slope * (n - len(rel) + 1), self._floor)


MIN_GAIN = 1.1  # how much faster than no drafts a plan with drafts must promise (``choose_length``)
ACCEPT_GUESS = 0.6  # the chance of each draft that a width is chosen for (the schemas' acceptance: 0.3-0.9)
MIN_WIDTH_GAIN = 1.2  # how much faster than one token per decode a width must promise


def choose_width(seconds: dict[int, float], accept: float = ACCEPT_GUESS) -> int:
    """The decode width, from steady timings (n -> seconds of one decode of n tokens, logits at
    each; n = 1 among them): the n that maximizes the tokens a decode gives, drafts taken at
    ``accept`` each, per second, if it promises ``MIN_WIDTH_GAIN`` times one token's rate; else 1
    (lengths chosen per decode, ``choose_length``)."""
    one = seconds[1]
    best, best_rate = 1, 1.0 / one
    for n, t in sorted(seconds.items()):
        rate = sum(accept ** i for i in range(n)) / t
        if n > 1 and rate > best_rate:
            best, best_rate = n, rate
    return best if best_rate >= MIN_WIDTH_GAIN / one else 1


def choose_length(probs: list[float], cost: DecodeCost, fixed: int = 0, longest: int = 0) -> tuple[int, int]:
    """(k, n): decode the first k drafts in a decode of n tokens, the n that maximizes the expected
    tokens per unit of time, (1 + sum of the chance that the first i drafts are all accepted,
    i <= k) / T(n), with k = min(n - 1 - fixed, len(probs)). ``fixed`` tokens are decoded anyway
    (fast-forwarded text). Up to ``longest`` tokens (with at least one draft), n may pass the
    drafts: a decode padded to a length the machine computes faster, as timed (``DecodeCost.known``;
    an untimed length is tried by drafts alone, as they come). llama.cpp's CPU matrix
    kernels take the positions with logits four at a time: on one 2-core CPU, Gemma 3 decodes
    8 tokens with logits faster than 5, so 4 drafts go faster with 3 more positions behind them.
    A plan with drafts must promise ``MIN_GAIN`` times the rate of none: each drafted position is
    sampled after the decode, and the estimates err both ways (SmolLM2 on the reference kernels of
    a 2-core CPU: 4 tokens a decode at 80% acceptance ran 0.8x one-token decoding, its plans
    promising a few percent more)."""
    base = 1.0 / cost.relative(1 + fixed)
    best_k, best_n, best = 0, 1 + fixed, base * MIN_GAIN
    expected, alive = 1.0, 1.0
    for k, p in enumerate(probs, 1):
        alive *= p
        expected += alive
        rate = expected / cost.relative(1 + fixed + k)
        if rate > best:
            best_k, best_n, best = k, 1 + fixed + k, rate
    if probs:
        for n in range(2 + fixed + len(probs), longest + 1):
            rate = expected / cost.relative(n)
            if rate > best and cost.known(n):
                best_k, best_n, best = len(probs), n, rate
    return best_k, best_n
