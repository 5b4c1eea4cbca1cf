"""An Index that answers before it is built, for automata with many states.

Building a whole Index walks the vocabulary trie from every automaton state; for a large
JSON Schema that is most of the time to the first mask. A ``LazyIndex`` answers at once:
its guides compute each automaton state's row (allowed tokens and where each leads) the
first time they reach it, while the whole Index is built, and cached on disk, by a
background thread; from then on the guides read the Index.

Computing a row alone is exact, with no pruning step, when every automaton state can
reach acceptance through bytes that are tokens on their own: then every state a token
reaches can still finish. ``single_byte_distance`` checks that (JSON never needs the few
bytes a vocabulary may lack as single tokens: raw control characters, bytes that are
never UTF-8). Until the Index is there, a token budget is kept with that number of
single-byte steps (an upper bound on the tokens still needed, which a single-byte token
always lowers by one), so the text always finishes in time.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from typing import Callable

import numpy as np

from ..automaton import ByteDFA
from ..distance import UNREACHABLE
from ..errors import BudgetError, TokenNotAllowedError, as_token, check_max_tokens
from ..protocol import Mask, MaskKind, unwind
from ..vocabulary import Vocabulary
from ..runtime.numba_tools import compiled
from . import build_kernels as kernels
from . import build_numpy
from .guide import Guide

_NONE = np.zeros(0, np.int32)
_NONE.flags.writeable = False


def single_byte_distance(dfa: ByteDFA, vocabulary: Vocabulary) -> np.ndarray:
    """Fewest single-byte tokens from each state to acceptance (``UNREACHABLE``: none reach it)."""
    lengths = np.diff(vocabulary.offsets)
    covered = np.zeros(256, bool)
    covered[vocabulary.flat[vocabulary.offsets[:-1][lengths == 1]]] = True
    trans = np.where(covered[None, :], dfa.transitions, -1)
    offsets = np.arange(0, 256 * (dfa.n_states + 1), 256, dtype=np.int64)
    run = kernels if compiled(kernels.distances) else build_numpy
    return run.distances(offsets, trans.reshape(-1), dfa.accepting)


def lazy_possible(dfa: ByteDFA, vocabulary: Vocabulary) -> bool:
    """Whether every state of ``dfa`` can finish through single-byte tokens (rows alone are exact)."""
    return bool((single_byte_distance(dfa, vocabulary) < UNREACHABLE).all())


class LazyIndex:
    """Rows computed state by state until ``build()`` (run in a background thread) returns the Index.

    ``dfa`` must pass ``lazy_possible`` for ``vocabulary`` (checked here).
    """

    def __init__(self, dfa: ByteDFA, vocabulary: Vocabulary, build: Callable[[], object], description: str = ""):
        self._byte_distance = single_byte_distance(dfa, vocabulary)
        if (self._byte_distance >= UNREACHABLE).any():
            raise ValueError("some automaton states cannot finish through single-byte tokens")
        self.dfa = dfa
        self.description = description
        self.vocab_size = vocabulary.size
        self.fingerprint = vocabulary.fingerprint
        self.stop_ids = vocabulary.stop_ids
        self._vocabulary = vocabulary
        self._rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._index = None
        self._local = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._lock = threading.Lock()

        def run():
            try:
                self._index = build()
            except BaseException as e:  # reported by index(); the rows stay usable
                self._error = e
            finally:
                self._done.set()

        # Not a daemon: the interpreter lets it finish (and write the cache) at exit. Started
        # once the first row is made (``_start``): the first mask does not share the CPU with it.
        self._thread = threading.Thread(target=run, name="localguide-index-build")
        self._started = False

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        self._thread.start()

    # -- the whole Index --------------------------------------------------------------
    def index(self, wait: bool = True):
        """The whole Index (waiting for it with ``wait``), or None while it is being built."""
        self._start()
        if wait:
            self._done.wait()
        if not self._done.is_set():
            return None
        if self._error is not None:
            raise self._error
        return self._index

    def local_state(self, dfa_state: int) -> int:
        """The Index state of an automaton state (the Index must be built)."""
        if self._local is None:
            index = self.index()
            local = np.full(self.dfa.n_states, -1, np.int64)
            local[index.dfa_states] = np.arange(index.n_states)
            self._local = local
        return int(self._local[dfa_state])

    # -- rows -------------------------------------------------------------------------
    def row(self, s: int) -> tuple[np.ndarray, np.ndarray]:
        """(allowed token ids, sorted; next automaton state of each, -1 for stop tokens)."""
        r = self._rows.get(s)
        if r is None:
            if compiled(kernels.state_edges):
                toks, nexts = kernels.state_edges(*self._vocabulary.trie.arrays, self.dfa.transitions, s)
            else:  # (a first use: the kernel is not compiled yet)
                toks, nexts = build_numpy.state_edges(self._vocabulary.token_rows, self.dfa.transitions, s,
                                                      self.vocab_size)
            if self.dfa.accepting[s]:
                stops = self.stop_ids
                toks = np.concatenate([toks, stops])
                nexts = np.concatenate([nexts, np.full(len(stops), -1, np.int32)])
                order = np.argsort(toks, kind="stable")
                toks, nexts = toks[order], nexts[order]
            toks.flags.writeable = False
            nexts.flags.writeable = False
            with self._lock:
                r = self._rows.setdefault(s, (toks, nexts))
            self._start()
        return r

    @property
    def byte_distance(self) -> np.ndarray:
        """Fewest single-byte tokens from each automaton state to acceptance."""
        return self._byte_distance

    def guide(self, max_tokens: int | None = None):
        """A cursor at the start; with ``max_tokens``, every path completes within that budget.

        Once the whole Index is built, its own Guide (which the native sampler runs)."""
        index = self.index(wait=False)
        if index is not None:
            return index.guide(max_tokens)
        if max_tokens is not None and self.index(wait=False) is None and self.byte_distance[0] > max_tokens:
            self.index()  # the byte count is too coarse here: wait for the exact token count
        return LazyGuide(self, max_tokens)

    def __repr__(self) -> str:
        state = "built" if self._done.is_set() else f"{len(self._rows)} states so far"
        return f"LazyIndex({self.description or 'constraint'}: {self.dfa.n_states} automaton states, {state})"


class LazyGuide:
    """A guide over a LazyIndex: rows state by state, then the Index's own Guide once it exists.

    Its history is kept in automaton states up to the hand-over; a rollback past the
    hand-over drops the Index guide, and the next call hands over again from there.
    """

    __slots__ = ("lazy", "state", "_left", "finished", "_inner", "_past", "_depth")
    cheap_masks = True

    def __init__(self, lazy: LazyIndex, max_tokens: int | None = None):
        self.lazy = lazy
        self.state = 0
        self._left = max_tokens
        self.finished = False
        self._inner = None
        self._past = None
        self._depth = 0
        check_max_tokens(max_tokens)
        if not self._switch() and max_tokens is not None and lazy.byte_distance[0] > max_tokens:
            raise BudgetError(f"{lazy.description or 'the constraint'} needs more than {max_tokens} tokens")

    @property
    def remaining(self) -> int | None:
        """Tokens of budget left (None: no budget); the Index guide's once handed over."""
        return self._left if self._inner is None else self._inner.remaining

    def _switch(self) -> bool:
        """Hand over to the Index's Guide once the Index is built (True once handed over)."""
        if self._inner is not None:
            return True
        index = self.lazy.index(wait=False)
        if index is None:
            return False
        state = 0 if self.finished else self.lazy.local_state(self.state)
        if self._left is not None and not self.finished and index.fast.distance[state] > self._left:
            raise BudgetError.needs(self.lazy.description or "the constraint", index.fast.distance[state],
                                    self._left)
        self._inner = Guide.at(index, state, self._left, self.finished)
        return True

    def allowed_token_ids(self) -> np.ndarray:
        if self._switch():
            return self._inner.allowed_token_ids()
        if self.finished:
            return _NONE
        toks, nexts = self.lazy.row(self.state)
        if self._left is None:
            return toks
        dist = self.lazy.byte_distance
        ok = (nexts < 0) | (dist[np.maximum(nexts, 0)] <= self._left - 1)
        return toks if ok.all() else toks[ok]

    def mask(self) -> Mask:
        if self._switch():
            return self._inner.mask()
        return Mask(MaskKind.ALLOWED, self.allowed_token_ids())

    def accepts(self, token_id: int) -> bool:
        if self._switch():
            return self._inner.accepts(token_id)
        if self.finished:
            return False
        nxt = self._target(as_token(token_id, self.lazy.vocab_size))
        return nxt is not None and not self._over_budget(nxt)

    def _target(self, token_id: int):
        """The automaton state ``token_id`` leads to (-1: a stop token), None when the row has no such token."""
        toks, nexts = self.lazy.row(self.state)
        pos = bisect_left(toks, token_id)
        if pos >= len(toks) or toks[pos] != token_id:
            return None
        return int(nexts[pos])

    def _over_budget(self, nxt: int) -> bool:
        return nxt >= 0 and self._left is not None and self.lazy.byte_distance[nxt] > self._left - 1

    def advance(self, token_id: int) -> None:
        if self._switch():
            return self._inner.advance(token_id)
        token_id = as_token(token_id, self.lazy.vocab_size)
        if self.finished:
            raise TokenNotAllowedError.after_end(token_id)
        nxt = self._target(token_id)
        if nxt is None:
            toks, _ = self.lazy.row(self.state)
            raise TokenNotAllowedError(f"token {token_id} is not allowed in state {self.state} of "
                                       f"{self.lazy.description or 'the constraint'}; {len(toks)} tokens are")
        if self._over_budget(nxt):
            raise TokenNotAllowedError(f"token {token_id} is allowed by the constraint but may not "
                                       f"finish within the remaining {self._left} token(s)")
        self._past = (self._past, (self.state, self._left, False))
        self._depth += 1
        if nxt < 0:
            self.finished = True
            return
        if self._left is not None:
            self._left -= 1
        self.state = nxt

    def is_accepting(self) -> bool:
        if self._switch():
            return self._inner.is_accepting()
        return self.finished or bool(self.lazy.dfa.accepting[self.state])

    def is_finished(self) -> bool:
        if self._switch():
            return self._inner.is_finished()
        if self.finished:
            return True
        allowed = self.allowed_token_ids()
        return len(allowed) == 0 or bool(np.all(np.isin(allowed, self.lazy.stop_ids)))

    def state_key(self) -> int:
        """The automaton state (-1 once finished), as the Index guide's."""
        if self._switch():
            return self._inner.state_key()
        return -1 if self.finished else self.state

    def copy(self) -> "LazyGuide":
        g = LazyGuide.__new__(LazyGuide)
        g.lazy, g.state, g._left, g.finished = self.lazy, self.state, self._left, self.finished
        g._past, g._depth = self._past, self._depth
        g._inner = None if self._inner is None else self._inner.copy()
        return g

    def checkpoint(self) -> int:
        return self._depth + (0 if self._inner is None else self._inner.checkpoint())

    def rollback(self, n: int) -> None:
        inner = self._inner
        if inner is not None:
            if n <= inner.checkpoint():
                return inner.rollback(n)
            n -= inner.checkpoint()
            self._inner = None  # back before the hand-over: hand over again from there
        self._past, cursor, self._depth = unwind(self._past, self._depth, n)
        if cursor is not None:
            self.state, self._left, self.finished = cursor

    def native_block(self) -> None:
        """None: the sampler drives this guide through ``mask()`` (it may hand over mid-generation)."""
        return None


def warm_kernels(dfa: ByteDFA) -> None:
    """Compile (or load from numba's cache) the trie and index kernels now, on a tiny vocabulary and
    ``dfa`` (made as constraints make theirs, so the specializations are the ones later calls use):
    small automata otherwise take the numpy path (the same arrays) until a large one has compiled them."""
    from ..runtime.numba_tools import kernels_only
    from .index import build_arrays

    vocabulary = Vocabulary.from_tokens([b"", b"a", b"ab", b"b"], [0])
    with kernels_only():
        build_arrays(dfa, vocabulary)
        single_byte_distance(dfa, vocabulary)
        kernels.state_edges(*vocabulary.trie.arrays, dfa.transitions, 0)
