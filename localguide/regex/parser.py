"""Regular expression → minimal byte-level DFA, with ECMA-262 semantics.

The pattern is first scanned here: the scan checks the ECMA-262 syntax we support,
reports errors with their position, and rewrites the pattern into the dialect that
interegular parses (``\\uXXXX`` and ``\\u{X}`` become characters, ``(?<name>`` becomes
``(?:``, a literal ``{`` is escaped, outer ``^``/``$`` anchors are dropped because
the whole output must match anyway). interegular then builds a character-level DFA,
whose character classes are expanded here into UTF-8 byte sequences.

Semantics: ``\\d`` is ``[0-9]``, ``\\w`` is ``[A-Za-z0-9_]``, ``\\s`` is
``[ \\t\\n\\r\\f\\v]`` (as Python's ``re.ASCII``), ``.`` is any character but ``\\n``.
"""

from __future__ import annotations

from functools import lru_cache

import interegular
import numpy as np
from interegular.fsm import anything_else

from ..automaton import ByteDFA, ByteNFA, minimize
from ..errors import EmptyLanguageError, PatternError, UnsupportedPatternError
from ..automaton.utf8 import codepoint_ranges, complement_ranges, merge_ranges

_CLASS_ESCAPES = set("dDwWsS")
_CONTROL_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f", "v": "\v", "0": "\0"}
_SYNTAX = set("^$\\.*+?()[]{}|/-")
_INLINE_FLAGS = set("is")


def _emit_char(c: str, in_class: bool) -> str:
    """``c`` as a literal in interegular's dialect."""
    if c.isalnum() and c.isascii():
        return c
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02x}"
    if ord(c) > 0x7F:
        return c
    return "\\" + c


