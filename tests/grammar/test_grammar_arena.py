"""The compiled mask path (``grammar.arena``, Earley sets and tree walk in numba) keeps
exactly the groups that the Python path (``PState`` and ``MaskEngine._kept``), its twin,
keeps, on real vocabularies, also while it builds trees lazily, grows its arena, and
after a flush; its budget bounds and group costs equal the Python ones; the bitset masks
the sampler applies hold exactly the allowed ids."""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import tokenize
from test_grammar_formats import SAMPLES

from localguide.grammar import sources
from localguide.grammar.arena_kernels import AR_META, AR_SET_KEYS, AR_SET_OFF, DF_ALLOWED, SC_ACCEPT, SC_ST_OFF, SC_ST_RD
from localguide.protocol import MaskKind
from localguide.grammar.arena import CompiledMasks
from localguide.grammar.cfg import normalize
from localguide.grammar.compiled import GrammarIndex


def lazy_index(name, vocab) -> GrammarIndex:
    """A fresh index of shipped grammar ``name`` with no tree built yet (no disk cache)."""
    text, kind, desc = sources.resolve(name)
    return GrammarIndex(normalize(sources.to_cfg(text, kind, desc), 64), vocab, desc, lazy=True)


def compare_walks(idx, model, texts, seed: int = 1) -> int:
    """Walk the model's tokens of each text, with one-token detours to random allowed tokens;
    at each state both paths agree on every configuration."""
    eng = idx.engine
    stops = set(model.vocabulary.stop_ids.tolist())
    rng = random.Random(seed)
    checked = 0

    comp = idx.completer
    assert eng.core.enable_budget(comp)

    def python_bound(p, c) -> int:
        al = p.allowed | eng.ign_bit
        return max([comp.visit_bound(s, node) for r in eng.state_readings(c) if (al >> eng.r_term[r]) & 1
                    for s, node in eng.kept_visits(p, r)], default=0)

    def python_costs(configs) -> list:
        best: dict = {}
        for p, c in configs:
            al = p.allowed | eng.ign_bit
            for r in eng.state_readings(c):
                if (al >> eng.r_term[r]) & 1:
                    for gid, node in zip(*eng.kept_nodes(p, r)):
                        b = comp.node_cost(node, eng.group_state(gid))
                        best[gid] = min(b, best.get(gid, b))
        return sorted((b, gid) for gid, b in best.items())

    def check(g):
        nonlocal checked
        configs = list(g.state.configs)
        for p, c in configs:
            p.ends.pop(c, None)  # (what the walk records, not what an earlier Python answer left)
        w = eng.core.walk(configs, bounds=True)  # one call, new states copied in
        keys, bounds = w.keys, w.bounds
        for (p, c), got, bound in zip(configs, keys, bounds):
            assert got is not None
            assert got == eng.mask_key_python(p, c)
            assert bound == python_bound(p, c)
            # acceptance, recorded by the same call: a lexeme ending here completes a sentence
            assert p.ends.get(c) == any(q is not None and q.accepting
                                        for q in (p.feed(t) for t in idx._acc[c] if t != idx._ign))
            checked += 1
        assert eng.core.walk(configs).keys == keys  # without bounds, from the same arena
        if rng.random() < 0.3:  # the group costs near the end of a budget (slow in Python)
            assert eng.core.walk(configs, bounds=True, costs=True).costs == python_costs(configs)
        # the mask as a bitset (what the sampler applies) holds the same tokens as the ids
        mode, bits = g.mask()
        assert mode == MaskKind.BITS
        ids = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little"))
        assert ids.tolist() == g.allowed_token_ids().tolist()

    for text in texts:
        g = idx.guide()
        for t in tokenize(model, text):
            check(g)
            toks = [u for u in g.allowed_token_ids().tolist() if u not in stops]
            for u in rng.sample(toks, min(2, len(toks))):
                h = g.copy()
                h.advance(u)
                check(h)
            g.advance(t)
        check(g)
    return checked


@pytest.mark.parametrize("name", ["json", "sql", "c", "yaml", "arithmetic", "c-gbnf", "csv"])
def test_compiled_masks_equal_python_path(model, name, monkeypatch):
    monkeypatch.setattr(CompiledMasks, "initial_sets", 4)  # the arena grows many times
    monkeypatch.setattr(CompiledMasks, "scratch", 2)  # and sets outgrow the scratch areas
    idx = lazy_index(name, model.vocabulary)
    idx.guide().allowed_token_ids()
    assert idx.engine.core is not None
    assert compare_walks(idx, model, SAMPLES[name][0]) > 20
    assert idx.engine.core.n_sets > 4


