"""DOMINO's count model (§3.6): which token the model took next in each constraint state.

Counts are keyed by a guide's ``state_key()`` (an automaton state for the Index guides;
a digest of the scanner states and the mask for a grammar guide) and learned while
generating. A ``CountModel`` belongs to one compiled constraint and one model; it is
saved in localguide's cache directory, so an app's drafts improve as it is used.

Bounded: at most ``max_states`` states and ``max_tokens`` tokens per state (the rarest
goes first). Safe to share between threads: updates hold a lock, reads see a dict.
"""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import numpy as np

from .. import cache

FORMAT = "1"
MAX_STATES = 1 << 14
MAX_TOKENS = 8
_SATURATE = 1 << 30  # counts are halved in their state before they would overflow int32
_warned: set[Path] = set()
JUDGED = 8  # decodes with drafts before drafting is first judged (``Calibration.settle``)
PROBE = 2  # decodes with drafts after a pause before it is judged again
MIN_PAUSE, MAX_PAUSE = 16, 512  # decodes without drafts, where drafting did not pay


class Calibration:
    """What generating taught about drafting for one constraint and model: how often forced
    text is accepted (the model may tokenize it otherwise), the counts' calibration (drafts
    accepted / their predicted probabilities, as running averages), and whether drafting pays
    here at all (``settle``); with the forced tokens found per state (a cache). Updated without
    a lock: a lost update between threads costs nothing."""

    __slots__ = ("forced_rate", "hits", "predicted", "forced", "gain", "judged", "paused", "pause")

    def __init__(self, forced_rate: float = 0.9, hits: float = 1.0, predicted: float = 1.0):
        self.forced_rate = forced_rate
        self.hits = hits
        self.predicted = predicted
        self.forced: dict[int, tuple[int, ...]] = {}
        self.gain = 0.0  # running average of what a decode with drafts gained, in one-token decodes
        self.judged = 0  # decodes with drafts averaged since the last pause
        self.paused = 0  # decodes left without drafts
        self.pause = MIN_PAUSE  # the next pause's length

    def drafting(self) -> bool:
        """Whether to draft for the next decode (False while a pause lasts; it counts down)."""
        if self.paused > 0:
            self.paused -= 1
            return False
        return True

    def settle(self, tokens: int, cost: float) -> None:
        """Learn from one decode with drafts: it gave ``tokens`` tokens for ``cost`` (its time,
        drafting's included, in one-token decodes; one token alone gains 0). Where such decodes
        lose on average after ``JUDGED`` of them (drafts the model keeps refusing, a decode
        dearer than its estimate), drafting pauses for a while; after it, ``PROBE`` decodes
        with drafts decide, the average so far halved: a loss pauses again, twice as long, a
        gain brings the pauses back to their shortest. The count model keeps learning meanwhile."""
        self.gain = 0.9 * self.gain + 0.1 * (tokens - cost)
        self.judged += 1
        if self.judged < JUDGED:
            return
        if self.gain < 0:
            self.paused, self.pause = self.pause, min(2 * self.pause, MAX_PAUSE)
            self.gain, self.judged = 0.5 * self.gain, JUDGED - PROBE
        else:
            self.pause = MIN_PAUSE


class CountModel:
    """Counts of (state key, next token), with the best guess per state, and the ``Calibration``
    of the drafts made from them."""

    def __init__(self, path: Path | None = None, max_states: int = MAX_STATES, max_tokens: int = MAX_TOKENS):
        self.path = path
        self.max_states = max_states
        self.max_tokens = max_tokens
        self._counts: dict[int, dict[int, int]] = {}
        self._best: dict[int, tuple[int, float]] = {}  # key -> (token, count / (total + 1))
        self._lock = threading.Lock()
        self._dirty = False
        self.calibration = Calibration()
        if path is not None:
            self._load(path)

    def __len__(self) -> int:
        return len(self._counts)

    def guess(self, key: int) -> tuple[int, float] | None:
        """(the token most often taken in state ``key``, its estimated probability), or None."""
        return self._best.get(key)

    def count(self, key: int, token: int) -> int:
        return self._counts.get(key, {}).get(token, 0)

    def add(self, key: int, token: int) -> None:
        """One more observation of ``token`` taken in state ``key``."""
        with self._lock:
            row = self._counts.get(key)
            if row is None:
                if len(self._counts) >= self.max_states:
                    return  # full: the states seen first keep their places
                row = self._counts[key] = {}
            c = row.get(token)
            if c is None:
                if len(row) >= self.max_tokens:
                    rare = min(row, key=row.__getitem__)
                    del row[rare]
                c = 0
            row[token] = c + 1
            if c + 1 >= _SATURATE:
                for t in row:
                    row[t] = max(1, row[t] // 2)
            self._update(key, row)
            self._dirty = True

    def _update(self, key: int, row: dict[int, int]) -> None:
        token = max(row, key=row.__getitem__)
        self._best[key] = (token, row[token] / (sum(row.values()) + 1))

    # -- persistence ----------------------------------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        with self._lock:
            rows = [(k, t, c) for k, row in self._counts.items() for t, c in row.items()]
        a = np.array(rows, np.int64).reshape(-1, 3)
        c = self.calibration
        return {"format": np.array([int(FORMAT)], np.int64), "keys": a[:, 0].copy(),
                "tokens": a[:, 1].astype(np.int32), "counts": a[:, 2].astype(np.int32),
                "calibration": np.array([c.forced_rate, c.hits, c.predicted], np.float64)}

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
        for k, t, c in zip(keys.tolist(), tokens.tolist(), counts.tolist()):
            row = self._counts.get(k)
            if row is None:
                if len(self._counts) >= self.max_states:
                    continue
                row = self._counts[k] = {}
            if len(row) < self.max_tokens:
                row[t] = c
        for k, row in self._counts.items():
            self._update(k, row)
        cal = arrays.get("calibration")  # (absent from files written before it was kept)
        if cal is not None and cal.shape == (3,) and np.isfinite(cal).all() and (cal > 0).all() and cal[0] <= 1:
            self.calibration = Calibration(*(float(x) for x in cal))

    @staticmethod
    def _damaged(path: Path, why: str) -> None:
        if path not in _warned:
            _warned.add(path)
            warnings.warn(f"localguide: ignoring the damaged draft counts file {path} ({why})",
                          RuntimeWarning, stacklevel=4)
