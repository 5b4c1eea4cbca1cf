"""Grammar rewrites that keep the language: bounded repetitions (``Repeats``) and the inlining of
nonterminals used once (``inline_single_uses``), checked by the Earley recognizer itself on
every terminal sequence up to a length, against the languages they must have."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.errors import GrammarError
from localguide.grammar.cfg import CFG, Terminal, literal_dfa, normalize
from localguide.grammar.rewrites import (
    REPEAT_BLOCK, Repeats, inline_single_uses, merge_equal_rules, simplify_generated,
)
from localguide.grammar.earley import Grammar

LETTERS = "abc"


def recognizer(rules, start):
    """A function telling whether a word over ``LETTERS`` is in the grammar's language (or None
    when the grammar has no sentence)."""
    terminals = [Terminal(ch, literal_dfa(ch)) for ch in LETTERS]
    try:
        cfg = normalize(CFG(terminals, list(rules), start))
    except GrammarError:  # no sentence, or no start rule left
        return None
    g = Grammar(cfg)
    index = {t.name: i for i, t in enumerate(cfg.terminals)}

    def accepts(word: str) -> bool:
        p = g.initial
        for ch in word:
            if ch not in index:
                return False
            p = p.feed(index[ch])
            if p is None:
                return False
        return p.accepting

    return accepts, g


def repeat_grammar(lo, hi):
    rules: list = []
    names = itertools.count()
    rep = Repeats(lambda: f"r{next(names)}", rules)
    rules.append(("S", rep.bounded((0,), lo, hi) if hi is not None else (0,) * lo + (rep.star((0,)),)))
    return rules


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 60))
def test_bounded_repetition_has_exactly_its_counts(lo, extra):
    hi = lo + extra
    accepts, _ = recognizer(repeat_grammar(lo, hi), "S")
    for n in range(hi + 3):
        assert accepts("a" * n) == (lo <= n <= hi), (lo, hi, n)
    assert not accepts("a" * lo + "b")


def test_repetition_counts_in_blocks_and_beyond():
    for lo, hi in [(0, REPEAT_BLOCK), (0, REPEAT_BLOCK + 1), (3, 2 * REPEAT_BLOCK), (0, REPEAT_BLOCK ** 2 + 5),
                   (5, 5), (0, 0)]:
        accepts, _ = recognizer(repeat_grammar(lo, hi), "S")
        for n in sorted({0, 1, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1, hi + REPEAT_BLOCK}):
            if n >= 0:
                assert accepts("a" * n) == (lo <= n <= hi), (lo, hi, n)
    accepts, _ = recognizer(repeat_grammar(2, None), "S")
    assert [accepts("a" * n) for n in range(5)] == [False, False, True, True, True]


def test_long_repetition_keeps_earley_sets_small():
    """Nested optionals made the k-th copy's set hold k entries (a chain of completions)."""
    _, g = recognizer(repeat_grammar(0, 255), "S")
    p = g.initial
    sizes = []
    for _ in range(255):
        p = p.feed(0)
        sizes.append(len(p.entries))
    assert p.accepting and p.feed(0) is None
    assert max(sizes) <= 8, sizes


def test_repeat_pieces_are_shared():
    rules: list = []
    names = itertools.count()
    rep = Repeats(lambda: f"r{next(names)}", rules)
    rep.bounded((0,), 0, 300)
    n = len(rules)
    assert rep.bounded((0,), 0, 300) == rep.bounded((0,), 0, 300)
    assert len(rules) == n
    assert rep.star((0,)) == rep.star((0,))


# -- inlining ----------------------------------------------------------------------------------
NAMES = ["S", "A", "B", "C", "D"]
symbols = st.one_of(st.integers(0, len(LETTERS) - 1), st.sampled_from(NAMES))
grammars = st.lists(st.tuples(st.sampled_from(NAMES), st.lists(symbols, max_size=3).map(tuple)),
                    min_size=1, max_size=9)


def words(n: int):
    for k in range(n + 1):
        for w in itertools.product(LETTERS, repeat=k):
            yield "".join(w)


@settings(max_examples=200, deadline=None)
@given(grammars, st.sampled_from([inline_single_uses, merge_equal_rules, simplify_generated]))
def test_rewrites_keep_the_language(rules, rewrite):
    rules = [("S", rules[0][1])] + rules
    before = recognizer(rules, "S")
    after = recognizer(rewrite(rules, "S"), "S")
    if before is None:
        assert after is None
        return
    assert after is not None
    for w in words(5):
        assert before[0](w) == after[0](w), (rules, w)


def test_equal_rules_are_merged():
    rules = [("S", ("A", "B")), ("A", (0, "C")), ("B", (0, "D")), ("C", (1,)), ("C", ()), ("D", ()), ("D", (1,))]
    out = merge_equal_rules(rules, "S")
    assert {a for a, _ in out} == {"S", "A", "C"} and ("S", ("A", "A")) in out, out
    assert len(simplify_generated(rules, "S")) < len(rules)
    # merges cascade: C and D merged make A and B alike (not E, whose second rule differs)
    rules = [("S", ("A", "B", "E")), ("A", (0, "C")), ("A", (1,)), ("B", (0, "D")), ("B", (1,)),
             ("E", (0, "D")), ("E", (2,)), ("C", (2,)), ("C", ()), ("D", ()), ("D", (2,))]
    out = merge_equal_rules(rules, "S")
    assert {a for a, _ in out} == {"S", "A", "C", "E"}, out
    accepts = recognizer(out, "S")[0]
    want = recognizer(rules, "S")[0]
    assert all(accepts(w) == want(w) for w in words(5))


def test_inlining_removes_aliases_and_single_uses():
    rules = [("S", ("A", 2)), ("A", ("B",)), ("B", (0, "C")), ("C", (1,)), ("C", ()), ("D", ("D", 0)), ("D", ()),
             ("S", ("D",))]
    out = inline_single_uses(rules, "S")
    lhs = {a for a, _ in out}
    assert lhs == {"S", "C", "D"}, out  # A is an alias of B, used once with one rule
    assert ("S", (0, "C", 2)) in out
    # a whole right-hand side: each rule of E becomes one of S's
    rules = [("S", ("E",)), ("E", (0,)), ("E", (1, "E2")), ("E2", (2,)), ("E2", (1,))]
    out = inline_single_uses(rules, "S")
    assert {a for a, _ in out} == {"S", "E2"}, out  # E2: used inside a longer right-hand side
    accepts = recognizer(out, "S")[0]
    assert [w for w in words(2) if accepts(w)] == ["a", "bb", "bc"]


def test_gbnf_repetition_of_a_recursive_rule(vocab):
    """A bounded repetition of a recursive part stays a grammar (``Repeats``), exact at its bounds."""
    from localguide.grammar import compile_grammar

    idx = compile_grammar('root ::= item{2,40}\nitem ::= "(" item? ")"', vocab)
    for n in range(45):
        assert idx.matches("()" * n) == (2 <= n <= 40), n
    assert idx.matches("(())" * 3 + "()")
    assert not idx.matches("(()" + "()")
