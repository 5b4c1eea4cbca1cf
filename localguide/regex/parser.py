"""The one regular-expression dialect: ECMA-262 with the ``u`` flag, parsed into a character AST.

Every pattern of localguide goes through ``parse``: ``compile_regex`` (the whole output
must match), JSON Schema's ``pattern`` (a match anywhere, ECMA's search semantics) and
the regex terminals of Lark grammars. Semantics are ECMA-262's with the ``u`` flag:

- ``\\d`` is ``[0-9]`` and ``\\w`` ``[A-Za-z0-9_]`` (ASCII); ``\\s`` is ECMA's WhiteSpace and
  LineTerminator set (tab, LF, VT, FF, CR, space, U+00A0, U+1680, U+2000-U+200A, U+2028,
  U+2029, U+202F, U+205F, U+3000, U+FEFF); ``.`` is any character but LF, CR, U+2028 and U+2029
  (any character at all under the ``s`` flag).
- ``(?i)`` at the start (the ``i`` flag) or ``(?i:...)``: case-insensitive matching by ECMA's
  canonicalization with the ``u`` flag, Unicode simple case folding, so ``(?i)k`` also matches
  U+212A KELVIN SIGN and ``(?i)\\w`` U+017F LONG S. ``(?s)`` and ``(?s:...)``: the ``s`` flag.
- Escapes as in ``u`` mode (``\\xHH``, ``\\uHHHH``, ``\\u{H...}``, surrogate pairs, ``\\cX``,
  ``\\0``), except that an escaped ASCII punctuation character is that character (``\\-``,
  ``\\:``), as in ECMA without ``u``. Lazy quantifiers are accepted: the language is the same.

Lookaheads ``(?=...)`` and ``(?!...)`` are read anywhere (``regex.lookahead`` resolves them). Not supported,
each with an error naming the construct and its position: lookbehind, a lookahead inside a
lookahead, backreferences, ``\\b``/``\\B``, ``\\p{...}``, octal escapes, anchors inside a pattern that
must fully match. The parse tree is made of tuples: ``("set", ranges)``, ``("seq", items)``,
``("alt", items)``, ``("rep", item, lo, hi)``, ``("anchor", "^" or "$")`` and
``("look", negative, tree, position)``.
"""

from __future__ import annotations

from functools import lru_cache

from ..errors import EmptyLanguageError, PatternError, UnsupportedPatternError
from .ast import MAX_CP, Auto, Node, alt, cls, complement, norm_ranges, rep, seq


def _digit(text: str) -> bool:
    """ASCII digits only (``str.isdigit`` takes superscripts, which ``int`` refuses)."""
    return bool(text) and text.isascii() and text.isdigit()


