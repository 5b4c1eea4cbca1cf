"""Free text until a trigger, then the constraint (reasoning first: ``after="</think>"``).

``TriggerGuide`` lets the model write anything but a stop token until the trigger's bytes
have been written, then up to two whitespace-only tokens, then hands every token to the
constraint's guide, made then with the tokens left (budget-aware, as always). A token
that would carry text past the trigger's end is refused (the constraint starts exactly
after it), so the text splits at the trigger's first occurrence. Once ``force_after``
free tokens are spent, only tokens that continue the trigger's bytes are allowed, so the
trigger comes, and the constraint still completes within ``max_tokens``.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..errors import BudgetError, TokenNotAllowedError, as_token
from ..protocol import Mask, MaskKind

GAP_TOKENS = 2  # whitespace-only tokens allowed between the trigger and the constraint
_WS = frozenset(b" \t\r\n")
_BY_BYTES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _kmp(trigger: bytes) -> list[int]:
    fail = [0] * (len(trigger) + 1)
    k = 0
    for i in range(1, len(trigger)):
        while k and trigger[i] != trigger[k]:
            k = fail[k]
        if trigger[i] == trigger[k]:
            k += 1
        fail[i + 1] = k
    return fail


def _whitespace_ids(vocabulary) -> np.ndarray:
    """Sorted ids of the tokens made of whitespace only (made once per vocabulary)."""
    got = _WHITESPACE.get(vocabulary)
    if got is None:
        rows = vocabulary.token_rows
        cols = np.arange(rows.data.shape[1])
        blank = np.isin(rows.data, np.frombuffer(bytes(sorted(_WS)), np.uint8)) | (cols >= rows.lengths[:, None])
        got = _WHITESPACE[vocabulary] = np.sort(rows.order[blank.all(axis=1) & (rows.lengths > 0)]).astype(np.int32)
    return got


_WHITESPACE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Trigger:
    """The trigger's matcher and, per match state, the tokens refused or forced (built lazily)."""

    def __init__(self, vocabulary, trigger: bytes):
        if not trigger:
            raise ValueError("after= needs a non-empty trigger text")
        self.vocabulary, self.trigger, self.fail = vocabulary, trigger, _kmp(trigger)
        self.length = len(trigger)  # (the most tokens it takes)
        rows = vocabulary.token_rows
        holds_last = np.any(rows.data == trigger[-1], axis=1)
        self._candidates = np.sort(rows.order[holds_last]).tolist()  # tokens that can complete it
        self._refused: dict[int, np.ndarray] = {}
        self._forced: dict[int, np.ndarray] = {}
        self.stop = np.asarray(vocabulary.stop_ids, np.int32)
        self.whitespace = _whitespace_ids(vocabulary)

    def advance(self, q: int, token: int) -> tuple[int, bool]:
        """(the match state after ``token``, whether it completed the trigger)."""
        q, end = self.step(q, self.vocabulary[token])
        return q, end != -1

    def step(self, q: int, data: bytes) -> tuple[int, int]:
        """Run ``data`` from match state ``q``: (the new state, the index just past the byte that
        completed the trigger, or -1)."""
        t, fail = self.trigger, self.fail
        for i, b in enumerate(data):
            while q and b != t[q]:
                q = fail[q]
            if b == t[q]:
                q += 1
            if q == len(t):
                return q, i + 1
        return q, -1

    def refused(self, q: int, stop: bool = True) -> np.ndarray:
        """Sorted ids refused in state ``q``: tokens that go on past the trigger, and (``stop``)
        the stop tokens."""
        got = self._refused.get((q, stop))
        if got is None:
            over = []
            for tok in self._candidates:
                data = self.vocabulary[tok]
                end = self.step(q, data)[1]
                if end != -1 and end < len(data):
                    over.append(tok)
            parts = [self.stop, np.asarray(over, np.int32)] if stop else [np.asarray(over, np.int32)]
            got = self._refused[(q, stop)] = np.unique(np.concatenate(parts)).astype(np.int32)
        return got

    def forced(self, q: int) -> np.ndarray:
        """Sorted ids whose bytes are a prefix of the trigger's rest from state ``q``."""
        got = self._forced.get(q)
        if got is None:
            by = _BY_BYTES.get(self.vocabulary)
            if by is None:
                by = _BY_BYTES[self.vocabulary] = {self.vocabulary[t]: t for t in range(self.vocabulary.size)
                                                   if self.vocabulary[t]}
            rest = self.trigger[q:]
            got = self._forced[q] = np.array(sorted({by[rest[:n]] for n in range(1, len(rest) + 1)
                                                     if rest[:n] in by}), np.int32)
        return got


