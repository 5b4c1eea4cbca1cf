"""Byte DFA → regex AST over characters (``localguide.regex.ast``), the way back from automata.

The JSON Schema compiler builds some languages only as automata (a key that one pattern
property matches and another does not: an intersection and a difference), and writes the rest
of a schema as an AST. This module reads a byte DFA of UTF-8 text (surrogates allowed, as
``ast_dfa`` encodes them) as an automaton over code points, then removes its states one by one
(Brzozowski and McCluskey's state elimination), each edge a ``Cls`` or an expression.

State elimination can grow a regex exponentially in the number of states: past ``max_weight``
leaves the answer is None, and the caller keeps its approximation.
"""

from __future__ import annotations

import numpy as np

from ..automaton import ByteDFA, row_runs
from .ast import EMPTY, EPS, Auto, Node, alt, cls, seq, star

# (first bytes, bits the first byte carries, continuation bytes, smallest code point) per length
_LENGTHS = ((range(0x00, 0x80), 0x7F, 0, 0x0), (range(0xC2, 0xE0), 0x1F, 1, 0x80),
            (range(0xE0, 0xF0), 0x0F, 2, 0x800), (range(0xF0, 0xF5), 0x07, 3, 0x10000))


def char_edges(dfa: ByteDFA) -> list[dict[int, list]]:
    """Per state: target state -> code point ranges that lead there (UTF-8 read whole)."""
    trans = dfa.transitions
    memo: dict = {}

    def cont(m: int, k: int) -> list:
        """(lo, hi, target) over the values of the next ``k`` continuation bytes from state ``m``."""
        if k == 0:
            return [(0, 0, m)]
        got = memo.get((m, k))
        if got is not None:
            return got
        span = 64 ** (k - 1)
        out = []
        for x, y, t in row_runs(trans[m], 0x80, 0xC0):
            if t >= 0:
                out += _spread(x - 0x80, y - 0x80, cont(t, k - 1), span)
        got = memo[(m, k)] = _merge(out)
        return got

    edges: list[dict[int, list]] = []
    for s in range(dfa.n_states):
        row = trans[s]
        to: dict[int, list] = {}
        for firsts, bits, k, least in _LENGTHS:
            span = 64 ** k
            for b, c, t in row_runs(row, firsts.start, firsts.stop):  # first bytes with one target
                if t >= 0:
                    for lo, hi, u in _spread(b & bits, c & bits, cont(t, k), span):
                        lo, hi = max(lo, least), min(hi, 0x10FFFF)
                        if lo <= hi:
                            to.setdefault(u, []).append((lo, hi))
        edges.append({u: _merge([(a, b, 0) for a, b in rs], ranges=True) for u, rs in to.items()})
    return edges


def _spread(first: int, last: int, sub: list, span: int) -> list:
    """(lo, hi, target) for the values ``digit * span + rest``, ``digit`` in first..last and
    ``rest`` in the intervals of ``sub`` (one interval when ``sub`` covers all of ``span`` alike)."""
    if len(sub) == 1 and sub[0][0] == 0 and sub[0][1] == span - 1:
        return [(first * span, last * span + span - 1, sub[0][2])]
    return [(z * span + lo, z * span + hi, u) for z in range(first, last + 1) for lo, hi, u in sub]


def _merge(items: list, ranges: bool = False) -> list:
    """Adjacent intervals with the same target joined (sorted)."""
    items = sorted(items)
    out: list = []
    for lo, hi, t in items:
        if out and out[-1][2] == t and out[-1][1] + 1 >= lo:
            out[-1] = (out[-1][0], max(out[-1][1], hi), t)
        else:
            out.append((lo, hi, t))
    return [(lo, hi) for lo, hi, _ in out] if ranges else out


def dfa_to_node(dfa: ByteDFA, max_weight: int = 50_000) -> Node | None:
    """A regex AST of the language of ``dfa`` (minimal and trimmed, as ``ByteDFA``s are), or None
    when the expression would exceed ``max_weight`` leaves."""
    if dfa.is_empty:
        return EMPTY
    n = dfa.n_states
    start, final = n, n + 1
    # out[p][q]: (the expression of the paths p -> q through removed states, its leaves)
    out: dict[int, dict[int, tuple]] = {s: {} for s in range(n + 2)}
    inc: dict[int, set] = {s: set() for s in range(n + 2)}
    for s, to in enumerate(char_edges(dfa)):
        for t, rs in to.items():
            out[s][t] = (cls(tuple(rs)), 1)
            inc[t].add(s)
    out[start][0] = (EPS, 0)
    inc[0].add(start)
    for s in np.flatnonzero(dfa.accepting):
        out[int(s)][final] = (EPS, 0)
        inc[final].add(int(s))
    todo = set(range(n))
    while todo:
        # the state whose removal adds the fewest paths
        s = min(todo, key=lambda q: (len(inc[q] - {q}) * len(set(out[q]) - {q}), q))
        todo.remove(s)
        loop = out[s].pop(s, None)
        inc[s].discard(s)
        middle, mw = (star(loop[0]), loop[1]) if loop is not None else (EPS, 0)
        for p in inc[s]:
            into, iw = out[p].pop(s)
            for q, (away, aw) in out[s].items():
                path, w = seq(into, middle, away), iw + mw + aw
                old = out[p].get(q)
                if old is not None:
                    path, w = alt(old[0], path), old[1] + w
                if w > max_weight:
                    return None
                out[p][q] = (path, w)
                inc[q].add(p)
        for q in out[s]:
            inc[q].discard(s)
        out[s] = {}
        inc[s] = set()
    return out[start].get(final, (EMPTY, 0))[0]


def auto_tree(node: Auto) -> Node | None:
    """``node``'s language as ordinary nodes, under ``Auto.TREE_WEIGHT`` leaves, else None (kept on the node)."""
    if node._tree is False:
        node._tree = dfa_to_node(node.dfa, max_weight=node.TREE_WEIGHT)
    return node._tree
