"""Regex → byte DFA: ECMA-262 semantics, whole-string matching, valid UTF-8 only, minimal DFAs.

Python's ``re`` (``re.ASCII``, ``re.fullmatch``) is the oracle for the patterns of
``strategies.regexes``, which mean the same in both dialects.
"""

from __future__ import annotations

import re
from collections import deque

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from localguide.errors import LocalguideError
from localguide.regex import regex_to_dfa
from strategies import language_samples, matches, regex_pairs, regexes

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Strings to probe a DFA with: every kind of character the strategies use, and others.
PROBE_ALPHABET = "abcxyzAZ019 _-.,@\t\n\ré€日😀🙏\u00a0٣}{[]()\\$^|*+?/"


# --- helpers -------------------------------------------------------------------------

def utf8_step(u, b: int):
    """One step of a UTF-8 validator: state 0 is a character boundary; None is invalid."""
    if u == 0:
        if b < 0x80:
            return 0
        if 0xC2 <= b <= 0xDF:
            return 1
        if b == 0xE0:
            return "E0"
        if 0xE1 <= b <= 0xEF and b != 0xED:
            return 2
        if b == 0xED:
            return "ED"
        if b == 0xF0:
            return "F0"
        if 0xF1 <= b <= 0xF3:
            return 3
        if b == 0xF4:
            return "F4"
        return None
    lo, hi, nxt = {1: (0x80, 0xBF, 0), 2: (0x80, 0xBF, 1), 3: (0x80, 0xBF, 2),
                   "E0": (0xA0, 0xBF, 1), "ED": (0x80, 0x9F, 1),
                   "F0": (0x90, 0xBF, 2), "F4": (0x80, 0x8F, 2)}[u]
    return nxt if lo <= b <= hi else None


def assert_only_valid_utf8(dfa) -> None:
    """Every byte string that the DFA can read (not only accept) is a prefix of valid UTF-8,
    and it accepts only at character boundaries: a BFS over DFA x UTF-8 validator."""
    trans = dfa.transitions
    start = (0, 0)
    seen = {start}
    queue = deque([start])
    while queue:
        s, u = queue.popleft()
        if dfa.accepting[s]:
            assert u == 0, f"state {s} accepts in the middle of a UTF-8 character"
        for b in np.flatnonzero(trans[s] >= 0):
            u2 = utf8_step(u, int(b))
            assert u2 is not None, f"state {s} reads byte {int(b):#04x}, invalid in UTF-8 state {u}"
            nxt = (int(trans[s, b]), u2)
            if nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)


def equivalent_state_pairs(dfa) -> list[tuple[int, int]]:
    """Pairs of distinct states with the same language (naive partition refinement)."""
    n = dfa.n_states
    block = [int(a) for a in dfa.accepting]
    while True:
        sigs = [(block[s], tuple(block[t] if t >= 0 else -1 for t in dfa.transitions[s].tolist()))
                for s in range(n)]
        ids: dict = {}
        new = [ids.setdefault(sig, len(ids)) for sig in sigs]
        if len(ids) == len(set(block)):
            break
        block = new
    groups: dict = {}
    for s in range(n):
        groups.setdefault(block[s], []).append(s)
    return [(g[0], g[1]) for g in groups.values() if len(g) > 1]


def assert_trimmed(dfa) -> None:
    trans = dfa.transitions
    n = dfa.n_states
    assert trans.shape == (n, 256) and trans.dtype == np.int32
    assert trans.min() >= -1 and trans.max() < n
    reach = {0}
    queue = [0]
    while queue:
        s = queue.pop()
        for t in set(trans[s].tolist()) - {-1}:
            if t not in reach:
                reach.add(t)
                queue.append(t)
    assert reach == set(range(n)), "unreachable states"
    co = set(np.flatnonzero(dfa.accepting).tolist())
    changed = True
    while changed:
        changed = False
        for s in range(n):
            if s not in co and any(t in co for t in trans[s].tolist() if t >= 0):
                co.add(s)
                changed = True
    assert co == set(range(n)), "states that cannot reach acceptance"


# --- differential: localguide vs Python's re -----------------------------------------------

@pytest.mark.parametrize("cls", [r"[\S\D]", r"[\D\S]", r"[\S\W]", r"[\D\W]", r"[\W\Da]", r"[\S\D\W]",
                                 r"[\D\s]", r"[\W\d]", r"[^\D\W0]", r"[^\S\W]"])
