"""Regex → byte DFA: ECMA-262 semantics, whole-string matching, valid UTF-8 only, minimal DFAs.

Python's ``re`` (``re.ASCII``, ``re.fullmatch``) is the oracle for the patterns of
``strategies.regexes``, once ``strategies.to_python`` has spelled out ECMA's ``\\s`` and ``.``;
``test_v8.py`` checks the dialect against V8 itself.
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
from strategies import ECMA_SPACE, language_samples, matches, regex_pairs, regexes

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
    r"""A class holding negated escapes is the union of their complements (``[\S\D]`` is everything)."""
    sets = {"s": lambda c: re.fullmatch(f"[{ECMA_SPACE}]", c) is not None, "d": lambda c: c.isascii() and c.isdigit(),
            "w": lambda c: c.isascii() and (c.isalnum() or c == "_")}
    body = cls[1:-1]
    negated = body.startswith("^")
    items = re.findall(r"\\[A-Za-z]|.", body[1:] if negated else body)

    def member(c):
        def one(item):
            if item[0] == "\\":
                hit = sets[item[1].lower()](c)
                return hit if item[1].islower() else not hit
            return c == item
        return any(one(i) for i in items) != negated

    try:
        dfa = regex_to_dfa(cls)
    except LocalguideError:  # a class that matches nothing
        assert not any(member(c) for c in PROBE_ALPHABET)
        return
    for c in PROBE_ALPHABET + "\n\t_-":
        assert dfa.matches(c.encode("utf-8")) == member(c), (cls, c)


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
    (r"\s", [" ", "\t", "\n", "\r", "\f", "\v", "\u00a0", "\u1680", "\u2000", "\u200a", "\u2028", "\u2029",
             "\u202f", "\u205f", "\u3000", "\ufeff"], ["\x1c", "\x85", "\u200b", "a", ""]),
    (r"\D", ["a", "٣", "😀", "\n"], ["5", ""]),
    (r"\W", ["é", "-", "😀"], ["a", "_"]),
    (r"\S", ["a", "\x85", "😀"], [" ", "\n", "\u00a0", "\ufeff"]),
    (r".", ["a", "é", "日", "😀", "\x85", "\t"], ["\n", "\r", "\u2028", "\u2029", "", "ab"]),
    (r"(?s).", ["\n", "\r", "\u2028", "a"], ["", "ab"]),
    (r"(?s:.)\n.", ["\r\na"], ["\r\n\n"]),
    (r"(?i)k", ["k", "K", "\u212a"], ["x", "kk"]),
    (r"(?i)[^k]", ["x", "\u212b"], ["k", "K", "\u212a"]),
    (r"(?i)\w", ["a", "Z", "_", "\u017f", "\u212a"], ["é", "-"]),
    (r"(?i)\W", ["é", "-"], ["a", "\u017f", "\u212a", "s", "K"]),
    (r"(?i)[\W]", ["é", "-"], ["s", "k", "\u017f", "\u212a"]),
    (r"(?i)σ", ["σ", "Σ", "ς"], ["s"]),
    (r"(?i)ß", ["ß", "\u1e9e"], ["ss", "SS"]),
    (r"(?i)straße", ["STRASSE"[:0] + "Straße", "STRAẞE"], ["STRASSE"]),
    (r"(?i)\u00e9", ["é", "É"], ["e"]),
    (r"(?i:ab)c", ["ABc", "abc"], ["abC"]),
    (r"(?i)[a-c]", ["A", "b", "C"], ["d"]),
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


@pytest.mark.parametrize("pattern,pos", [(r"a\x4", 1), (r"\u12", 0), (r"\c1", 0), (r"[\d-z]", 1), (r"\a", 0),
                                         (r"\k<x>", 0), (r"\p{L}", 0), (r"(?<=a)", 0), (r"a\1", 1), (r"\01", 0),
                                         (r"a**", 2), (r"(?x)a", 0), (r"a(?i)b", 1), (r"[b-a]", 1)])
def test_ecma_u_syntax_errors(pattern, pos):
    """What ECMA-262's u mode refuses is an error that names its position."""
    from localguide.errors import PatternError

    with pytest.raises(PatternError) as e:
        regex_to_dfa(pattern)
    assert e.value.position == pos, str(e.value)
