"""The scanner: every terminal DFA run side by side, keeping every viable reading.

A scanner state is a set of readings ``(terminal, DFA state)`` of the current
partial lexeme, determinized into one combined DFA over bytes (``trans``). Nothing
is ever committed: a lexeme may end wherever one of its readings accepts, and may
also go on. After a lexeme of terminal ``T`` ends, the next one starts in the
*seed* state ``after[T]``: all terminals that can follow ``T`` in the grammar (its
FOLLOW set, plus the ignored ones); after an ignored terminal, all terminals. The
seeds over-approximate; the parser filters readings by the terminals it allows.
"""

from __future__ import annotations

import numpy as np

from .earley import Grammar


def follow_sets(g: Grammar) -> list[int]:
    """For each terminal, the bitmask of terminals that can come right after it."""
    nt = g.n_terminals
    first: dict[int, int] = {t: 1 << t for t in range(nt)}
    for n in g.nt_id.values():
        first[n] = 0
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            acc = 0
            for s in rhs:
                acc |= first[s]
                if s not in g.nullable:
                    break
            if acc | first[lhs] != first[lhs]:
                first[lhs] |= acc
                changed = True
    follow: dict[int, int] = {s: 0 for s in first}
    changed = True
    while changed:
        changed = False
        for lhs, rhs in g.rules:
            trailer = follow[lhs]
            for s in reversed(rhs):
                if trailer | follow[s] != follow[s]:
                    follow[s] |= trailer
                    changed = True
                trailer = (trailer | first[s]) if s in g.nullable else first[s]
    return [follow[t] for t in range(nt)]


class Scanner:
    """The combined DFA of all terminals, built from the seed states outward."""

    def __init__(self, g: Grammar, max_states: int = 20000):
        cfg = g.cfg
        self.n_terminals = nt = g.n_terminals
        self.ignore_mask = g.ignore_mask
        self.term_trans = [t.dfa.transitions for t in cfg.terminals]
        self.term_acc = [t.dfa.accepting for t in cfg.terminals]
        follow = follow_sets(g)
        every = (1 << nt) - 1
        self._ids: dict[frozenset, int] = {}
        self.readings: list[frozenset] = []
        rows: list[np.ndarray] = []
        seeds = {}

        def seed(mask: int) -> int:
            if mask not in seeds:
                seeds[mask] = self._intern(frozenset((t, 0) for t in range(nt) if (mask >> t) & 1))
            return seeds[mask]

        self.start = seed(every)
        self.after = np.zeros(nt, np.int32)
        for t in range(nt):
            self.after[t] = seed(every if (g.ignore_mask >> t) & 1 else follow[t] | g.ignore_mask)
        i = 0
        while i < len(self.readings):
            rows.append(self._row(self.readings[i]))
            i += 1
            if len(self.readings) > max_states:
                from .errors import GrammarError

                raise GrammarError(f"the terminals overlap too much: the scanner needs more than "
                                   f"{max_states} states", source=cfg.source)
        self.trans = np.stack(rows).astype(np.int32)
        n = len(self.readings)
        self.live = [0] * n  # bitmask of terminals with a reading
        self.accepts = [0] * n  # bitmask of terminals whose reading accepts here
        acc_lists = []
        for c, rs in enumerate(self.readings):
            live = acc = 0
            for t, q in rs:
                live |= 1 << t
                if self.term_acc[t][q]:
                    acc |= 1 << t
            self.live[c], self.accepts[c] = live, acc
            acc_lists.append([t for t in range(nt) if (acc >> t) & 1])
        self.acc_offsets = np.zeros(n + 1, np.int64)
        np.cumsum([len(a) for a in acc_lists], out=self.acc_offsets[1:])
        self.acc_terms = np.array([t for a in acc_lists for t in a], np.int32)
        self.is_ignore = np.array([(g.ignore_mask >> t) & 1 for t in range(nt)], np.int8)
        self.accept_lists = acc_lists

    def _intern(self, rs: frozenset) -> int:
        c = self._ids.get(rs)
        if c is None:
            c = self._ids[rs] = len(self.readings)
            self.readings.append(rs)
        return c

    def _row(self, rs: frozenset) -> np.ndarray:
        row = np.full(256, -1, np.int64)
        if not rs:
            return row
        rl = sorted(rs)
        mat = np.stack([self.term_trans[t][q] for t, q in rl])  # (k, 256)
        cols, inverse = np.unique(mat.T, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        targets = []
        for col in cols:
            nxt = frozenset((rl[i][0], int(q)) for i, q in enumerate(col) if q >= 0)
            targets.append(self._intern(nxt) if nxt else -1)
        return np.array(targets, np.int64)[inverse]

    @property
    def n_states(self) -> int:
        return len(self.readings)
