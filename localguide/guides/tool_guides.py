"""Guides around a compiled call constraint: several calls in a row, and a call or free text.

``Calls`` makes ``SeqGuide``s: one text of the call constraint, then, while the budget
still fits another whole call, the separator's exact bytes (``</tool_call>\\n<tool_call>``)
and another call: parallel tool calls in the Hermes syntax. ``Lead`` makes ``LeadGuide``s:
the answer is either a call (its first token is one the call constraint allows) or free
text whose first byte is not ``{`` nor whitespace, so a call is never written unconstrained
(Llama 3.1's calls are a bare JSON object). Both follow the guide protocol, with an O(1)
``copy`` and ``rollback`` across their phases.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..errors import BudgetError, TokenNotAllowedError, as_token
from ..protocol import Mask, MaskKind
from .trigger import _trigger, min_tokens


def _has(ids: np.ndarray, t: int) -> bool:
    i = np.searchsorted(ids, t)
    return bool(i < len(ids) and ids[i] == t)


class _Cursor:
    """History and copy shared by the guides here: a state tuple whose last field is the inner
    guide (or None), and a stack of (state before a step, the inner guide's checkpoint then)."""

    cheap_masks = False

    def _push(self, state: tuple) -> None:
        inner = self._s[-1]
        self._history.append((self._s, inner.checkpoint() if inner is not None else 0))
        self._s = state

    def checkpoint(self) -> int:
        return len(self._history)

    def rollback(self, n: int) -> None:
        if not isinstance(n, int) or n < 0 or n > len(self._history):
            raise ValueError(f"cannot roll back {n!r} tokens: the guide has advanced {len(self._history)}")
        for _ in range(n):
            state, ck = self._history.pop()
            inner = state[-1]
            if inner is not None:
                inner.rollback(inner.checkpoint() - ck)
            self._s = state

    def copy(self):
        c = object.__new__(type(self))
        c.__dict__.update(self.__dict__)
        memo: dict[int, object] = {}

        def mine(g):  # (every inner guide the history names, copied once: the copy may roll back into it)
            if g is None:
                return None
            if id(g) not in memo:
                memo[id(g)] = g.copy()
            return memo[id(g)]

        c._s = self._s[:-1] + (mine(self._s[-1]),)
        c._history = [(st[:-1] + (mine(st[-1]),), ck) for st, ck in self._history]
        return c

    def allowed_token_ids(self) -> np.ndarray:
        return self.mask().allowed(self.vocabulary.size)

    def native_block(self) -> None:
        return None


class Calls:
    """Calls of ``index`` one after another, ``sep`` (bytes) between two, at most ``max_calls``
    (None: as many as the budget fits). ``guide(max_tokens)`` makes a ``SeqGuide``."""

    def __init__(self, vocabulary, index, sep: bytes, max_calls: int | None = None):
        if not sep:
            raise ValueError("calls in a row need a separator")
        self.vocabulary, self.index, self.sep, self.max_calls = vocabulary, index, sep, max_calls
        self.sep_trigger = _trigger(vocabulary, sep)
        self._min_call: int | None = None

    def min_call(self, max_tokens: int) -> int:
        """The fewest tokens one call takes (BudgetError past ``max_tokens``)."""
        if self._min_call is None:
            self._min_call = min_tokens(self.index, max_tokens)
        return self._min_call

    def guide(self, max_tokens: int | None = None) -> "SeqGuide":
        return SeqGuide(self, max_tokens)


class SeqGuide(_Cursor):
    """A call, then perhaps the separator and another call (see ``Calls``)."""

    def __init__(self, spec: Calls, max_tokens: int | None):
        self.spec, self.vocabulary, self.max_tokens = spec, spec.vocabulary, max_tokens
        first = spec.index.guide(max_tokens=max_tokens)  # (BudgetError where no call fits)
        if max_tokens is not None:
            spec.min_call(max_tokens)
        # state: (tokens so far, calls begun, position in the separator or -1 inside a call, inner guide)
        self._s = (0, 1, -1, first)
        self._history: list[tuple] = []

    def _may_part(self) -> bool:
        """Whether the separator may start now: the call is complete and another fits."""
        n, calls, pos, inner = self._s
        if pos >= 0 or not inner.is_accepting():
            return False
        if self.spec.max_calls is not None and calls >= self.spec.max_calls:
            return False
        if self.max_tokens is None:
            return True
        return self.max_tokens - n >= self.spec.sep_trigger.length + self.spec.min_call(self.max_tokens)

    def mask(self) -> Mask:
        n, calls, pos, inner = self._s
        if pos >= 0:
            return Mask(MaskKind.ALLOWED, self.spec.sep_trigger.forced(pos))
        if not self._may_part():
            return inner.mask()
        return Mask(MaskKind.ALLOWED, np.union1d(inner.allowed_token_ids(),
                                                 self.spec.sep_trigger.forced(0)).astype(np.int32))

    def accepts(self, token_id: int) -> bool:
        n, calls, pos, inner = self._s
        t = as_token(token_id, self.vocabulary.size)
        if pos >= 0:
            return _has(self.spec.sep_trigger.forced(pos), t)
        return inner.accepts(t) or (self._may_part() and _has(self.spec.sep_trigger.forced(0), t))

    def advance(self, token_id: int) -> None:
        t = as_token(token_id, self.vocabulary.size)
        n, calls, pos, inner = self._s
        if pos < 0 and inner.accepts(t):  # (a token both could take continues the call)
            self._push((n + 1, calls, -1, inner))
            inner.advance(t)
            return
        if not self.accepts(t):
            raise TokenNotAllowedError(f"token {t} is not allowed here ({'separator' if pos >= 0 else 'call'})")
        pos = max(pos, 0) + len(self.vocabulary[t])
        if pos < len(self.spec.sep):
            self._push((n + 1, calls, pos, inner))
            return
        left = None if self.max_tokens is None else self.max_tokens - n - 1
        self._push((n + 1, calls + 1, -1, self.spec.index.guide(max_tokens=left)))

    def is_accepting(self) -> bool:
        return self._s[2] < 0 and self._s[3].is_accepting()

    def is_finished(self) -> bool:
        return self._s[2] < 0 and self._s[3].is_finished() and not self._may_part()

    def state_key(self) -> int:
        return self._s[3].state_key() if self._s[2] < 0 else -1


_FREE_FIRST: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _free_first(vocabulary) -> np.ndarray:
    """Sorted ids that may open free text beside a JSON call: a first byte other than ``{`` and
    whitespace, and the stop tokens (an empty answer)."""
    got = _FREE_FIRST.get(vocabulary)
    if got is None:
        rows = vocabulary.token_rows
        first = rows.data[:, 0]
        ok = (rows.lengths > 0) & ~np.isin(first, np.frombuffer(b"{ \t\r\n", np.uint8))
        got = np.union1d(rows.order[ok], vocabulary.stop_ids).astype(np.int32)
        _FREE_FIRST[vocabulary] = got
    return got


class Lead:
    """A call of ``calls`` (anything with ``guide(max_tokens=)``) or free text, decided by the
    first token. ``guide(max_tokens)`` makes a ``LeadGuide``."""

    def __init__(self, vocabulary, calls):
        self.vocabulary, self.calls = vocabulary, calls

    def guide(self, max_tokens: int | None = None) -> "LeadGuide":
        return LeadGuide(self, max_tokens)


class LeadGuide(_Cursor):
    """Free text or a call (see ``Lead``); ``is_call`` once the first token has said."""

    def __init__(self, spec: Lead, max_tokens: int | None):
        self.spec, self.vocabulary = spec, spec.vocabulary
        try:
            call = spec.calls.guide(max_tokens=max_tokens)
        except BudgetError:
            call = None  # (too few tokens for a call: free text only)
        # state: (branch 0 undecided / 1 free text / 2 call, the call's guide)
        self._s = (0, call)
        self._history: list[tuple] = []

    @property
    def is_call(self) -> bool:
        return self._s[0] == 2

    def mask(self) -> Mask:
        branch, call = self._s
        if branch == 1:
            return Mask(MaskKind.EXCLUDED, np.empty(0, np.int32))
        if branch == 2:
            return call.mask()
        free = _free_first(self.vocabulary)
        if call is None:
            return Mask(MaskKind.ALLOWED, free)
        return Mask(MaskKind.ALLOWED, np.union1d(call.allowed_token_ids(), free).astype(np.int32))

    def accepts(self, token_id: int) -> bool:
        branch, call = self._s
        t = as_token(token_id, self.vocabulary.size)
        if branch == 1:
            return True
        if branch == 2:
            return call.accepts(t)
        return (call is not None and call.accepts(t)) or _has(_free_first(self.vocabulary), t)

    def advance(self, token_id: int) -> None:
        t = as_token(token_id, self.vocabulary.size)
        branch, call = self._s
        if not self.accepts(t):
            raise TokenNotAllowedError(f"token {t} is not allowed here")
        if branch == 0:
            branch = 2 if call is not None and call.accepts(t) else 1
        self._push((branch, call))
        if branch == 2:
            call.advance(t)

    def is_accepting(self) -> bool:
        branch, call = self._s
        return branch == 1 or (branch == 2 and call.is_accepting())

    def is_finished(self) -> bool:
        return self._s[0] == 2 and self._s[1].is_finished()

    def state_key(self) -> int:
        return self._s[1].state_key() if self._s[0] == 2 else -1