class _Scanner:
    """Recursive-descent check of the supported ECMA-262 subset; emits the rewritten pattern."""

    def __init__(self, pattern: str):
        self.p = pattern
        self.i = 0
        self.out: list[str] = []

    # -- helpers -------------------------------------------------------------
    def error(self, msg: str, pos: int | None = None) -> PatternError:
        return PatternError(msg, self.p, self.i if pos is None else pos)

    def unsupported(self, msg: str, pos: int) -> UnsupportedPatternError:
        return UnsupportedPatternError(msg, self.p, pos)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def startswith(self, s: str) -> bool:
        return self.p.startswith(s, self.i)

    # -- grammar -------------------------------------------------------------
    def scan(self) -> str:
        end = len(self.p)
        if self.startswith("^"):
            self.i += 1
        if self.p.endswith("$") and end > self.i and not _escaped(self.p, len(self.p) - 1):
            end -= 1
        self.end = end
        self.disjunction(top=True)
        if self.i < self.end:
            raise self.error("unmatched ')'")
        return "".join(self.out)

    def disjunction(self, top: bool) -> None:
        self.alternative()
        while self.i < self.end and self.peek() == "|":
            self.out.append("|")
            self.i += 1
            self.alternative()

    def alternative(self) -> None:
        while self.i < self.end and self.peek() not in "|)":
            start = self.i
            quantifiable = self.term()
            self.quantifier(start, quantifiable)

    def term(self) -> bool:
        c = self.peek()
        pos = self.i
        if c == "(":
            self.group()
            return True
        if c == "[":
            self.char_class()
            return True
        if c == "\\":
            return self.atom_escape()
        if c == "^":
            raise self.unsupported("anchor '^' is only supported at the start of the pattern", pos)
        if c == "$":
            raise self.unsupported("anchor '$' is only supported at the end of the pattern", pos)
        if c in "*+?":
            raise self.error(f"nothing to repeat before '{c}'")
        if c == "{" and self._brace_quantifier() is not None:
            raise self.error("nothing to repeat before '{'")
        if c == "]" or c == "}":
            self.out.append("\\" + c)
            self.i += 1
            return True
        self.i += 1
        if c == ".":
            self.out.append(".")
        else:
            self.out.append(_emit_char(c, False))
        return True

    def group(self) -> None:
        pos = self.i
        self.i += 1
        if self.startswith("?"):
            if self.startswith("?:"):
                self.i += 2
                self.out.append("(?:")
            elif self.startswith("?=") or self.startswith("?!"):
                raise self.unsupported("lookahead is not supported", pos)
            elif self.startswith("?<=") or self.startswith("?<!"):
                raise self.unsupported("lookbehind is not supported", pos)
            elif self.startswith("?<") or self.startswith("?P<"):
                close = self.p.find(">", self.i)
                name = self.p[self.i + (2 if self.peek(1) == "<" else 3):close]
                if close < 0 or not name or not (name[0].isalpha() or name[0] == "_") or not all(
                    ch.isalnum() or ch == "_" for ch in name
                ):
                    raise self.error("invalid group name", pos)
                self.i = close + 1
                self.out.append("(?:")
            else:
                j = self.i + 1
                while j < self.end and self.p[j].isalpha():
                    j += 1
                flags = self.p[self.i + 1:j]
                if flags and set(flags) <= _INLINE_FLAGS and j < self.end and self.p[j] in ":)":
                    self.out.append("(?" + flags + self.p[j])
                    self.i = j + 1
                    if self.p[j] == ")":
                        return
                else:
                    raise self.unsupported("unknown group construct '(?'", pos)
        else:
            self.out.append("(?:")
        self.disjunction(top=False)
        if self.i >= self.end or self.peek() != ")":
            raise self.error("missing ')' for the group opened", pos)
        self.i += 1
        self.out.append(")")

    def atom_escape(self) -> bool:
        pos = self.i
        self.i += 1
        c = self.peek()
        if not c:
            raise self.error("pattern ends with a lone backslash", pos)
        if c in "bB":
            raise self.unsupported(f"word boundary '\\{c}' is not supported", pos)
        if c.isdigit() and c != "0":
            raise self.unsupported("backreferences are not supported", pos)
        if c == "k" and self.peek(1) == "<":
            raise self.unsupported("named backreferences are not supported", pos)
        self.out.append(self.escape(pos, in_class=False))
        return True

    def escape(self, pos: int, in_class: bool) -> str:
        """Translate the escape whose backslash is at ``pos``; ``self.i`` is just after it."""
        c = self.peek()
        self.i += 1
        if c in _CLASS_ESCAPES:
            return "\\" + c
        if c == "0" and self.peek().isdigit():
            raise self.unsupported("octal escapes are not supported", pos)
        if c in _CONTROL_ESCAPES:
            return _emit_char(_CONTROL_ESCAPES[c], in_class)
        if c == "b" and in_class:
            return "\\x08"
        if c == "x":
            h = self.p[self.i:self.i + 2]
            if len(h) != 2 or not all(ch in "0123456789abcdefABCDEF" for ch in h):
                raise self.error("'\\x' needs two hex digits", pos)
            self.i += 2
            return _emit_char(chr(int(h, 16)), in_class)
        if c == "u":
            return _emit_char(self.unicode_escape(pos), in_class)
        if c == "c":
            letter = self.peek()
            if not (letter.isascii() and letter.isalpha()):
                raise self.error("'\\c' needs a letter", pos)
            self.i += 1
            return _emit_char(chr(ord(letter) % 32), in_class)
        if c in "pP":
            raise self.unsupported(f"Unicode property escapes '\\{c}{{...}}' are not supported", pos)
        if c in _SYNTAX or not c.isalnum():
            return _emit_char(c, in_class)
        raise self.error(f"unknown escape '\\{c}'", pos)

    def unicode_escape(self, pos: int) -> str:
        if self.peek() == "{":
            close = self.p.find("}", self.i)
            h = self.p[self.i + 1:close] if close > 0 else ""
            if not h or not all(ch in "0123456789abcdefABCDEF" for ch in h) or int(h, 16) > 0x10FFFF:
                raise self.error("invalid '\\u{...}' escape", pos)
            self.i = close + 1
            cp = int(h, 16)
        else:
            h = self.p[self.i:self.i + 4]
            if len(h) != 4 or not all(ch in "0123456789abcdefABCDEF" for ch in h):
                raise self.error("'\\u' needs four hex digits", pos)
            self.i += 4
            cp = int(h, 16)
            # A surrogate pair written as two escapes is one character.
            if 0xD800 <= cp <= 0xDBFF and self.p.startswith("\\u", self.i):
                low = self.p[self.i + 2:self.i + 6]
                if len(low) == 4 and all(ch in "0123456789abcdefABCDEF" for ch in low):
                    lo = int(low, 16)
                    if 0xDC00 <= lo <= 0xDFFF:
                        self.i += 6
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
        if 0xD800 <= cp <= 0xDFFF:
            raise self.unsupported("a lone surrogate cannot appear in UTF-8 text", pos)
        return chr(cp)

    def char_class(self) -> None:
        pos = self.i
        self.i += 1
        parts = ["["]
        if self.peek() == "^":
            parts.append("^")
            self.i += 1
        items = 0
        while True:
            if self.i >= len(self.p):
                raise self.error("missing ']' for the character class opened", pos)
            c = self.peek()
            if c == "]":
                self.i += 1
                break
            lo_pos = self.i
            lo = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi_pos = self.i
                hi = self.class_atom()
                if len(lo) != 1 or len(hi) != 1:
                    raise self.error("a range bound must be a single character", lo_pos if len(lo) != 1 else hi_pos)
                if ord(lo) > ord(hi):
                    raise self.error("range out of order", lo_pos)
                parts.append(_emit_char(lo, True) + "-" + _emit_char(hi, True))
            else:
                parts.append(lo if len(lo) == 2 and lo[0] == "\\" and lo[1] in _CLASS_ESCAPES else _emit_char(lo, True))
            items += 1
        # interegular reads two negated escapes in one class as the complement of their
        # union; ECMA-262 means the union of the complements. \s and \d (or \w) are
        # disjoint and \d is inside \w, so: \S with \D or \W is every character, and
        # \D with \W is \D.
        negated = {x[1] for x in parts[1:] if len(x) == 2 and x[0] == "\\" and x[1] in "DSW"}
        if len(negated) >= 2:
            head = parts[:2] if parts[1:2] == ["^"] else parts[:1]
            parts = head + ["\\s\\S"] if "S" in negated else [x for x in parts if x != "\\W"]
        parts.append("]")
        self.out.append("".join(parts))
        if items == 0 and parts[1] != "^":
            raise EmptyLanguageError(f"the empty class '[]' at position {pos} matches nothing in pattern {self.p!r}")

    def class_atom(self) -> str:
        """One class member: a single character, or ``\\d``-style escape text (2 chars)."""
        c = self.peek()
        pos = self.i
        if c == "\\":
            self.i += 1
            if self.i >= len(self.p):
                raise self.error("pattern ends with a lone backslash", pos)
            if self.peek() in _CLASS_ESCAPES:
                self.i += 1
                return "\\" + self.p[self.i - 1]
            if self.peek() in "pP":
                raise self.unsupported("Unicode property escapes are not supported", pos)
            if self.peek().isdigit() and self.peek() != "0":
                raise self.unsupported("octal escapes are not supported", pos)
            text = self.escape(pos, in_class=True)
            return _unemit(text)
        self.i += 1
        return c

    def _brace_quantifier(self) -> tuple[int, int | None, int] | None:
        """If a valid ``{n}``, ``{n,}`` or ``{n,m}`` starts here: (n, m, length)."""
        j = self.i + 1
        k = j
        while k < self.end and self.p[k].isdigit():
            k += 1
        if k == j:
            return None
        n = int(self.p[j:k])
        if k < self.end and self.p[k] == "}":
            return n, n, k + 1 - self.i
        if k < self.end and self.p[k] == ",":
            m_start = k + 1
            k = m_start
            while k < self.end and self.p[k].isdigit():
                k += 1
            if k < self.end and self.p[k] == "}":
                m = int(self.p[m_start:k]) if k > m_start else None
                return n, m, k + 1 - self.i
        return None

    def quantifier(self, start: int, quantifiable: bool) -> None:
        c = self.peek() if self.i < self.end else ""
        pos = self.i
        if c in ("*", "+", "?"):
            self.i += 1
            self.out.append(c)
        elif c == "{" and (q := self._brace_quantifier()) is not None:
            n, m, length = q
            if m is not None and m < n:
                raise self.error(f"numbers out of order in '{{{n},{m}}}'", pos)
            if n > 10000 or (m or 0) > 10000:
                raise self.unsupported("a repetition count above 10000 is not supported", pos)
            self.i += length
            self.out.append(self.p[pos:self.i])
        else:
            return
        if self.i < self.end and self.peek() == "?":
            self.i += 1  # lazy: irrelevant when the whole output must match
        if self.i < self.end and (self.peek() in "*+" or (self.peek() == "{" and self._brace_quantifier())):
            raise self.error("nothing to repeat: a quantifier follows a quantifier")


