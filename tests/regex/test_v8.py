"""The regex dialect against a real ECMA-262 engine: V8, through Node.js's ``RegExp`` with the ``u`` flag.

Random patterns (hypothesis) of ECMA-262's ``u`` syntax, with the characters where dialects
differ (Unicode spaces, line terminators, case-folding pairs): every string localguide's
automaton accepts (random walks) matches in V8, and on probe strings both agree, for
``compile_regex`` (the whole string) and for JSON Schema's ``pattern`` (a match anywhere).
Guides over both real vocabularies produce only texts that V8 matches.
"""

from __future__ import annotations

import json
import random
import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import localguide
from localguide.json_schema.strings import pattern_matches
from localguide.regex import regex_to_dfa

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node (V8) is not installed")

_SERVER = r"""
const rl = require('readline').createInterface({input: process.stdin});
rl.on('line', (line) => {
  const q = JSON.parse(line);
  let out;
  try {
    const full = new RegExp('^(?:' + q.p + ')$', 'u' + q.f);
    const some = new RegExp(q.p, 'u' + q.f);
    out = {full: q.s.map((s) => full.test(s)), search: q.s.map((s) => some.test(s))};
  } catch (e) {
    out = {error: String(e)};
  }
  process.stdout.write(JSON.stringify(out) + '\n');
});
"""

# Characters where dialects disagree: spaces and line terminators, case-folding pairs, astral ones.
PROBES = ("aAzZ09_ -.\t\n\r\x0b\x0c\x1c\x85\u00a0\u1680\u2000\u200b\u2028\u2029\u202f\u3000\ufeff"
          "éÉßẞσΣςkK\u212aſsSİıi\u01c4\u01c5\u01c6日😀{}")


