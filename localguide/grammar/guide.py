"""``GrammarGuide``: the cursor the llama.cpp sampler drives (same protocol as ``localguide.Guide``).

A token is allowed exactly when the text so far plus the token's bytes is a
prefix of some sentence of the grammar; stop ids are allowed exactly when the
text is a sentence. With ``max_tokens``, the guide leaves room to finish: once
the remaining budget comes within ``BUDGET_SLACK`` tokens of the shortest
completion, it only allows the tokens of that completion (and stopping, when the
text is complete).

``opportunistic=True`` (DOMINO §3.5): ``accepts(token)`` checks one proposed token
without computing the mask; the sampler may try the model's choice first and only
ask for ``allowed_token_ids()`` when it is rejected. The outputs are the same.
"""

from __future__ import annotations

import numpy as np

from ..errors import BudgetError, TokenNotAllowedError

BUDGET_SLACK = 8


class GrammarGuide:
    __slots__ = ("index", "state", "remaining", "finished", "opportunistic", "_plan")

    def __init__(self, index, max_tokens: int | None = None, opportunistic: bool = False, *, _state=None):
        self.index = index
        self.state = index.initial if _state is None else _state
        self.finished = False
        self.remaining = max_tokens
        self.opportunistic = opportunistic
        self._plan = None
        if max_tokens is not None and _state is None:
            if max_tokens < 0:
                raise ValueError("max_tokens must be >= 0")
            plan = index.completer.plan(self.state)
            if plan is not None and len(plan) > max_tokens:
                raise BudgetError(f"{index.description} needs at least {len(plan)} tokens "
                                  f"(by its shortest completion), but max_tokens is {max_tokens}")

    # -- budget -------------------------------------------------------------------------
    def _forced(self):
        """The shortest-completion plan when the budget is tight, else None."""
        r = self.remaining
        if r is None:
            return None
        if self._plan is None:
            self._plan = self.index.completer.plan(self.state)
            if self._plan is None:
                self._plan = []
        if len(self._plan) + BUDGET_SLACK >= r:
            return self._plan
        return None

    # -- protocol -----------------------------------------------------------------------
    def allowed_token_ids(self) -> np.ndarray:
        if self.finished:
            return np.zeros(0, np.int32)
        index = self.index
        plan = self._forced()
        if plan is not None:
            ids = [plan[0]] if plan else []
            if index.accepting(self.state):
                ids += index.stop_ids.tolist()
            return np.array(sorted(set(ids)), np.int32)
        return index.allowed(self.state)

    def accepts(self, token_id: int) -> bool:
        """Whether ``token_id`` is allowed now, without computing the whole mask."""
        if self.finished:
            return False
        token_id = int(token_id)
        index = self.index
        plan = self._forced()
        if token_id in set(index.stop_ids.tolist()):
            return index.accepting(self.state)
        if plan is not None:
            return bool(plan) and token_id == plan[0]
        return index.step(self.state, token_id) is not None

    def advance(self, token_id: int) -> None:
        token_id = int(token_id)
        if self.finished:
            raise TokenNotAllowedError(f"token {token_id} after the end: the guide has already finished")
        index = self.index
        if token_id in index.stop_ids:
            if not index.accepting(self.state):
                raise TokenNotAllowedError(f"a stop token is not allowed: the text so far is not a "
                                           f"complete sentence of {index.description}")
            self.finished = True
            return
        plan = self._forced()
        if plan is not None and (not plan or token_id != plan[0]):
            raise TokenNotAllowedError(f"token {token_id} is allowed by {index.description} but cannot "
                                       f"finish within the remaining {self.remaining} token(s)")
        nxt = index.step(self.state, token_id)
        if nxt is None:
            raise TokenNotAllowedError(
                f"token {token_id} ({index.vocabulary[token_id]!r}) is not allowed here by "
                f"{index.description}: the text would no longer be a prefix of any sentence")
        self.state = nxt
        if self.remaining is not None:
            self.remaining -= 1
            if plan is not None:
                self._plan = plan[1:]
            else:
                self._plan = None

    def is_accepting(self) -> bool:
        return self.finished or self.index.accepting(self.state)

    def is_finished(self) -> bool:
        if self.finished:
            return True
        st = self.state
        if st._only_stop is None:
            st._only_stop = len(self.index.token_mask(st)) == 0
        if st._only_stop:
            return True
        plan = self._forced()
        return plan is not None and not plan

    def copy(self) -> "GrammarGuide":
        g = GrammarGuide.__new__(GrammarGuide)
        g.index, g.state, g.remaining, g.finished, g.opportunistic = (
            self.index, self.state, self.remaining, self.finished, self.opportunistic)
        g._plan = self._plan
        return g

    def __repr__(self) -> str:
        return (f"GrammarGuide(accepting={self.is_accepting()}, remaining={self.remaining}, "
                f"readings={len(self.state.configs)})")
