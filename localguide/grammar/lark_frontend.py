"""Lark grammar text → ``CFG``, through Lark's public API.

Lark expands templates, ``?rule`` inlining, ``[optional]``, ``%import`` and
``%declare``-free grammars into plain productions (``Lark.rules``) and gives every
terminal as a regex or a string (``Lark.terminals``). Terminal patterns are Python
regexes; they become byte DFAs through ``localguide.regex.regex_to_dfa`` (flags
such as ``i`` and ``s`` become inline groups). Lazy quantifiers match the same
language as greedy ones; the lookbehind patterns of ``common.lark``
(``ESCAPED_STRING`` and friends) are replaced by equivalent plain regexes.

Priorities only choose between parse trees or between tokenizations in Lark; a
constraint accepts a text when *some* reading of it parses, so they do not change
the language and are ignored here.
"""

from __future__ import annotations

import re

from ..errors import PatternError
from ..regex import regex_to_dfa
from .cfg import CFG, Terminal, literal_dfa
from .errors import GrammarError

# Python-regex idioms from lark's common.lark (lookbehind, lazy matching up to a
# delimiter) and the plain regex with the same matches.
_KNOWN = {
    r'".*?(?<!\\)(\\\\)*?"': r'"(?:[^"\\\n]|\\[^\n])*"',
    r"'.*?(?<!\\)(\\\\)*?'": r"'(?:[^'\\\n]|\\[^\n])*'",
    r"/\*(.|\n)*?\*/": r"/\*(?:[^*]|\*+[^*/])*\*+/",
    r"\/\*(.|\n)*?\*\/": r"/\*(?:[^*]|\*+[^*/])*\*+/",
}
_LAZY = re.compile(r"(?<!\\)([*+?}])\?")


def _python_regex_to_dfa(name: str, pattern: str, flags) -> object:
    pattern = _KNOWN.get(pattern, pattern)
    if "(?<" in pattern.replace("(?<!", "(?<").replace("(?P<", "") or "(?=" in pattern or "(?!" in pattern:
        if "(?<=" in pattern or "(?<!" in pattern or "(?=" in pattern or "(?!" in pattern:
            raise GrammarError(f"terminal {name} uses a lookaround assertion ({pattern!r}), which a "
                               f"finite automaton cannot express")
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
        return regex_to_dfa(pattern)
    except PatternError as e:
        raise GrammarError(f"terminal {name}: {e}") from None


def lark_to_cfg(text: str, source: str = "grammar", start: str | None = None, import_paths=()) -> CFG:
    """Parse Lark grammar ``text`` and convert it to the internal form."""
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
    try:
        lk = lark.Lark(text, **kwargs)
    except UnexpectedInput as e:
        raise GrammarError(f"invalid Lark grammar: {str(e).splitlines()[0]}", getattr(e, "line", None),
                           getattr(e, "column", None), source) from None
    except (LarkGrammarError, KeyError, ValueError, AssertionError) as e:
        msg = str(e).strip() or type(e).__name__
        m = re.search(r"[Ll]ine:? (\d+)(?:, column:? (\d+))?", msg)
        line = int(m.group(1)) if m else None
        col = int(m.group(2)) if m and m.group(2) else None
        raise GrammarError(f"invalid Lark grammar: {msg.splitlines()[0]}", line, col, source) from None
    terminals: list[Terminal] = []
    index: dict[str, int] = {}
    for td in lk.terminals:
        p = td.pattern
        if type(p).__name__ == "PatternStr":
            dfa = literal_dfa(p.value, ignore_case="i" in p.flags)
        else:
            dfa = _python_regex_to_dfa(td.name, p.value, p.flags)
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
