"""Hypothesis strategies: random regular expressions in localguide's ECMA-262 subset.

Every pattern generated here, once ``to_python`` has written ECMA's ``\\s``, ``\\S`` and
``.`` out as explicit classes, means the same thing to localguide (ECMA-262) and to Python's
``re`` with ``re.ASCII`` under ``re.fullmatch``, so ``re`` is the oracle: no ``{,n}``, no
inline flags, no ``\\b``, classes whose punctuation is escaped (no FutureWarning about set
operations), and no negated class that could be empty. (V8 itself is the oracle of
``tests/regex/test_v8.py``.)

``regex_pairs()`` yields ``(pattern, sampling_pattern)``: the second is the same
language written without ``\\d \\w \\s`` (and their negations), for
``hypothesis.strategies.from_regex``, which only produces ASCII characters for a
class when the pattern is compiled with ``re.ASCII``.
"""

from __future__ import annotations

import re

import hypothesis.strategies as st

# Literal characters: ASCII letters and digits, punctuation (escaped when needed),
# whitespace, and non-ASCII characters of 2, 3 and 4 UTF-8 bytes.
LITERALS = "abcxyzAZ019 _,:;!@#%&=~'\"<>" + ".*+?()[]{}|^$\\/-" + "\t\n" + "éßñ€日本😀🙏"
SYNTAX = set("^$\\.*+?()[]{}|/")
CLASS_SPECIAL = set("\\]^-[&~|")

# Ranges for character classes, as (lo, hi) characters; include multi-byte ones.
RANGES = [("a", "f"), ("0", "5"), ("A", "Z"), ("x", "z"), ("à", "ÿ"), ("α", "ω"),
          ("😀", "🙏"), ("一", "丁"), (" ", "/")]

# ECMA-262 class escapes and their explicit (ASCII) members.
ECMA_SPACE = "\\t\\n\\x0b\\x0c\\r \\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000\\ufeff"
ECMA_DOT = "[^\\n\\r\\u2028\\u2029]"
CLASS_MEMBERS = {"d": "0-9", "w": "A-Za-z0-9_", "s": ECMA_SPACE}


def class_escape_pair(letter: str) -> tuple[str, str]:
    """``\\d`` and friends, and an equivalent pattern without them."""
    members = CLASS_MEMBERS[letter.lower()]
    return "\\" + letter, ("[" + members + "]" if letter.islower() else "[^" + members + "]")


def _literal(c: str) -> str:
    if c == "\t":
        return "\\t"
    if c == "\n":
        return "\\n"
    if c in SYNTAX:
        return "\\" + c
    return c


def _class_char(c: str) -> str:
    if c == "\t":
        return "\\t"
    if c == "\n":
        return "\\n"
    if c in CLASS_SPECIAL or (c.isascii() and not c.isalnum() and c != " "):
        return "\\" + c
    return c


def _same(s: str) -> tuple[str, str]:
    return s, s


@st.composite
def literal(draw) -> tuple[str, str]:
    kind = draw(st.integers(0, 9))
    if kind == 0:  # a \xHH escape
        return _same("\\x%02x" % draw(st.sampled_from([0x41, 0x61, 0x2D, 0x20, 0x7E])))
    if kind == 1:  # a \uHHHH escape
        return _same("\\u%04x" % draw(st.sampled_from([0xE9, 0x65E5, 0x3B1])))
    return _same(_literal(draw(st.sampled_from(LITERALS))))


@st.composite
def char_class(draw) -> tuple[str, str]:
    negated = draw(st.booleans()) and draw(st.booleans())
    items: list[str] = []  # ECMA class members
    plain: list[str] = []  # the same members, without class escapes
    extra: list[str] = []  # negated escapes, as separate alternatives (positive classes only)
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            lo, hi = draw(st.sampled_from(RANGES))
            items.append(_class_char(lo) + "-" + _class_char(hi))
            plain.append(items[-1])
        elif kind == 1:
            # A negated class holding \D, \W or \S could match nothing: keep those positive.
            letter = draw(st.sampled_from("dws" if negated else "dwsDWS"))
            items.append("\\" + letter)
            if letter.islower():
                plain.append(CLASS_MEMBERS[letter])
            else:
                extra.append(class_escape_pair(letter)[1])
        else:
            items.append(_class_char(draw(st.sampled_from(LITERALS))))
            plain.append(items[-1])
    hat = "^" if negated else ""
    ecma = "[" + hat + "".join(items) + "]"
    alts = (["[" + hat + "".join(plain) + "]"] if plain else []) + extra
    return ecma, alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"


ATOMS = st.one_of(
    literal(),
    literal(),
    literal(),
    char_class(),
    st.sampled_from("dwsdwsDWS").map(class_escape_pair),
    st.just((".", ECMA_DOT)),
)

QUANTIFIERS = st.sampled_from(["", "", "", "", "?", "*", "+", "{2}", "{0,2}", "{1,3}", "{2,}", "??", "+?"])


