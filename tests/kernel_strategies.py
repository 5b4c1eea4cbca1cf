"""Shared strategies and helpers of the kernel-versus-twin tests."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from localguide import Vocabulary

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# A small byte alphabet (ASCII and UTF-8 pieces) so tokens share prefixes and repeat.
ALPHABET = [0x61, 0x62, 0x63, 0xC3, 0xA9, 0x00, 0xFF]


@st.composite
def synthetic_vocabularies(draw, min_tokens: int = 1, max_tokens: int = 25) -> Vocabulary:
    """Random tokens over a tiny alphabet: duplicates, prefixes of one another, empty tokens."""
    token = st.lists(st.sampled_from(ALPHABET), min_size=0, max_size=5).map(bytes)
    tokens = draw(st.lists(token, min_size=min_tokens, max_size=max_tokens))
    if tokens and draw(st.booleans()):  # force a duplicate and a prefix
        t = draw(st.sampled_from(tokens))
        tokens += [t, t[:-1]]
    tokens.append(b"")  # the stop token
    return Vocabulary.from_tokens(tokens, [len(tokens) - 1])


@st.composite
def random_dfas(draw, max_states: int = 6) -> np.ndarray:
    """A random transition table over ``ALPHABET`` (-1 elsewhere)."""
    n = draw(st.integers(1, max_states))
    trans = np.full((n, 256), -1, np.int32)
    for s in range(n):
        for b in ALPHABET:
            trans[s, b] = draw(st.integers(-1, n - 1))
    return trans


def assert_same_dfa(got, want) -> None:
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


# --- keep_candidates / exclude_candidates / mask_candidates_at ----------------------------------

def candidates(ids) -> np.ndarray:
    """A llama_token_data-like int32[size, 3] array: (id, logit bits, p bits)."""
    ids = np.asarray(ids, np.int32)
    logits = (ids.astype(np.float32) * 0.5 - 3.0).view(np.int32)
    return np.stack([ids, logits, ids * 13 + 2], axis=1).astype(np.int32)


@st.composite
def candidate_arrays(draw, max_id_slack: int = 0):
    size = draw(st.integers(1, 12))
    ids = list(range(size))
    if draw(st.booleans()):
        ids = draw(st.permutations(ids))  # an earlier sampler may have reordered the array
    ids = ids[:draw(st.integers(1, size))]  # or dropped some candidates
    chosen = sorted(draw(st.sets(st.integers(0, size - 1 + max_id_slack), max_size=size)))
    return candidates(ids), np.array(chosen, np.int32)


# A permutation that fixes the first and last ids: not in id order, though it looks so at the ends.
PERMUTED_ENDS = (candidates([0, 2, 1, 3]), np.array([0, 1, 3], np.int32))


def _agree_in_id_order(fast, twin, reference, data, mask) -> None:
    """``fast`` and its ``twin`` keep the same rows or both give -1; kept rows are those of the
    plain ``reference`` compaction."""
    d1, d2 = data.copy(), data.copy()
    k1 = fast(d1, mask)
    k2 = twin(d2, mask)
    assert k1 == k2
    if k1 >= 0:
        np.testing.assert_array_equal(d1[:k1], d2[:k2])
        ref = data.copy()
        assert reference(ref, mask) == k1
        np.testing.assert_array_equal(d1[:k1], ref[:k1])


def token_data_array(arr: np.ndarray):
    """A ``llama_token_data_array`` over the rows of ``arr`` (kept alive by the caller)."""
    import ctypes

    import llama_cpp

    return llama_cpp.llama_token_data_array(
        data=ctypes.cast(arr.ctypes.data, ctypes.POINTER(llama_cpp.llama_token_data)),
        size=len(arr), selected=-1, sorted=False)


# --- grammar masks as bitsets -------------------------------------------------------------------

def bitset(ids, n_bits: int) -> np.ndarray:
    words = np.zeros((n_bits + 63) // 64, np.uint64)
    for t in ids:
        words[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    return words
