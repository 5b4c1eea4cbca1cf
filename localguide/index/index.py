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

from bisect import bisect_left

import numpy as np

from ..runtime import cache
from ..automaton import ByteDFA
from ..distance import UNREACHABLE
from ..errors import EmptyLanguageError
from ..runtime.progress import stage
from ..protocol import Mask, MaskKind
from ..vocabulary import Vocabulary
from ..runtime.numba_tools import compiled
from . import build_kernels as kernels
from . import build_numpy, packed

_ARRAYS = packed.ARRAYS
FORMAT = "6"  # 6: large masks as exclusions only, next states row by row (``packed``); bump when the arrays (or the regex dialect) change meaning, so old cache files are not read


class Index:
    """Compiled constraint over one vocabulary. State 0 is the start."""

    __slots__ = _ARRAYS + ("vocab_size", "fingerprint", "description", "_fast")

    def __init__(self, arrays: dict, vocab_size: int, fingerprint: str, description: str = ""):
        if "next_states" in arrays:  # (as ``build_arrays`` makes them)
            arrays = packed.pack(arrays, vocab_size)
        for name in _ARRAYS:
            a = np.ascontiguousarray(arrays[name])
            a.flags.writeable = False
            object.__setattr__(self, name, a)
        object.__setattr__(self, "vocab_size", int(vocab_size))
        object.__setattr__(self, "fingerprint", fingerprint)
        object.__setattr__(self, "description", description)
        object.__setattr__(self, "_fast", None)

    def __setattr__(self, name, value):
        raise AttributeError("an Index is immutable")

    # -- building ---------------------------------------------------------------------
    @classmethod
    def build(cls, dfa: ByteDFA, vocabulary: Vocabulary, description: str = "") -> "Index":
        arrays = build_arrays(dfa, vocabulary, description)
        return cls(arrays, vocabulary.size, vocabulary.fingerprint, description)

    @staticmethod
    def cache_path(kind: str, key: str, vocabulary: Vocabulary):
        """Where ``cached`` keeps the Index for ``key``."""
        return cache.key_path(kind, FORMAT, vocabulary.fingerprint, key)

    @classmethod
    def cached(cls, kind: str, key: str, make_dfa, vocabulary: Vocabulary, description: str = "") -> "Index":
        """The Index for ``key`` from the disk cache, or built from ``make_dfa()`` and stored."""
        path = cls.cache_path(kind, key, vocabulary)
        got: dict = {}  # the in-memory arrays, made by whichever of the two below runs

        def build():
            stored = packed.pack(build_arrays(make_dfa(), vocabulary, description), vocabulary.size)
            got["arrays"] = packed.unpack(stored, vocabulary.size, trusted=True)  # (as a later load has them)
            return stored

        def check(a, trusted: bool) -> bool:
            got["arrays"] = packed.unpack(a, vocabulary.size, trusted)
            return True

        stored = cache.cached(path, build, check, trusting=True)
        arrays = got.get("arrays")
        if arrays is None:  # (a write of this process still pending: its packed arrays, unchecked)
            arrays = packed.unpack(stored, vocabulary.size, trusted=True)
        return cls(arrays, vocabulary.size, vocabulary.fingerprint, description)

    def to_arrays(self) -> dict:
        """The arrays as the Index keeps them (``packed``)."""
        return {name: getattr(self, name) for name in _ARRAYS}

    # -- queries ----------------------------------------------------------------------
    @property
    def n_states(self) -> int:
        return len(self.state_mask)

    @property
    def n_masks(self) -> int:
        return len(self.mask_sizes)

    @property
    def fast(self) -> "FastTables":
        """Python-native views of the arrays for the per-token path (built once, on first use)."""
        if self._fast is None:
            object.__setattr__(self, "_fast", FastTables(self))
        return self._fast

    def allowed(self, state: int) -> np.ndarray:
        """The sorted ids allowed in ``state``."""
        return self.fast.tokens(self.fast.state_mask[state])

    def successors(self, state: int) -> np.ndarray:
        """Next state for each token of ``allowed(state)``; -1 for stop tokens."""
        return packed.next_row(self.fast.arrays, state)

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
                f"{self.n_masks} distinct masks, {int(self.mask_sizes.sum())} mask entries)")