def _join(sep: str):
    def join(pairs):
        return sep.join(a for a, _ in pairs), sep.join(b for _, b in pairs)
    return join


def _quantified(atoms):
    return st.tuples(atoms, QUANTIFIERS).map(lambda t: (t[0][0] + t[1], t[0][1] + t[1]))


def _sequence(items):
    return st.lists(items, min_size=1, max_size=3).map(_join(""))


def _alternation(items):
    return st.lists(_sequence(items), min_size=1, max_size=2).map(_join("|"))


GROUP_QUANTIFIERS = st.sampled_from(["", "", "?", "*", "+", "{2}", "{0,2}"])


def _group(inner):
    """A group, with its own quantifier (milder than an atom's: nested counted
    repetition makes automata, and the time to build them, blow up)."""
    return st.tuples(st.sampled_from(["(", "(?:"]), inner, GROUP_QUANTIFIERS).map(
        lambda t: (t[0] + t[1][0] + ")" + t[2], t[0] + t[1][1] + ")" + t[2]))


@st.composite
def regex_pairs(draw, max_depth: int = 1) -> tuple[str, str]:
    """``(pattern, sampling_pattern)``: a random pattern of the supported subset, nesting
    up to ``max_depth`` groups, and the same language without class escapes."""
    items = _quantified(ATOMS)
    for _ in range(max_depth):
        items = st.one_of(_quantified(ATOMS), _quantified(ATOMS), _quantified(ATOMS),
                          _group(_alternation(items)))
    ecma, plain = draw(_alternation(items))
    # Anchors at the very ends are allowed and mean nothing under whole-string matching.
    if draw(st.integers(0, 9)) == 0:
        ecma = "^(?:" + ecma + ")$"
        plain = "(?:" + plain + ")"
    return ecma, plain


def regexes(max_depth: int = 1) -> st.SearchStrategy[str]:
    """A random pattern of the supported ECMA-262 subset."""
    return regex_pairs(max_depth).map(lambda pair: pair[0])


def to_python(pattern: str) -> str:
    """A pattern of these strategies for Python's ``re``: ``\\s``, ``\\S`` and ``.`` spelled out as
    ECMA-262 defines them (``\\S`` in a class becomes an alternative beside the class)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            e = pattern[i:i + 2]
            out.append({"\\s": f"[{ECMA_SPACE}]", "\\S": f"[^{ECMA_SPACE}]"}.get(e, e))
            i += 2
        elif c == ".":
            out.append(ECMA_DOT)
            i += 1
        elif c == "[":
            j, items, negated_space = i + 1, [], False
            while pattern[j] != "]":
                item = pattern[j:j + 2] if pattern[j] == "\\" else pattern[j]
                if item == "\\S":
                    negated_space = True
                else:
                    items.append(ECMA_SPACE if item == "\\s" else item)
                j += len(item)
            body = "".join(items)
            if not negated_space:
                out.append("[" + body + "]")
            else:  # positive classes only (see char_class)
                out.append(f"(?:[{body}]|[^{ECMA_SPACE}])" if body else f"[^{ECMA_SPACE}]")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matches(pattern: str, text: str) -> bool:
    """The oracle: ECMA-262 whole-string match, through Python's ``re`` in ASCII mode."""
    return re.fullmatch(to_python(pattern), text, re.ASCII) is not None


def language_samples(pair: tuple[str, str]) -> st.SearchStrategy[str]:
    """Strings fully matching ``pair[0]`` (drawn through the escape-free ``pair[1]``)."""
    pattern, plain = pair
    return st.from_regex(re.compile(plain), fullmatch=True).filter(lambda s: matches(pattern, s))


# -- JSON Schemas ---------------------------------------------------------------------------

SCHEMA_LEAVES = [
    {"type": "integer", "minimum": -5, "maximum": 120},
    {"type": "string", "maxLength": 3},
    {"type": "string", "pattern": "^[a-c]+x?$"},
    {"type": "boolean"},
    {"enum": ["a", 1, None]},
    {"type": "number"},
    {"const": {"k": [1, 2]}},
]


@st.composite
def small_schemas(draw, depth: int = 2):
    """Random schemas from a few leaves, objects, arrays and unions."""
    if depth == 0 or draw(st.integers(0, 2)) == 0:
        return draw(st.sampled_from(SCHEMA_LEAVES))
    kind = draw(st.sampled_from(["object", "array", "anyOf"]))
    if kind == "object":
        names = draw(st.lists(st.sampled_from(["a", "b", "cd"]), min_size=1, max_size=3, unique=True))
        props = {k: draw(small_schemas(depth - 1)) for k in names}
        return {"type": "object", "properties": props, "required": names[: draw(st.integers(0, len(names)))],
                "additionalProperties": False}
    if kind == "array":
        return {"type": "array", "items": draw(small_schemas(depth - 1)), "maxItems": draw(st.integers(0, 3))}
    return {"anyOf": draw(st.lists(small_schemas(depth - 1), min_size=2, max_size=3))}