@pytest.mark.parametrize("name", ["json", "sql"])
def test_budget_tables_grow_mid_walk(smollm2, name, monkeypatch):
    """A finish pool too small for one walk is flagged, grown and walked again; a half-full after
    memo is replaced by a larger one: bounds and costs stay those of the Python path."""
    from localguide.grammar import arena
    from localguide.grammar.arena_kernels import AR_AFTER, AR_FINISH

    monkeypatch.setattr(arena, "FINISH_ROWS", 2)
    monkeypatch.setattr(arena, "AFTER_SLOTS", 2)
    grown = []
    room = CompiledMasks._budget_room

    def watched(self):
        before = (len(self.A[AR_FINISH]), len(self.A[AR_AFTER]))
        again = room(self)
        grown.append((again, before != (len(self.A[AR_FINISH]), len(self.A[AR_AFTER]))))
        return again

    monkeypatch.setattr(CompiledMasks, "_budget_room", watched)
    idx = lazy_index(name, smollm2.vocabulary)
    idx.guide().allowed_token_ids()
    assert compare_walks(idx, smollm2, SAMPLES[name][0][:1]) > 5
    assert any(again for again, _ in grown)  # a walk found the pool full and was walked again
    assert sum(changed for _, changed in grown) >= 4  # both tables grew, several times
    assert len(idx.engine.core.A[AR_FINISH]) > 2


def test_flush_resets_the_arena(smollm2, smollm2_vocab):
    idx = lazy_index("sql", smollm2_vocab)
    g = idx.guide()
    for t in tokenize(smollm2, "SELECT a, b FROM t WHERE a > 1"):
        g.allowed_token_ids()
        g.advance(t)
    core = idx.engine.core
    assert core.n_sets > 0
    idx.flush()
    assert core.n_sets == 0
    for p, c in g.state.configs:  # a guide from before the flush: its states are copied in again
        assert core.mask_key(p, c) == idx.engine.mask_key_python(p, c)


def test_bitsets_after_a_flush_equal_the_ids(smollm2, smollm2_vocab):
    """A flush frees the rows of the large groups' bitsets; refilled for other groups, a row
    holds only theirs (a reused row once kept the old group's bits: unsound masks)."""
    from localguide.grammar.masks import bits_ids, key_groups, key_of

    idx = lazy_index("sql", smollm2_vocab)
    eng = idx.engine
    g = idx.guide()
    keys = []
    for t in tokenize(smollm2, "SELECT a, b FROM t WHERE a > 1 ORDER BY b"):
        g.mask()
        keys.append(key_groups(idx._mask_key(g.state)).tolist())
        g.advance(t)
    big = max(64, eng.vocab_size >> 6)
    large = sorted({k for key in keys for k in key if eng.grp_off[k + 1] - eng.grp_off[k] >= big})
    assert len(large) >= 2
    small = next(k for key in keys for k in key if k not in large)
    for order in (large, large[::-1]):  # rows refilled in another order after the flush
        idx.flush()
        for k in order:
            eng.bits_of(key_of([k]))  # gives the group its row
            key = key_of([k, small])  # made with the row
            assert bits_ids(eng.bits_of(key)).tolist() == eng.union_of(key).tolist()


def test_large_grammars_keep_the_python_path(smollm2, smollm2_vocab, monkeypatch):
    want = lazy_index("sql", smollm2_vocab)
    h = want.guide()
    h.allowed_token_ids()
    monkeypatch.setattr("localguide.grammar.arena.MAX_DSTATES", 10)
    idx = lazy_index("sql", smollm2_vocab)
    g = idx.guide()
    for t in tokenize(smollm2, "SELECT name FROM users"):
        assert g.allowed_token_ids().tolist() == h.allowed_token_ids().tolist()
        g.advance(t)
        h.advance(t)
    assert idx.engine.core is None and want.engine.core is not None


@pytest.mark.parametrize("name", ["json", "sql", "c", "yaml"])
def test_cached_dfa_equals_the_explored_one(smollm2, smollm2_vocab, name):
    """The ε-DFA kept in the cache file reads back state for state as the one explored, and
    a loaded index walks a sample without building a state (nor exploring again)."""
    from localguide.grammar.earley import Grammar

    fresh = lazy_index(name, smollm2_vocab)
    arrays = fresh.arrays()
    assert len(arrays["dfa_pred"]) == len(fresh.grammar.dstates) > 10
    loaded = GrammarIndex.from_arrays(arrays, smollm2_vocab)
    g0, g1 = fresh.grammar, loaded.grammar
    assert g1.nullable == g0.nullable and g1.accept_item == g0.accept_item
    for d in range(len(g0.dstates)):
        a, b = g0.dstates[d], g1.dstates[d]
        for slot in ("items", "shift", "complete", "allowed", "pred", "accept", "is_pred", "lhs"):
            assert getattr(a, slot) == getattr(b, slot), (d, slot)
    made = []
    real = Grammar._dstate
    Grammar._dstate = lambda self, *a: made.append(a) or real(self, *a)
    try:
        g, h = loaded.guide(), fresh.guide()
        for t in tokenize(smollm2, SAMPLES[name][0][0]):
            assert g.allowed_token_ids().tolist() == h.allowed_token_ids().tolist()
            g.advance(t)
            h.advance(t)
    finally:
        Grammar._dstate = real
    assert g.is_accepting() and made == [] and loaded.engine.core is not None