def _escaped(p: str, i: int) -> bool:
    """Whether the character at ``i`` is escaped (an odd number of backslashes before it)."""
    n = 0
    while i - n - 1 >= 0 and p[i - n - 1] == "\\":
        n += 1
    return n % 2 == 1


def _unemit(text: str) -> str:
    """The character an emitted single-character escape stands for."""
    if text.startswith("\\x"):
        return chr(int(text[2:], 16))
    if text.startswith("\\") and len(text) == 2:
        return text[1]
    return text


def normalize(pattern: str) -> str:
    """Check ``pattern`` (ECMA-262 subset) and rewrite it into interegular's dialect."""
    if not isinstance(pattern, str):
        raise TypeError(f"a pattern must be a str, not {type(pattern).__name__}")
    return _Scanner(pattern).scan()


def _ascii_table(fsm):
    """interegular's character DFA as a byte transition table when it only reads ASCII.

    Then characters are bytes and no UTF-8 expansion or subset construction is needed.
    Returns (transitions, accepting), start state 0, or None when a non-ASCII character
    (or "any other character") is read.
    """
    used = {key for row in fsm.map.values() for key in row}
    columns = {}
    for key, chars in fsm.alphabet.by_transition.items():
        if key not in used:
            continue
        cps = [ord(ch) for ch in chars if ch is not anything_else]
        if len(cps) < len(chars) or max(cps) >= 0x80:
            return None
        columns[key] = cps
    ids = {fsm.initial: 0}
    for s in fsm.states:
        ids.setdefault(s, len(ids))
    trans = np.full((len(ids), 256), -1, np.int32)
    for s, row in fsm.map.items():
        for key, dst in row.items():
            trans[ids[s], columns[key]] = ids[dst]
    accepting = np.zeros(len(ids), bool)
    for s in fsm.finals:
        accepting[ids[s]] = True
    return trans, accepting