class V8:
    def __init__(self):
        self.proc = subprocess.Popen([NODE, "-e", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8")

    def ask(self, pattern: str, flags: str, strings: list[str]) -> dict:
        self.proc.stdin.write(json.dumps({"p": pattern, "f": flags, "s": strings}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(10)


@pytest.fixture(scope="module")
def v8():
    server = V8()
    yield server
    server.close()


# -- patterns of ECMA-262's u syntax ---------------------------------------------------------------

LITERALS = ["a", "b", "z", "K", "s", "0", "7", "_", " ", "é", "ß", "σ", "ς", "Σ", "k", "\u212a", "ſ", "İ", "ı",
            "\u01c5", "日", "😀", "\\.", "\\-", "\\\\", "\\/", "\\t", "\\n", "\\r", "\\u00a0", "\\u{1F600}",
            "\\x41", "\\u2028", "\\cJ", "\\0"]
ESCAPES = ["\\d", "\\D", "\\w", "\\W", "\\s", "\\S"]
RANGES = ["a-f", "A-Z", "0-5", "à-ÿ", "α-ω", "\\u2000-\\u200a", "j-l", "r-t"]
QUANTS = ["", "", "", "?", "*", "+", "{2}", "{0,2}", "{1,3}", "+?"]


@st.composite
def atoms(draw):
    kind = draw(st.integers(0, 5))
    if kind <= 2:  # (u mode allows \- in a class only; localguide allows it anywhere, as without u)
        return draw(st.sampled_from([c for c in LITERALS if c != "\\-"]))
    if kind == 3:
        return draw(st.sampled_from(ESCAPES + ["."]))
    items = draw(st.lists(st.sampled_from(LITERALS[:22] + ["\\-", "\\u00a0", "\\x41"] + ESCAPES[::2] + RANGES),
                          min_size=1, max_size=3))
    negated = draw(st.booleans())
    body = "".join(items)
    return "[" + ("^" if negated else "") + body + "]"


@st.composite
def patterns(draw, depth: int = 1):
    def seq():
        parts = []
        for _ in range(draw(st.integers(1, 3))):
            if depth and draw(st.integers(0, 4)) == 0:
                inner = draw(patterns(depth - 1))
                parts.append("(" + draw(st.sampled_from(["", "?:"])) + inner + ")" + draw(st.sampled_from(QUANTS[:6])))
            else:
                parts.append(draw(atoms()) + draw(st.sampled_from(QUANTS)))
        return "".join(parts)

    return "|".join(seq() for _ in range(draw(st.integers(1, 2))))


def _walk(dfa, rng: random.Random, max_len: int = 12) -> bytes | None:
    """A random accepted byte string of ``dfa`` (None if the walk dead-ends)."""
    s, out = 0, bytearray()
    for _ in range(max_len * 4):
        if dfa.accepting[s] and (rng.random() < 0.3 or len(out) >= max_len):
            return bytes(out)
        nxt = np.flatnonzero(dfa.transitions[s] >= 0)
        if len(nxt) == 0:
            return bytes(out) if dfa.accepting[s] else None
        b = int(nxt[rng.randrange(len(nxt))])
        out.append(b)
        s = int(dfa.transitions[s, b])
    return bytes(out) if dfa.accepting[s] else None


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns(), flags=st.sampled_from(["", "", "i", "s", "is"]), seed=st.integers(0, 1000),
       probes=st.lists(st.text(alphabet=PROBES, max_size=4), min_size=8, max_size=8))
def test_compile_regex_agrees_with_v8(v8, pattern, flags, seed, probes):
    prefix = f"(?{flags})" if flags else ""
    rng = random.Random(seed)
    try:
        dfa = regex_to_dfa(prefix + pattern)
    except localguide.EmptyLanguageError:
        dfa = None
    members = [w.decode("utf-8") for w in (_walk(dfa, rng) for _ in range(6)) if w is not None] if dfa else []
    texts = members + probes
    got = v8.ask(pattern, flags, texts)
    assert "error" not in got, (pattern, got)
    for text, full in zip(texts, got["full"]):
        mine = dfa is not None and dfa.matches(text.encode("utf-8"))
        assert mine == full, f"{prefix + pattern!r} on {text!r}: localguide {mine}, V8 {full}"


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=patterns(), anchors=st.sampled_from(["", "^", "$", "^$"]),
       probes=st.lists(st.text(alphabet=PROBES, max_size=5), min_size=8, max_size=8))
def test_json_schema_pattern_agrees_with_v8(v8, pattern, anchors, probes):
    """JSON Schema's ``pattern`` finds a match anywhere, as ``RegExp.prototype.test``."""
    p = ("^" if "^" in anchors else "") + "(?:" + pattern + ")" + ("$" if "$" in anchors else "")
    got = v8.ask(p, "", probes)
    assert "error" not in got, (p, got)
    for text, some in zip(probes, got["search"]):
        assert pattern_matches(p, text) == some, f"{p!r} on {text!r}: V8 {some}"


@st.composite
def looking(draw):
    """A pattern with lookaheads (``(?=``, ``(?!``) anywhere: at the top, under a repetition, in
    an optional group, beside an alternative; a lookahead may end with ``$``."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.integers(0, 3))
        look = "(?" + draw(st.sampled_from("=!")) + draw(patterns(0)) + draw(st.sampled_from(["", "", "$"])) + ")"
        if kind == 0:
            parts.append(look)
        elif kind == 1:
            parts.append("(?:" + look + draw(atoms()) + ")" + draw(st.sampled_from(["*", "?", "+", "{0,2}"])))
        elif kind == 2:
            parts.append("(?:" + draw(atoms()) + "|" + look + draw(atoms()) + ")")
        else:
            parts.append(draw(atoms()) + draw(st.sampled_from(QUANTS)))
    return "".join(parts)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pattern=looking(), anchors=st.sampled_from(["", "^", "$", "^$"]), seed=st.integers(0, 1000),
       probes=st.lists(st.text(alphabet="abzK0 _.\né日", max_size=6), min_size=10, max_size=10))
def test_json_schema_pattern_lookaheads_agree_with_v8(v8, pattern, anchors, seed, probes):
    """Lookaheads anywhere (marks resolved by ``regex.lookahead``), in JSON Schema's ``pattern``
    (a match anywhere) and in ``compile_regex`` (the whole string): strings the automata accept
    (random walks) and probes, judged as V8 judges them."""
    from localguide.json_schema.strings import LookaheadsTooLarge, pattern_dfa

    p = ("^" if "^" in anchors else "") + pattern + ("$" if "$" in anchors else "")
    try:
        dfa = pattern_dfa(p)
    except LookaheadsTooLarge:
        return
    try:
        full = regex_to_dfa(pattern)
    except localguide.EmptyLanguageError:
        full = None
    rng = random.Random(seed)
    members = [w.decode("utf-8") for d in (dfa, full) if d is not None
               for w in (_walk(d, rng) for _ in range(4)) if w is not None]
    texts = members + probes
    got = v8.ask(p, "", texts)
    assert "error" not in got, (p, got)
    for text, some, whole in zip(texts, got["search"], got["full"]):
        assert dfa.matches(text.encode("utf-8")) == some, f"{p!r} on {text!r}: V8 {some}"
        mine = full is not None and full.matches(text.encode("utf-8"))
        assert mine == whole, f"compile_regex {pattern!r} on {text!r}: V8 {whole}"


@pytest.mark.parametrize("pattern", [r"[A-Z][a-z]+\s\w+", r"(?i)[a-z]{2,5}\.", r".{1,8}\s?", r"\S+ \S+",
                                     r"[^\s]{3}[\u2000-\u200a]?x", r"\d+(?:,\d{3})*",
                                     r"(?=.*\d)(?=.*[a-z])[a-z0-9]{4,8}", r"[a-z](?:(?!--)[a-z-]){2,9}"])
def test_guide_texts_match_in_v8(v8, vocab, pattern):
    """Every text a guide over a real vocabulary completes fully matches in V8."""
    index = localguide.compile_regex(pattern, vocab)
    stops = set(vocab.stop_ids.tolist())
    rng = random.Random(7)
    texts = []
    for _ in range(20):
        g = index.guide(max_tokens=16)
        out = b""
        while not g.is_finished():
            allowed = g.allowed_token_ids()
            t = int(allowed[rng.randrange(len(allowed))])
            g.advance(t)
            if t in stops:
                break
            out += vocab[t]
        assert g.is_accepting()
        texts.append(out.decode("utf-8"))
    flags = "i" if pattern.startswith("(?i)") else ""
    got = v8.ask(pattern[4:] if flags else pattern, flags, texts)
    assert got["full"] == [True] * len(texts), [t for t, ok in zip(texts, got["full"]) if not ok]


@pytest.mark.parametrize("pattern", [r"a\x4", r"\u12", r"\c1", r"[\d-z]", r"\a", r"a**", r"\01"])
def test_syntax_errors_are_errors_in_v8_too(v8, pattern):
    with pytest.raises(localguide.PatternError):
        regex_to_dfa(pattern)
    assert "error" in v8.ask(pattern, "", [])


def test_case_folding_table_agrees_with_v8(v8):
    """Every character below U+20000 that folds with another (``(?i)``) does so in V8 too, and
    a sample of the others folds with none."""
    from localguide.regex.parser import _fold_classes

    _, members = _fold_classes()
    groups = sorted(members.values())
    for group in groups:
        first = "\\u{%x}" % group[0]
        got = v8.ask(first, "i", [chr(c) for c in group])
        assert got["full"] == [True] * len(group), [hex(c) for c in group]
    folding = {c for g in groups for c in g}
    rng = random.Random(1)
    lone = [c for c in (rng.randrange(0x20000) for _ in range(3000)) if c not in folding
            and not 0xD800 <= c <= 0xDFFF][:300]
    for c in lone:
        for other in (ord(chr(c).upper()[0]), ord(chr(c).lower()[0])):
            if other != c:
                got = v8.ask("\\u{%x}" % c, "i", [chr(other)])
                assert got["full"] == [False], (hex(c), hex(other))
