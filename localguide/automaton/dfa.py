"""Byte-level finite automata: the common currency between constraints and the Index.

Every constraint (regex, JSON Schema, grammar terminal) ends up as a ``ByteDFA``:
a dense ``int32[n_states, 256]`` transition table (``-1`` is the dead state), an
accepting mask, and start state 0. DFAs built here are minimal and trimmed: every
state is reachable from the start and can reach an accepting state.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..runtime.numba_tools import compiled
from .minimize_kernels import minimize_dfa, py_minimize_dfa
from .utf8 import utf8_sequences


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A deterministic automaton over bytes; state 0 is the start."""

    transitions: np.ndarray  # int32[n, 256], -1 = dead
    accepting: np.ndarray  # bool[n]

    @property
    def n_states(self) -> int:
        return len(self.accepting)

    @cached_property
    def is_empty(self) -> bool:
        return not bool(self.accepting.any())

    def run(self, data: bytes, state: int = 0) -> int:
        """The state after reading ``data`` from ``state`` (-1 once dead)."""
        t = self.transitions
        for b in data:
            state = int(t[state, b])
            if state < 0:
                return -1
        return state

    def matches(self, data: bytes) -> bool:
        s = self.run(data)
        return s >= 0 and bool(self.accepting[s])


class ByteNFA:
    """A nondeterministic automaton with byte-range and epsilon edges, built by hand."""

    def __init__(self) -> None:
        self.edges: list[list[tuple[int, int, int]]] = []  # state -> [(lo, hi, target)]
        self.eps: list[list[int]] = []
        self.accepting: set[int] = set()

    def add_state(self) -> int:
        self.edges.append([])
        self.eps.append([])
        return len(self.edges) - 1

    def add_range(self, src: int, lo: int, hi: int, dst: int) -> None:
        self.edges[src].append((lo, hi, dst))

    def add_epsilon(self, src: int, dst: int) -> None:
        self.eps[src].append(dst)

    def add_codepoints(self, src: int, ranges, dst: int) -> None:
        """Edges from ``src`` to ``dst`` reading any character in ``ranges`` as UTF-8."""
        for lo, hi in ranges:
            for seq in utf8_sequences(lo, hi):
                cur = src
                for i, (blo, bhi) in enumerate(seq):
                    nxt = dst if i == len(seq) - 1 else self.add_state()
                    self.add_range(cur, blo, bhi, nxt)
                    cur = nxt

    def to_dfa(self, start: int = 0, max_states: int | None = None) -> ByteDFA:
        """Subset construction (``TooManyStates`` past ``max_states``), then minimization."""
        return minimize(*_determinize(self, start, max_states))


def _closure(nfa: ByteNFA, states) -> frozenset[int]:
    seen = set(states)
    stack = list(states)
    while stack:
        for t in nfa.eps[stack.pop()]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return frozenset(seen)


class TooManyStates(Exception):
    """A construction went past the states it was allowed."""


