"""A Guide: a cheap cursor over an Index (advance, allowed tokens, accepting, copy)."""

from __future__ import annotations

import numpy as np

from . import kernels
from .errors import BudgetError, TokenNotAllowedError


class Guide:
    """Where generation stands in a compiled constraint.

    ``allowed_token_ids()`` is the set of tokens that keep the text completable
    (within the remaining budget, when one was given), stop tokens included exactly
    when the text so far is complete. After a stop token the guide is finished.
    """

    __slots__ = ("index", "state", "remaining", "finished", "_buffer")

    def __init__(self, index, max_tokens: int | None = None, *, _state: int = 0):
        self.index = index
        self.state = _state
        self.finished = False
        self.remaining = max_tokens
        self._buffer = None
        if max_tokens is not None:
            if max_tokens < 0:
                raise ValueError("max_tokens must be >= 0")
            need = int(index.distance[_state])
            if need > max_tokens:
                raise BudgetError(
                    f"{index.description or 'the constraint'} needs at least {need} tokens, "
                    f"but max_tokens is {max_tokens}"
                )

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted int32 ids of the tokens allowed now (a read-only view or a fresh array)."""
        if self.finished:
            return np.zeros(0, np.int32)
        index = self.index
        s = self.state
        m = index.state_mask[s]
        tokens = index.mask_tokens[index.mask_offsets[m]:index.mask_offsets[m + 1]]
        r = self.remaining
        if r is None or index.max_next_distance[s] <= r - 1:
            return tokens
        if self._buffer is None or len(self._buffer) < len(tokens):
            self._buffer = np.empty(max(len(tokens), 16), np.int32)
        nexts = index.next_states[index.next_offsets[s]:index.next_offsets[s + 1]]
        k = kernels.within_budget(tokens, nexts, index.distance, r - 1, self._buffer)
        return self._buffer[:k].copy()

    def advance(self, token_id: int) -> None:
        """Move past ``token_id``; raise ``TokenNotAllowedError`` if it is not allowed here."""
        token_id = int(token_id)
        if self.finished:
            raise TokenNotAllowedError(f"token {token_id} after the end: the guide has already finished")
        index = self.index
        s = self.state
        m = index.state_mask[s]
        lo, hi = index.mask_offsets[m], index.mask_offsets[m + 1]
        pos = lo + int(np.searchsorted(index.mask_tokens[lo:hi], token_id))
        if pos >= hi or index.mask_tokens[pos] != token_id:
            raise TokenNotAllowedError(self._explain(token_id))
        nxt = int(index.next_states[index.next_offsets[s] + (pos - lo)])
        if nxt < 0:
            self.finished = True
            return
        r = self.remaining
        if r is not None:
            if index.distance[nxt] > r - 1:
                raise TokenNotAllowedError(
                    f"token {token_id} is allowed by the constraint but cannot finish within the "
                    f"remaining {r} token(s)"
                )
            self.remaining = r - 1
        self.state = nxt

    def is_accepting(self) -> bool:
        """True when the text so far is complete (a stop token may follow)."""
        return self.finished or bool(self.index.accepting[self.state])

    def is_finished(self) -> bool:
        """True after a stop token, or when nothing but stopping is possible."""
        if self.finished:
            return True
        allowed = self.allowed_token_ids()
        return len(allowed) == 0 or bool(np.all(np.isin(allowed, self.index.stop_ids)))

    def copy(self) -> "Guide":
        g = Guide.__new__(Guide)
        g.index, g.state, g.remaining, g.finished, g._buffer = (
            self.index, self.state, self.remaining, self.finished, None)
        return g

    def _explain(self, token_id: int) -> str:
        what = "a stop token" if token_id in self.index.stop_ids else f"token {token_id}"
        n = len(self.allowed_token_ids())
        done = " (the text so far is complete)" if self.is_accepting() else ""
        return (f"{what} is not allowed in state {self.state} of "
                f"{self.index.description or 'the constraint'}; {n} tokens are allowed here{done}")

    def __repr__(self) -> str:
        return f"Guide(state={self.state}, accepting={self.is_accepting()}, remaining={self.remaining})"
