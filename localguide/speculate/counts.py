"""DOMINO's count model (§3.6): which token the model took next in each constraint state.

Counts are keyed by a guide's ``state_key()`` (an automaton state for the Index guides;
a digest of the scanner states and the mask for a grammar guide) and learned while
generating. A ``CountModel`` belongs to one compiled constraint and one model; it is
saved in localguide's cache directory, so an app's drafts improve as it is used.

Beside the state alone, counts are kept per state and the 1 to ``ORDER`` tokens taken just
before it: inside a string or a number the state says little (every letter of a name leaves
the automaton where it was), the tokens before it say which name it is. A guess comes from the
longest such context seen, else from the state alone; each length keeps its own calibration.
A context is counted once per generation (``localguide.engines.llamacpp.loop``), so that a text going
round in circles does not make it look certain to the next generation.

Bounded: at most ``max_states`` states and ``max_tokens`` tokens per state (the rarest
goes first), ``max_contexts`` contexts of ``MAX_CONTEXT_TOKENS`` tokens each (when full, the
half seen least often goes). Safe to share between threads: updates hold a lock, reads see a
dict.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..runtime import cache
from .lookup import MAX_MATCH, MIN_MATCH

FORMAT = "1"
MAX_STATES = 1 << 14
MAX_TOKENS = 8
ORDER = 3  # tokens of context the counts are also kept by
RECENT = ORDER + 1  # the calibration's place for guesses from the generation's own counts
LOOKUP = RECENT + 1  # LOOKUP + i: guesses from a match of MIN_MATCH + i tokens earlier in the text
LOOKUPS = MAX_MATCH - MIN_MATCH + 1
MAX_CONTEXTS = 1 << 14  # (about 8 MB when full)
MAX_CONTEXT_TOKENS = 4
_SATURATE = 1 << 30  # counts are halved in their state before they would overflow int32
_warned: set[Path] = set()
JUDGED = 8  # decodes with drafts before drafting is first judged (``Calibration.settle``)
EARLY = 3  # decodes with drafts before drafting that loses a decode on average is judged
PROBE = 2  # decodes with drafts after a pause before it is judged again
# The drafts of one probing decode at most: a probe asks whether drafts pay again where they had
# stopped paying; a long one that the model refuses at its first token costs 1.5-3 tokens' decode
# (SmolLM2's digits of a float on a 2-core CPU), and one short one accepted answers as well.
PROBE_DRAFTS = 2
MIN_PAUSE, MAX_PAUSE = 16, 512  # decodes without drafts, where drafting did not pay
# Proposals in a row that came to nothing (none proposed, or none worth a decode's cost) before
# drafts are proposed on every IDLE_EVERY-th decode only (and where the state's forced text is
# known), until one is decoded again: where drafting does not pay (SmolLM2's grammars on a 2-core
# CPU), proposing alone cost 0.2 ms of a 14 ms token.
IDLE, IDLE_EVERY = 16, 4


class Calibration:
    """What generating taught about drafting for one constraint and model: how often forced
    text is accepted (the model may tokenize it otherwise), the counts' calibration (drafts
    accepted / their predicted probabilities, as running averages, one of each per length of
    context the guesses came from, ``hits[order]`` and ``predicted[order]``, and one for the
    guesses from the generation's own counts, ``[RECENT]``), how often a guess from a match of
    ``MIN_MATCH + i`` tokens earlier in the text was right (``lookup[i]``, ``localguide.speculate.lookup``),
    and whether drafting pays here at all (``settle``); with the forced tokens found per state
    (a cache). Updated without a lock: a lost update between threads costs nothing."""

    __slots__ = ("forced_rate", "hits", "predicted", "lookup", "forced", "gain", "judged", "paused", "pause",
                 "probing", "width_gain", "length", "idle")

    def __init__(self, forced_rate: float = 0.9, hits=None, predicted=None, lookup=None):
        self.forced_rate = forced_rate
        self.hits = list(hits) if hits is not None else [1.0] * (RECENT + 1)
        self.predicted = list(predicted) if predicted is not None else [1.0] * (RECENT + 1)
        # (about what SmolLM2 and Gemma 3 showed on the benchmark's schemas: 0.65 to 0.9, the
        # longer matches the surer)
        self.lookup = list(lookup) if lookup is not None else [0.65 + 0.2 * i / max(1, LOOKUPS - 1) for i in range(LOOKUPS)]
        self.forced: dict[int, tuple[int, ...]] = {}
        self.gain = 0.0  # running average of what a decode with drafts gained, in one-token decodes
        self.judged = 0  # decodes with drafts averaged since the last pause
        self.paused = 0  # decodes left without drafts
        self.pause = MIN_PAUSE  # the next pause's length
        self.probing = False  # after a pause, until judged again: drafts at most PROBE_DRAFTS a decode
        # Where every decode with drafts has one width (``DecodeCost.width``): what a decode of
        # that width gives against one token, drafted or (not drafting) simulated, as a running
        # average; each generation drafts where it is 1 or more. (Optimistic at first: tried.)
        self.width_gain = 1.5
        self.length = 0.0  # tokens per generation, a running average (0: none ended yet)
        self.idle = 0  # proposals in a row that came to nothing (``chose``)

    def ended(self, tokens: int, cut: bool = False) -> None:
        """A generation ended after ``tokens`` tokens (``length``: how long the next one likely is);
        ``cut`` by its budget, it was at least that long: it only raises a length known already."""
        if cut and (self.length == 0.0 or tokens <= self.length):
            return
        self.length = float(tokens) if self.length == 0.0 else 0.8 * self.length + 0.2 * tokens

    def scale(self, order: int) -> float:
        """What to multiply the counts' estimate by, for a guess from ``order`` tokens of context
        (a lookup's guess comes with its rate: 1)."""
        return self.hits[order] / self.predicted[order] if order < LOOKUP else 1.0

    def drafting(self) -> bool:
        """Whether to draft for the next decode (False while a pause lasts; it counts down)."""
        if self.paused > 0:
            self.paused -= 1
            return False
        return True

    def proposing(self, forced: bool, decode: int) -> bool:
        """Whether to propose drafts for a generation's ``decode``-th decode: always, but after
        ``IDLE`` proposals in a row that came to nothing, on every ``IDLE_EVERY``-th decode of
        each generation only (counted per generation: lanes that share a calibration step in
        turn), or where the state's forced text is known (``forced``: forced text, a JSON key
        after a value, pays where little else does)."""
        return self.idle < IDLE or forced or decode % IDLE_EVERY == 0

    def chose(self, drafts: int) -> None:
        """A proposal's outcome: ``drafts`` of it worth their decode (0: it came to nothing)."""
        self.idle = 0 if drafts else self.idle + 1

    def settle(self, tokens: int, cost: float) -> None:
        """Learn from one decode with drafts: it gave ``tokens`` tokens for ``cost`` (its time,
        drafting's included, in one-token decodes; one token alone gains 0). Where such decodes
        lose on average after ``JUDGED`` of them (drafts the model keeps refusing, a decode
        dearer than its estimate), drafting pauses for a while; after it, ``PROBE`` decodes
        with drafts decide (``PROBE_DRAFTS`` drafts each at most), alone: a loss pauses again,
        twice as long, a gain brings the pauses back to their shortest. The count model keeps
        learning meanwhile."""
        self.gain = 0.9 * self.gain + 0.1 * (tokens - cost)
        self.judged += 1
        # (a loss of a whole decode on average is judged at once: a busy machine, not bad luck)
        if self.judged < JUDGED and not (self.judged >= EARLY and self.gain < -1.0):
            return
        if self.gain < 0:
            self.paused, self.pause = self.pause, min(2 * self.pause, MAX_PAUSE)
            self.gain, self.judged = 0.0, JUDGED - PROBE  # (the probes alone decide: the machine may have changed)
            self.probing = True
        else:
            self.pause, self.probing = MIN_PAUSE, False


class Guess(NamedTuple):
    """The counts' guess: the token, its estimated probability (``estimate``),
    and how many tokens of context it came from (0: the state alone)."""

    token: int
    p: float
    order: int


class CountModel:
    """Counts of (state key, next token), and of (state key, the tokens before, next token),
    with the best guess per row, and the ``Calibration`` of the drafts made from them."""

    def __init__(self, path: Path | None = None, max_states: int = MAX_STATES, max_tokens: int = MAX_TOKENS,
                 max_contexts: int = MAX_CONTEXTS):
        self.path = path
        self.max_states = max_states
        self.max_tokens = max_tokens
        self.max_contexts = max_contexts
        self._counts: dict[int, dict[int, int]] = {}
        self._best: dict[int, tuple[int, float]] = {}  # key -> (token, estimate(count, total))
        # (key, the 1 to ORDER tokens before, oldest first) -> counts, and the best of each
        self._contexts: dict[tuple, dict[int, int]] = {}
        self._best_in: dict[tuple, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._dirty = False
        self.calibration = Calibration()
        if path is not None:
            self._load(path)

    def __len__(self) -> int:
        return len(self._counts)

    @property
    def contexts(self) -> int:
        """How many (state, tokens before) rows are kept."""
        return len(self._contexts)

    def guess(self, key: int, context: tuple[int, ...] = ()) -> Guess | None:
        """The token most often taken in state ``key`` after the last tokens of ``context`` (the
        tokens taken before, oldest first), from the longest context seen; None if the state
        was never seen."""
        best_in = self._best_in
        for order in range(min(len(context), ORDER), 0, -1):
            got = best_in.get((key, *context[len(context) - order:]))
            if got is not None:
                return Guess(got[0], got[1], order)
        got = self._best.get(key)
        return Guess(got[0], got[1], 0) if got is not None else None

    def count(self, key: int, token: int, context: tuple[int, ...] = ()) -> int:
        if context:
            return self._contexts.get((key, *context), {}).get(token, 0)
        return self._counts.get(key, {}).get(token, 0)

    def add(self, key: int, token: int, context: tuple[int, ...] = ()) -> None:
        """One more observation of ``token`` taken in state ``key`` after ``context`` (the tokens
        taken before, oldest first; its last ``ORDER`` count)."""
        with self._lock:
            row = self._counts.get(key)
            if row is None:
                if len(self._counts) >= self.max_states:
                    return  # full: the states seen first keep their places
                row = self._counts[key] = {}
            _bump(row, token, self.max_tokens)
            self._best[key] = best(row)
            longest = min(len(context), ORDER) if self.max_contexts > 0 else 0
            for order in range(1, longest + 1):
                ctx = (key, *context[len(context) - order:])
                row = self._contexts.get(ctx)
                if row is None:
                    if len(self._contexts) >= self.max_contexts:
                        self._compact()
                    row = self._contexts[ctx] = {}
                _bump(row, token, MAX_CONTEXT_TOKENS)
                self._best_in[ctx] = best(row)
            self._dirty = True

    def _compact(self) -> None:
        """Make room for new contexts (the counts keep learning as an app's texts change): keep
        the half seen most often, the later seen first among equals."""
        rows = list(self._contexts.items())
        order = sorted(range(len(rows)), key=lambda i: (sum(rows[i][1].values()), i), reverse=True)
        keep = sorted(order[:self.max_contexts // 2])
        self._contexts = {rows[i][0]: rows[i][1] for i in keep}
        self._best_in = {ctx: self._best_in[ctx] for ctx in self._contexts}

    # -- persistence ----------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        with self._lock:
            rows = [(k, t, c) for k, row in self._counts.items() for t, c in row.items()]
            crows = [((-1,) * (ORDER + 1 - len(ctx)) + ctx, t, c)
                     for ctx, row in self._contexts.items() for t, c in row.items()]
        a = np.array(rows, np.int64).reshape(-1, 3)
        c = self.calibration
        return {"format": np.array([int(FORMAT)], np.int64), "keys": a[:, 0].copy(),
                "tokens": a[:, 1].astype(np.int32), "counts": a[:, 2].astype(np.int32),
                # (left-padded with -1: the state key, then the tokens before, oldest first)
                "context_keys": np.array([r[0] for r in crows], np.int64).reshape(-1, ORDER + 1),
                "context_tokens": np.array([r[1] for r in crows], np.int32),
                "context_counts": np.array([r[2] for r in crows], np.int32),
                "calibration": np.array([c.forced_rate, *c.hits, *c.predicted, *c.lookup], np.float64)}

    def save(self) -> None:
        """Write the counts to ``path`` (atomically) if they changed since the last save."""
        if self.path is None or not self._dirty:
            return
        self._dirty = False
        cache.save(self.path, self.to_arrays())

    def _load(self, path: Path) -> None:
        try:
            arrays = cache.read(path)
        except FileNotFoundError:
            return
        except (OSError, ValueError, EOFError, KeyError, TypeError) as e:
            self._damaged(path, f"{type(e).__name__}: {e}")
            return
        try:
            keys, tokens, counts = arrays["keys"], arrays["tokens"], arrays["counts"]
            ok = (int(arrays["format"][0]) == int(FORMAT) and keys.ndim == tokens.ndim == counts.ndim == 1
                  and len(keys) == len(tokens) == len(counts) and (counts > 0).all() and (tokens >= 0).all())
        except (KeyError, IndexError, ValueError, TypeError):
            ok = False
        if not ok:
            self._damaged(path, "unexpected content")
            return
        _fill(self._counts, self._best, keys.tolist(), tokens, counts, self.max_states, self.max_tokens)
        self._load_contexts(arrays)
        cal = arrays.get("calibration")  # (absent from files written before it was kept)
        if cal is not None and np.isfinite(cal).all() and (cal > 0).all() and cal.ndim == 1 and cal[0] <= 1:
            n = RECENT + 1
            if cal.shape == (3,):  # (written before each context length had its own)
                self.calibration = Calibration(float(cal[0]), [float(cal[1])] + [1.0] * (n - 1),
                                               [float(cal[2])] + [1.0] * (n - 1))
            elif cal.shape in ((1 + 2 * n,), (1 + 2 * n + LOOKUPS,)) and (cal[1 + 2 * n:] <= 1).all():
                self.calibration = Calibration(float(cal[0]), cal[1:1 + n].tolist(), cal[1 + n:1 + 2 * n].tolist(),
                                               cal[1 + 2 * n:].tolist() or None)

    def _load_contexts(self, arrays) -> None:
        """The context rows, where the file has sound ones (files written before they were
        kept have none; the state counts are of use without them)."""
        try:
            keys, tokens, counts = arrays["context_keys"], arrays["context_tokens"], arrays["context_counts"]
        except KeyError:
            return
        if not (keys.ndim == 2 and keys.shape[1] == ORDER + 1 and tokens.ndim == counts.ndim == 1
                and len(keys) == len(tokens) == len(counts) and (counts > 0).all() and (tokens >= 0).all()
                # a state key and at least one token, after the padding only
                and (keys[:, -2:] >= 0).all() and (np.diff((keys >= 0).astype(np.int8), axis=1) >= 0).all()):
            self._damaged(self.path, "unexpected context rows")
            return
        _fill(self._contexts, self._best_in, [tuple(x for x in k if x >= 0) for k in keys.tolist()], tokens,
              counts, self.max_contexts, MAX_CONTEXT_TOKENS)

    @staticmethod
    def _damaged(path: Path, why: str) -> None:
        if path not in _warned:
            _warned.add(path)
            warnings.warn(f"localguide: ignoring the damaged draft counts file {path} ({why})",
                          RuntimeWarning, stacklevel=4)


def _bump(row: dict[int, int], token: int, max_tokens: int) -> None:
    """One more of ``token`` in ``row`` (the rarest goes where the row is full)."""
    c = row.get(token)
    if c is None:
        if len(row) >= max_tokens:
            del row[min(row, key=row.__getitem__)]
        c = 0
    row[token] = c + 1
    if c + 1 >= _SATURATE:
        for t in row:
            row[t] = max(1, row[t] // 2)


def best(row: dict[int, int]) -> tuple[int, float]:
    """(the token counted most often in ``row``, the estimated chance that it comes next)."""
    token = max(row, key=row.__getitem__)
    return token, estimate(row[token], sum(row.values()))


def estimate(count: int, total: int) -> float:
    """The chance that the token seen ``count`` times of ``total`` in a row comes next. Where it is
    the only one seen, 1 - 1/(2 count^2); else (count / total)^2. Both follow recorded generations
    better than ``count / (total + 1)``: a row's only token comes out again more often once seen
    twice, and a token with under half of its row far less often (BENCHMARKS.md)."""
    if count >= total:
        return 1.0 - 0.5 / (count * count)
    return (count / total) ** 2


def _fill(table: dict, bests: dict, keys: list, tokens: np.ndarray, counts: np.ndarray, max_rows: int,
          max_tokens: int) -> None:
    """Load rows of (key, token, count) into ``table`` within its bounds, and their best guesses."""
    for k, t, c in zip(keys, tokens.tolist(), counts.tolist()):
        row = table.get(k)
        if row is None:
            if len(table) >= max_rows:
                continue
            row = table[k] = {}
        if len(row) < max_tokens:
            row[t] = c
    for k, row in table.items():
        bests[k] = best(row)
