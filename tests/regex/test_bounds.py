"""Every regex compile is bounded (issue: reliability): past the bounds, an error naming the bound
and the repetition at fault; choices and large alternations of words built directly."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import localguide
from localguide.automaton.literals import literals_dfa
from localguide.errors import UnsupportedPatternError
from localguide.regex.ast_dfa import ast_to_dfa
from localguide.regex.compile import choice_pattern
from localguide.regex.parser import MAX_STATES, match_node, regex_to_dfa


@pytest.mark.parametrize("pattern,at", [(".{0,10000}", 1), ("(.{1,100}){1,100}", 10)])
def test_a_pattern_over_the_bounds_is_refused_naming_them(smollm2_vocab, pattern, at):
    t = time.perf_counter()
    with pytest.raises(UnsupportedPatternError) as e:
        localguide.compile_regex(pattern, smollm2_vocab)
    assert time.perf_counter() - t < 60  # (not a timing test: unbounded, these took minutes or all memory)
    assert e.value.position == at and "bound" in str(e.value)
    assert f"{MAX_STATES:,}" in str(e.value) or "MAX_INDEX_TRANSITIONS" in str(e.value)


def test_an_index_too_large_is_refused_before_it_is_built(smollm2_vocab):
    with pytest.raises(UnsupportedPatternError, match="token transitions") as e:
        localguide.compile_regex(".{0,3000}", smollm2_vocab)  # (30,001 states: each takes most tokens)
    assert e.value.position == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet="ab\u00e9\u4e2d", max_size=6), min_size=1, max_size=30), st.text(alphabet="ab\u00e9\u4e2d", max_size=6))
def test_literals_dfa_is_the_minimal_dfa_of_the_strings(words, probe):
    d = literals_dfa([w.encode() for w in words])
    assert d.matches(probe.encode()) == (probe in words)
    for w in words:
        assert d.matches(w.encode())
    ref = ast_to_dfa(match_node(choice_pattern(words)))
    assert d.n_states == ref.n_states and (d.transitions == ref.transitions).all()


def test_ten_thousand_choices_and_a_large_alternation(smollm2_vocab):
    words = [f"item-{i}-{i * 7 % 1000}" for i in range(10000)]
    t = time.perf_counter()
    index = localguide.compile_choice(words, smollm2_vocab)
    assert time.perf_counter() - t < 10  # (not a timing test: the regex route took over 5 minutes)
    g = index.guide()
    for b in b"item-42-294":  # (single-byte tokens: every path of the trie is there)
        g.advance(next(t for t in g.allowed_token_ids() if smollm2_vocab[int(t)] == bytes([b])))
    assert g.is_accepting()
    pattern = "|".join(words[:3000])
    assert regex_to_dfa(pattern).n_states == literals_dfa([w.encode() for w in words[:3000]]).n_states
    with pytest.raises(localguide.errors.ArgumentError, match="list of strings"):
        localguide.compile_choice("yes", smollm2_vocab)


def test_groups_nested_past_the_bound_are_an_error_naming_it():
    from localguide.regex.parser import MAX_NESTING

    regex_to_dfa("(" * MAX_NESTING + "a" + ")" * MAX_NESTING)  # (the bound itself compiles)
    with pytest.raises(UnsupportedPatternError, match="MAX_NESTING") as e:
        regex_to_dfa("(" * 200 + "a" + ")" * 200)
    assert e.value.position == MAX_NESTING
