"""Each numba kernel computes what its plain-Python twin ``py_*`` defines, on random inputs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from localguide import Vocabulary, kernels
from strategies import small_schemas

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


@SETTINGS
@given(random_dfas(max_states=12), st.data())
def test_minimize_dfa_equals_twin(trans, data):
    """Hopcroft-style refinement (compiled) and Moore's refinement (the twin) give the same
    array: the minimal DFA, numbered canonically; unreachable and dead-end states go."""
    acc = np.array(data.draw(st.lists(st.booleans(), min_size=len(trans), max_size=len(trans))), bool)
    assert_same_dfa(kernels.minimize_dfa(trans, acc), kernels.py_minimize_dfa(trans, acc))


def test_minimize_dfa_edge_cases():
    none = np.full((1, 256), -1, np.int32)
    for trans, acc in [
        (none, np.zeros(1, bool)),  # empty language
        (none, np.ones(1, bool)),  # only the empty string
        (np.full((3, 256), 1, np.int32), np.array([False, False, False])),  # no accepting state
        (np.full((3, 256), 2, np.int32), np.array([False, True, True])),  # 1 and 2 unreachable / equal
    ]:
        assert_same_dfa(kernels.minimize_dfa(trans, acc), kernels.py_minimize_dfa(trans, acc))
    # A chain of 3,000 states that all differ (Moore needs a round per state; not Hopcroft).
    n = 3000
    chain = np.full((n, 256), -1, np.int32)
    chain[np.arange(n - 1), 97] = np.arange(1, n)
    chain[np.arange(n - 1), 98] = n - 1
    acc = np.zeros(n, bool)
    acc[-1] = True
    got = kernels.minimize_dfa(chain, acc)
    assert got[0].shape == (n, 256)
    assert_same_dfa(got, kernels.py_minimize_dfa(chain, acc))
    # ...and a cycle of 3,000 accepting states that are all the same: one state.
    loop = np.full((n, 256), -1, np.int32)
    loop[:, 97] = (np.arange(n) + 1) % n
    loop[:, 98] = n - 1
    got = kernels.minimize_dfa(loop, np.ones(n, bool))
    assert_same_dfa(got, kernels.py_minimize_dfa(loop, np.ones(n, bool)))
    assert got[0].shape[0] == 1 and got[0][0, 97] == got[0][0, 98] == 0



def assert_same_trie(kernel_out, twin_out) -> None:
    node_byte, node_depth, subtree_end, tok_start, tok_count = kernel_out
    p_byte, p_depth, p_end, p_start, p_count = twin_out
    np.testing.assert_array_equal(node_byte, p_byte)
    np.testing.assert_array_equal(node_depth, p_depth)
    np.testing.assert_array_equal(subtree_end, p_end)
    np.testing.assert_array_equal(tok_count, p_count)
    # tok_start only means something where tokens end.
    has = tok_count > 0
    np.testing.assert_array_equal(tok_start[has], p_start[has])


# --- build_trie -------------------------------------------------------------------------

@SETTINGS
@given(synthetic_vocabularies())
def test_build_trie_equals_twin(vocab):
    order = vocab.trie.order
    kernel_out = kernels.build_trie(vocab.flat, vocab.offsets, order)
    twin_out = kernels.py_build_trie(vocab.flat, vocab.offsets, order)
    assert_same_trie(kernel_out, twin_out)
    # And the trie spells exactly the non-empty tokens.
    node_byte, node_depth, _, tok_start, tok_count = kernel_out
    spelled = {}
    path: list[int] = []
    for n in range(1, len(node_byte)):
        path = path[: node_depth[n] - 1] + [int(node_byte[n])]
        for k in range(tok_start[n], tok_start[n] + tok_count[n]):
            spelled[int(order[k])] = bytes(path)
    expected = {t: vocab[t] for t in range(vocab.size) if vocab[t]}
    assert spelled == expected


def test_build_trie_long_tokens():
    """Tokens longer than 511 bytes (a fixed-size path buffer) must not corrupt memory.

    Run in a subprocess: an out-of-bounds write in a numba kernel can abort the interpreter.
    """
    code = textwrap.dedent("""
        import numpy as np
        from localguide import Vocabulary, kernels
        from localguide.index import Index
        from localguide.regex import regex_to_dfa
        tokens = [b"", b"a" * 600, b"a", b"b" * 520 + b"c", b"b"]
        v = Vocabulary.from_tokens(tokens, [0])
        out = kernels.build_trie(v.flat, v.offsets, v.trie.order)
        twin = kernels.py_build_trie(v.flat, v.offsets, v.trie.order)
        assert all(np.array_equal(a, b) for a, b in zip(out[:3], twin[:3]))
        idx = Index.build(regex_to_dfa("a*"), v)
        assert idx.allowed(0).tolist() == [0, 1, 2], idx.allowed(0)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])