def _determinize(nfa: ByteNFA, start: int, max_states: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    first = _closure(nfa, [start])
    ids = {first: 0}
    order = [first]
    rows: list[np.ndarray] = []
    i = 0
    while i < len(order):
        subset = order[i]
        i += 1
        # Split the byte axis at every range boundary so each class has one target set.
        bounds = {0, 256}
        edges = [e for s in subset for e in nfa.edges[s]]
        for lo, hi, _ in edges:
            bounds.add(lo)
            bounds.add(hi + 1)
        cuts = sorted(bounds)
        row = np.full(256, -1, dtype=np.int32)
        for a, b in zip(cuts, cuts[1:]):
            targets = [t for lo, hi, t in edges if lo <= a and b - 1 <= hi]
            if not targets:
                continue
            key = _closure(nfa, targets)
            if key not in ids:
                if max_states is not None and len(order) >= max_states:
                    raise TooManyStates(f"more than {max_states:,} states")
                ids[key] = len(order)
                order.append(key)
            row[a:b] = ids[key]
        rows.append(row)
    trans = np.stack(rows) if rows else np.full((1, 256), -1, np.int32)
    acc = np.array([bool(s & nfa.accepting) for s in order], dtype=bool)
    return trans, acc


# Below this many states, an automaton is minimized by the plain-Python twin (the same result,
# in milliseconds) until the kernel is compiled: compiling it costs seconds on a first use.
TWIN_STATES = 3000


def minimize(transitions: np.ndarray, accepting: np.ndarray) -> ByteDFA:
    """Minimal equivalent DFA, with unreachable and non-coaccessible states removed, numbered
    breadth-first from the start (``minimize_kernels.minimize_dfa``; its twin is Moore's refinement)."""
    run = minimize_dfa if len(accepting) > TWIN_STATES or compiled(minimize_dfa) else py_minimize_dfa
    trans, acc = run(np.ascontiguousarray(transitions, dtype=np.int32), np.ascontiguousarray(accepting, dtype=np.bool_))
    return ByteDFA(trans, acc)


def row_runs(row: np.ndarray, lo: int = 0, hi: int = 256):
    """(first, last, target) for each run of equal entries of ``row[lo:hi]`` (-1 runs included)."""
    b = lo
    while b < hi:
        t = int(row[b])
        e = b
        while e + 1 < hi and row[e + 1] == t:
            e += 1
        yield b, e, t
        b = e + 1


def product(dfas: list[ByteDFA], max_states: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The DFAs run side by side: (transitions int32[n, 256] over the tuples of their states reachable
    from the start, not all dead, and flags bool[n, len(dfas)]: which parts accept there);
    ``TooManyStates`` past ``max_states`` tuples. State 0 is the start; the others are numbered
    breadth-first (in the order of their codes within one level)."""
    k = len(dfas)
    total = 1
    for d in dfas:
        total *= d.n_states + 1
    if total >= 2 ** 62:
        return _product_tuples(dfas, max_states)
    # a dead part as state n_i, so that a tuple of states is one number (mixed radix)
    radix = np.array([d.n_states + 1 for d in dfas], np.int64)
    weights = np.ones(k, np.int64)
    for i in range(k - 2, -1, -1):
        weights[i] = weights[i + 1] * radix[i + 1]
    dead = int(np.dot(radix - 1, weights))
    # bytes whose columns agree in every part move every tuple alike: one column per class
    _, reps, byte_class = np.unique(np.vstack([d.transitions for d in dfas]), axis=1, return_index=True,
                                    return_inverse=True)
    tables = [np.vstack([np.where(d.transitions[:, reps] < 0, d.n_states, d.transitions[:, reps]),
                         np.full((1, len(reps)), d.n_states, np.int32)]).astype(np.int64) for d in dfas]
    # Breadth-first, a whole level at a time: ``known`` (sorted codes) and ``known_ids`` find a tuple's number.
    known = np.zeros(1, np.int64)
    known_ids = np.zeros(1, np.int32)
    level = np.zeros((1, k), np.int64)
    states, rows, n = [level], [], 1
    while len(level):
        codes = np.zeros((len(level), len(reps)), np.int64)
        for j in range(k):
            codes += tables[j][level[:, j]] * weights[j]
        new = np.unique(codes)
        new = new[new != dead]
        at = np.minimum(np.searchsorted(known, new), len(known) - 1)
        new = new[known[at] != new]
        if max_states is not None and n + len(new) > max_states:
            raise TooManyStates(f"more than {max_states:,} states")
        order = np.argsort(np.concatenate([known, new]), kind="stable")
        known = np.concatenate([known, new])[order]
        known_ids = np.concatenate([known_ids, np.arange(n, n + len(new), dtype=np.int32)])[order]
        n += len(new)
        at = np.minimum(np.searchsorted(known, codes), len(known) - 1)
        rows.append(np.where(codes == dead, -1, known_ids[at]).astype(np.int32))
        level = (new[:, None] // weights) % radix
        states.append(level)
    tuples = np.vstack(states)
    flags = np.zeros((n, k), bool)
    for j, d in enumerate(dfas):
        flags[:, j] = np.append(d.accepting, False)[tuples[:, j]]
    return np.vstack(rows)[:, byte_class.reshape(-1)], flags


def _product_tuples(dfas: list[ByteDFA], max_states: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``product`` keyed by tuples (where the tuples of states outnumber an int64)."""
    start = tuple(0 for _ in dfas)
    ids = {start: 0}
    order = [start]
    rows = []
    i = 0
    while i < len(order):
        st = order[i]
        i += 1
        nxt = np.stack([d.transitions[s] if s >= 0 else np.full(256, -1, np.int32) for s, d in zip(st, dfas)])
        cols, inverse = np.unique(nxt.T, axis=0, return_inverse=True)
        targets = np.full(len(cols), -1, np.int32)
        for j, col in enumerate(map(tuple, cols.tolist())):
            if max(col) < 0:
                continue
            tgt = ids.get(col)
            if tgt is None:
                if max_states is not None and len(order) >= max_states:
                    raise TooManyStates(f"more than {max_states:,} states")
                tgt = ids[col] = len(order)
                order.append(col)
            targets[j] = tgt
        rows.append(targets[inverse.reshape(-1)])
    flags = np.array([[s >= 0 and bool(d.accepting[s]) for s, d in zip(st, dfas)] for st in order], bool)
    return np.stack(rows), flags.reshape(len(order), len(dfas))


def combine(dfas: list[ByteDFA], accept) -> ByteDFA:
    """The DFA run of ``dfas`` side by side (product construction), accepting where
    ``accept(flags)`` holds for the tuple of the parts' accepting flags (a dead part reads
    False). ``accept`` must be False when every part is dead, so the product stays finite
    and trimmed after ``minimize``; union and difference are ``any(f)`` and ``f[0] and not f[1]``."""
    trans, flags = product(dfas)
    return minimize(trans, np.array([bool(accept(tuple(bool(x) for x in row))) for row in flags], dtype=bool))


def product_walk(a, b, hit, partial: bool = False, limit: int | None = None) -> bool | None:
    """Whether a string takes byte DFAs ``a`` and ``b`` to states ``x``, ``y`` with ``hit(x, y)``:
    True, False, or None past ``limit`` pairs of states. ``partial``: ``a`` goes on where ``b``
    has no move (``y`` is then -1); else both must move."""
    seen = {(0, 0)}
    stack = [(0, 0)]
    ta, tb = a.transitions, b.transitions
    while stack:
        x, y = stack.pop()
        if hit(x, y):
            return True
        ra = ta[x]
        rb = tb[y] if y >= 0 else None
        moves = ra >= 0 if partial else (ra >= 0) & (rb >= 0)
        for byte in np.flatnonzero(moves).tolist():
            pair = (int(ra[byte]), int(rb[byte]) if rb is not None else -1)
            if pair not in seen:
                if limit is not None and len(seen) >= limit:
                    return None
                seen.add(pair)
                stack.append(pair)
    return False