@pytest.mark.parametrize("name", ["json", "sql"])
def test_budget_on_a_loaded_index_makes_only_the_states_it_walks(model, name):
    """The budget's tables read the ε-DFA's items from the loaded arrays: a guide with a budget
    makes a ``DState`` for the states its walk reaches, not one per state (each would stay an
    object for the cycle collector to walk in a server that keeps the index), and it allows
    what the fresh index's guide with the same budget allows."""
    fresh = lazy_index(name, model.vocabulary)
    loaded = GrammarIndex.from_arrays(fresh.arrays(), model.vocabulary)
    states = loaded.grammar.dstates
    tokens = tokenize(model, SAMPLES[name][0][0])
    g, h = loaded.guide(max_tokens=len(tokens) + 8), fresh.guide(max_tokens=len(tokens) + 8)
    assert g.allowed_token_ids().tolist() == h.allowed_token_ids().tolist()
    assert 0 < dict.__len__(states) < len(states) // 4
    for t in tokens:
        assert g.allowed_token_ids().tolist() == h.allowed_token_ids().tolist()
        g.advance(t)
        h.advance(t)
    assert g.is_accepting() and loaded.engine.core is not None


def test_loaded_index_has_the_large_groups_bitsets_and_keeps_them(smollm2, smollm2_vocab):
    """A loaded index makes its large groups' bitsets at load; a flush keeps them, and masks
    made with them, before and after, hold exactly the allowed ids."""
    from localguide.grammar.masks import bits_ids

    idx = GrammarIndex.from_arrays(lazy_index("sql", smollm2_vocab).arrays(), smollm2_vocab)
    eng = idx.engine
    big = max(64, eng.vocab_size >> 6)
    large = [g for g in range(eng.n_grp) if eng.grp_off[g + 1] - eng.grp_off[g] >= big]
    assert len(large) >= 2 and eng._n_gw == len(large) and all(eng._g_row[g] >= 0 for g in large)
    rows = [eng._g_row[g] for g in large]
    for flushed in (False, True):
        if flushed:
            idx.flush()
            assert [eng._g_row[g] for g in large] == rows
        g = idx.guide()
        for t in tokenize(smollm2, "SELECT a, b FROM t WHERE a > 1 ORDER BY b"):
            key = idx._mask_key(g.state)
            assert bits_ids(eng.bits_of(key)).tolist() == eng.union_of(key).tolist()
            g.advance(t)


def _seeded(name, vocab):
    """(an index of ``name`` loaded from its arrays, with the arena seed; the seed)."""
    from localguide.grammar import arena

    built = lazy_index(name, vocab)
    a = built.arrays(seed=True)
    assert len(a["ar_set_off"]) - 1 == arena.SEED_SETS
    return GrammarIndex.from_arrays(a, vocab), {k: a[k] for k in arena.SEED_KEYS}


def test_seed_kernel_equals_its_twin(smollm2_vocab):
    from localguide.grammar import arena_kernels as kernels
    from localguide.grammar import arena

    g = lazy_index("sql", smollm2_vocab).grammar
    assert g.explore(arena.MAX_DSTATES)
    D = arena._dfa_tables(g)
    out = []
    for seed in (kernels.earley_seed, kernels.py_earley_seed):
        A = arena._new_arena(2048, D[DF_ALLOWED].shape[1], 1 << 14, 256)
        keys = np.array(sorted(d << 32 for d, _ in g.initial.entries), np.int64)
        seed(A, D, kernels.earley_intern(A, D, keys, len(keys)), 300, 4000)
        out.append(A)
    for x, y in zip(*out):
        assert np.array_equal(x, y)
    assert out[0][0][0] == 300


