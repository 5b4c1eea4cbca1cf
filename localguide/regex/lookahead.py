"""Lookaheads anywhere in a pattern, as automata.

Each lookahead's place in the pattern becomes a mark, a byte UTF-8 never uses (F8-FF), so the
pattern is an ordinary automaton over text and marks. A lookahead asks what follows its place, to
the end of the text: kept are the marked strings in which every mark is followed by a rest that
the lookahead accepts (``(?=``) or refuses (``(?!``), read with the other marks skipped; the
marks are then erased. A string matches iff some placement of its marks survives, which is the
backtracking reading: lookaheads under repetition, in alternatives and in optional groups
included.
"""

from __future__ import annotations

import numpy as np

from ..automaton import ByteDFA, ByteNFA, minimize, product, row_runs
from ..automaton.dfa import TooManyStates

FIRST_MARK = 0xF8
MAX_LOOKAHEADS = 256 - FIRST_MARK  # marks available: F8-FF
# the most states of a marked automaton, a lookahead's and the result (subset constructions in Python)
MAX_STATES = 5_000


def mark_dfa(k: int) -> ByteDFA:
    """The text of the ``k``-th lookahead's mark (one byte)."""
    t = np.full((2, 256), -1, np.int32)
    t[0, FIRST_MARK + k] = 1
    return ByteDFA(t, np.array([False, True]))


def _skipping_marks(dfa: ByteDFA) -> ByteDFA:
    """``dfa`` reading marks as nothing (a loop on every mark, every state)."""
    t = dfa.transitions.copy()
    t[:, FIRST_MARK:] = np.arange(dfa.n_states, dtype=np.int32)[:, None]
    return ByteDFA(t, dfa.accepting.copy())


def _complement(dfa: ByteDFA) -> ByteDFA:
    """Every byte string ``dfa`` refuses (a sink state completes it)."""
    n = dfa.n_states
    t = np.vstack([np.where(dfa.transitions < 0, n, dfa.transitions), np.full((1, 256), n, np.int32)])
    return ByteDFA(t.astype(np.int32), ~np.append(dfa.accepting, False))


def _copy_into(nfa: ByteNFA, dfa: ByteDFA, marks_as_epsilon: bool = False) -> int:
    """``dfa``'s states and edges added to ``nfa`` (its start returned); marks as empty moves
    where ``marks_as_epsilon``."""
    base = len(nfa.edges)
    for _ in range(dfa.n_states):
        nfa.add_state()
    hi = FIRST_MARK if marks_as_epsilon else 256
    for s in range(dfa.n_states):
        row = dfa.transitions[s]
        for lo, last, t in row_runs(row, 0, hi):
            if t >= 0:
                nfa.add_range(base + s, lo, last, base + t)
        if marks_as_epsilon:
            for t in set(row[FIRST_MARK:].tolist()) - {-1}:
                nfa.add_epsilon(base + s, base + t)
        if dfa.accepting[s]:
            nfa.accepting.add(base + s)
    return base


def _mark_then(k: int, rest: ByteDFA) -> ByteDFA:
    """Strings holding the ``k``-th mark followed by a string of ``rest`` (anything before it)."""
    nfa = ByteNFA()
    start = nfa.add_state()
    nfa.add_range(start, 0, 255, start)
    first = _copy_into(nfa, rest)
    nfa.add_range(start, FIRST_MARK + k, FIRST_MARK + k, first)
    return nfa.to_dfa(start, MAX_STATES)


def resolve(marked: ByteDFA, looks: list[tuple[bool, ByteDFA]]) -> ByteDFA:
    """The language of a pattern whose ``k``-th lookahead is the mark ``FIRST_MARK + k`` in
    ``marked``; ``looks[k]`` = (negative, the rests of the text that lookahead accepts).
    ``regex.ast_dfa.TooLargeError`` where a construction passes ``MAX_STATES`` (several
    lookaheads side by side can multiply their states)."""
    from .ast_dfa import TooLargeError

    try:
        kept = marked
        # (one lookahead at a time, minimized in between: all at once, their states multiply)
        for k, (negative, rests) in enumerate(looks):
            rests = _skipping_marks(rests)
            wrong = _mark_then(k, rests if negative else _complement(rests))  # (a mark gone wrong)
            trans, flags = product([kept, wrong], MAX_STATES)
            kept = minimize(trans, flags[:, 0] & ~flags[:, 1])
            if kept.is_empty:
                return kept
        nfa = ByteNFA()
        start = _copy_into(nfa, kept, marks_as_epsilon=True)
        return nfa.to_dfa(start, MAX_STATES)
    except TooManyStates as e:
        raise TooLargeError(str(e)) from None


def apply(marked, looks: list, max_states: int = MAX_STATES) -> ByteDFA | None:
    """``resolve`` from AST nodes: ``marked`` (lookaheads as ``mark_dfa`` leaves) and ``looks[k]`` =
    (negative, the node of the rests it accepts); None where an automaton passes ``max_states``."""
    from .ast_dfa import TooLargeError, ast_to_dfa

    try:
        dfa = resolve(ast_to_dfa(marked, max_states),
                      [(negative, ast_to_dfa(rests, max_states)) for negative, rests in looks])
    except TooLargeError:
        return None
    return dfa if dfa.n_states <= max_states else None
