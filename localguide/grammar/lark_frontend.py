"""Lark grammar text → ``CFG``, through Lark's public API.

Lark expands templates, ``?rule`` inlining, ``[optional]``, ``%import`` and
``%declare``-free grammars into plain productions (``Lark.rules``) and gives every
terminal as a regex or a string (``Lark.terminals``). Terminal patterns are Python
regexes; they become byte DFAs through ``localguide.regex.regex_to_dfa`` (flags
such as ``i`` and ``s`` become inline groups). Lazy quantifiers match the same
language as greedy ones; the lookbehind patterns of ``common.lark``
(``ESCAPED_STRING`` and friends) are replaced by equivalent plain regexes.

One lookaround has a meaning for a terminal and is supported: a negative lookahead
that starts an alternative of a word-character terminal and ends in ``\\b``, the
idiom that keeps keywords out of identifiers (``/(?!(?:select|from)\\b)[a-z_]\\w*/i``).
Inside a lexeme of word characters ``K\\b`` can only match the whole lexeme, so the
terminal is ``R`` minus the strings of ``K``. (Lark's Earley lexer evaluates the
lookahead on the text, so it also refuses to *start* the terminal where a keyword
stands: it rejects a keyword split into adjacent lexemes, ``select`` as ``s`` +
``elect``, which this reading accepts.)

Priorities only choose between parse trees or between tokenizations in Lark; a
constraint accepts a text when *some* reading of it parses, so they do not change
the language and are ignored here.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ..errors import PatternError
from ..automaton import ByteDFA, combine
from ..regex.parser import regex_to_dfa
from .cfg import CFG, Terminal, literal_dfa
from ..errors import GrammarError

# Python-regex idioms from lark's common.lark (lookbehind, lazy matching up to a
# delimiter) and the plain regex with the same matches.
_KNOWN = {
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
    r"'.*?(?<!\\)(\\\\)*?'": r"'(?:[^'\\\n]|\\[^\n])*'",
    r"/\*(.|\n)*?\*/": r"/\*(?:[^*]|\*+[^*/])*\*+/",
    r"\/\*(.|\n)*?\*\/": r"/\*(?:[^*]|\*+[^*/])*\*+/",
}
_LOOKAROUND = ("(?=", "(?!", "(?<=", "(?<!")
MAX_EXPANSION = 10_000  # copies one part of a rule expands to through ~ repetitions inside one another
MAX_NESTING = 100  # (), [] and {} inside one another in a rule (lark's reading recurses a few frames a level)
_LAZY = re.compile(r"(?<!\\)([*+?}])\?")


_WORD = np.zeros(256, bool)
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_":
    _WORD[_c] = True


def _top(pattern: str):
    """``(index, char, depth)`` of the unescaped characters outside character classes;
    depth counts the groups open before the character (a ``)`` reads its own group's)."""
    i, depth, in_class = 0, 0, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
            if pattern[i + 1:i + 2] == "]":  # a leading ] is a literal
                i += 1
        else:
            if c == ")":
                depth -= 1
            yield i, c, depth
            if c == "(":
                depth += 1
        i += 1


def _close(pattern: str) -> int:
    """The index of the ``)`` closing the group that opens ``pattern``."""
    return next((i for i, c, d in _top(pattern) if c == ")" and d == 0), -1)


def _alternatives(pattern: str) -> list[str]:
    cuts = [i for i, c, d in _top(pattern) if c == "|" and d == 0]
    return [pattern[i + 1:j] for i, j in zip([-1] + cuts, cuts + [len(pattern)])]


_GROUP = re.compile(r"\(\?([a-zA-Z]*):")


def _parts(pattern: str, flags: str = ""):
    """``pattern`` as alternatives ``(body, excluded or None)`` with their inline flags
    applied, looking through whole-alternative groups for a leading ``(?!K\\b)``."""
    for alt in _alternatives(pattern):
        wrap = (lambda p, f=flags: f"(?{f}:{p})" if f else p)
        m = _GROUP.match(alt)
        if m and _close(alt) == len(alt) - 1:
            yield from _parts(alt[m.end():-1], flags + m.group(1))
        elif alt.startswith("(?!"):
            end = _close(alt)
            inner = alt[3:end]
            if end < 0 or not inner.endswith("\\b") or inner.endswith("\\\\b"):
                raise ValueError(alt)
            yield wrap(alt[end + 1:]), wrap(inner[:-2])
        else:
            yield wrap(alt), None


