"""Byte-level finite automata: the common currency between constraints and the Index.

Every constraint (regex, JSON Schema, grammar terminal) ends up as a ``ByteDFA``:
a dense ``int32[n_states, 256]`` transition table (``-1`` is the dead state), an
accepting mask, and start state 0. DFAs built here are minimal and trimmed: every
state is reachable from the start and can reach an accepting state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .utf8 import utf8_sequences


@dataclass(frozen=True, eq=False)
class ByteDFA:
    """A deterministic automaton over bytes; state 0 is the start."""

    transitions: np.ndarray  # int32[n, 256], -1 = dead
    accepting: np.ndarray  # bool[n]

    @property
    def n_states(self) -> int:
        return len(self.accepting)

    @property
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

    def to_dfa(self, start: int = 0) -> ByteDFA:
        """Subset construction, then minimization."""
        return minimize(*_determinize(self, start))


def _closure(nfa: ByteNFA, states) -> frozenset[int]:
    seen = set(states)
    stack = list(states)
    while stack:
        for t in nfa.eps[stack.pop()]:
            if t not in seen:
                seen.add(t)
                stack.append(t)
    return frozenset(seen)


def _determinize(nfa: ByteNFA, start: int) -> tuple[np.ndarray, np.ndarray]:
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
                ids[key] = len(order)
                order.append(key)
            row[a:b] = ids[key]
        rows.append(row)
    trans = np.stack(rows) if rows else np.full((1, 256), -1, np.int32)
    acc = np.array([bool(s & nfa.accepting) for s in order], dtype=bool)
    return trans, acc


_MIX = np.random.default_rng(0x10ca1).integers(1, 1 << 62, size=257, dtype=np.int64) | 1


def refine(acc: np.ndarray, tc: np.ndarray, max_rounds: int | None = None) -> tuple[np.ndarray, int] | None:
    """Moore's refinement of the states of ``tc`` (int[n, classes], every target a state):
    (block of each state, number of blocks), or None past ``max_rounds`` rounds."""
    got = _refine(acc, tc, hashed=True, max_rounds=max_rounds)
    if got is not None and not _stable(got[0], tc, acc):  # a hash collision merged two states
        got = _refine(acc, tc, hashed=False, max_rounds=max_rounds)
    return got


def _refine(acc: np.ndarray, tc: np.ndarray, hashed: bool, max_rounds: int | None = None):
    """Moore's refinement: (block of each state, number of blocks), None past ``max_rounds``.

    A state's signature is its block and its successors' blocks; ``hashed`` compares
    signatures by a 64-bit mix instead of whole rows (much faster, checked afterwards).
    """
    block = acc.astype(np.int64)
    count = int(block.max()) + 1
    mix = _MIX[: tc.shape[1] + 1]
    rounds = 0
    while True:
        rounds += 1
        if max_rounds is not None and rounds > max_rounds:
            return None
        sig = np.concatenate([block[:, None], block[tc]], axis=1)
        if hashed:
            _, new = np.unique(sig @ mix, return_inverse=True)
        else:
            _, new = np.unique(sig, axis=0, return_inverse=True)
        block = new.reshape(-1).astype(np.int64)
        found = int(block.max()) + 1
        if found == count:
            return block, count
        count = found


def _stable(block: np.ndarray, tc: np.ndarray, acc: np.ndarray) -> bool:
    """Whether states in the same block agree on acceptance and have successors in the same
    blocks: then merging each block keeps the language, whatever hashing did."""
    rep = np.zeros(int(block.max()) + 1, np.int64)
    rep[block] = np.arange(len(block))  # one state of each block
    same = rep[block]
    return bool(np.array_equal(acc, acc[same]) and np.array_equal(block[tc], block[tc][same]))


def minimize(transitions: np.ndarray, accepting: np.ndarray) -> ByteDFA:
    """Minimal equivalent DFA, with unreachable and non-coaccessible states removed.

    Moore's partition refinement over byte classes (columns with equal transitions
    are one class): states are split by the classes of their successors until the
    number of blocks stops growing.
    """
    n = len(accepting)
    sink = n
    t = np.where(transitions < 0, sink, transitions).astype(np.int64)
    t = np.vstack([t, np.full((1, 256), sink, np.int64)])
    _, first_col, byte_class = np.unique(t.T, axis=0, return_index=True, return_inverse=True)
    # Classes in the order of their first byte, so that the numbering below is canonical.
    by_first = np.argsort(first_col)
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(len(by_first))
    byte_class = rank[byte_class.reshape(-1)]
    tc = t[:, first_col[by_first]]  # [n+1, n_classes]
    acc = np.append(accepting, False)
    block, count = refine(acc, tc)
    dead = block[sink]
    # Renumber blocks in breadth-first order from the start, dropping the dead block.
    rep = {}
    for s in range(n + 1):
        rep.setdefault(int(block[s]), s)
    start = int(block[0])
    if start == dead:
        return ByteDFA(np.full((1, 256), -1, np.int32), np.zeros(1, bool))
    index = {start: 0}
    order = [start]
    i = 0
    while i < len(order):
        for nxt in block[tc[rep[order[i]]]].tolist():
            if nxt != dead and nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
        i += 1
    remap = np.full(count, -1, np.int64)
    for b, k in index.items():
        remap[b] = k
    reps = np.array([rep[b] for b in order])
    out = remap[block[tc[reps]]][:, byte_class].astype(np.int32)
    return ByteDFA(np.ascontiguousarray(out), acc[reps].copy())
