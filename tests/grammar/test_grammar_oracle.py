"""Grammar masks against brute force: the allowed set is exactly {t : text + t is a viable prefix}.

Two oracles: (1) for regular grammars, an independent DFA of the same language
(``localguide.regex``): a prefix is viable iff the trimmed DFA is still alive;
(2) for context-free grammars, the guide's own byte-level simulation, which shares
no code with the precomputed subterminal trees the masks come from.
"""

from __future__ import annotations

import os
import random
import tempfile

import numpy as np
import pytest

os.environ.setdefault("LOCALGUIDE_CACHE_DIR", tempfile.mkdtemp(prefix="localguide-test-"))

from localguide import BudgetError, TokenNotAllowedError, Vocabulary  # noqa: E402
from localguide.grammar import compile_grammar  # noqa: E402
from localguide.grammar import trees_kernels as kernels  # noqa: E402
from localguide.regex import regex_to_dfa  # noqa: E402

JSONISH = r'''
start: value
?value: object | array | STRING | NUMBER | "true" | "false" | "null"
array: "[" [value ("," value)*] "]"
object: "{" [pair ("," pair)*] "}"
pair: STRING ":" value
STRING: /"[a-z]*"/
NUMBER: /-?[0-9]+/
%ignore /[ \n]+/
'''
JSON_TOKENS = [b"<eos>", b"{", b"}", b"[", b"]", b",", b":", b'"', b'",', b'":', b"a", b"ab", b"true", b"tr",
               b"ue", b"1", b"-", b"12", b" ", b"  ", b"\n", b'{"', b"},", b"],", b'"a"', b"nul", b"l",
               b"null,", b"e", b" {", b", ", b"}}", b'":"', b'"}', b"1,", b"]]"]

# Keywords that are prefixes of names, names that may follow names, and an ignored separator.
KEYWORDS = r'''
start: stmt+
stmt: "if" NAME "then" NAME ";" | NAME "=" NAME ";" | "int" NAME ";"
NAME: /[a-z]+/
%ignore " "
'''
KW_TOKENS = [b"<eos>", b"i", b"f", b"if", b"int", b"in", b"t", b"then", b"the", b"n", b"x", b"xy", b";", b"=",
             b" ", b"  ", b"f ", b"x;", b";\n", b"intx", b"ift", b"n;", b" =", b"= ", b"hen", b"a"]

# GBNF with a recursive rule, left recursion and a nullable terminal.
GBNF = r'''
root ::= list
list ::= "(" ws items? ws ")"
items ::= items ws "," ws item | item
item ::= [0-9]+ | list
ws ::= [ ]?
'''
GBNF_TOKENS = [b"<eos>", b"(", b")", b"()", b"((", b"))", b"1", b"12", b",", b", ", b" ", b"(1", b"1)", b",(",
               b" )", b"0,", b"x"]


def brute_force(idx, tokens, text: bytes) -> list[int]:
    out = []
    for i, t in enumerate(tokens):
        if i == 0:
            if idx.matches(text):
                out.append(0)
        elif idx.is_prefix(text + t):
            out.append(i)
    return out


@pytest.mark.parametrize("grammar,tokens,run", [(JSONISH, JSON_TOKENS, 3), (JSONISH, JSON_TOKENS, None),
                                                  (KEYWORDS, KW_TOKENS, 32), (GBNF, GBNF_TOKENS, 32)],
                         ids=["jsonish", "jsonish-unlimited", "keywords", "gbnf"])
def test_masks_equal_brute_force(grammar, tokens, run):
    """Exact masks for the restricted language: ignored runs of at most ``run`` bytes, none at the end."""
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(grammar, vocab, max_ignored_run=run)
    rng = random.Random(1)
    for _ in range(150):
        g = idx.guide()
        text = b""
        for _ in range(10):
            allowed = g.allowed_token_ids()
            assert allowed.dtype == np.int32
            assert allowed.tolist() == brute_force(idx, tokens, text), text
            assert g.is_accepting() == (0 in allowed.tolist())
            if not len(allowed) or allowed.tolist() == [0]:
                break
            t = rng.choice(allowed.tolist())
            if t == 0:
                g.advance(0)
                assert g.is_finished()
                break
            g.advance(t)
            text += tokens[t]
        # anything outside the mask is rejected by advance
        if not g.is_finished():
            bad = sorted(set(range(len(tokens))) - set(g.allowed_token_ids().tolist()))
            for t in bad[:3]:
                with pytest.raises(TokenNotAllowedError):
                    g.copy().advance(t)