def _fsm_to_nfa(fsm) -> ByteNFA:
    """interegular's character DFA as a byte NFA (each character class expanded to UTF-8)."""
    alphabet = fsm.alphabet
    explicit = [ord(ch) for ch in alphabet if ch is not anything_else]
    other_ranges = complement_ranges(codepoint_ranges(explicit))
    symbol_ranges = {}
    for key, chars in alphabet.by_transition.items():
        cps = [ord(ch) for ch in chars if ch is not anything_else]
        ranges = codepoint_ranges(cps)
        if any(ch is anything_else for ch in chars):
            ranges = sorted(ranges + other_ranges)
        symbol_ranges[key] = ranges
    nfa = ByteNFA()
    ids = {}
    for s in fsm.states:
        ids[s] = nfa.add_state()
    start = ids[fsm.initial]
    for s, row in fsm.map.items():
        # Merge all symbols with the same target so each (src, dst) gets one expansion.
        by_target: dict = {}
        for key, dst in row.items():
            by_target.setdefault(dst, []).extend(symbol_ranges[key])
        for dst, ranges in by_target.items():
            nfa.add_codepoints(ids[s], merge_ranges(ranges), ids[dst])
    nfa.accepting = {ids[s] for s in fsm.finals}
    nfa.start = start
    return nfa


@lru_cache(maxsize=256)
def regex_to_dfa(pattern: str) -> ByteDFA:
    """The minimal byte DFA of the strings that fully match ``pattern``."""
    normalized = normalize(pattern)
    try:
        parsed = interegular.parse_pattern(normalized)
        fsm = parsed.to_fsm()
        table = _ascii_table(fsm)
        if table is None:
            fsm = fsm.reduce()  # minimal first: byte expansion multiplies states
    except interegular.Unsupported as e:
        raise UnsupportedPatternError(f"unsupported construct ({e})", pattern) from None
    except (interegular.InvalidSyntax, ValueError, KeyError) as e:
        raise PatternError(f"invalid syntax ({e or 'not a regular expression'})", pattern) from None
    if table is not None:
        dfa = minimize(*table)
    else:
        nfa = _fsm_to_nfa(fsm)
        dfa = nfa.to_dfa(nfa.start)
    if dfa.is_empty:
        raise EmptyLanguageError(f"pattern {pattern!r} matches no string at all")
    return dfa