def test_two_negated_escapes_in_one_class(cls):
    r"""A union of complements (interegular alone reads [\S\D] as matching neither '0' nor ' ')."""
    try:
        dfa = regex_to_dfa(cls)
    except LocalguideError:  # a class that matches nothing
        assert all(re.fullmatch(cls, c, re.ASCII) is None for c in PROBE_ALPHABET)
        return
    for c in PROBE_ALPHABET + "\n\t_-":
        assert dfa.matches(c.encode("utf-8")) == bool(re.fullmatch(cls, c, re.ASCII)), (cls, c)


@SETTINGS
@given(regex_pairs(), st.data())
def test_agrees_with_python_re(pair, data):
    pattern = pair[0]
    dfa = regex_to_dfa(pattern)
    for _ in range(3):
        text = data.draw(language_samples(pair), label="member")
        assert dfa.matches(text.encode("utf-8")), (pattern, text)
    for _ in range(5):
        text = data.draw(st.text(alphabet=PROBE_ALPHABET, max_size=6), label="probe")
        assert dfa.matches(text.encode("utf-8")) == matches(pattern, text), (pattern, text)


@SETTINGS
@given(regexes())
def test_dfa_is_trimmed_minimal_and_utf8_only(pattern):
    dfa = regex_to_dfa(pattern)
    assert_trimmed(dfa)
    assert_only_valid_utf8(dfa)
    if dfa.n_states <= 150:
        assert equivalent_state_pairs(dfa) == [], "the DFA is not minimal"


@pytest.mark.parametrize("pattern", [r".*", r"[^a]*", r"\W*", r"\S+", r"\D*", r"[\s\S]*",
                                     r"[😀-🙏]{1,3}", r"日本語|中文", r"[^\x00-\x7f]+", r"[^]*"])
def test_wide_classes_read_only_valid_utf8(pattern):
    dfa = regex_to_dfa(pattern)
    assert_trimmed(dfa)
    assert_only_valid_utf8(dfa)
    assert equivalent_state_pairs(dfa) == []


@pytest.mark.parametrize("data", [b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80", b"\xed\xa0\x80",
                                  b"\xf0\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80",
                                  b"\xff", b"\x80", b"\xc3", b"\xe6\x97"])
def test_any_character_rejects_invalid_utf8(data):
    assert not regex_to_dfa(r"[\s\S]*").matches(data)
    assert not regex_to_dfa(r".*").matches(data)


# --- ECMA-262 semantics, case by case ----------------------------------------------------------

SEMANTICS = [
    # pattern, members, non-members
    (r"\d", ["0", "5", "9"], ["٣", "a", "", "55"]),
    (r"\w", ["a", "Z", "0", "_"], ["é", "-", " ", "日"]),
    (r"\s", [" ", "\t", "\n", "\r", "\f", "\v"], ["\u00a0", "\u2028", "a", ""]),
    (r"\D", ["a", "٣", "😀", "\n"], ["5", ""]),
    (r"\W", ["é", "-", "😀"], ["a", "_"]),
    (r"\S", ["a", "\u00a0", "😀"], [" ", "\n"]),
    (r".", ["a", "\r", "é", "日", "😀", "\u2028"], ["\n", "", "ab"]),
    (r"[^]", ["\n", "a", "😀"], ["", "ab"]),
    (r"[\s\S]", ["\n", "é"], [""]),
    (r"\x41\u00e9\u{1F600}", ["Aé😀"], ["A"]),
    (r"\ud83d\ude00", ["😀"], [""]),
    (r"\cJ\0\t", ["\n\0\t"], []),
    (r"[\b]", ["\b"], ["b"]),
    (r"(?<year>\d{4})-(?:\d\d)", ["2024-01"], ["2024-1"]),
    (r"a{,3}", ["a{,3}"], ["", "aaa"]),
    (r"a{", ["a{"], ["a"]),
    (r"x{1,2", ["x{1,2"], ["x"]),
    (r"]}", ["]}"], []),
    (r"a\$", ["a$"], ["a"]),
    (r"\^a", ["^a"], ["a"]),
    (r"^ab|cd$", ["ab", "cd"], ["abcd", "ab\n"]),
    (r"^(?:ab)$", ["ab"], ["ab\n"]),
    (r"a|", ["a", ""], ["aa"]),
    (r"", [""], ["a"]),
    (r"a{0}", [""], ["a"]),
    (r"(a|b)*?c", ["c", "abbac"], ["ab"]),
    (r"a+?b??", ["a", "aab"], ["b"]),
    (r"[😀-🙏]", ["😀", "😁", "🙏"], ["🙐", "\U0001F5FF"]),
    (r"[é-ë]+", ["éêë"], ["e", "ì"]),
    (r"[-a]", ["-", "a"], ["b"]),
    (r"[a-]", ["-", "a"], ["b"]),
    (r"[\-\]\\^]", ["-", "]", "\\", "^"], ["a"]),
    (r"\/\-\.", ["/-."], []),
    (r"(?:)", [""], ["a"]),
    (r"(ab){2,}", ["abab", "ababab"], ["ab", "aba"]),
]