def _word_only(dfa: ByteDFA) -> bool:
    """Whether every character ``dfa`` reads is a word character, as Python's ``\\w`` reads one
    (Lark's terminals are Python regexes): ASCII letters, digits and ``_``, and the non-ASCII
    characters ``str.isalnum`` takes (``(?i)[a-z]`` also reads ``ſ`` and the Kelvin sign)."""
    trans = dfa.transitions
    for s in range(dfa.n_states):
        for b in np.flatnonzero(trans[s] >= 0).tolist():
            if b < 0x80 and not _WORD[b]:
                return False
            if b >= 0xC0 and not all(chr(cp).isalnum() for cp in _characters(trans, int(trans[s, b]), b)):
                return False
    return True


def _characters(trans: np.ndarray, state: int, lead: int):
    """The code points of the UTF-8 sequences that start with byte ``lead`` and go on from ``state``."""
    n = 1 if lead < 0xE0 else 2 if lead < 0xF0 else 3
    stack = [(state, lead & (0x3F >> n), n)]
    while stack:
        q, cp, left = stack.pop()
        if left == 0:
            yield cp
            continue
        for b in np.flatnonzero(trans[q, 0x80:0xC0] >= 0).tolist():
            stack.append((int(trans[q, 0x80 + b]), (cp << 6) | b, left - 1))


def _lookahead_dfa(name: str, pattern: str) -> ByteDFA:
    """A terminal whose alternatives may start with ``(?!K\\b)``: each such alternative
    is its body minus ``K``, given both only read word characters."""
    msg = (f"terminal {name} uses a lookaround assertion ({pattern!r}), which a finite automaton "
           f"cannot express; the one supported is (?!K\\b) at the start of an alternative whose "
           f"strings, like K's, are word characters (keywords kept out of an identifier)")
    try:
        parts = list(_parts(pattern))
    except ValueError:
        raise GrammarError(msg) from None
    dfas, accepts = [], []
    for body, excluded in parts:
        if any(a in body for a in _LOOKAROUND):
            raise GrammarError(msg)
        b = regex_to_dfa(body)
        if excluded is None:
            accepts.append((len(dfas), None))
            dfas.append(b)
            continue
        k = regex_to_dfa(excluded)
        if not (_word_only(b) and _word_only(k)):
            raise GrammarError(msg)
        accepts.append((len(dfas), len(dfas) + 1))
        dfas += [b, k]
    dfa = combine(dfas, lambda f: any(f[i] and (j is None or not f[j]) for i, j in accepts))
    if dfa.is_empty:
        raise GrammarError(f"terminal {name}: {pattern!r} matches no string once its lookahead excludes")
    return dfa


def _python_regex_to_dfa(name: str, pattern: str, flags) -> object:
    pattern = _KNOWN.get(pattern, pattern)
    pattern = pattern.replace("(?P<", "(?<")
    pattern = _LAZY.sub(r"\1", pattern)
    for f in sorted(flags):
        if f in "is":
            pattern = f"(?{f}:{pattern})"
        elif f in "mx" or f == "u":
            if f == "x":
                raise GrammarError(f"terminal {name}: the regex flag 'x' is not supported")
        else:
            raise GrammarError(f"terminal {name}: unknown regex flag {f!r}")
    try:
        if any(a in pattern for a in _LOOKAROUND):
            return _lookahead_dfa(name, pattern)
        return regex_to_dfa(pattern)
    except PatternError as e:
        raise GrammarError(f"terminal {name}: {e}") from None


def _unplaced(message: str) -> str:
    """Lark's first line without its own "at line N, column M" (GrammarError says where, once)."""
    first = message.strip().splitlines()[0] if message.strip() else message
    return re.sub(r"[ ,]*(?:at )?[Ll]ine:? \d+,? (?:col(?:umn)?:? \d+)?\.?(?: in <string>:?)?\s*$", "", first) or first