# --- explore ------------------------------------------------------------------------------

@SETTINGS
@given(synthetic_vocabularies(), random_dfas())
def test_explore_equals_twin(vocab, trans):
    arrays = vocab.trie.arrays
    got = kernels.explore(*arrays, trans)
    want = kernels.py_explore(*arrays, trans)
    names = ("states", "offsets", "tokens", "next")
    for name, a, b in zip(names, got, want):
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b, err_msg=name)


@SETTINGS
@given(synthetic_vocabularies(), random_dfas())
def test_explore_edges_are_token_transitions(vocab, trans):
    """Independent of both: each edge is the DFA run over the token's bytes, and nothing is missed."""
    states, offsets, toks, nexts = kernels.explore(*vocab.trie.arrays, trans)

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
    np.testing.assert_array_equal(kernels.distances(offsets, nexts, accepting),
                                  kernels.py_distances(offsets, nexts, accepting))


@SETTINGS
@given(synthetic_vocabularies(), random_dfas())
def test_distances_on_explored_graphs(vocab, trans):
    states, offsets, toks, nexts = kernels.explore(*vocab.trie.arrays, trans)
    accepting = np.zeros(len(states), bool)
    accepting[::2] = True
    np.testing.assert_array_equal(kernels.distances(offsets, nexts, accepting),
                                  kernels.py_distances(offsets, nexts, accepting))


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
    c1 = kernels.within_budget(tokens, nexts, dist, limit, out1)
    c2 = kernels.py_within_budget(tokens, nexts, dist, limit, out2)
    assert c1 == c2
    np.testing.assert_array_equal(out1[:c1], out2[:c2])


# --- finalize -----------------------------------------------------------------------------

@SETTINGS
@given(synthetic_vocabularies(), random_dfas(), st.data())
def test_finalize_equals_twin(vocab, trans, data):
    states, offsets, toks, nexts = kernels.explore(*vocab.trie.arrays, trans)
    accepting = np.array(data.draw(st.lists(st.booleans(), min_size=len(states), max_size=len(states))), bool)
    dist = kernels.distances(offsets, nexts, accepting)
    got = kernels.finalize(offsets, toks, nexts, dist, accepting, vocab.stop_ids)
    want = kernels.py_finalize(offsets, toks, nexts, dist, accepting, vocab.stop_ids)
    for name, a, b in zip(("keep", "offsets", "tokens", "nexts", "max_next"), got[:5], want[:5]):
        np.testing.assert_array_equal(a, b, err_msg=name)
    # Hashes are only compared for what they are used for: equal masks, equal hashes.
    hashes, py_hashes = got[5].tolist(), want[5]
    for i in range(len(hashes)):
        for j in range(i):
            if py_hashes[i] == py_hashes[j]:
                assert hashes[i] == hashes[j]


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


@SETTINGS
@given(candidate_arrays())
@example(PERMUTED_ENDS)
def test_keep_candidates_equals_twin(case):
    data, allowed = case
    d1, d2 = data.copy(), data.copy()
    k1 = kernels.keep_candidates(d1, allowed)
    k2 = kernels.py_keep_candidates(d2, allowed)
    assert k1 == k2
    np.testing.assert_array_equal(d1[:k1], d2[:k2])
    assert set(d1[:k1, 0].tolist()) <= set(allowed.tolist())


@SETTINGS
@given(candidate_arrays())
@example((candidates([0, 2, 1, 3]), np.array([1], np.int32)))
def test_exclude_candidates_equals_twin(case):
    data, forbidden = case
    d1, d2 = data.copy(), data.copy()
    assert kernels.exclude_candidates(d1, forbidden) == kernels.py_exclude_candidates(d2, forbidden)
    np.testing.assert_array_equal(d1, d2)
    logits = d1[:, 1].view(np.float32)
    assert set(d1[np.isneginf(logits), 0].tolist()) == set(forbidden.tolist()) & set(data[:, 0].tolist())