REGULAR = r'''
start: item ("," item)*
item: WORD | NUMBER | WORD "=" NUMBER
WORD: /[a-c]+/
NUMBER: /[0-9]+(\.[0-9]+)?/
%ignore / +/
'''
# The same language with at most 3 spaces in a row and none at the end (max_ignored_run=3).
_ITEM = r"(?:[a-c]+|[0-9]+(?:\.[0-9]+)?|[a-c]+ {0,3}= {0,3}[0-9]+(?:\.[0-9]+)?)"
REGULAR_REGEX = rf" {{0,3}}{_ITEM}(?: {{0,3}}, {{0,3}}{_ITEM})*"


def test_regular_grammar_matches_independent_dfa():
    tokens = [b"<eos>", b"a", b"ab", b"abc", b"c", b"1", b"12", b".", b".5", b"1.", b",", b", ", b" ", b"=",
              b"a=", b"=1", b" =", b"a,", b"1,b", b"ba1", b"  ", b"   ", b"    ", b"  a", b",  ", b"1   ,"]
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(REGULAR, vocab, max_ignored_run=3)
    dfa = regex_to_dfa(REGULAR_REGEX)

    def oracle(text):
        out = []
        for i, t in enumerate(tokens):
            if i == 0:
                if dfa.matches(text):
                    out.append(0)
            elif dfa.run(text + t) >= 0:
                out.append(i)
        return out

    rng = random.Random(7)
    for _ in range(300):
        g = idx.guide()
        text = b""
        for _ in range(8):
            allowed = g.allowed_token_ids().tolist()
            assert allowed == oracle(text), text
            choices = [t for t in allowed if t != 0]
            if not choices:
                break
            t = rng.choice(choices)
            g.advance(t)
            text += tokens[t]


@pytest.mark.parametrize("grammar,tokens,run", [(KEYWORDS, KW_TOKENS, 32), (JSONISH, JSON_TOKENS, 3),
                                                  (GBNF, GBNF_TOKENS, None)], ids=["keywords", "jsonish", "gbnf"])
def test_kernel_matches_twin(grammar, tokens, run):
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(grammar, vocab, max_ignored_run=run)
    sc = idx.scanner
    origins = sc.single[sc.tree_reading]
    res = kernels.grammar_trees(*vocab.trie.arrays, sc.trans, sc.acc_offsets, sc.acc_terms, sc.seed_tab, sc.ign,
                                sc.live_tab, sc.rdist, origins, sc.tree_track, vocab.size, 256)
    parent, term, tree_seq, grp_seq, grp_state, grp_lead, grp_off, grp_tok, unres_off, unres_tok = res
    assert len(unres_tok) == 0

    def seq_of(s):
        seq = []
        while parent[s] >= 0:
            seq.append(int(term[s]))
            s = int(parent[s])
        return tuple(reversed(seq))

    got = [set() for _ in origins]
    tree_of_seq = np.searchsorted(tree_seq, np.arange(len(parent)), side="right") - 1
    for g in range(len(grp_seq)):
        toks = grp_tok[grp_off[g]:grp_off[g + 1]]
        assert list(toks) == sorted(set(toks.tolist()))
        for t in toks:
            got[tree_of_seq[grp_seq[g]]].add((int(t), seq_of(grp_seq[g]), int(grp_state[g]), int(grp_lead[g])))
    want = kernels.py_grammar_trees({i: vocab[i] for i in range(vocab.size)}, sc.trans, sc.accept_lists,
                                    sc.seed_tab, sc.ign, sc.live_tab, sc.rdist, origins, sc.tree_track)
    assert got == want
    assert sum(len(x) for x in want) > 20


def test_tokens_spanning_terminals_and_ignored_whitespace():
    tokens = [b"<eos>", b'{"', b'a', b'":', b' 1', b'},', b'}', b'", "', b',', b' ', b'"b', b"1"]
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(JSONISH, vocab)
    g = idx.guide()
    for t in [1, 2, 3, 4]:  # {"a": 1
        assert t in g.allowed_token_ids()
        g.advance(t)
    assert 6 in g.allowed_token_ids() and 8 in g.allowed_token_ids()
    g.advance(6)
    assert g.is_accepting() and 0 in g.allowed_token_ids()


def test_lexical_ambiguity_never_commits():
    vocab = Vocabulary.from_tokens(KW_TOKENS, stop_ids=[0])
    idx = compile_grammar(KEYWORDS, vocab)
    # "int" may be the keyword or the start of a NAME ("intx = y;")
    assert idx.matches("int x;") and idx.matches("intx=y;") and idx.matches("inty;")
    assert idx.matches("if x then y;") and idx.matches("ifx theny;")
    assert not idx.matches("int;") and not idx.matches("if x then;")


