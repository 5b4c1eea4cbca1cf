"""``GrammarGuide``: the cursor the llama.cpp sampler drives (same protocol as ``localguide.Guide``).

A token is allowed exactly when the text so far plus the token's bytes is a
prefix of some sentence of the grammar; stop ids are allowed exactly when the
text is a sentence.

With ``max_tokens`` the guide guarantees the text ends complete within that many
tokens (``budget``): it carries a *plan* (tokens spelling a completion, at most
the remaining budget long) and, with ``r`` tokens left, allows a token only if
the state it leads to has a plan of at most ``r - 1`` tokens (the plan's own next
token always qualifies). While every allowed token qualifies, the mask is the
plain one. If no completion of the grammar can be spelled with the vocabulary's
tokens, there is no plan and no guarantee (masks are the plain ones).

``opportunistic=True`` (DOMINO §3.5): ``accepts(token)`` checks one proposed token
without computing the mask; the sampler may try the model's choice first and only
ask for ``allowed_token_ids()`` when it is rejected. The outputs are the same.
"""

from __future__ import annotations

import numpy as np

from ..errors import BudgetError, TokenNotAllowedError, as_token, check_max_tokens
from ..protocol import Mask, MaskKind, unwind
from .masks import bits_has, bits_ids, bits_with, key_of


_FINISHED = Mask(MaskKind.ALLOWED, np.zeros(0, np.int32))
_FINISHED.data.flags.writeable = False