@SETTINGS
@given(st.integers(1, 300), st.data())
def test_keep_and_exclude_in_id_order(size, data):
    """The case the sampler relies on: a full array in id order (the fast paths)."""
    chosen = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1)))), np.int32)
    arr, twin = candidates(np.arange(size)), candidates(np.arange(size))
    k = kernels.keep_candidates(arr, chosen)
    assert k == kernels.py_keep_candidates(twin, chosen) == len(chosen)
    np.testing.assert_array_equal(arr[:k], twin[:k])
    np.testing.assert_array_equal(arr[:k, 0], chosen)
    arr, twin = candidates(np.arange(size)), candidates(np.arange(size))
    assert kernels.exclude_candidates(arr, chosen) == kernels.py_exclude_candidates(twin, chosen) == size
    np.testing.assert_array_equal(arr, twin)


@SETTINGS
@given(candidate_arrays(max_id_slack=2))
@example(PERMUTED_ENDS)
@example((candidates(np.arange(6)), np.array([0, 2, 5], np.int32)))
def test_keep_in_id_order_equals_twin(case):
    """The one-pass compaction: the twin's result on id-ordered rows, -1 as soon as a row it
    reads or overwrites is out of place (the array is then not llama.cpp's fresh one)."""
    data, allowed = case
    _agree_in_id_order(kernels.keep_in_id_order, kernels.py_keep_in_id_order, kernels.py_keep_candidates,
                       data, allowed)


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


def test_mask_candidates_at_refuses_an_array_out_of_id_order():
    import ctypes

    arr = candidates([0, 2, 1, 3])
    cur = token_data_array(arr)
    assert not kernels.mask_candidates_at(ctypes.addressof(cur), np.array([0, 1, 3], np.int32), False)
    assert cur.size == 4


