"""Lookup: the token after the latest earlier occurrence of the longest match of the last tokens."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from localguide.speculate.lookup import MAX_MATCH, MAX_PROMPT, MIN_MATCH, Lookup


def plain(seq: list[int]) -> tuple[int, int] | None:
    """The same, by a plain search of every earlier position."""
    for m in range(MAX_MATCH, MIN_MATCH - 1, -1):
        if len(seq) <= m:
            continue
        for start in range(len(seq) - m - 1, -1, -1):
            if seq[start:start + m] == seq[len(seq) - m:]:
                return seq[start + m], m
    return None


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=40), st.lists(st.integers(0, 2), max_size=8),
       st.integers(0, 40))
def test_guesses_as_a_plain_search(tokens, extra, split):
    # built from a prompt and tokens appended one by one, with drafts not taken yet after them
    seen = Lookup(tokens[:split])
    for t in tokens[split:]:
        seen.append(t)
    assert seen.guess(extra) == plain(tokens + extra)


def test_the_longest_match_and_its_latest_occurrence_win():
    seen = Lookup([1, 2, 3, 4, 9, 9, 2, 3, 4, 5, 0, 1, 2, 3, 4])
    assert seen.guess() == (9, 4)  # "1 2 3 4" came before, followed by 9 (the 3-token "2 3 4": 5, later)
    assert seen.guess([7]) is None
    assert Lookup([1, 2]).guess([1]) is None


def test_a_long_prompt_is_looked_in_at_its_end():
    seen = Lookup([1, 2, 3, 4] + [0] * MAX_PROMPT)
    assert len(seen.tokens) == MAX_PROMPT
    assert seen.guess([1, 2, 3]) is None


def test_each_match_teaches_once():
    seen = Lookup([1, 1, 1, 1])
    assert seen.first(3) and not seen.first(3) and seen.first(4)
    seen.append(1)
    assert not seen.first(3)  # the same three tokens again
