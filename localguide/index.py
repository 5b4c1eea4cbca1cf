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
    keep, next_offsets, tokens, nexts, max_next, hashes = kernels.finalize(
        offsets, toks, nexts, dist, accepting, vocabulary.stop_ids)
    # Identical masks are stored once: same hash and length, then checked for equality.
    state_mask = np.empty(len(keep), np.int32)
    seen: dict[tuple[int, int], list[int]] = {}
    mask_offsets = [0]
    mask_chunks = []
    for s in range(len(keep)):
        t = tokens[next_offsets[s]:next_offsets[s + 1]]
        bucket = seen.setdefault((int(hashes[s]), len(t)), [])
        for m in bucket:
            if np.array_equal(mask_chunks[m], t):
                state_mask[s] = m
                break
        else:
            state_mask[s] = len(mask_chunks)
            bucket.append(len(mask_chunks))
            mask_chunks.append(t)
            mask_offsets.append(mask_offsets[-1] + len(t))
    return {
        "state_mask": state_mask,
        "mask_offsets": np.array(mask_offsets, np.int64),
        "mask_tokens": np.concatenate(mask_chunks).astype(np.int32),
        "next_offsets": next_offsets,
        "next_states": nexts,
        "accepting": accepting[keep].copy(),
        "distance": dist[keep].copy(),
        "max_next_distance": max_next,
        "stop_ids": vocabulary.stop_ids.copy(),
    }
