"""The numpy index build (a first use's path) against the kernels it stands in for."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from localguide.index import build_kernels, build_numpy
from localguide.vocabulary_numpy import TokenRows
from kernel_strategies import SETTINGS, random_dfas, synthetic_vocabularies


def _rows(vocab):
    return TokenRows(vocab.flat, vocab.offsets, vocab.trie.order)


@SETTINGS
@given(synthetic_vocabularies(), random_dfas(), st.data())
def test_numpy_build_equals_kernels(vocab, trans, data):
    want = build_kernels.explore(*vocab.trie.arrays, trans)
    got = build_numpy.explore(_rows(vocab), trans, vocab.size, max_states=10 ** 6)
    for name, a, b in zip(("states", "offsets", "tokens", "next"), got, want):
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    states, offsets, toks, nexts = want
    accepting = np.array(data.draw(st.lists(st.booleans(), min_size=len(states), max_size=len(states))), bool)
    dist = build_kernels.distances(offsets, nexts, accepting)
    np.testing.assert_array_equal(build_numpy.distances(offsets, nexts, accepting), dist)
    k_out = build_kernels.finalize(offsets, toks, nexts, dist, accepting, vocab.stop_ids)
    n_out = build_numpy.finalize(offsets, toks, nexts, dist, accepting, vocab.stop_ids)
    for name, a, b in zip(("keep", "offsets", "tokens", "nexts", "max_next"), n_out[:5], k_out[:5]):
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)
    k_hash, n_hash = k_out[5].tolist(), n_out[5]
    for i in range(len(k_hash)):  # hashes serve one purpose: equal masks, equal hashes
        for j in range(i):
            if k_hash[i] == k_hash[j]:
                assert n_hash[i] == n_hash[j]


@SETTINGS
@given(synthetic_vocabularies(), random_dfas(), st.data())
def test_numpy_state_edges_equals_kernel(vocab, trans, data):
    s = data.draw(st.integers(0, trans.shape[0] - 1))
    want = build_kernels.state_edges(*vocab.trie.arrays, trans, s)
    got = build_numpy.state_edges(_rows(vocab), trans, s, vocab.size)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


@SETTINGS
@given(synthetic_vocabularies(), random_dfas())
def test_numpy_explore_gives_up_past_its_bound(vocab, trans):
    states = build_kernels.explore(*vocab.trie.arrays, trans)[0]
    rows = _rows(vocab)
    assert build_numpy.explore(rows, trans, vocab.size, max_states=len(states) - 1) is None
    assert build_numpy.explore(rows, trans, vocab.size, max_states=len(states)) is not None


def test_numpy_build_on_the_models(vocab):
    """The same arrays on real vocabularies, for constraints a first use meets."""
    from localguide.regex import regex_to_dfa

    v = vocab
    rows = v.token_rows
    for pattern in (r"\d{4}-\d{2}-\d{2}", r'\{"name": "[^"\\]{0,8}"\}', r"(yes|no)"):
        trans = regex_to_dfa(pattern).transitions
        for a, b in zip(build_numpy.explore(rows, trans, v.size), build_kernels.explore(*v.trie.arrays, trans)):
            np.testing.assert_array_equal(a, b)
