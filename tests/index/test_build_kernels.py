"""The Index construction kernels against their plain-Python twins."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from localguide.index import build_kernels
from kernel_strategies import SETTINGS, synthetic_vocabularies, random_dfas
from packed_helpers import built_arrays

# --- explore ------------------------------------------------------------------------------

@SETTINGS
@given(synthetic_vocabularies(), random_dfas())
def test_explore_equals_twin(vocab, trans):
    arrays = vocab.trie.arrays
    got = build_kernels.explore(*arrays, trans)
    want = build_kernels.py_explore(*arrays, trans)
    names = ("states", "offsets", "tokens", "next")
    for name, a, b in zip(names, got, want):
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


@SETTINGS
@given(synthetic_vocabularies(), random_dfas())
def test_explore_edges_are_token_transitions(vocab, trans):
    """Independent of both: each edge is the DFA run over the token's bytes, and nothing is missed."""
    states, offsets, toks, nexts = build_kernels.explore(*vocab.trie.arrays, trans)

    def run(s, data):
        for b in data:
            s = trans[s, b]
            if s < 0:
                return -1
        return int(s)

    assert states[0] == 0 and len(set(states.tolist())) == len(states)
    for i, s in enumerate(states):
        edges = list(zip(toks[offsets[i]:offsets[i + 1]].tolist(), nexts[offsets[i]:offsets[i + 1]].tolist()))
        want = [(t, run(s, vocab[t])) for t in range(vocab.size) if vocab[t] and run(s, vocab[t]) >= 0]
        assert edges == [(t, int(np.flatnonzero(states == q)[0])) for t, q in want]


# --- distances --------------------------------------------------------------------------------

@st.composite
def csr_graphs(draw):
    n = draw(st.integers(1, 12))
    edges = [draw(st.lists(st.integers(-1, n - 1), max_size=4)) for _ in range(n)]  # -1: no edge
    offsets = np.zeros(n + 1, np.int64)
    offsets[1:] = np.cumsum([len(e) for e in edges])
    nexts = np.array([q for e in edges for q in e], np.int32)
    accepting = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool)
    return offsets, nexts, accepting


@SETTINGS
@given(csr_graphs())
def test_distances_equals_twin(graph):
    offsets, nexts, accepting = graph
    np.testing.assert_array_equal(build_kernels.distances(offsets, nexts, accepting),
                                  build_kernels.py_distances(offsets, nexts, accepting))


@SETTINGS
@given(synthetic_vocabularies(), random_dfas())
def test_distances_on_explored_graphs(vocab, trans):
    states, offsets, toks, nexts = build_kernels.explore(*vocab.trie.arrays, trans)
    accepting = np.zeros(len(states), bool)
    accepting[::2] = True
    np.testing.assert_array_equal(build_kernels.distances(offsets, nexts, accepting),
                                  build_kernels.py_distances(offsets, nexts, accepting))


# --- within_budget --------------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_within_budget_equals_twin(data):
    n_states = data.draw(st.integers(1, 10))
    dist = data.draw(hnp.arrays(np.int32, n_states, elements=st.integers(0, 8)))
    k = data.draw(st.integers(0, 30))
    tokens = np.array(sorted(data.draw(st.sets(st.integers(0, 1000), min_size=k, max_size=k))), np.int32)
    nexts = data.draw(hnp.arrays(np.int32, k, elements=st.integers(-1, n_states - 1)))
    limit = data.draw(st.integers(-1, 9))
    out1 = np.full(max(k, 1), -7, np.int32)
    out2 = np.full(max(k, 1), -7, np.int32)
    c1 = build_kernels.within_budget(tokens, nexts, dist, limit, out1)
    c2 = build_kernels.py_within_budget(tokens, nexts, dist, limit, out2)
    assert c1 == c2
    np.testing.assert_array_equal(out1[:c1], out2[:c2])


# --- next_state / next_row -------------------------------------------------------------------