DIGITS = ((0x30, 0x39),)
WORD = ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))
SPACE = norm_ranges([(0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
                     (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)])
LINE_TERMINATORS = ((0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029))
DOT = complement(LINE_TERMINATORS)
ANY = ((0, MAX_CP),)
_CONTROL = {"t": 0x09, "n": 0x0A, "v": 0x0B, "f": 0x0C, "r": 0x0D}
_HEX = set("0123456789abcdefABCDEF")
_FLAGS = set("is")
MAX_REPEAT = 10_000
MAX_NESTING = 100  # groups inside groups (the parser and the AST's walks recurse once a level)


# -- case folding (ECMA-262 Canonicalize with the u flag: Unicode simple case folding) ----------

def simple_fold(c: str) -> str:
    """Unicode simple case folding of one character (CaseFolding.txt, status C and S)."""
    f = c.casefold()
    if len(f) == 1:
        return f  # a common (C) mapping, or none
    low = c.lower()  # the full folding is several characters: the simple one, if any, is the lowercase
    return low if len(low) == 1 else c


@lru_cache(maxsize=1)
def _fold_classes() -> tuple[dict[int, int], dict[int, tuple[int, ...]]]:
    """(code point -> its folding, folding -> every code point with it), for the code points that fold
    together with another one. Cased letters all lie below U+20000."""
    fold: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    for cp in range(0x20000):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        f = ord(simple_fold(chr(cp)))
        if f != cp:
            fold[cp] = f
            members.setdefault(f, [f]).append(cp)
    for f in members:
        fold.setdefault(f, f)
    return fold, {f: tuple(m) for f, m in members.items()}


def case_closure(ranges: tuple) -> tuple:
    """``ranges`` with every character that folds like one of them (what an ``i``-flag set matches)."""
    fold, members = _fold_classes()
    extra = []
    for f, group in members.items():
        if any(_contains(ranges, cp) for cp in group):
            extra += [(cp, cp) for cp in group]
    return norm_ranges(list(ranges) + extra) if extra else ranges


def _contains(ranges, cp: int) -> bool:
    lo, hi = 0, len(ranges)
    while lo < hi:
        mid = (lo + hi) // 2
        if ranges[mid][1] < cp:
            lo = mid + 1
        else:
            hi = mid
    return lo < len(ranges) and ranges[lo][0] <= cp


# -- the parser ----------------------------------------------------------------------------------

class _Parser:
    """Recursive descent over ECMA-262's Pattern grammar (``u`` mode)."""

    def __init__(self, pattern: str):
        if not isinstance(pattern, str):
            raise TypeError(f"a pattern must be a str, not {type(pattern).__name__}")
        self.p = pattern
        self.i = 0
        self.flags = frozenset()
        self.depth = 0

    def error(self, msg: str, pos: int | None = None) -> PatternError:
        return PatternError(msg, self.p, self.i if pos is None else pos)

    def unsupported(self, msg: str, pos: int) -> UnsupportedPatternError:
        return UnsupportedPatternError(msg, self.p, pos)

    def peek(self, k: int = 0) -> str:
        j = self.i + k
        return self.p[j] if j < len(self.p) else ""

    def parse(self):
        m = self._flag_prefix()
        if m is not None:
            self.flags = frozenset(m[0])
            self.i = m[1]
        tree = self.disjunction()
        if self.i < len(self.p):
            raise self.error("unmatched ')'")
        return tree

    def _flag_prefix(self):
        """``(?flags)`` at the start: (flags, end) or None."""
        if not self.p.startswith("(?"):
            return None
        j = 2
        while j < len(self.p) and self.p[j].isalpha():
            j += 1
        if j > 2 and j < len(self.p) and self.p[j] == ")":
            flags = self.p[2:j]
            if not set(flags) <= _FLAGS:
                raise self.unsupported(f"unknown flag in '(?{flags})' (only i and s are supported)", 0)
            return flags, j + 1
        return None

    def disjunction(self):
        alts = [self.alternative()]
        while self.peek() == "|":
            self.i += 1
            alts.append(self.alternative())
        return ("alt", alts)

    def alternative(self):
        items = []
        while self.i < len(self.p) and self.peek() not in "|)":
            items.append(self.quantified())
        return ("seq", items)

    def _brace(self):
        """A valid ``{n}``, ``{n,}`` or ``{n,m}`` at ``self.i``: (n, m or None, length), else None."""
        j = self.i + 1
        k = j
        while k < len(self.p) and _digit(self.p[k]):
            k += 1
        if k == j:
            return None
        lo = int(self.p[j:k])
        if k < len(self.p) and self.p[k] == "}":
            return lo, lo, k + 1 - self.i
        if k < len(self.p) and self.p[k] == ",":
            m = k + 1
            k = m
            while k < len(self.p) and _digit(self.p[k]):
                k += 1
            if k < len(self.p) and self.p[k] == "}":
                return lo, (int(self.p[m:k]) if k > m else None), k + 1 - self.i
        return None

    def quantified(self):
        atom = self.atom()
        c = self.peek()
        pos = self.i
        if c == "*":
            lo, hi, n = 0, None, 1
        elif c == "+":
            lo, hi, n = 1, None, 1
        elif c == "?":
            lo, hi, n = 0, 1, 1
        elif c == "{" and (q := self._brace()) is not None:
            lo, hi, n = q
        else:
            return atom
        if atom[0] in ("anchor", "look"):
            what = "an anchor" if atom[0] == "anchor" else "a lookahead"
            raise self.error(f"nothing to repeat: a quantifier after {what}", pos)
        if hi is not None and hi < lo:
            raise self.error(f"numbers out of order in '{self.p[pos:pos + n]}'", pos)
        if max(lo, hi or 0) > MAX_REPEAT:
            raise self.unsupported(f"a repetition count above {MAX_REPEAT} is not supported", pos)
        self.i += n
        if self.peek() == "?":
            self.i += 1  # lazy: the same language
        c = self.peek()
        if c in ("*", "+", "?") or (c == "{" and self._brace() is not None):
            raise self.error("nothing to repeat: a quantifier follows a quantifier")
        return ("rep", atom, lo, hi)

    def atom(self):
        c = self.peek()
        if c == "(":
            return self.group()
        if c == "[":
            return ("set", self.char_class())
        if c == ".":
            self.i += 1
            return ("set", ANY if "s" in self.flags else DOT)
        if c in "^$":
            self.i += 1
            return ("anchor", c)
        if c == "\\":
            return self.atom_escape()
        if c in "*+?":
            raise self.error(f"nothing to repeat before '{c}'")
        if c == "{" and self._brace() is not None:
            raise self.error("nothing to repeat before '{'")
        self.i += 1  # a lone ']' or '}' is itself, as in ECMA-262 without the u flag
        return ("set", self.fold(((self._code_point(c), self._code_point(c)),)))

    def _code_point(self, c: str) -> int:
        """The code point at ``self.i - 1``, joining a surrogate pair written as two characters."""
        cp = ord(c)
        if 0xD800 <= cp <= 0xDBFF and self.i < len(self.p) and 0xDC00 <= ord(self.p[self.i]) <= 0xDFFF:
            cp = 0x10000 + ((cp - 0xD800) << 10) + (ord(self.p[self.i]) - 0xDC00)
            self.i += 1
        if 0xD800 <= cp <= 0xDFFF:
            raise self.unsupported("a lone surrogate cannot appear in UTF-8 text", self.i - 1)
        return cp

    def fold(self, ranges: tuple) -> tuple:
        return case_closure(ranges) if "i" in self.flags else ranges

    def group(self):
        pos = self.i
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.unsupported(f"groups nested more than {MAX_NESTING} deep are not supported "
                                   "(localguide.regex.parser.MAX_NESTING)", pos)
        try:
            return self._group(pos)
        finally:
            self.depth -= 1

    def _group(self, pos: int):
        self.i += 1
        saved = self.flags
        if self.peek() == "?":
            rest = self.p[self.i + 1:]
            if rest.startswith(":"):
                self.i += 2
            elif rest.startswith(("=", "!")):
                self.i += 2
                inner = self.disjunction()
                self.flags = saved
                if self.peek() != ")":
                    raise self.error("missing ')' for the lookahead opened", pos)
                self.i += 1
                return ("look", rest[0] == "!", inner, pos)
            elif rest.startswith(("<=", "<!")):
                raise self.unsupported("lookbehind is not supported", pos)
            elif rest.startswith("<"):
                close = self.p.find(">", self.i)
                name = self.p[self.i + 2:close] if close > 0 else ""
                if not name or not (name[0].isalpha() or name[0] in "_$") or not all(
                        ch.isalnum() or ch in "_$" for ch in name):
                    raise self.error("invalid group name", pos)
                self.i = close + 1
            else:
                j = self.i + 1
                while j < len(self.p) and self.p[j].isalpha():
                    j += 1
                flags = self.p[self.i + 1:j]
                if flags and set(flags) <= _FLAGS and j < len(self.p) and self.p[j] == ":":
                    self.flags = self.flags | set(flags)
                    self.i = j + 1
                elif flags and j < len(self.p) and self.p[j] == ")" and set(flags) <= _FLAGS:
                    raise self.unsupported(f"the flag group '(?{flags})' is only supported at the start of "
                                           f"the pattern (use '(?{flags}:...)' here)", pos)
                else:
                    raise self.unsupported("unknown group construct '(?'", pos)
        inner = self.disjunction()
        self.flags = saved
        if self.peek() != ")":
            raise self.error("missing ')' for the group opened", pos)
        self.i += 1
        return inner

    def atom_escape(self):
        pos = self.i
        self.i += 1
        c = self.peek()
        if not c:
            raise self.error("pattern ends with a lone backslash", pos)
        if c in "bB":
            raise self.unsupported(f"word boundary '\\{c}' is not supported", pos)
        if _digit(c) and c != "0":
            raise self.unsupported("backreferences are not supported", pos)
        if c == "k":
            raise self.unsupported("named backreferences are not supported", pos)
        return ("set", self.escape(pos, in_class=False))

    def class_escape_set(self, c: str) -> tuple:
        """The set of ``\\d``, ``\\w``, ``\\s`` or a negated one (``\\w`` with the ``i`` flag folded first)."""
        base = {"d": DIGITS, "w": WORD, "s": SPACE}[c.lower()]
        if c.lower() == "w" and "i" in self.flags:
            base = case_closure(base)
        return complement(base) if c.isupper() else base

    def escape(self, pos: int, in_class: bool) -> tuple:
        """The character set of the escape whose backslash is at ``pos``; ``self.i`` is just after it.

        A single character is folded here outside a class (a class folds as a whole)."""
        fold = (lambda r: r) if in_class else self.fold
        c = self.peek()
        self.i += 1
        if c in "dDwWsS":
            return self.class_escape_set(c)
        if c == "0":
            if _digit(self.peek()):
                raise self.unsupported("octal escapes are not supported", pos)
            return fold(((0, 0),))
        if c in _CONTROL:
            v = _CONTROL[c]
            return ((v, v),)
        if c == "b" and in_class:
            return ((8, 8),)
        if c == "x":
            h = self.p[self.i:self.i + 2]
            if len(h) != 2 or not set(h) <= _HEX:
                raise self.error("'\\x' needs two hex digits", pos)
            self.i += 2
            v = int(h, 16)
            return fold(((v, v),))
        if c == "u":
            v = self.unicode_escape(pos)
            return fold(((v, v),))
        if c == "c":
            letter = self.peek()
            if not (letter.isascii() and letter.isalpha()):
                raise self.error("'\\c' needs a letter", pos)
            self.i += 1
            v = ord(letter) % 32
            return ((v, v),)
        if c in "pP":
            raise self.unsupported(f"Unicode property escapes '\\{c}{{...}}' are not supported", pos)
        if c.isascii() and not c.isalnum():
            return fold(((ord(c), ord(c)),))  # ^$\.*+?()[]{}|/ and any other punctuation
        if in_class and _digit(c):
            raise self.unsupported("octal escapes are not supported", pos)
        raise self.error(f"unknown escape '\\{c}'", pos)

    def unicode_escape(self, pos: int) -> int:
        if self.peek() == "{":
            close = self.p.find("}", self.i)
            h = self.p[self.i + 1:close] if close > 0 else ""
            if not h or not set(h) <= _HEX or int(h, 16) > 0x10FFFF:
                raise self.error("invalid '\\u{...}' escape", pos)
            self.i = close + 1
            cp = int(h, 16)
        else:
            h = self.p[self.i:self.i + 4]
            if len(h) != 4 or not set(h) <= _HEX:
                raise self.error("'\\u' needs four hex digits", pos)
            self.i += 4
            cp = int(h, 16)
            if 0xD800 <= cp <= 0xDBFF and self.p.startswith("\\u", self.i):
                low = self.p[self.i + 2:self.i + 6]
                if len(low) == 4 and set(low) <= _HEX and 0xDC00 <= int(low, 16) <= 0xDFFF:
                    self.i += 6
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (int(low, 16) - 0xDC00)
        if 0xD800 <= cp <= 0xDFFF:
            raise self.unsupported("a lone surrogate cannot appear in UTF-8 text", pos)
        return cp

    def char_class(self) -> tuple:
        pos = self.i
        self.i += 1
        negate = self.peek() == "^"
        if negate:
            self.i += 1
        ranges: list = []
        while True:
            if self.i >= len(self.p):
                raise self.error("missing ']' for the character class opened", pos)
            if self.peek() == "]":
                self.i += 1
                break
            lo_pos = self.i
            lo = self.class_atom()
            if self.peek() == "-" and self.peek(1) not in ("]", ""):
                self.i += 1
                hi_pos = self.i
                hi = self.class_atom()
                for r, p in ((lo, lo_pos), (hi, hi_pos)):
                    if len(r) != 1 or r[0][0] != r[0][1]:
                        raise self.error("a range bound must be a single character", p)
                if lo[0][0] > hi[0][0]:
                    raise self.error("range out of order", lo_pos)
                ranges.append((lo[0][0], hi[0][0]))
            else:
                ranges.extend(lo)
        r = norm_ranges(ranges)
        if "i" in self.flags:
            r = case_closure(r)
        return complement(r) if negate else r

    def class_atom(self) -> tuple:
        """One class member as ranges: a single character (unfolded: the class folds as a whole) or an escape's set."""
        c = self.peek()
        pos = self.i
        if c == "\\":
            self.i += 1
            if self.i >= len(self.p):
                raise self.error("pattern ends with a lone backslash", pos)
            if self.peek() == "-":
                self.i += 1
                return ((0x2D, 0x2D),)
            return self.escape(pos, in_class=True)
        self.i += 1
        cp = self._code_point(c)
        return ((cp, cp),)


def parse(pattern: str):
    """The parse tree of ``pattern`` (see the module doc); raises ``PatternError`` with the position."""
    return _Parser(pattern).parse()


def tree_to_node(tree, anchor, look) -> Node:
    """The AST of a parse tree; ``anchor(kind)`` gives the node of an anchor (or raises), and
    ``look(tree)`` that of a lookahead."""
    kind = tree[0]
    if kind == "set":
        return cls(tree[1])
    if kind == "seq":
        return seq(*[tree_to_node(x, anchor, look) for x in tree[1]])
    if kind == "alt":
        return alt(*[tree_to_node(x, anchor, look) for x in tree[1]])
    if kind == "rep":
        return rep(tree_to_node(tree[1], anchor, look), tree[2], tree[3])
    if kind == "look":
        return look(tree)
    return anchor(tree[1])


def match_node(pattern: str) -> Node:
    """The AST of the strings that fully match ``pattern``: a leading ``^`` and a trailing ``$``
    are redundant there; an anchor anywhere else is an error. Lookaheads (``(?=``, ``(?!``) are
    resolved into one automaton leaf (``lookahead``)."""
    branches = [list(b[1]) for b in parse(pattern)[1]]
    if branches[0][:1] == [("anchor", "^")]:
        branches[0].pop(0)
    if branches[-1][-1:] == [("anchor", "$")]:
        branches[-1].pop()
    tree = ("alt", [("seq", b) for b in branches])

    def anchor(kind):
        where = _anchor_positions(pattern)
        raise UnsupportedPatternError(f"anchor '{kind}' is only supported at the "
                                      f"{'start' if kind == '^' else 'end'} of the pattern", pattern,
                                      where.get(kind))

    looks: list = []

    def look(t):
        from . import lookahead

        if len(looks) == lookahead.MAX_LOOKAHEADS:
            raise UnsupportedPatternError(f"more than {lookahead.MAX_LOOKAHEADS} lookaheads are not supported",
                                          pattern, t[3])
        looks.append(t)
        return Auto(lookahead.mark_dfa(len(looks) - 1))

    node = tree_to_node(tree, anchor, look)
    return _resolved(pattern, node, looks) if looks else node


def _resolved(pattern: str, marked: Node, looks: list) -> Node:
    """``marked`` (lookaheads as marks) with each lookahead applied to what follows its place: its
    pattern, then anything (or the end, where it ends with ``$``)."""
    from . import lookahead
    from .ast import ANY_CHAR_RANGES, star

    def rests(t):
        def inner_anchor(kind):
            raise UnsupportedPatternError("anchor '$' is only supported at the end of a lookahead" if kind == "$"
                                          else "anchor '^' is not supported inside a lookahead", pattern, t[3])

        def inner_look(u):
            raise UnsupportedPatternError("a lookahead inside a lookahead is not supported", pattern, u[3])

        parts = []
        for b in t[2][1]:
            items = list(b[1])
            end = items[-1:] == [("anchor", "$")]
            body = tree_to_node(("seq", items[:-1] if end else items), inner_anchor, inner_look)
            parts.append(body if end else seq(body, star(cls(ANY_CHAR_RANGES))))
        return alt(*parts)

    dfa = lookahead.apply(marked, [(t[1], rests(t)) for t in looks])
    if dfa is None:
        raise UnsupportedPatternError(f"with its lookaheads applied, the pattern's automaton is over "
                                      f"{lookahead.MAX_STATES:,} states (localguide.regex.lookahead.MAX_STATES)",
                                      pattern, looks[0][3])
    return Auto(dfa)


def _anchor_positions(pattern: str) -> dict:
    """The position of the first unescaped ``^`` and ``$`` outside classes, past a leading ``^``."""
    out: dict = {}
    i, in_class = (1 if pattern.startswith("^") else 0), False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            in_class = True
        elif c == "]":
            in_class = False
        elif c in "^$" and not in_class and not (c == "$" and i == len(pattern) - 1):
            out.setdefault(c, i)
        i += 1
    return out


MAX_STATES = 100_000  # automaton states of one pattern (and the work of building them: WORK_PER_STATE)


def largest_repetition(pattern: str, node) -> int | None:
    """The position in ``pattern`` of the quantifier of its largest counted repetition (the part
    that makes an automaton large), where it can be found."""
    from .ast import Rep, size_estimate

    best, stack = None, [node]
    while stack:
        n = stack.pop()
        if isinstance(n, Rep):
            if (n.hi or 0) > 1 and (best is None or size_estimate(n) > size_estimate(best)):
                best = n
            stack.append(n.item)
        else:
            stack.extend(getattr(n, "items", ()))
    if best is None:
        return None
    for text in (f"{{{best.lo},{best.hi}}}", f"{{{best.hi}}}"):
        k = pattern.rfind(text)  # (the outermost of equal quantifiers comes last)
        if k >= 0:
            return k
    return None


@lru_cache(maxsize=256)
def regex_to_dfa(pattern: str):
    """The minimal byte DFA of the strings that fully match ``pattern``: at most ``MAX_STATES``
    states (else an ``UnsupportedPatternError`` naming the bound and the repetition at fault)."""
    from .ast_dfa import TooLargeError, ast_to_dfa

    from .ast import Alt, Lit

    node = match_node(pattern)
    if isinstance(node, Alt) and len(node.items) > 64 and all(isinstance(x, Lit) for x in node.items):
        from ..automaton.literals import literals_dfa  # (a large alternation of words: built directly)

        return literals_dfa([x.text.encode("utf-8", "surrogatepass") for x in node.items])
    try:
        dfa = ast_to_dfa(node, MAX_STATES)
    except TooLargeError as e:
        raise UnsupportedPatternError(f"the automaton needs {e}, over localguide's bound of {MAX_STATES:,} "
                                      "states (localguide.regex.parser.MAX_STATES): make the repetition smaller",
                                      pattern, largest_repetition(pattern, node)) from None
    if dfa.is_empty:
        raise EmptyLanguageError(f"pattern {pattern!r} matches no string at all")
    return dfa


__all__ = ["ANY", "DIGITS", "DOT", "LINE_TERMINATORS", "SPACE", "WORD", "case_closure", "match_node",
           "parse", "regex_to_dfa", "simple_fold", "tree_to_node"]