class _TokenTrigger:
    """A trigger that is one control token (``[TOOL_CALLS]`` in Mistral's vocabulary): it has no
    bytes, so it is matched by its id."""

    length = 1

    def __init__(self, vocabulary, token: int):
        self.vocabulary, self.token = vocabulary, int(token)
        self.stop = np.asarray(vocabulary.stop_ids, np.int32)
        self.whitespace = _whitespace_ids(vocabulary)
        self._forced = np.array([self.token], np.int32)

    def advance(self, q: int, token: int) -> tuple[int, bool]:
        return (1, True) if int(token) == self.token else (0, False)

    def refused(self, q: int, stop: bool = True) -> np.ndarray:
        return self.stop if stop else np.empty(0, np.int32)

    def forced(self, q: int) -> np.ndarray:
        return self._forced


_TRIGGERS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _trigger(vocabulary, trigger: bytes | int):
    """The matcher of ``trigger`` (bytes, or a control token's id) over ``vocabulary``, made once
    (its tables fill as they are asked)."""
    if not isinstance(trigger, (bytes, bytearray)):
        return _TokenTrigger(vocabulary, trigger)
    per = _TRIGGERS.get(vocabulary)
    if per is None:
        per = _TRIGGERS[vocabulary] = {}
    got = per.get(trigger)
    if got is None:
        got = per[trigger] = _Trigger(vocabulary, trigger)
    return got