def _line_of(text: str, pattern: str) -> int | None:
    m = re.search(pattern, text, re.M)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _name(td) -> str:
    """A terminal as the user wrote it: its name, or for an anonymous one its pattern."""
    if not td.name.startswith("__"):
        return td.name
    return f"/{td.pattern.value}/" if type(td.pattern).__name__ == "PatternRE" else repr(td.pattern.value)


def _place(text: str, td) -> tuple[int | None, int | None]:
    """(line, column) of a terminal's definition, or of an anonymous one's pattern, in ``text``."""
    if td.name.startswith("__"):
        k = text.find(f"/{td.pattern.value}/")
    else:
        m = re.search(rf"^\s*{re.escape(td.name)}(\.-?\d+)?\s*:", text, re.M)
        k = m.start() + len(m.group(0)) - len(m.group(0).lstrip()) if m else -1
    if k < 0:
        return None, None
    line = text.count("\n", 0, k) + 1
    return line, k - (text.rfind("\n", 0, k) + 1) + 1


def check_nesting(text: str, source: str = "grammar") -> None:
    """Refuse ``text`` where its parentheses, brackets and braces (outside strings, regexes and
    comments) nest deeper than ``MAX_NESTING``, or where ``~`` repetitions of groups inside
    one another multiply past ``MAX_EXPANSION`` copies: a ``GrammarError`` at the first bracket
    or ``~`` past it, before lark reads the grammar (its reading recurses: a ``RecursionError``
    at a few hundred brackets; it writes every copy out: ``(("b")~2)~2``... 40 deep never ends)."""
    depth = 0
    widest = [1]  # per open group: the most copies one of its parts expands to
    closed, closed_at = 1, -1  # the copies of the group closed last, and where it ended
    for m in _NESTING.finditer(text):
        c, i = m.group(), m.start()
        if c in "([{":
            depth += 1
            widest.append(1)
            if depth > MAX_NESTING:
                raise GrammarError(f"parentheses, brackets and braces nested more than {MAX_NESTING} deep are not "
                                   "supported (localguide.grammar.lark_frontend.MAX_NESTING)", *_at(text, i), source)
        elif c in ")]}":
            depth = max(0, depth - 1)
            closed, closed_at = (widest.pop() if len(widest) > 1 else 1), m.end()
            widest[-1] = max(widest[-1], closed)
        elif c[0] == "~":
            part = closed if text[closed_at:i].strip() == "" else 1  # (a group's copies, or one item's)
            copies = part * int(m.group(2) or m.group(1))
            if copies > MAX_EXPANSION:
                raise GrammarError(f"repetitions with ~ inside one another expand to more than {MAX_EXPANSION:,} "
                                   "copies of a part (localguide.grammar.lark_frontend.MAX_EXPANSION): write the "
                                   "repeated part as a rule of its own", *_at(text, i), source)
            widest[-1] = max(widest[-1], copies)


def _at(text: str, i: int) -> tuple[int, int]:
    return text.count("\n", 0, i) + 1, i - (text.rfind("\n", 0, i) + 1) + 1


# (a string, a regex, a comment, as lark's lexer reads them: their brackets are no nesting; a
# bracket; a ``~`` repetition with its count or range)
_NESTING = re.compile(r'"(?:\\[\s\S]|[^"\\\n])*"?|/(?!/)(?:\\[\s\S]|[^/\\])*/?|(?://|#)[^\n]*|[()\[\]{}]'
                      r'|~\s*(\d+)(?:\s*\.\.\s*(\d+))?')


@functools.lru_cache(maxsize=None)
def _reader():
    import lark
    from lark.exceptions import GrammarError as LarkGrammarError

    class Read(lark.Lark):
        """A grammar read by lark (rules and terminals), without the parser lark would build: its
        analysis (FIRST/FOLLOW sets to a fixed point) takes seconds for a rule of a few hundred
        items, and only its two checks of the rules are wanted."""

        def _build_parser(self):
            rules = self.rules
            twice = sorted({str(r) for r in rules if rules.count(r) > 1}) if len(set(rules)) < len(rules) else ()
            if twice:
                raise LarkGrammarError("Rules defined twice: %s" % ", ".join(twice))
            defined = {r.origin for r in rules}
            for r in rules:
                for sym in r.expansion:
                    if not sym.is_term and sym not in defined:
                        raise LarkGrammarError("Using an undefined rule: %s" % sym)
            return None

    return Read


