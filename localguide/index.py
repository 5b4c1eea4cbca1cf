"""The Index: for every automaton state, the allowed tokens and where each leads.

Built once per (constraint, vocabulary) by walking the vocabulary trie from every
DFA state reachable through whole tokens (Willard & Louf, Algorithms 3 and 4).
States from which no token path reaches acceptance are dropped, so a guide can
never be steered into a dead end. Stop tokens are allowed exactly in accepting
states. Identical masks are stored once.

An Index is immutable (its arrays are read-only) and can be shared between
threads; ``Index.guide()`` makes a cheap cursor over it.
"""

from __future__ import annotations

import numpy as np

from . import cache, kernels
from .automaton import ByteDFA
from .errors import EmptyLanguageError
from .vocabulary import Vocabulary

_ARRAYS = ("state_mask", "mask_offsets", "mask_tokens", "next_offsets", "next_states",
           "accepting", "distance", "max_next_distance", "stop_ids")


class Index:
    """Compiled constraint over one vocabulary. State 0 is the start."""

    __slots__ = _ARRAYS + ("vocab_size", "fingerprint", "description")

    def __init__(self, arrays: dict, vocab_size: int, fingerprint: str, description: str = ""):
        for name in _ARRAYS:
            a = np.ascontiguousarray(arrays[name])
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        object.__setattr__(self, "vocab_size", int(vocab_size))
        object.__setattr__(self, "fingerprint", fingerprint)
        object.__setattr__(self, "description", description)

    def __setattr__(self, name, value):
        raise AttributeError("an Index is immutable")

    # -- building ---------------------------------------------------------------------
    @classmethod
    def build(cls, dfa: ByteDFA, vocabulary: Vocabulary, description: str = "") -> "Index":
        arrays = build_arrays(dfa, vocabulary, description)
        return cls(arrays, vocabulary.size, vocabulary.fingerprint, description)

    @classmethod
    def cached(cls, kind: str, key: str, make_dfa, vocabulary: Vocabulary, description: str = "") -> "Index":
        """The Index for ``key`` from the disk cache, or built from ``make_dfa()`` and stored."""
        path = cache.key_path(kind, vocabulary.fingerprint, key)
        arrays = cache.cached(path, lambda: build_arrays(make_dfa(), vocabulary, description),
                              lambda a: _consistent(a, vocabulary.size))
        return cls(arrays, vocabulary.size, vocabulary.fingerprint, description)

    def to_arrays(self) -> dict:
        return {name: getattr(self, name) for name in _ARRAYS}

    # -- queries ----------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        return len(self.state_mask)

    @property
    def n_masks(self) -> int:
        return len(self.mask_offsets) - 1

    def allowed(self, state: int) -> np.ndarray:
        m = self.state_mask[state]
        return self.mask_tokens[self.mask_offsets[m]:self.mask_offsets[m + 1]]

    def successors(self, state: int) -> np.ndarray:
        """Next state for each token of ``allowed(state)``; -1 for stop tokens."""
        return self.next_states[self.next_offsets[state]:self.next_offsets[state + 1]]

    def guide(self, max_tokens: int | None = None):
        """A cursor at the start state; with ``max_tokens``, every path completes within that budget."""
        from .guide import Guide

        return Guide(self, max_tokens=max_tokens)

    def __getstate__(self):
        return (self.to_arrays(), self.vocab_size, self.fingerprint, self.description)

    def __setstate__(self, state):
        Index.__init__(self, *state)

    def __repr__(self) -> str:
        return (f"Index({self.description or 'constraint'}: {self.n_states} states, "
                f"{self.n_masks} distinct masks, {len(self.mask_tokens)} mask entries)")


def _consistent(a: dict, vocab_size: int) -> bool:
    n = len(a["state_mask"])
    return (n > 0 and len(a["next_offsets"]) == n + 1 and a["next_offsets"][-1] == len(a["next_states"])
            and a["mask_offsets"][-1] == len(a["mask_tokens"])
            and (len(a["mask_tokens"]) == 0 or int(a["mask_tokens"].max()) < vocab_size)
            and len(a["distance"]) == n and len(a["accepting"]) == n)


def build_arrays(dfa: ByteDFA, vocabulary: Vocabulary, description: str = "") -> dict:
    """The Index arrays of ``dfa`` over ``vocabulary``."""
    trie = vocabulary.trie
    states, offsets, toks, nexts = kernels.explore(*trie.arrays, dfa.transitions)
    n = len(states)
    local = np.full(dfa.n_states, -1, np.int32)
    local[states] = np.arange(n, dtype=np.int32)
    nexts = local[nexts]
    accepting = dfa.accepting[states]
    dist = kernels.distances(offsets, nexts, accepting)
    if dist[0] < 0:
        raise EmptyLanguageError(
            f"no sequence of tokens of {vocabulary.name} spells a string of {description or 'the constraint'}"
        )
    # Keep only states that can still finish, and edges into them; renumber from 0.
    live = dist >= 0
    keep_state = np.flatnonzero(live)
    renum = np.full(n, -1, np.int32)
    renum[keep_state] = np.arange(len(keep_state), dtype=np.int32)
    stop_ids = vocabulary.stop_ids
    state_mask = np.empty(len(keep_state), np.int32)
    next_offsets = np.zeros(len(keep_state) + 1, np.int64)
    mask_chunks, next_chunks = [], []
    mask_ids: dict[bytes, int] = {}
    mask_offsets = [0]
    max_next = np.zeros(len(keep_state), np.int32)
    for new, old in enumerate(keep_state):
        lo, hi = offsets[old], offsets[old + 1]
        t, q = toks[lo:hi], nexts[lo:hi]
        ok = live[q]
        t, q = t[ok], renum[q[ok]]
        if accepting[old]:
            t = np.concatenate([t, stop_ids])
            q = np.concatenate([q, np.full(len(stop_ids), -1, np.int32)])
            order = np.argsort(t, kind="stable")
            t, q = t[order], q[order]
        key = t.tobytes()
        m = mask_ids.get(key)
        if m is None:
            m = mask_ids[key] = len(mask_chunks)
            mask_chunks.append(t)
            mask_offsets.append(mask_offsets[-1] + len(t))
        state_mask[new] = m
        next_chunks.append(q)
        next_offsets[new + 1] = next_offsets[new] + len(q)
        real = q[q >= 0]
        max_next[new] = dist[keep_state[real]].max() if len(real) else 0
    return {
        "state_mask": state_mask,
        "mask_offsets": np.array(mask_offsets, np.int64),
        "mask_tokens": np.concatenate(mask_chunks).astype(np.int32) if mask_chunks else np.zeros(0, np.int32),
        "next_offsets": next_offsets,
        "next_states": np.concatenate(next_chunks).astype(np.int32) if next_chunks else np.zeros(0, np.int32),
        "accepting": accepting[keep_state].copy(),
        "distance": dist[keep_state].copy(),
        "max_next_distance": max_next,
        "stop_ids": stop_ids.copy(),
    }