@SETTINGS
@given(st.data())
def test_next_state_and_row_equal_twins_and_the_plain_rows(data):
    """Rows packed by ``index.packed`` (whole or as exceptions) read back as the plain rows."""
    from localguide.index import packed

    n_states = data.draw(st.integers(1, 6))
    lengths = data.draw(st.lists(st.integers(0, 12), min_size=n_states, max_size=n_states))
    rows = [np.array(data.draw(st.lists(st.integers(-1, n_states - 1), min_size=n, max_size=n)), np.int32)
            for n in lengths]
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    nexts = packed._pack_nexts(np.concatenate(rows).astype(np.int32), offsets)
    arrays = tuple(nexts[k] for k in packed.NEXT)
    for s, row in enumerate(rows):
        for p, want in enumerate(row.tolist()):
            assert build_kernels.next_state(*arrays, s, p) == want
            assert build_kernels.py_next_state(*arrays, s, p) == want
        out1 = np.full(len(row), -7, np.int32)
        out2 = np.full(len(row), -7, np.int32)
        build_kernels.next_row(*arrays, s, out1)
        build_kernels.py_next_row(*arrays, s, out2)
        np.testing.assert_array_equal(out1, row)
        np.testing.assert_array_equal(out2, row)


@SETTINGS
@given(st.data())
def test_mask_position_and_large_mask_ids_equal_twins_and_the_ids(data):
    """A mask kept as its ids or (allowing most of the vocabulary) as its exclusions: every token's
    position among the mask's ids, and the ids a large mask makes, as the plain list says."""
    from localguide.index import packed

    vocab_size = data.draw(st.integers(1, 60))
    masks = data.draw(st.lists(st.sets(st.integers(0, vocab_size - 1)), min_size=1, max_size=4))
    masks = [np.array(sorted(m), np.int32) for m in masks]
    built = built_arrays(masks, [np.zeros(len(masks[0]), np.int32)], vocab_size, state_mask=[0])
    kept = packed.pack(built, vocab_size)
    arrays = tuple(kept[k] for k in packed.MASKS)
    for m, ids in enumerate(masks):
        listed = ids.tolist()
        for t in range(vocab_size):
            want = listed.index(t) if t in listed else -1
            assert build_kernels.mask_position(*arrays, vocab_size, m, t) == want
            assert build_kernels.py_mask_position(*arrays, vocab_size, m, t) == want
        if 2 * len(ids) > vocab_size:
            excluded = kept["excl_tokens"][kept["excl_offsets"][m]:kept["excl_offsets"][m + 1]]
            out1 = np.full(len(ids), -7, np.int32)
            out2 = np.full(len(ids), -7, np.int32)
            build_kernels.large_mask_ids(excluded, vocab_size, out1)
            build_kernels.py_large_mask_ids(excluded, vocab_size, out2)
            np.testing.assert_array_equal(out1, ids)
            np.testing.assert_array_equal(out2, ids)


# --- finalize -----------------------------------------------------------------------------

@SETTINGS
@given(synthetic_vocabularies(), random_dfas(), st.data())
def test_finalize_equals_twin(vocab, trans, data):
    states, offsets, toks, nexts = build_kernels.explore(*vocab.trie.arrays, trans)
    accepting = np.array(data.draw(st.lists(st.booleans(), min_size=len(states), max_size=len(states))), bool)
    dist = build_kernels.distances(offsets, nexts, accepting)
    got = build_kernels.finalize(offsets, toks, nexts, dist, accepting, vocab.stop_ids)
    want = build_kernels.py_finalize(offsets, toks, nexts, dist, accepting, vocab.stop_ids)
    for name, a, b in zip(("keep", "offsets", "tokens", "nexts", "max_next"), got[:5], want[:5]):
        np.testing.assert_array_equal(a, b, err_msg=name)
    # Hashes are only compared for what they are used for: equal masks, equal hashes.
    hashes, py_hashes = got[5].tolist(), want[5]
    for i in range(len(hashes)):
        for j in range(i):
            if py_hashes[i] == py_hashes[j]:
                assert hashes[i] == hashes[j]


@SETTINGS
@given(synthetic_vocabularies(), random_dfas(), st.data())
def test_state_edges_equals_twin_and_explore(vocab, trans, data):
    """One state's edges, alone: as the twin, and as that state's row of ``explore``."""
    s = data.draw(st.integers(0, trans.shape[0] - 1))
    got = build_kernels.state_edges(*vocab.trie.arrays, trans, s)
    want = build_kernels.py_state_edges(*vocab.trie.arrays, trans, s)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    states, offsets, toks, nexts = build_kernels.explore(*vocab.trie.arrays, trans)
    for i, q in enumerate(states.tolist()):
        t, n = build_kernels.state_edges(*vocab.trie.arrays, trans, q)
        np.testing.assert_array_equal(t, toks[offsets[i]:offsets[i + 1]])
        np.testing.assert_array_equal(n, states[nexts[offsets[i]:offsets[i + 1]]])
