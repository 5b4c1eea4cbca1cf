"""The numpy masks on llama.cpp's candidate array (a first use's path) against the kernels:
the same size and the same rows, on arrays laid out as llama.cpp lays them out."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.engines.llamacpp import candidates_kernels, candidates_numpy


def candidates(n: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """(the rows (id, logit bits, p), the header (data pointer, size, selected, sorted))."""
    data = np.zeros((n, 3), np.int32)
    data[:, 0] = np.arange(n)
    data[:, 1] = rng.standard_normal(n).astype(np.float32).view(np.int32)
    header = np.array([data.ctypes.data, n, -1, 0], np.int64)
    return data, header


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 700), st.integers(0, 2 ** 32), st.floats(0, 1), st.integers(-1, 2))
def test_mask_candidates_bits_equals_the_kernel(n, seed, density, extra_words):
    rng = np.random.default_rng(seed)
    n_words = max(1, (n + 63) // 64 + extra_words)
    words = np.zeros(n_words, np.uint64)
    ids = np.flatnonzero(rng.random(64 * n_words) < density)
    np.bitwise_or.at(words, ids >> 6, np.uint64(1) << (ids & 63).astype(np.uint64))
    words.flags.writeable = False
    (d1, h1), (d2, h2) = candidates(n, np.random.default_rng(seed)), candidates(n, np.random.default_rng(seed))
    k1 = candidates_kernels.mask_candidates_bits(h1.ctypes.data, words)
    k2 = candidates_numpy.mask_candidates_bits(h2.ctypes.data, words)
    assert k1 == k2 and h1[1] == h2[1]
    np.testing.assert_array_equal(d1[:h1[1]], d2[:h2[1]])


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 500), st.integers(0, 2 ** 32), st.booleans(), st.booleans())
def test_mask_candidates_at_equals_the_kernel(n, seed, exclude, shuffled):
    rng = np.random.default_rng(seed)
    tokens = np.flatnonzero(rng.random(n) < rng.random()).astype(np.int32)
    (d1, h1), (d2, h2) = candidates(n, np.random.default_rng(seed)), candidates(n, np.random.default_rng(seed))
    if shuffled and n > 1:
        perm = np.random.default_rng(seed + 1).permutation(n)
        d1[:] = d1[perm]
        d2[:] = d2[perm]
    r1 = candidates_kernels.mask_candidates_at(h1.ctypes.data, tokens, exclude)
    r2 = candidates_numpy.mask_candidates_at(h2.ctypes.data, tokens, exclude)
    assert r1 == r2 and h1[1] == h2[1]
    if r1:
        np.testing.assert_array_equal(d1[:h1[1]], d2[:h2[1]])