class FastTables:
    """Per-token lookups without numpy scalar overhead: lists, views and memoryviews."""

    __slots__ = ("arrays", "vocab_size", "state_mask", "large", "masks", "sampler_masks", "mask_offsets", "mask_tokens",
                 "excl_offsets", "excl_tokens", "next_default", "next_value_offsets", "next_values",
                 "next_position_offsets", "next_positions", "accepting", "distance", "max_next", "dfa_states")

    def __init__(self, index: Index):
        mo, eo = index.mask_offsets, index.excl_offsets
        self.arrays = index.to_arrays()  # (not the Index itself: it holds this table)
        self.vocab_size = index.vocab_size
        self.state_mask = index.state_mask.tolist()
        self.large = large = packed.big(index.mask_sizes, index.vocab_size).tolist()
        # a large mask's ids are made when first asked for (``tokens``); the sampler applies its exclusions
        self.masks = [None if large[m] else index.mask_tokens[mo[m]:mo[m + 1]] for m in range(len(large))]
        self.sampler_masks = [Mask(MaskKind.EXCLUDED, index.excl_tokens[eo[m]:eo[m + 1]]) if large[m]
                              else Mask(MaskKind.ALLOWED, self.masks[m]) for m in range(len(large))]
        self.mask_offsets = mo.tolist()
        self.mask_tokens = memoryview(index.mask_tokens)
        self.excl_offsets = eo.tolist()
        self.excl_tokens = memoryview(index.excl_tokens)
        self.next_default = index.next_default.tolist()
        self.next_value_offsets = index.next_value_offsets.tolist()
        self.next_values = memoryview(index.next_values)
        self.next_position_offsets = index.next_position_offsets.tolist()
        self.next_positions = memoryview(index.next_positions)
        self.accepting = index.accepting.tolist()
        self.distance = index.distance.tolist()
        self.max_next = index.max_next_distance.tolist()
        self.dfa_states = index.dfa_states.tolist()

    def tokens(self, m: int) -> np.ndarray:
        """Mask ``m``'s sorted ids (read-only)."""
        t = self.masks[m]
        if t is None:
            t = packed.mask_ids(self.arrays, m, self.vocab_size)
            t.flags.writeable = False
            self.masks[m] = t
        return t

    def position(self, m: int, t: int) -> int:
        """Where token ``t`` stands among mask ``m``'s ids; -1 if not there."""
        if self.large[m]:
            lo, hi = self.excl_offsets[m], self.excl_offsets[m + 1]
            i = bisect_left(self.excl_tokens, t, lo, hi)
            return -1 if i < hi and self.excl_tokens[i] == t else t - (i - lo)
        lo, hi = self.mask_offsets[m], self.mask_offsets[m + 1]
        i = bisect_left(self.mask_tokens, t, lo, hi)
        return i - lo if i < hi and self.mask_tokens[i] == t else -1

    def next_state(self, s: int, p: int) -> int:
        """The state the ``p``-th token of state ``s``'s mask leads to (-1: a stop token)."""
        usual = self.next_default[s]
        if usual == kernels.DENSE:
            return self.next_values[self.next_value_offsets[s] + p]
        a, b = self.next_position_offsets[s], self.next_position_offsets[s + 1]
        i = bisect_left(self.next_positions, p, a, b)
        return self.next_values[self.next_value_offsets[s] + i - a] if i < b and self.next_positions[i] == p else usual


def build_arrays(dfa: ByteDFA, vocabulary: Vocabulary, description: str = "") -> dict:
    """The Index arrays of ``dfa`` over ``vocabulary``."""
    with stage("building the index"):
        return _build_arrays(dfa, vocabulary, description)


def _build_arrays(dfa: ByteDFA, vocabulary: Vocabulary, description: str) -> dict:
    # Before the kernels are compiled (a first use), numpy builds the index of a small automaton.
    run = kernels
    explored = None
    if not compiled(kernels.explore) and dfa.n_states <= build_numpy.state_budget(vocabulary.size):
        explored = build_numpy.explore(vocabulary.token_rows, dfa.transitions, vocabulary.size)
        run = build_numpy if explored is not None else kernels
    if explored is None:
        explored = kernels.explore(*vocabulary.trie.arrays, dfa.transitions)
    states, offsets, toks, nexts = explored
    accepting = dfa.accepting[states]
    dist = run.distances(offsets, nexts, accepting)
    if dist[0] >= UNREACHABLE:
        raise EmptyLanguageError(
            f"no sequence of tokens of {vocabulary.name} spells a string of {description or 'the constraint'}"
        )
    keep, next_offsets, tokens, nexts, max_next, hashes = run.finalize(
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
    # Masks allowing most of the vocabulary are applied by excluding the rest (cheaper).
    excl_offsets = [0]
    excl_chunks = []
    everything = np.arange(vocabulary.size, dtype=np.int32)
    for t in mask_chunks:
        if 2 * len(t) > vocabulary.size:
            excl_chunks.append(np.setdiff1d(everything, t, assume_unique=True).astype(np.int32))
        else:
            excl_chunks.append(np.zeros(0, np.int32))
        excl_offsets.append(excl_offsets[-1] + len(excl_chunks[-1]))
    return {
        "state_mask": state_mask,
        "mask_offsets": np.array(mask_offsets, np.int64),
        "excl_offsets": np.array(excl_offsets, np.int64),
        "excl_tokens": np.concatenate(excl_chunks),
        "mask_tokens": np.concatenate(mask_chunks).astype(np.int32),
        "next_offsets": next_offsets,
        "next_states": nexts,
        "accepting": accepting[keep].copy(),
        "distance": dist[keep].astype(np.int32),  # reachable states only: small
        "max_next_distance": max_next,
        "stop_ids": vocabulary.stop_ids.copy(),
        "dfa_states": states[keep],  # the automaton state of each Index state
    }
