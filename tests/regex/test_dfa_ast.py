"""Byte DFA → regex AST (``localguide.regex.dfa_ast``): the AST's automaton is the DFA again,
on random patterns (multi-byte characters included) and on the boolean combinations of two
(the key regions of pattern properties)."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strategies import regexes
from localguide.automaton import ByteDFA, combine, minimize, product
from localguide.regex.ast import EMPTY
from localguide.regex.ast_dfa import ast_to_dfa
from localguide.regex.dfa_ast import char_edges, dfa_to_node
from localguide.regex.parser import regex_to_dfa


def same(a: ByteDFA, b: ByteDFA) -> bool:
    """Equal languages: minimal DFAs are numbered breadth-first, so their arrays are equal."""
    return a.n_states == b.n_states and np.array_equal(a.transitions, b.transitions) and \
        np.array_equal(a.accepting, b.accepting)


@settings(max_examples=150, deadline=None)
@given(regexes(max_depth=1))
def test_round_trip(pattern):
    dfa = regex_to_dfa(pattern)
    node = dfa_to_node(dfa, max_weight=5000)
    assume(node is not None)  # (a regex past the bound: the caller keeps its approximation)
    assert same(ast_to_dfa(node), dfa) if node is not EMPTY else dfa.is_empty


@settings(max_examples=80, deadline=None)
@given(regexes(max_depth=1), regexes(max_depth=1), st.sampled_from(["and", "minus", "xor"]))
def test_boolean_combinations(p, q, op):
    a, b = regex_to_dfa(p), regex_to_dfa(q)
    accept = {"and": lambda f: f[0] and f[1], "minus": lambda f: f[0] and not f[1],
              "xor": lambda f: f[0] != f[1]}[op]
    dfa = combine([a, b], accept)
    node = dfa_to_node(dfa, max_weight=5000)
    assume(node is not None)
    assert same(ast_to_dfa(node), dfa) if node is not EMPTY else dfa.is_empty


def test_product_flags_and_bounds():
    a, b = regex_to_dfa("ab*"), regex_to_dfa("a.")
    trans, flags = product([a, b])
    assert flags.shape == (len(trans), 2)
    both = minimize(trans, flags[:, 0] & flags[:, 1])
    assert both.matches(b"ab") and not both.matches(b"a") and not both.matches(b"abb")
    # a product past an int64 of state tuples takes the tuple-keyed path: the same automaton
    many = [regex_to_dfa(f"[a-z]{{{i}}}x") for i in range(20, 26)]
    assert same(combine(many, lambda f: any(f)), regex_to_dfa("|".join(f"[a-z]{{{i}}}x" for i in range(20, 26))))


def test_multibyte_edges():
    """Code points, not bytes: one class of 2-, 3- and 4-byte characters is one edge."""
    dfa = regex_to_dfa("[é-ÿ\u4e00-\u9fff\U0001F600-\U0001F64F]")
    edges = char_edges(dfa)
    (target, ranges), = edges[0].items()
    assert ranges == [(0xE9, 0xFF), (0x4E00, 0x9FFF), (0x1F600, 0x1F64F)] and dfa.accepting[target]


def test_too_large_gives_up():
    dfa = regex_to_dfa("(a|b)*a(a|b){3}")  # a minimal DFA of 2^4 states, a regex of thousands of leaves
    assert dfa_to_node(dfa, max_weight=100) is None
    assert same(ast_to_dfa(dfa_to_node(dfa)), dfa)
    assert dfa_to_node(regex_to_dfa("(a|b)*a(a|b){9}")) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(regexes(max_depth=1), min_size=1, max_size=4), st.integers(0, 2))
def test_product_equals_its_tuple_keyed_twin(patterns, op):
    """The product read a whole level at a time (codes, byte classes) has the states of the
    tuple-keyed path, state 0 the start, and the same automaton for any choice of accepting flags."""
    from localguide.automaton.dfa import TooManyStates, _product_tuples

    dfas = [regex_to_dfa(p) for p in patterns]
    assume(all(not d.is_empty for d in dfas))
    t1, f1 = product(dfas)
    t2, f2 = _product_tuples(dfas)
    assert t1.shape == t2.shape and f1.shape == f2.shape
    pick = [lambda f: f.all(axis=1), lambda f: f.any(axis=1), lambda f: f[:, 0] & ~f[:, 1:].any(axis=1)][op]
    assert same(minimize(t1, pick(f1)), minimize(t2, pick(f2)))
    assert f1[0].tolist() == [bool(d.accepting[0]) for d in dfas]
    if len(t1) > 1:
        try:
            product(dfas, max_states=len(t1) - 1)
        except TooManyStates:
            pass
        else:
            raise AssertionError("max_states not enforced")
    product(dfas, max_states=len(t1))