ARITH_TOKENS = [b"<eos>", b"1", b"12", b"(", b"((", b"(((", b")", b"))", b"+", b"-", b"*", b"/", b" ", b"  ",
                b"+(", b"*(", b"-(", b"1)", b"2))", b"3+", b" (", b"(-", b"+((", b"1.5", b".", b"(1"]


@pytest.mark.parametrize("grammar,tokens", [(JSONISH, JSON_TOKENS), ("arithmetic", ARITH_TOKENS),
                                            (GBNF, GBNF_TOKENS)], ids=["jsonish", "arithmetic", "gbnf"])
def test_budget_always_ends_complete(grammar, tokens):
    """Random walks under max_tokens=k: every allowed token keeps a completion within the budget."""
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[0])
    idx = compile_grammar(grammar, vocab, max_ignored_run=3)
    comp = idx.completer
    need = len(idx.guide(max_tokens=64)._current_plan())
    rng = random.Random(11)
    for k in list(range(need, need + 8)) + [20]:
        for _ in range(40):
            g = idx.guide(max_tokens=k)
            n = 0
            while n < k:
                allowed = g.allowed_token_ids().tolist()
                assert allowed, (k, n)
                for t in allowed:  # soundness of the mask, token by token
                    if t != 0:
                        nxt = idx.step(g.state, t)
                        plan = comp.plan(nxt)
                        assert plan is not None and len(plan) <= g.remaining - 1 or t == g._current_plan()[0]
                t = rng.choice(allowed)
                g.advance(t)
                if t == 0:
                    break
                n += 1
            assert g.is_accepting() and n <= k
    if need:
        with pytest.raises(BudgetError):
            idx.guide(max_tokens=need - 1)


def test_disk_cache_roundtrip(tmp_path, monkeypatch):
    """A grammar loaded from the disk cache gives the same masks as the one built."""
    from localguide.runtime import cache
    from localguide.grammar import sources

    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sources, "_COMPILED", sources.BoundedCache(32, 1 << 30))
    vocab = Vocabulary.from_tokens(JSON_TOKENS, stop_ids=[0])
    built = compile_grammar(JSONISH, vocab, max_ignored_run=3)
    cache.flush()  # a lazy index writes its file once its trees are complete
    assert list(tmp_path.glob("grammar-*"))
    sources._COMPILED.clear()
    loaded = compile_grammar(JSONISH, vocab, max_ignored_run=3)
    assert loaded is not built
    rng = random.Random(2)
    for _ in range(40):
        a, b = built.guide(max_tokens=12), loaded.guide(max_tokens=12)
        for _ in range(12):
            ma, mb = a.allowed_token_ids(), b.allowed_token_ids()
            assert ma.tolist() == mb.tolist()
            if not len(ma):
                break
            t = rng.choice(ma.tolist())
            a.advance(t)
            b.advance(t)
            if t == 0:
                break


def _naive_trigrams(g):
    """All terminal trigrams of the grammar's sentences, by a fixpoint over explicit sets."""
    nt = g.n_terminals
    F = {t: {(t,)} for t in range(nt)}
    L = {t: {(t,)} for t in range(nt)}
    TR = {t: set() for t in range(nt)}
    for n in g.nt_id.values():
        F[n], L[n], TR[n] = set(), set(), set()
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            pre, first, tri = {()}, {()}, set()
            if any(not F[s] for s in rhs):
                continue
            for s in rhs:
                tri |= TR[s]
                for u in pre:
                    for v in F[s]:
                        w = u + v
                        tri.update(w[i:i + 3] for i in range(len(w) - 2))
                pre = {(u + v)[-2:] if len(v) < 2 else v for u in pre for v in L[s]}
                first = {u if len(u) >= 2 else (u + v)[:2] for u in first for v in F[s]}
            for d, new in ((F, first), (L, pre), (TR, tri)):
                if not new <= d[lhs]:
                    d[lhs] |= new
                    changed = True
    return TR[g.nt_id["__start__"]]


@pytest.mark.parametrize("name", ["json", "arithmetic", "c", "yaml", "json-gbnf", "c-gbnf"])
def test_trigrams_match_naive(name):
    from localguide.grammar.cfg import normalize
    from localguide.grammar.earley import Grammar
    from localguide.grammar.lexer import trigrams
    from localguide.grammar.sources import resolve, to_cfg

    text, kind, desc = resolve(name)
    g = Grammar(normalize(to_cfg(text, kind, desc)))
    fast = {(a, b, c) for (a, b), cm in trigrams(g).items() for c in range(g.n_terminals) if (cm >> c) & 1}
    assert fast == _naive_trigrams(g)
