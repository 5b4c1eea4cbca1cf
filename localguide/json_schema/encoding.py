"""How characters are written in JSON text: string escapes, ``\\uXXXX`` digits, numerals.

Content-level nodes (``localguide.regex.ast``, over the characters of a decoded string)
become nodes over the JSON text, where each character may be written raw or escaped.
"""

from __future__ import annotations

from functools import lru_cache

from ..regex.ast import (
    ANY_CHAR_RANGES, Cls, EMPTY, EPS, Lit, MAX_CP, Node, alt, cls, contains, intersect, map_leaves, norm_ranges, rep, seq,
    subtract,
)


# -- characters inside a JSON string ------------------------------------------------------------

_SHORT = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
RAW_OK = ((0x20, 0x21), (0x23, 0x5B), (0x5D, MAX_CP))  # unescaped in a JSON string


def _hex_digit_class(lo: int, hi: int) -> Node:
    """One hex digit with value in lo..hi, either case."""
    rs = []
    for v in range(lo, hi + 1):
        if v < 10:
            rs.append((0x30 + v, 0x30 + v))
        else:
            rs.append((0x61 + v - 10, 0x61 + v - 10))
            rs.append((0x41 + v - 10, 0x41 + v - 10))
    return cls(rs)


def digits_range(lo: int, hi: int, width: int, base: int, digit) -> Node:
    """Fixed-width numerals (leading zeros kept) with value in lo..hi."""
    if lo > hi:
        return EMPTY
    if width == 0:
        return EPS
    p = base ** (width - 1)
    a, b = divmod(lo, p), divmod(hi, p)
    (fa, ra), (fb, rb) = a, b
    if fa == fb:
        return seq(digit(fa, fa), digits_range(ra, rb, width - 1, base, digit))
    parts = []
    if ra == 0 and rb == p - 1:
        return seq(digit(fa, fb), digits_range(0, p - 1, width - 1, base, digit))
    start, end = fa, fb
    if ra != 0:
        parts.append(seq(digit(fa, fa), digits_range(ra, p - 1, width - 1, base, digit)))
        start = fa + 1
    if rb != p - 1:
        end = fb - 1
    if start <= end:
        parts.append(seq(digit(start, end), digits_range(0, p - 1, width - 1, base, digit)))
    if rb != p - 1:
        parts.append(seq(digit(fb, fb), digits_range(0, rb, width - 1, base, digit)))
    return alt(*parts)


def hex4(lo: int, hi: int) -> Node:
    """Four hex digits (either case) with value in lo..hi."""
    return digits_range(lo, hi, 4, 16, _hex_digit_class)


_BMP = ((0, 0xD7FF), (0xE000, 0xFFFF))


@lru_cache(maxsize=4096)
def json_char(ranges: tuple) -> Node:
    """How one character from the set ``ranges`` can be written inside a JSON string.

    Raw when JSON allows it, the short escape where one exists, ``\\uXXXX`` (either
    case) for any character of the BMP, and a surrogate pair of escapes beyond it.
    The backslash is factored out so the automaton stays small.
    """
    ranges = norm_ranges(ranges)
    raw = cls(intersect(ranges, RAW_OK))
    letters = [e for c, e in _SHORT.items() if contains(ranges, ord(c))]
    esc = intersect(ranges, _BMP)
    if esc == _BMP:
        h = _hex_digit_class(0, 15)
        hex_part = seq(alt(seq(cls([(0x30, 0x39), (0x41, 0x43), (0x45, 0x46), (0x61, 0x63), (0x65, 0x66)]), h),
                           seq(cls([(0x44, 0x44), (0x64, 0x64)]), _hex_digit_class(0, 7))), h, h)
    else:
        hex_part = alt(*[hex4(a, b) for a, b in esc])
    astral = intersect(ranges, ((0x10000, MAX_CP),))
    u_part = alt(hex_part, *[_surrogate_pairs(a, b) for a, b in astral])
    escaped = alt(cls([(ord(e), ord(e)) for e in letters]) if letters else EMPTY,
                  seq(Lit("u"), u_part) if u_part is not EMPTY else EMPTY)
    return alt(raw, seq(Lit("\\"), escaped) if escaped is not EMPTY else EMPTY)


def _surrogate_pairs(a: int, b: int) -> Node:
    ha, la = 0xD800 + ((a - 0x10000) >> 10), 0xDC00 + ((a - 0x10000) & 0x3FF)
    hb, lb = 0xD800 + ((b - 0x10000) >> 10), 0xDC00 + ((b - 0x10000) & 0x3FF)

    def pair(h1, h2, l1, l2):  # after the leading backslash-u
        return seq(hex4(h1, h2), Lit("\\u"), hex4(l1, l2))

    if ha == hb:
        return pair(ha, ha, la, lb)
    parts = []
    if la != 0xDC00:
        parts.append(pair(ha, ha, la, 0xDFFF))
        ha += 1
    if lb != 0xDFFF:
        parts.append(pair(hb, hb, 0xDC00, lb))
        hb -= 1
    if ha <= hb:
        parts.append(pair(ha, hb, 0xDC00, 0xDFFF))
    return alt(*parts)




def any_json_char() -> Node:
    return json_char(ANY_CHAR_RANGES)


def json_string_literal(s: str) -> Node:
    """The JSON spellings of the string ``s`` (quotes included)."""
    return seq(Lit('"'), json_string_content(s), Lit('"'))


def json_string_content(s: str) -> Node:
    parts: list[Node] = []
    for c in s:
        o = ord(c)
        if 0xD800 <= o <= 0xDFFF:
            # A lone surrogate (from a JSON escape): only its escape spells it.
            parts.append(seq(Lit("\\u"), hex4(o, o)))  # noqa
        elif 0x20 <= o < 0x7F and c not in '"\\/':
            parts.append(Lit(c))
        else:
            parts.append(json_char(((o, o),)))
    return seq(*parts)


def encode_content(node: Node) -> Node:
    """A content-level node (characters of the decoded string) as JSON string text."""
    def leaf(n: Node) -> Node:
        if isinstance(n, Lit):
            return json_string_content(n.text)
        if isinstance(n, Cls):
            return json_char(n.ranges)
        return n

    return map_leaves(node, leaf)


def not_in_strings(words, charset=ANY_CHAR_RANGES, min_len: int = 0) -> Node:
    """Content-level node: every string over ``charset`` (at least ``min_len`` long) except ``words``."""
    trie: dict = {}
    for w in words:
        t = trie
        for c in w:
            t = t.setdefault(c, {})
        t[""] = True
    any_ = cls(charset)

    def go(t: dict, depth: int) -> Node:
        kids = [c for c in t if c]
        parts = []
        if "" not in t and depth >= min_len:
            parts.append(EPS)
        others = subtract(charset, [(ord(c), ord(c)) for c in kids])
        if others:
            parts.append(seq(cls(others), rep(any_, max(0, min_len - depth - 1), None)))
        for c in kids:
            if contains(charset, ord(c)):
                parts.append(seq(Lit(c), go(t[c], depth + 1)))
        return alt(*parts)

    return go(trie, 0)