class GrammarGuide:
    """A cursor over a ``GrammarIndex`` (``localguide.protocol.GuideProtocol``)."""

    __slots__ = ("index", "state", "remaining", "finished", "opportunistic", "_plan", "_past", "_depth")
    cheap_masks = False

    def __init__(self, index, max_tokens: int | None = None, opportunistic: bool = False, *, _state=None):
        self.index = index
        self.state = index.initial if _state is None else _state
        self.finished = False
        self.remaining = max_tokens
        self.opportunistic = opportunistic
        self._plan = None
        self._past = None
        self._depth = 0
        if max_tokens is not None and _state is None:
            check_max_tokens(max_tokens)
            index.prepare_budget()
            plan = self._current_plan()
            if plan is not None and len(plan) > max_tokens:
                raise BudgetError.needs(index.description, len(plan), max_tokens, " (by its shortest completion)")

    # -- budget -------------------------------------------------------------------------
    def _current_plan(self):
        """The carried plan (None: no completion can be spelled, so no budget guarantee)."""
        if self._plan is None:
            plan = self.index.completer.plan(self.state)
            self._plan = False if plan is None else plan
        return None if self._plan is False else self._plan

    def _budget_mask(self):
        """The allowed tokens as a bitset (``MaskEngine.bits_of``) when the budget may bind, else
        None (the plain mask applies)."""
        r = self.remaining
        if r is None:
            return None
        index = self.index
        st = self.state
        if index.budget_bound(st) <= r - 1:
            return None  # far from the end: no need for a plan (the Completer's Python work)
        plan = self._current_plan()
        if plan is None:
            return None
        top, pairs, cache = index.budget_info(st)
        if top <= r - 1:
            return None
        k = 0
        while k < len(pairs) and pairs[k][0] <= r - 1:
            k += 1
        first = plan[0] if plan else -1
        key = (k, first)
        m = cache.get(key)
        if m is None:
            m = index.engine.bits_of(key_of(g for _, g in pairs[:k] if g >= 0))
            extra = [-1 - g for _, g in pairs[:k] if g < 0]
            if first >= 0:
                extra.append(first)
            if index.accepting(st):
                extra += index.stop_ids.tolist()
            if extra:
                m = bits_with(m, extra)
            cache[key] = m
        return m

    # -- protocol -----------------------------------------------------------------------
    def allowed_token_ids(self) -> np.ndarray:
        if self.finished:
            return np.zeros(0, np.int32)
        if self.remaining is not None:
            m = self._budget_mask()
            if m is not None:
                return bits_ids(m)
        return self.index.allowed(self.state)

    def mask(self) -> Mask:
        """A bitset of the vocabulary (no ids once the guide has finished)."""
        if self.finished:
            return _FINISHED
        m = self._budget_mask() if self.remaining is not None else None
        return self.index.sampler_mask(self.state) if m is None else Mask(MaskKind.BITS, m)

    def accepts(self, token_id: int) -> bool:
        """Whether ``token_id`` is allowed now, without computing the whole mask when possible."""
        if self.finished:
            return False
        token_id = as_token(token_id, self.index.vocab_size)
        index = self.index
        if token_id in index.stop_set:
            return index.accepting(self.state)
        if self.remaining is not None:
            m = self._budget_mask()
            if m is not None:
                return bits_has(m, token_id)
        return index.step(self.state, token_id) is not None

    def advance(self, token_id: int) -> None:
        token_id = as_token(token_id, self.index.vocab_size)
        if self.finished:
            raise TokenNotAllowedError.after_end(token_id)
        index = self.index
        if token_id in index.stop_set:
            if not index.accepting(self.state):
                raise TokenNotAllowedError(f"a stop token is not allowed: the text so far is not a "
                                           f"complete sentence of {index.description}")
            self._push()
            self.finished = True
            return
        if self.remaining is not None:
            m = self._budget_mask()
            if m is not None:
                if not bits_has(m, token_id) and index.step(self.state, token_id) is not None:
                    raise TokenNotAllowedError.over_budget(token_id, index.description, self.remaining)
        nxt = index.step(self.state, token_id)
        if nxt is None:
            raise TokenNotAllowedError(
                f"token {token_id} ({index.vocabulary[token_id]!r}) is not allowed here by "
                f"{index.description}: the text would no longer be a prefix of any sentence")
        self._push()
        self.state = nxt
        if self.remaining is not None:
            self.remaining -= 1
            plan = self._plan
            self._plan = plan[1:] if plan and plan[0] == token_id else None

    def is_accepting(self) -> bool:
        return self.finished or self.index.accepting(self.state)

    def is_finished(self) -> bool:
        if self.finished:
            return True
        if self.index.only_stop(self.state):
            return True
        if self.remaining is not None:
            if self.remaining <= 0:
                return True
            m = self._budget_mask()
            if m is not None:
                return not bits_with(m, self.index.stop_ids, on=False).any()  # no text token left
        return False

    def state_key(self) -> int:
        """A digest of the scanner states and the mask (DOMINO's (α, β)); -1 once finished."""
        return -1 if self.finished else self.index.state_key(self.state)

    def copy(self) -> "GrammarGuide":
        g = GrammarGuide.__new__(GrammarGuide)
        g.index, g.state, g.remaining, g.finished, g.opportunistic = (
            self.index, self.state, self.remaining, self.finished, self.opportunistic)
        g._plan, g._past, g._depth = self._plan, self._past, self._depth
        return g

    def _push(self) -> None:
        self._past = (self._past, (self.state, self.remaining, self.finished, self._plan))
        self._depth += 1

    def checkpoint(self) -> int:
        """How many tokens this cursor has advanced (``rollback`` undoes them)."""
        return self._depth

    def rollback(self, n: int) -> None:
        """Undo the last ``n`` tokens (O(n)): parser states are immutable and shared, so nothing is recomputed."""
        self._past, cursor, self._depth = unwind(self._past, self._depth, n)
        if cursor is not None:
            self.state, self.remaining, self.finished, self._plan = cursor

    def native_block(self) -> None:
        """None: grammar masks are computed in Python and the kernels, not by the native sampler."""
        return None

    def __repr__(self) -> str:
        return (f"GrammarGuide(accepting={self.is_accepting()}, remaining={self.remaining}, "
                f"readings={len(self.state.configs)})")

