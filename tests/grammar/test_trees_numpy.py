"""The numpy subterminal trees (a first use's path) against the kernel: the same (token, terminal
sequence, scanner state, lead) in every tree and the same unresolved tokens, on synthetic
vocabularies (with tiny reading budgets, so that tokens are left unresolved) and on both real
ones. (The numpy unions are checked beside the kernels' twins, in ``test_trees_kernels``.)"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_grammar_oracle import GBNF, GBNF_TOKENS, JSON_TOKENS, JSONISH, KEYWORDS, KW_TOKENS

from localguide import Vocabulary
from localguide.grammar import sources, trees_kernels, trees_numpy
from localguide.grammar.cfg import normalize
from localguide.grammar.compiled import GrammarIndex


def trees_of(result) -> tuple:
    """Per tree: the set of (token, terminal sequence, state, lead) and the set of unresolved
    tokens; the groups' tokens checked sorted and distinct, each tree's nodes parents first."""
    parent, term, tree_seq, grp_seq, grp_state, grp_lead, grp_off, grp_tok, unres_off, unres_tok = result
    assert all(a.dtype == np.int32 for a in (parent, term, grp_seq, grp_state, grp_lead, grp_tok, unres_tok))
    assert all(a.dtype == np.int64 for a in (tree_seq, grp_off, unres_off))
    assert (np.diff(grp_seq) >= 0).all()  # groups sorted by sequence node
    seqs: list = []
    for s in range(len(parent)):
        p = int(parent[s])
        assert p < s
        seqs.append(() if p < 0 else seqs[p] + (int(term[s]),))
    tree_of_seq = np.searchsorted(tree_seq, np.arange(len(parent)), side="right") - 1
    n = len(tree_seq) - 1
    got = [set() for _ in range(n)]
    for g in range(len(grp_seq)):
        toks = grp_tok[grp_off[g]:grp_off[g + 1]].tolist()
        assert toks == sorted(set(toks))
        for t in toks:
            got[tree_of_seq[grp_seq[g]]].add((t, seqs[grp_seq[g]], int(grp_state[g]), int(grp_lead[g])))
    unres = [tuple(unres_tok[unres_off[i]:unres_off[i + 1]].tolist()) for i in range(n)]
    return got, unres


def both(idx, vocab, max_cfg: int = 256) -> tuple:
    sc = idx.scanner
    args = (*vocab.trie.arrays, sc.trans, sc.acc_offsets, sc.acc_terms, sc.seed_tab, sc.ign, sc.live_tab, sc.rdist,
            sc.single[sc.tree_reading], sc.tree_track, vocab.size, max_cfg)
    return trees_of(trees_kernels.grammar_trees(*args)), trees_of(trees_numpy.grammar_trees(*args))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([(KEYWORDS, KW_TOKENS), (JSONISH, JSON_TOKENS), (GBNF, GBNF_TOKENS)]), st.data())
def test_numpy_trees_equal_the_kernels_on_drawn_vocabularies(case, data):
    grammar, base = case
    alphabet = sorted({b for t in base[1:] for b in t})
    extra = data.draw(st.lists(st.binary(min_size=1, max_size=6).map(lambda b: bytes(alphabet[x % len(alphabet)]
                                                                                      for x in b)), max_size=30))
    vocab = Vocabulary.from_tokens([b"<eos>"] + sorted(set(base[1:]) | set(extra)), stop_ids=[0])
    idx = GrammarIndex(normalize(sources.to_cfg(grammar, "gbnf" if "::=" in grammar else "lark", "g"), 3), vocab,
                       lazy=True)
    max_cfg = data.draw(st.sampled_from([1, 2, 3, 256]))
    kernel, numpy_ = both(idx, vocab, max_cfg)
    assert numpy_ == kernel
    if max_cfg == 256:
        assert sum(len(x) for x in kernel[0]) > 10


@pytest.mark.parametrize("name", sorted(sources.list_grammars()))
def test_numpy_trees_equal_the_kernels_on_smollm2(name, smollm2_vocab):
    text, kind, desc = sources.resolve(name)
    idx = GrammarIndex(normalize(sources.to_cfg(text, kind, desc), 64), smollm2_vocab, desc, lazy=True)
    kernel, numpy_ = both(idx, smollm2_vocab)
    assert numpy_ == kernel
    assert sum(len(x) for x in kernel[0]) > 50


@pytest.mark.parametrize("name", ["c", "csv"])
def test_numpy_trees_equal_the_kernels_on_gemma(name, gemma3_vocab):
    text, kind, desc = sources.resolve(name)
    idx = GrammarIndex(normalize(sources.to_cfg(text, kind, desc), 64), gemma3_vocab, desc, lazy=True)
    kernel, numpy_ = both(idx, gemma3_vocab)
    assert numpy_ == kernel
