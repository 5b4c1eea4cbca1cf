"""Constraint → Index, through the disk cache."""

from __future__ import annotations

from ..index import Index
from ..vocabulary import Vocabulary
from .parser import regex_to_dfa


def compile_regex(pattern: str, vocabulary: Vocabulary) -> Index:
    """The Index of the texts that fully match ``pattern`` (ECMA-262 syntax), cached on disk."""
    # The DFA is built (and the pattern checked) only when the cache misses; a bad
    # pattern raises before anything is written.
    return Index.cached("regex", pattern, lambda: regex_to_dfa(pattern), vocabulary, f"regex {pattern!r}")


def choice_pattern(choices) -> str:
    """A pattern matching exactly one of the literal strings ``choices``."""
    choices = list(choices)
    if not choices:
        raise ValueError("choice needs at least one option")
    return "|".join("(?:" + "".join(_escape(c) for c in s) + ")" for s in choices)


def _escape(c: str) -> str:
    if c.isalnum() or ord(c) > 0x7F:
        return c
    if c == "\n":
        return "\\n"
    if ord(c) < 0x20 or ord(c) == 0x7F:
        return f"\\x{ord(c):02x}"
    return "\\" + c


def compile_choice(choices, vocabulary: Vocabulary) -> Index:
    """The Index of exactly one of the literal strings ``choices``."""
    return compile_regex(choice_pattern(choices), vocabulary)