def lark_to_cfg(text: str, source: str = "grammar", start: str | None = None, import_paths=()) -> CFG:
    """Parse Lark grammar ``text`` and convert it to the internal form."""
    check_nesting(text, source)
    import lark
    from lark.exceptions import GrammarError as LarkGrammarError
    from lark.exceptions import UnexpectedInput

    from lark.lexer import Lexer

    class _NoLexer(Lexer):  # we only need the grammar analysis, and it must accept zero-width terminals
        def __init__(self, conf):
            pass

        def lex(self, data):
            return iter(())

    kwargs = {"parser": "earley", "lexer": _NoLexer, "keep_all_tokens": True}
    if start is not None:
        kwargs["start"] = start
    if import_paths:
        kwargs["import_paths"] = list(import_paths)
    from .confined import ImportRefused

    _Read = _reader()
    try:
        lk = _Read(text, **kwargs)
    except ImportRefused as e:
        line = _line_of(text, rf"^\s*%import\s+\.?{re.escape(e.name.split('.')[0])}\b")
        raise GrammarError(f"invalid Lark grammar: {e}", line or _line_of(text, r"^\s*%import\b"), None,
                           source) from None
    except UnexpectedInput as e:
        expected = sorted(getattr(e, "expected", None) or getattr(e, "allowed", None) or ())
        hint = f" (expected one of: {', '.join(expected[:8])}{', ...' if len(expected) > 8 else ''})" if expected else ""
        raise GrammarError(f"invalid Lark grammar: {_unplaced(str(e))}{hint}", getattr(e, "line", None),
                           getattr(e, "column", None), source) from None
    except OSError as e:  # (%import of a file that is not there)
        name = getattr(e, "filename", None) or str(e)
        line = _line_of(text, r"^\s*%import\b")
        raise GrammarError(f"invalid Lark grammar: %import cannot find {name}", line, None, source) from None
    except (LarkGrammarError, KeyError, ValueError, AssertionError) as e:
        msg = str(e).strip() or type(e).__name__
        m = re.search(r"[Ll]ine:? (\d+)(?:,? column:? (\d+))?", msg)
        line = int(m.group(1)) if m else None
        col = int(m.group(2)) if m and m.group(2) else None
        raise GrammarError(f"invalid Lark grammar: {_unplaced(msg)}", line, col, source) from None
    except Exception as e:  # noqa: BLE001 - lark's own failure on odd input (say '%declare start')
        raise GrammarError(f"invalid Lark grammar: lark could not read it ({type(e).__name__}: {e})",
                           source=source) from None
    terminals: list[Terminal] = []
    index: dict[str, int] = {}
    for td in lk.terminals:
        p = td.pattern
        if type(p).__name__ == "PatternStr":
            dfa = literal_dfa(p.value, ignore_case="i" in p.flags)
        else:
            try:
                dfa = _python_regex_to_dfa(_name(td), p.value, p.flags)
            except GrammarError as e:
                line, col = _place(text, td)
                raise GrammarError(e.reason, line, col, source) from None
        index[td.name] = len(terminals)
        terminals.append(Terminal(td.name, dfa))
    rules = []
    for r in lk.rules:
        rhs = []
        for s in r.expansion:
            if s.is_term:
                if s.name not in index:
                    raise GrammarError(f"rule {r.origin.name!r} uses terminal {s.name} that has no "
                                       f"definition (a %declare'd terminal cannot be generated)", source=source)
                rhs.append(index[s.name])
            else:
                rhs.append(s.name)
        rules.append((r.origin.name, tuple(rhs)))
    starts = lk.options.start
    if len(starts) != 1:
        raise GrammarError(f"give exactly one start rule (got {starts})", source=source)
    ignore = frozenset(index[n] for n in lk.ignore_tokens if n in index)
    return CFG(terminals, rules, starts[0], ignore, source)