def test_keep_candidates_ignores_ids_beyond_the_array():
    """Allowed ids that are not in a (shorter) candidate array are skipped, as by the twin.

    In a subprocess: the kernel reads rows by id without bounds checks.
    """
    code = textwrap.dedent("""
        import numpy as np
        from localguide import kernels
        ids = np.arange(4, dtype=np.int32)
        data = np.stack([ids, ids, ids], axis=1).astype(np.int32)
        twin = data.copy()
        allowed = np.array([1, 3, 100000, 2000000], np.int32)
        k = kernels.keep_candidates(data, allowed)
        k2 = kernels.py_keep_candidates(twin, allowed)
        print(k, data[:k, 0].tolist(), k2, twin[:k2, 0].tolist())
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["2", "[1,", "3]", "2", "[1,", "3]"], proc.stdout


def token_data_array(arr: np.ndarray):
    """A ``llama_token_data_array`` over the rows of ``arr`` (kept alive by the caller)."""
    import ctypes

    import llama_cpp

    return llama_cpp.llama_token_data_array(
        data=ctypes.cast(arr.ctypes.data, ctypes.POINTER(llama_cpp.llama_token_data)),
        size=len(arr), selected=-1, sorted=False)


def test_mask_candidates_at_address():
    import ctypes

    allowed = np.array([1, 7, 8, 49], np.int32)
    arr = candidates(np.arange(50))
    cur = token_data_array(arr)
    assert kernels.mask_candidates_at(ctypes.addressof(cur), allowed, False)
    assert cur.size == 4
    np.testing.assert_array_equal(arr[:4], candidates(allowed))
    arr = candidates(np.arange(50))
    cur = token_data_array(arr)
    kernels.mask_candidates_at(ctypes.addressof(cur), allowed, True)
    assert cur.size == 50
    logits = arr[:, 1].view(np.float32)
    assert np.flatnonzero(np.isneginf(logits)).tolist() == allowed.tolist()


# --- the native sampler's guide block: the same cursor as Guide ------------------------------------

def native_allowed(block, vocab_size: int) -> list[int]:
    """Run ``block_apply`` on a full candidate array in id order; the ids left possible."""
    import ctypes

    arr = candidates(np.arange(vocab_size))
    cur = token_data_array(arr)
    kernels.block_apply(block, ctypes.addressof(cur))
    kept = arr[:cur.size]
    logits = kept[:, 1].view(np.float32)
    return kept[~np.isneginf(logits), 0].tolist()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([r"(19|20)\d{2}", r"[a-c]*d?", r"\w+@\w+", r"[^x]{0,4}"]),
       st.one_of(st.none(), st.integers(0, 8)), st.randoms(use_true_random=False))
def test_native_block_follows_the_guide(pattern, budget, rng):
    from localguide import compile_regex

    from conftest import random_walk

    tokens = [b""] + [bytes([b]) for b in range(256)] + [b"19", b"20", b"ab", b"@a", b"xy", b"00"] * 2
    vocab = Vocabulary.from_tokens(tokens, [0])
    index = compile_regex(pattern, vocab)
    if budget is not None and budget < index.distance[0]:
        return
    guide = index.guide(max_tokens=budget)
    walk, _ = random_walk(guide.copy(), vocab, rng, max_steps=10)
    block = guide.native_block()
    for t in walk:
        assert native_allowed(block, vocab.size) == guide.allowed_token_ids().tolist()
        kernels.block_accept(block, t)
        guide.advance(t)
        assert int(block[kernels.B_ERROR]) == 0
        assert int(block[kernels.B_STATE]) == guide.state
    # A token the guide refuses is flagged in the block, not taken.
    refused = sorted(set(range(vocab.size)) - set(guide.allowed_token_ids().tolist()))
    if refused:
        state = int(block[kernels.B_STATE])
        kernels.block_accept(block, refused[len(refused) // 2])
        assert int(block[kernels.B_ERROR]) != 0 and int(block[kernels.B_STATE]) == state


@SETTINGS
@given(synthetic_vocabularies(), random_dfas(), st.data())
def test_state_edges_equals_twin_and_explore(vocab, trans, data):
    """One state's edges, alone: as the twin, and as that state's row of ``explore``."""
    s = data.draw(st.integers(0, trans.shape[0] - 1))
    got = kernels.state_edges(*vocab.trie.arrays, trans, s)
    want = kernels.py_state_edges(*vocab.trie.arrays, trans, s)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    states, offsets, toks, nexts = kernels.explore(*vocab.trie.arrays, trans)
    for i, q in enumerate(states.tolist()):
        t, n = kernels.state_edges(*vocab.trie.arrays, trans, q)
        np.testing.assert_array_equal(t, toks[offsets[i]:offsets[i + 1]])
        np.testing.assert_array_equal(n, states[nexts[offsets[i]:offsets[i + 1]]])


# --- subset construction of JSON Schema automata ---------------------------------


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_schemas())
def test_subset_dfa_equals_twin(schema):
    """The compiled subset construction and its twin give the same minimal automaton."""
    from localguide import jsonschema_dfa
    from localguide.json_schema import schema_to_ast

    node = schema_to_ast(schema, any_depth=1, max_length=8, max_items=3).node
    got = jsonschema_dfa.ast_to_dfa(node)
    jsonschema_dfa.subset_dfa = kernels.py_subset_dfa
    try:
        want = jsonschema_dfa.ast_to_dfa(node)
    finally:
        jsonschema_dfa.subset_dfa = kernels.subset_dfa
    assert_same_dfa((got.transitions, got.accepting), (want.transitions, want.accepting))


@given(st.integers(1, 300), st.data())
@settings(max_examples=150, deadline=None)
def test_union_groups_equals_twin(size, data):
    """Unions of token groups: both the sorted path (small unions) and the vocabulary pass (large)."""
    n_groups = data.draw(st.integers(0, 12))
    groups = [sorted(data.draw(st.sets(st.integers(0, size - 1), max_size=size))) for _ in range(n_groups)]
    off = np.zeros(n_groups + 1, np.int64)
    off[1:] = np.cumsum([len(g) for g in groups])
    tok = np.array([t for g in groups for t in g], np.int32)
    gids = np.array(data.draw(st.lists(st.integers(0, n_groups - 1), max_size=8)) if n_groups else [], np.int64)
    extra = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1), max_size=5))), np.int32)
    marks = np.zeros(size, np.uint8)
    got = kernels.union_groups(off, tok, gids, extra, marks)
    assert got.dtype == np.int32
    assert got.tolist() == kernels.py_union_groups(off, tok, gids, extra, marks).tolist()
    assert not marks.any()


@pytest.mark.parametrize("name", ["json", "sql", "c", "arithmetic", "yaml", "json-gbnf"])
def test_scanner_closure_equals_twin(name, monkeypatch):
    """The grammar scanner's subset construction: kernel and twin give the same states and transitions."""
    from localguide.grammar.cfg import normalize
    from localguide.grammar.earley import Grammar
    from localguide.grammar.lexer import Scanner
    from localguide.grammar.sources import resolve, to_cfg

    g = Grammar(normalize(to_cfg(*resolve(name))))
    got = Scanner(g)
    monkeypatch.setattr(kernels, "scanner_closure", kernels.py_scanner_closure)
    want = Scanner(g)
    for a, b in ((got.trans, want.trans), (got.st_off, want.st_off), (got.st_rd, want.st_rd)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    # from one seed reading, with other hashes: equal, and the state budget honoured by both
    inputs = _closure_inputs(got, g.cfg)
    full = kernels.scanner_closure(*inputs, 10 ** 6)
    for a, b in zip(full, kernels.py_scanner_closure(*inputs, 10 ** 6)):
        np.testing.assert_array_equal(a, b)
    n = len(full[0])
    assert n >= 2
    assert len(kernels.scanner_closure(*inputs, n - 1)[0]) == 0
    assert len(kernels.py_scanner_closure(*inputs, n - 1)[0]) == 0
    assert len(kernels.scanner_closure(*inputs, n)[0]) == n


def _closure_inputs(sc, cfg):
    n_r = len(sc.r_term)
    r_next = sc.reading_moves(cfg)
    h = np.arange(1, n_r + 2, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    h[n_r] = 0
    off = np.array([0, 1], np.int64)
    rd = np.array([sc.r_base[0]], np.int32)
    return r_next, h, h ^ np.uint64(12345), off, rd


# --- grammar masks as bitsets -------------------------------------------------------------------

def bitset(ids, n_bits: int) -> np.ndarray:
    words = np.zeros((n_bits + 63) // 64, np.uint64)
    for t in ids:
        words[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    return words


def test_mask_candidates_bits_at_address():
    import ctypes

    allowed = [1, 7, 8, 49]
    arr = candidates(np.arange(50))
    cur = token_data_array(arr)
    assert kernels.mask_candidates_bits(ctypes.addressof(cur), bitset(allowed, 50)) == 4
    assert cur.size == 4
    np.testing.assert_array_equal(arr[:4], candidates(allowed))


@st.composite
def group_unions(draw):
    n_tok = draw(st.integers(1, 200))
    groups = draw(st.lists(st.sets(st.integers(0, n_tok - 1), max_size=40), min_size=1, max_size=8))
    off = np.zeros(len(groups) + 1, np.int64)
    np.cumsum([len(g) for g in groups], out=off[1:])
    tok = np.array([t for g in groups for t in sorted(g)], np.int32)
    key = sorted(draw(st.sets(st.integers(0, len(groups) - 1))))
    key = sorted(-1 - t for t in draw(st.sets(st.integers(0, n_tok - 1), max_size=5))) + key
    big_min = draw(st.integers(1, 41))
    with_row = draw(st.lists(st.booleans(), min_size=len(groups), max_size=len(groups)))
    n_words = (n_tok + 63) // 64
    g_row = np.full(len(groups), -1, np.int64)
    gw = np.zeros((len(groups), n_words), np.uint64)
    for g, has in enumerate(with_row):
        if has:
            g_row[g] = g
            gw[g] = bitset(groups[g], n_tok)
    return groups, off, tok, np.array(key, np.int64), big_min, g_row, gw, n_tok


@SETTINGS
@given(group_unions())
def test_union_bits_equals_twin(case):
    groups, off, tok, key, big_min, g_row, gw, n_tok = case
    out1 = np.zeros((n_tok + 63) // 64, np.uint64)
    out2 = out1.copy()
    miss1 = kernels.union_bits(key, off, tok, big_min, g_row, gw, out1)
    miss2 = kernels.py_union_bits(key, off, tok, big_min, g_row, gw, out2)
    np.testing.assert_array_equal(out1, out2)
    np.testing.assert_array_equal(miss1, miss2)
    want = {-1 - g for g in key.tolist() if g < 0} | {t for g in key.tolist() if g >= 0 for t in groups[g]}
    np.testing.assert_array_equal(out1, bitset(want, n_tok))
    assert miss1.tolist() == [g for g in key.tolist() if g >= 0 and len(groups[g]) >= big_min and g_row[g] < 0]


@SETTINGS
@given(candidate_arrays(max_id_slack=70))
@example(PERMUTED_ENDS)
@example((candidates(np.arange(6)), np.array([0, 2, 5, 64, 70], np.int32)))
def test_keep_bits_in_id_order_equals_twin(case):
    """The sampler's bitset compaction visits only the set bits: the twin's result on id-ordered
    rows, -1 as soon as a row it reads or overwrites is out of place."""
    data, allowed = case
    _agree_in_id_order(kernels.keep_bits_in_id_order, kernels.py_keep_bits_in_id_order, kernels.py_keep_bits,
                       data, bitset(allowed.tolist(), len(data) + 71))


@SETTINGS
@given(candidate_arrays(max_id_slack=70))
@example(PERMUTED_ENDS)
@example((candidates(np.arange(6)), np.array([0, 2, 5, 64, 70], np.int32)))
def test_mark_bits_in_id_order_equals_twin(case):
    """A dense mask marks the rows it drops with a -inf logit (and leaves the others) instead of
    moving the rows it keeps: the twin's result, -1 as soon as a row it marks is out of place."""
    data, allowed = case
    mask = bitset(allowed.tolist(), len(data) + 71)
    d1, d2 = data.copy(), data.copy()
    k1 = kernels.mark_bits_in_id_order(d1, mask)
    k2 = kernels.py_mark_bits_in_id_order(d2, mask)
    assert k1 == k2
    if k1 >= 0:
        np.testing.assert_array_equal(d1, d2)
        assert k1 == len(data)
        keep = set(allowed.tolist())
        for row, old in zip(d1, data):
            want = old[1] if row[0] in keep else kernels.NEG_INF_BITS
            assert row[0] == old[0] and row[1] == want and row[2] == old[2]


def test_mask_candidates_bits_marks_a_dense_mask():
    import ctypes

    arr = candidates(np.arange(50))
    before = arr.copy()
    cur = token_data_array(arr)
    dropped = {3, 10, 49}
    assert kernels.mask_candidates_bits(ctypes.addressof(cur), bitset(set(range(50)) - dropped, 50)) == 50
    assert cur.size == 50
    for t in range(50):
        assert arr[t, 1] == (kernels.NEG_INF_BITS if t in dropped else before[t, 1])


@pytest.mark.parametrize("seed", range(40))
def test_marking_samples_as_compaction(seed):
    """llama.cpp's usual sampler chain (top-k, top-p, min-p, temperature, dist) picks the same
    token after either way of applying a mask, for the same seed."""
    import ctypes

    import llama_cpp

    rng = np.random.default_rng(seed)
    n = 300
    allowed = [t for t in range(n) if rng.random() < (0.9 if seed % 2 else 0.2)]
    logits = rng.normal(0, 3, n).astype(np.float32)

    def sample(apply) -> int:
        arr = candidates(np.arange(n))
        arr[:, 1] = logits.view(np.int32)
        cur = token_data_array(arr)
        apply(cur)
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        for smpl in (llama_cpp.llama_sampler_init_top_k(40), llama_cpp.llama_sampler_init_top_p(0.95, 1),
                     llama_cpp.llama_sampler_init_min_p(0.05, 1), llama_cpp.llama_sampler_init_temp(0.8),
                     llama_cpp.llama_sampler_init_dist(seed)):
            llama_cpp.llama_sampler_chain_add(chain, smpl)
        try:
            llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
            return int(cur.data[cur.selected].id)
        finally:
            llama_cpp.llama_sampler_free(chain)

    mask = bitset(allowed, n)

    def compact(cur):
        data = np.ctypeslib.as_array(ctypes.cast(cur.data, ctypes.POINTER(ctypes.c_int32)), (cur.size, 3))
        cur.size = kernels.keep_bits_in_id_order(data, mask)

    def mark(cur):
        data = np.ctypeslib.as_array(ctypes.cast(cur.data, ctypes.POINTER(ctypes.c_int32)), (cur.size, 3))
        assert kernels.mark_bits_in_id_order(data, mask) == n

    a, b = sample(compact), sample(mark)
    assert a in allowed and a == b


def test_mask_candidates_bits_refuses_an_array_out_of_id_order():
    import ctypes

    arr = candidates([1, 0, 2, 3])
    cur = token_data_array(arr)
    assert kernels.mask_candidates_bits(ctypes.addressof(cur), bitset([0, 2], 4)) == -1
    assert cur.size == 4
