"""A Guide: a cheap cursor over an Index (``localguide.protocol.GuideProtocol``)."""

from __future__ import annotations

import numpy as np

from ..errors import BudgetError, LocalguideError, TokenNotAllowedError, as_token, check_max_tokens
from ..protocol import Mask, MaskKind, unwind
from . import build_kernels, native_block as kernels

_NONE = np.zeros(0, np.int32)
_NONE.flags.writeable = False


class Guide:
    """Where generation stands in a compiled constraint.

    ``allowed_token_ids()`` is the set of tokens that keep the text completable
    (within the remaining budget, when one was given), stop tokens included exactly
    when the text so far is complete. After a stop token the guide is finished.
    """

    __slots__ = ("index", "state", "remaining", "finished", "_fast", "_past", "_depth")
    cheap_masks = True

    def __init__(self, index, max_tokens: int | None = None, *, _state: int = 0):
        self.index = index
        self._fast = index.fast
        self.state = _state
        self.finished = False
        self.remaining = max_tokens
        self._past = None
        self._depth = 0
        check_max_tokens(max_tokens)
        if max_tokens is not None and self._fast.distance[_state] > max_tokens:
            raise BudgetError.needs(index.description or "the constraint", self._fast.distance[_state], max_tokens)

    @classmethod
    def at(cls, index, state: int, remaining: int | None, finished: bool = False) -> "Guide":
        """A cursor at ``state`` of ``index`` with ``remaining`` tokens of budget (no check, no history)."""
        g = cls.__new__(cls)
        g.index, g._fast, g.state, g.remaining, g.finished = index, index.fast, state, remaining, finished
        g._past, g._depth = None, 0
        return g

    def _budget_limited(self) -> bool:
        r = self.remaining
        return r is not None and self._fast.max_next[self.state] > r - 1

    def allowed_token_ids(self) -> np.ndarray:
        """Sorted int32 ids of the tokens allowed now (a read-only view or a fresh array)."""
        if self.finished:
            return _NONE
        f = self._fast
        tokens = f.tokens(f.state_mask[self.state])
        if not self._budget_limited():
            return tokens
        index = self.index
        nexts = index.successors(self.state)
        out = np.empty(len(tokens), np.int32)
        k = build_kernels.within_budget(tokens, nexts, index.distance, self.remaining - 1, out)
        return out[:k]

    def mask(self) -> Mask:
        """The allowed ids, or the excluded ids where most of the vocabulary is allowed."""
        if not self.finished and not self._budget_limited():
            f = self._fast
            return f.sampler_masks[f.state_mask[self.state]]
        return Mask(MaskKind.ALLOWED, self.allowed_token_ids())

    def accepts(self, token_id: int) -> bool:
        """Whether ``token_id`` is allowed now (a lookup in the state's mask, within the budget)."""
        if self.finished:
            return False
        nxt = self._target(as_token(token_id, self.index.vocab_size))
        return nxt is not None and not self._over_budget(nxt)

    def _target(self, token_id: int):
        """The state ``token_id`` leads to by the mask (-1: a stop token), None when the mask has no such token."""
        f = self._fast
        s = self.state
        p = f.position(f.state_mask[s], token_id)
        return None if p < 0 else f.next_state(s, p)

    def _over_budget(self, nxt: int) -> bool:
        r = self.remaining
        return nxt >= 0 and r is not None and self._fast.distance[nxt] > r - 1

    def advance(self, token_id: int) -> None:
        """Move past ``token_id``; raise ``TokenNotAllowedError`` if it is not allowed here."""
        token_id = as_token(token_id, self.index.vocab_size)
        if self.finished:
            raise TokenNotAllowedError.after_end(token_id)
        nxt = self._target(token_id)
        if nxt is None:
            raise TokenNotAllowedError(self._explain(token_id))
        r = self.remaining
        if self._over_budget(nxt):
            raise TokenNotAllowedError.over_budget(token_id, "the constraint", r)
        self._past = (self._past, (self.state, r, False))
        self._depth += 1
        if nxt < 0:
            self.finished = True
            return
        if r is not None:
            self.remaining = r - 1
        self.state = nxt

    def is_accepting(self) -> bool:
        """True when the text so far is complete (a stop token may follow)."""
        return self.finished or self._fast.accepting[self.state]

    def is_finished(self) -> bool:
        """True after a stop token, or when nothing but stopping is possible."""
        if self.finished:
            return True
        allowed = self.allowed_token_ids()
        return len(allowed) == 0 or (
            len(allowed) <= len(self.index.stop_ids) and bool(np.all(np.isin(allowed, self.index.stop_ids))))

    # -- the native sampler path (``localguide.engines.llamacpp.native_kernels``) -------------------------------
    def native_block(self) -> np.ndarray:
        """This cursor as a guide block for the native llama.cpp sampler (an int64 array)."""
        ix = self.index
        b = np.zeros(kernels.BLOCK_LEN, np.int64)
        b[kernels.B_STATE] = self.state
        b[kernels.B_REMAINING] = -1 if self.remaining is None else self.remaining
        b[kernels.B_FINISHED] = self.finished
        for slot, a in ((kernels.B_STATE_MASK, ix.state_mask), (kernels.B_MASK_SIZES, ix.mask_sizes),
                        (kernels.B_MASK_OFFSETS, ix.mask_offsets),
                        (kernels.B_MASK_TOKENS, ix.mask_tokens), (kernels.B_EXCL_OFFSETS, ix.excl_offsets),
                        (kernels.B_EXCL_TOKENS, ix.excl_tokens), (kernels.B_NEXT_DEFAULT, ix.next_default),
                        (kernels.B_NEXT_VALUE_OFFSETS, ix.next_value_offsets), (kernels.B_NEXT_VALUES, ix.next_values),
                        (kernels.B_NEXT_POSITION_OFFSETS, ix.next_position_offsets),
                        (kernels.B_NEXT_POSITIONS, ix.next_positions), (kernels.B_DISTANCE, ix.distance),
                        (kernels.B_MAX_NEXT, ix.max_next_distance)):
            b[slot] = a.ctypes.data
        b[kernels.B_SIZES] = ix.vocab_size
        return b

    def write_block(self, block: np.ndarray) -> None:
        """Put this cursor into ``block`` (before a sample: the guide may have advanced or rolled back)."""
        block[kernels.B_STATE] = self.state
        block[kernels.B_REMAINING] = -1 if self.remaining is None else self.remaining
        block[kernels.B_FINISHED] = self.finished

    def sync_from_block(self, block: np.ndarray) -> None:
        """Take the cursor back from a guide block after a sample; raise what the native sampler flagged."""
        if not block[kernels.B_ERROR]:
            self._past = (self._past, (self.state, self.remaining, self.finished))
            self._depth += 1
        self.state = int(block[kernels.B_STATE])
        r = int(block[kernels.B_REMAINING])
        self.remaining = None if r < 0 else r
        self.finished = bool(block[kernels.B_FINISHED])
        error = int(block[kernels.B_ERROR])
        if error:
            token = int(block[kernels.B_ERROR_TOKEN])
            block[kernels.B_ERROR] = 0
            if error == kernels.ERROR_FINISHED:
                raise TokenNotAllowedError("a token was sampled after the guide had finished")
            if error == kernels.ERROR_ORDER:
                raise LocalguideError("the guide sampler must come first in the llama.cpp sampler chain "
                                      "(it got a candidate array that was not in token-id order)")
            if error == kernels.ERROR_OVER_BUDGET:
                raise TokenNotAllowedError(f"token {token} cannot finish within the remaining budget")
            raise TokenNotAllowedError(self._explain(token))

    def state_key(self) -> int:
        """The automaton state (-1 once finished): what the draft counts are keyed by."""
        return -1 if self.finished else self._fast.dfa_states[self.state]

    def copy(self) -> "Guide":
        g = Guide.at(self.index, self.state, self.remaining, self.finished)
        g._past, g._depth = self._past, self._depth
        return g

    def checkpoint(self) -> int:
        """How many tokens this cursor has advanced (``rollback`` undoes them)."""
        return self._depth

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` tokens (O(n))."""
        self._past, cursor, self._depth = unwind(self._past, self._depth, n)
        if cursor is not None:
            self.state, self.remaining, self.finished = cursor

    def _explain(self, token_id: int) -> str:
        what = "a stop token" if token_id in self.index.stop_ids else f"token {token_id}"
        n = len(self.allowed_token_ids())
        done = " (the text so far is complete)" if self.is_accepting() else ""
        return (f"{what} is not allowed in state {self.state} of "
                f"{self.index.description or 'the constraint'}; {n} tokens are allowed here{done}")

    def __repr__(self) -> str:
        return f"Guide(state={self.state}, accepting={self.is_accepting()}, remaining={self.remaining})"