class TriggerGuide:
    """The guide of ``after=``: free text, the trigger, then ``index``'s guide (see the module
    docstring). ``trigger``: bytes, or the id of a control token (which has no bytes);
    ``index``: anything whose ``guide(max_tokens=)`` makes a guide (raising ``BudgetError``
    where the budget is too small), a compiled constraint or another guide's maker.
    ``max_tokens`` bounds the whole text; ``force_after`` the free tokens; ``optional``: the
    text may end before the trigger."""

    cheap_masks = False

    def __init__(self, vocabulary, trigger: bytes | int, index, max_tokens: int, force_after: int | None = None,
                 optional: bool = False):
        self._t = _trigger(vocabulary, trigger)
        self.optional = optional  # the text may also end before the trigger (tool calls, "auto")
        self.index, self.max_tokens = index, max_tokens
        length = self._t.length
        need = min_tokens(index, max_tokens) + length + GAP_TOKENS if index is not None else length
        if need > max_tokens:
            raise BudgetError.needs("the trigger and the constraint after it", need, max_tokens)
        latest = max_tokens - need
        self.force_after = latest if force_after is None else min(force_after, latest)
        # state: (tokens so far, match state q, phase 0 free / 1 gap / 2 constraint, gap tokens, inner guide)
        self._s = (0, 0, 0, 0, None)
        self._history: list[tuple] = []

    # -- the protocol -------------------------------------------------------------------
    @property
    def inner(self):
        return self._s[4]

    @property
    def phase(self) -> str:
        return ("free", "gap", "constraint")[self._s[2]]

    def mask(self) -> Mask:
        n, q, phase, gap, inner = self._s
        if phase == 0:
            if n >= self.force_after:
                forced = self._t.forced(q)
                if self.optional:
                    forced = np.union1d(forced, self._t.stop).astype(np.int32)
                return Mask(MaskKind.ALLOWED, forced)
            return Mask(MaskKind.EXCLUDED, self._t.refused(q, stop=not self.optional))
        if phase == 1:
            allowed = self._inner_allowed(inner)
            if gap < GAP_TOKENS:
                allowed = np.union1d(allowed, self._t.whitespace).astype(np.int32)
            return Mask(MaskKind.ALLOWED, allowed)
        return inner.mask() if inner is not None else Mask(MaskKind.EXCLUDED, np.empty(0, np.int32))

    def allowed_token_ids(self) -> np.ndarray:
        return self.mask().allowed(self._t.vocabulary.size)

    def _inner_allowed(self, inner) -> np.ndarray:
        if inner is None:
            return np.arange(self._t.vocabulary.size, dtype=np.int32)
        return np.asarray(inner.allowed_token_ids(), np.int32)

    def accepts(self, token_id: int) -> bool:
        n, q, phase, gap, inner = self._s
        t = as_token(token_id, self._t.vocabulary.size)
        if phase == 2:
            return inner is None or inner.accepts(t)
        if phase == 1:
            if gap < GAP_TOKENS and self._is_ws(t):
                return True
            return inner is None or inner.accepts(t)
        kind, data = self.mask()
        i = np.searchsorted(data, t)
        hit = bool(i < len(data) and data[i] == t)
        return hit if kind == MaskKind.ALLOWED else not hit

    def _is_ws(self, t: int) -> bool:
        ws = self._t.whitespace
        i = np.searchsorted(ws, t)
        return bool(i < len(ws) and ws[i] == t)

    def advance(self, token_id: int) -> None:
        t = as_token(token_id, self._t.vocabulary.size)
        if not self.accepts(t):
            raise TokenNotAllowedError(f"token {t} is not allowed here ({self.phase})")
        n, q, phase, gap, inner = self._s
        ck = inner.checkpoint() if inner is not None else 0
        self._history.append((self._s, ck))
        if phase == 0:
            q, done = self._t.advance(q, t)
            if done:
                phase, inner = 1, self._inner_guide(n + 1)
        elif phase == 1 and gap < GAP_TOKENS and self._is_ws(t):
            gap += 1
        else:
            phase = 2
            if inner is not None:
                inner.advance(t)
        self._s = (n + 1, q, phase, gap, inner)

    def _inner_guide(self, used: int):
        if self.index is None:
            return None
        return self.index.guide(max_tokens=self.max_tokens - used - GAP_TOKENS)

    def is_accepting(self) -> bool:
        phase, inner = self._s[2], self._s[4]
        return phase >= 1 and (inner is None or inner.is_accepting())

    def is_finished(self) -> bool:
        phase, inner = self._s[2], self._s[4]
        return phase >= 1 and inner is not None and inner.is_finished()

    def copy(self) -> "TriggerGuide":
        c = object.__new__(TriggerGuide)
        c.__dict__.update(self.__dict__)
        inner = self._s[4]
        mine = inner.copy() if inner is not None else None
        c._s = self._s[:4] + (mine,)
        # (the copy's history refers to its own inner cursor, which shares the original's history)
        c._history = [((st[:4] + (mine,)) if inner is not None and st[4] is inner else st, ck)
                      for st, ck in self._history]
        return c

    def checkpoint(self) -> int:
        return len(self._history)

    def rollback(self, n: int) -> None:
        for _ in range(n):
            state, ck = self._history.pop()
            inner = state[4]
            if inner is not None and inner is self._s[4]:
                inner.rollback(inner.checkpoint() - ck)
            self._s = state

    def state_key(self) -> int:
        phase, inner = self._s[2], self._s[4]
        return inner.state_key() if phase == 2 and inner is not None else -1

    def native_block(self) -> None:
        return None


class Triggered:
    """A maker of ``TriggerGuide``s of one trigger and constraint (``guide(max_tokens=)``), so that
    a trigger can itself come after another (reasoning, then tool calls)."""

    def __init__(self, vocabulary, trigger: bytes | int, index, **options):
        self.vocabulary, self.trigger, self.index, self.options = vocabulary, trigger, index, options

    def guide(self, max_tokens: int | None = None) -> TriggerGuide:
        if max_tokens is None:
            raise BudgetError("a trigger's guide needs max_tokens")
        return TriggerGuide(self.vocabulary, self.trigger, self.index, max_tokens, **self.options)


def min_tokens(index, max_tokens: int) -> int:
    """The fewest tokens a text of ``index`` takes (at most ``max_tokens``; BudgetError beyond)."""
    lo, hi = 1, max_tokens
    try:
        index.guide(max_tokens=hi)
    except BudgetError:
        raise BudgetError(f"the constraint after the trigger needs more than {max_tokens} tokens") from None
    while lo < hi:  # (a guide is a cheap cursor: its budget check is a lookup)
        mid = (lo + hi) // 2
        try:
            index.guide(max_tokens=mid)
            hi = mid
        except BudgetError:
            lo = mid + 1
    return lo