@pytest.mark.parametrize("pattern,members,others", SEMANTICS, ids=[s[0] for s in SEMANTICS])
def test_semantics(pattern, members, others):
    dfa = regex_to_dfa(pattern)
    for text in members:
        assert dfa.matches(text.encode("utf-8")), f"{pattern!r} should match {text!r}"
    for text in others:
        assert not dfa.matches(text.encode("utf-8")), f"{pattern!r} should not match {text!r}"


def test_escaped_backslash_before_final_anchor():
    """``a\\\\$`` is the literal ``a\\`` followed by the end anchor (ECMA-262 and Python agree)."""
    pattern = r"a\\$"
    assert re.fullmatch(pattern, "a\\")
    dfa = regex_to_dfa(pattern)
    assert dfa.matches(b"a\\")
    assert not dfa.matches(b"a")


@pytest.mark.parametrize("greedy,lazy", [(r"a*b", r"a*?b"), (r"(ab)+", r"(ab)+?"), (r"x{1,3}", r"x{1,3}?"),
                                         (r"a?", r"a??")])
def test_lazy_quantifiers_have_the_same_language(greedy, lazy):
    g, z = regex_to_dfa(greedy), regex_to_dfa(lazy)
    assert np.array_equal(g.transitions, z.transitions) and np.array_equal(g.accepting, z.accepting)


@pytest.mark.parametrize("plain,anchored", [("abc", "^abc$"), ("a|b", "^a|b$"), (r"\d+", r"^\d+"),
                                            (r"\d+", r"\d+$")])
def test_outer_anchors_are_no_ops(plain, anchored):
    p, a = regex_to_dfa(plain), regex_to_dfa(anchored)
    assert np.array_equal(p.transitions, a.transitions) and np.array_equal(p.accepting, a.accepting)


@given(st.text(alphabet=PROBE_ALPHABET, max_size=8))
@settings(max_examples=60, deadline=None)
@example("😀🙏")
def test_escaped_literal_matches_exactly_itself(text):
    pattern = "".join("\\u{%x}" % ord(c) for c in text)
    dfa = regex_to_dfa(pattern)
    assert dfa.matches(text.encode("utf-8"))
    assert not dfa.matches(text.encode("utf-8") + b"a")
    assert dfa.n_states == len(text.encode("utf-8")) + 1


@SETTINGS
@given(regexes())
def test_ascii_shortcut_equals_the_utf8_route(pattern):
    """ASCII-only patterns skip the UTF-8 expansion and subset construction; the minimal
    DFA (numbered canonically) is the same array as the general route's."""
    import interegular

    from localguide.regex import parser as R

    fsm = interegular.parse_pattern(R.normalize(pattern)).to_fsm()
    table = R._ascii_table(fsm)
    if table is None or len(fsm.states) > 300:
        return
    direct = R.minimize(*table)
    nfa = R._fsm_to_nfa(fsm)  # (not reduced first: Brzozowski's method can blow up)
    general = nfa.to_dfa(nfa.start)
    np.testing.assert_array_equal(direct.transitions, general.transitions)
    np.testing.assert_array_equal(direct.accepting, general.accepting)


@SETTINGS
@given(regexes())
def test_hashed_refinement_equals_exact_refinement(pattern):
    from localguide.automaton import minimize_kernels as A  # the twin of the compiled minimizer

    dfa = regex_to_dfa(pattern)
    t = np.where(dfa.transitions < 0, dfa.n_states, dfa.transitions).astype(np.int64)
    t = np.vstack([t, np.full((1, 256), dfa.n_states, np.int64)])
    acc = np.append(dfa.accepting, False)
    b1, c1 = A._refine(acc, t, hashed=True)
    b2, c2 = A._refine(acc, t, hashed=False)
    assert c1 == c2
    # The same partition, whatever the block numbers.
    assert len(set(zip(b1.tolist(), b2.tolist()))) == c1
    assert A._stable(b1, t, acc)
    if acc.any():  # merging everything (as a run of hash collisions might) is caught
        assert not A._stable(np.zeros_like(b1), t, acc)