@pytest.mark.parametrize("name", ["sql", "c"])
def test_loaded_index_starts_from_the_seed(smollm2, smollm2_vocab, name):
    """A loaded index's arena holds the seed before its first mask, finds the seed's sets for
    the parser states it copies in, and its masks equal the Python path's."""
    from localguide.grammar import arena

    idx, seed = _seeded(name, smollm2_vocab)
    g = idx.guide()
    g.allowed_token_ids()
    core = idx.engine.core
    assert core.seed is not None
    n_seed = len(seed["ar_set_off"]) - 1
    assert core.n_sets == n_seed  # the initial state is a seed set
    A = core.A
    assert np.array_equal(A[AR_SET_OFF][:n_seed + 1], seed["ar_set_off"])
    assert np.array_equal(A[AR_SET_KEYS][:len(seed["ar_set_keys"])], seed["ar_set_keys"])
    assert compare_walks(idx, smollm2, SAMPLES[name][0]) > 20
    idx.flush()  # back to the seed, not to nothing
    assert core.n_sets == n_seed


def test_damaged_seed_is_left_out(smollm2, smollm2_vocab):
    """A seed that does not fit the grammar's tables (a damaged cache file) is not loaded: the
    arena starts empty and the masks are right."""
    idx, seed = _seeded("sql", smollm2_vocab)
    for k, fix in (("ar_set_keys", lambda x: x + (1 << 40)), ("ar_feed_sets", lambda x: x + 10 ** 6),
                   ("ar_set_off", lambda x: x[::-1].copy())):
        idx.engine.core = None
        idx.engine._core_tried = False
        idx.engine.seed = dict(seed, **{k: fix(seed[k])})
        idx.flush()
        g = idx.guide()
        g.allowed_token_ids()
        assert idx.engine.core.seed is None
        assert compare_walks(idx, smollm2, ["SELECT a FROM t WHERE b > 1"]) > 5


def test_kernel_context_copies_tables_but_not_the_arena(smollm2_vocab):
    """A read-only table of another dtype is copied into the context; an arena array, which the
    kernels write, must match its slot (a copy would lose the kernels' writes)."""
    from localguide.grammar import arena

    idx = sources.compile_grammar("arithmetic", smollm2_vocab)
    idx.guide().mask()
    core = idx.engine.core
    T = core._trees()
    S = (core.S[SC_ST_OFF], core.S[SC_ST_RD].astype(np.int64), core.S[SC_ACCEPT])  # readings of another dtype than their slot's
    ctx, held = arena.kernel_context(core.A, core.D, T, core.B, S)
    assert held[-2].dtype == np.int32 and ctx[-6] == held[-2].ctypes.data
    np.testing.assert_array_equal(held[-2], core.S[SC_ST_RD])
    A = (core.A[AR_META].astype(np.int32),) + core.A[AR_META + 1:]
    with pytest.raises(ValueError, match="arena array 0"):
        arena.kernel_context(A, core.D, T, core.B, core.S)


def test_merged_mask_keys_are_the_sorted_union():
    """A guide state's key merges its configurations' keys (unresolved tokens as negative ids)."""
    from localguide.grammar.masks import key_groups, key_of, merge_keys

    rng = random.Random(3)
    for n in (0, 1, 2, 40):
        keys = [key_of(rng.randrange(-5, 60) for _ in range(n)) for _ in range(rng.randrange(2, 5))]
        got = merge_keys(keys)
        assert key_groups(got).tolist() == sorted(set().union(*(key_groups(k).tolist() for k in keys)))


@pytest.mark.parametrize("several", [False, True])
def test_a_rejected_feed_falls_back_to_copying_the_state_in(smollm2, smollm2_vocab, several):
    """A parser state the arena makes by the feed that made it in Python (``PState.src``) is
    copied in instead if the arena rejects that feed: the key is still the Python walk's. Alone
    (``_args_one``) or beside another configuration (``_args``)."""
    idx = lazy_index("sql", smollm2_vocab)
    eng = idx.engine
    g = idx.guide()
    g.mask()
    core = eng.core
    for t in tokenize(smollm2, "SELECT a, b FROM t WHERE a > 1"):
        g.advance(t)
        fed = [(p, c) for p, c in g.state.configs
               if p.src is not None and p.uid not in core._aid and p.src[0] in core._aid]
        if fed:
            break
        g.mask()
    else:
        raise AssertionError("no state made by a feed from one the arena holds")
    p, c = fed[0]
    parent = next(q for q in eng.grammar._table.values() if q.uid == p.src[0])
    bad = next(t for t in range(eng.grammar.n_terminals) if not (parent.allowed >> t) & 1 and t != eng.ign)
    p.src = (p.src[0], bad)  # a feed the arena rejects
    configs = [(p, c)] + ([(parent, c)] if several else [])
    assert core.walk(configs).keys == [eng.mask_key_python(q, d) for q, d in configs]
    assert p.uid in core._aid
