"""Constraint → Index, through the disk cache."""

from __future__ import annotations

import numpy as np

from ..automaton import minimize
from ..index import Index
from ..index.lazy import warm_kernels as warm_index_kernels
from ..runtime.numba_tools import kernels_only
from ..vocabulary import Vocabulary
from .ast_dfa import ast_to_dfa
from .parser import match_node, regex_to_dfa


def compile_regex(pattern: str, vocabulary: Vocabulary) -> Index:
    """The Index of the texts that fully match ``pattern`` (ECMA-262 syntax), cached on disk."""
    # The DFA is built (and the pattern checked) only when the cache misses; a bad
    # pattern raises before anything is written.
    return Index.cached("regex", pattern, lambda: _bounded(regex_to_dfa(pattern), vocabulary, pattern), vocabulary,
                        f"regex {pattern!r}")


MAX_INDEX_TRANSITIONS = 50_000_000  # token transitions of one regex's index (about 400 MB)


def _bounded(dfa, vocabulary: Vocabulary, pattern: str):
    """``dfa``, where its index stays within ``MAX_INDEX_TRANSITIONS`` (an upper bound: each state
    times the tokens whose first byte it takes); else an ``UnsupportedPatternError`` saying so."""
    from ..errors import UnsupportedPatternError
    from .parser import largest_repetition, match_node

    lengths = np.diff(vocabulary.offsets)
    firsts = vocabulary.flat[vocabulary.offsets[:-1][lengths > 0]]
    per_byte = np.bincount(firsts, minlength=256).astype(np.int64)
    bound = int(((dfa.transitions >= 0) @ per_byte).sum())
    if bound > MAX_INDEX_TRANSITIONS:
        raise UnsupportedPatternError(
            f"its index could hold {bound:,} token transitions ({dfa.n_states:,} automaton states), over "
            f"localguide's bound of {MAX_INDEX_TRANSITIONS:,} (localguide.regex.compile.MAX_INDEX_TRANSITIONS): "
            "make the repetition smaller", pattern, largest_repetition(pattern, match_node(pattern)))
    return dfa


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
    """The Index of exactly one of the literal strings ``choices`` (its automaton built directly
    from the strings: 10,000 of them in well under a second)."""
    from ..automaton.literals import literals_dfa
    from ..errors import ArgumentError

    if isinstance(choices, (str, bytes)):
        raise ArgumentError(f"choice takes a list of strings, not one string ({choices!r})")
    choices = list(choices)
    if not all(isinstance(c, str) for c in choices):
        bad = next(c for c in choices if not isinstance(c, str))
        raise ArgumentError(f"choice takes strings, not {type(bad).__name__} ({bad!r})")
    for i, c in enumerate(choices):
        try:
            c.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ArgumentError(f"choice[{i}]: a lone surrogate (U+{ord(c[e.start]):04X}) at character {e.start} "
                                "is not text: expected valid Unicode") from None
    pattern = choice_pattern(choices)
    return Index.cached("regex", pattern, lambda: _bounded(literals_dfa([c.encode("utf-8") for c in choices]),
                                                           vocabulary, pattern), vocabulary, f"choice of {len(choices)}")


def warm_kernels() -> None:
    """Compile (or load from numba's cache) the kernels that regexes and JSON schemas use, now.

    Small automata otherwise take the plain-Python twins and the numpy index build (the same
    results) until a large one has compiled the kernels: an app can call this at start-up, in a
    thread; a benchmark before timing."""
    with kernels_only():
        dfa = ast_to_dfa(match_node("(a|bc)*d?"))
        minimize(np.full((1, 256), -1, np.int32), np.ones(1, np.bool_))
    warm_index_kernels(dfa)
