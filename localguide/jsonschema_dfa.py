"""AST (``jsonschema_ast``) → minimal byte DFA, without going through pattern text.

The JSON Schema compiler writes its result both as an ECMA-262 pattern (the cache
key, and what ``localguide.regex.regex_to_dfa`` would build) and as an AST; this
module builds the same automaton from the AST directly, because the generic pattern
path is far too slow on the large patterns that schemas produce.

Construction: Glushkov's position automaton over bytes (every character class is
expanded into its UTF-8 byte-range sequences; every repetition copy gets its own
positions, nested so that ``x{0,n}`` stays linear), then subset construction with
positions as bits of Python integers, then ``automaton.minimize``.
"""

from __future__ import annotations

import numpy as np

from .automaton import ByteDFA
from .jsonschema_ast import EMPTY, Alt, Cls, Lit, Node, Rep, Seq
from .utf8 import utf8_sequences


class TooLargeError(Exception):
    """The automaton would exceed the state budget."""


_NONE: frozenset = frozenset()


class _Glushkov:
    """Positions (one per byte range) with their follow sets; first/last sets are frozensets."""

    def __init__(self) -> None:
        self.lo: list[int] = []
        self.hi: list[int] = []
        self.follow: list[set] = []
        self._utf8: dict[tuple, list] = {}

    def _pos(self, lo: int, hi: int) -> int:
        self.lo.append(lo)
        self.hi.append(hi)
        self.follow.append(set())
        return len(self.lo) - 1

    def _link(self, last, first) -> None:
        if first:
            f = self.follow
            for p in last:
                f[p] |= first

    def _seq(self, a, b):
        fa, la, na = a
        fb, lb, nb = b
        self._link(la, fb)
        return (fa | fb if na else fa), (lb | la if nb else lb), na and nb

    def _chain(self, ranges) -> tuple[int, int]:
        prev = first = None
        for blo, bhi in ranges:
            p = self._pos(blo, bhi)
            if prev is None:
                first = p
            else:
                self.follow[prev].add(p)
            prev = p
        return first, prev

    def build(self, node: Node):
        """(first, last, nullable) of ``node``, allocating fresh positions."""
        if isinstance(node, Lit):
            f, l = self._chain((b, b) for b in node.text.encode("utf-8", "surrogatepass"))
            return frozenset((f,)), frozenset((l,)), False
        if isinstance(node, Cls):
            seqs = self._utf8.get(node.ranges)
            if seqs is None:
                seqs = [s for a, b in node.ranges for s in utf8_sequences(a, b)]
                self._utf8[node.ranges] = seqs
            first, last = [], []
            for s in seqs:
                f, l = self._chain(s)
                first.append(f)
                last.append(l)
            return frozenset(first), frozenset(last), False
        if isinstance(node, Seq):
            acc = (_NONE, _NONE, True)
            for x in node.items:
                acc = self._seq(acc, self.build(x))
            return acc
        if isinstance(node, Alt):
            first, last = set(), set()
            nul = False
            for x in node.items:
                f, l, n = self.build(x)
                first |= f
                last |= l
                nul = nul or n
            return frozenset(first), frozenset(last), nul
        if isinstance(node, Rep):
            acc = (_NONE, _NONE, True)
            for _ in range(node.lo):
                acc = self._seq(acc, self.build(node.item))
            if node.hi is None:
                f, l, n = self.build(node.item)
                self._link(l, f)
                return self._seq(acc, (f, l, True))
            # x{0,m} as (x(x(x)?)?)?: build the copies first, then nest from the inside.
            copies = [self.build(node.item) for _ in range(node.hi - node.lo)]
            tail = (_NONE, _NONE, True)
            for c in reversed(copies):
                f, l, n = self._seq(c, tail)
                tail = (f, l, True)
            return self._seq(acc, tail)
        if node is EMPTY:
            return _NONE, _NONE, False
        raise TypeError(node)


def ast_to_dfa(node: Node, max_states: int = 200_000) -> ByteDFA:
    """The minimal byte DFA of the strings of ``node`` (see ``minimize`` for large ones)."""
    trans, acc = ast_to_raw_dfa(node, max_states)
    return minimize(trans, acc)


def ast_to_raw_dfa(node: Node, max_states: int = 200_000) -> tuple[np.ndarray, np.ndarray]:
    """Subset construction over Glushkov positions: (transitions, accepting), not minimized."""
    g = _Glushkov()
    first, last, nul = g.build(node)
    lo, hi = g.lo, g.hi
    follow = [frozenset(f) for f in g.follow]
    initial = frozenset((-1,))
    ids: dict[frozenset, int] = {initial: 0}
    order = [initial]
    rows: list[list[tuple[int, int, int]]] = []
    acc: list[bool] = []
    row_cache: dict[frozenset, list] = {}
    i = 0
    while i < len(order):
        s = order[i]
        i += 1
        if s is initial:
            reach = first
            acc.append(nul)
        else:
            if len(s) == 1:
                (p,) = s
                reach = follow[p]
            else:
                reach = frozenset().union(*[follow[p] for p in s])
            acc.append(not last.isdisjoint(s))
        row = row_cache.get(reach)
        if row is None:
            row = _split(reach, lo, hi)
            row_cache[reach] = row
        out = []
        for a, b, target in row:
            t = ids.get(target)
            if t is None:
                t = ids[target] = len(order)
                order.append(target)
                if len(order) > max_states:
                    raise TooLargeError(f"more than {max_states} automaton states")
            out.append((a, b, t))
        rows.append(out)
    trans = np.full((len(order), 256), -1, np.int32)
    for k, row in enumerate(rows):
        for a, b, t in row:
            trans[k, a:b + 1] = t
    return trans, np.array(acc, dtype=bool)


def _split(reach, lo: list[int], hi: list[int]) -> list[tuple[int, int, frozenset]]:
    """The byte intervals of the positions in ``reach``, each with the set it leads to."""
    if not reach:
        return []
    if len(reach) == 1:
        (p,) = reach
        return [(lo[p], hi[p], reach)]
    cuts = sorted({lo[p] for p in reach} | {hi[p] + 1 for p in reach})
    out = []
    ps = list(reach)
    for a, b in zip(cuts, cuts[1:]):
        m = frozenset(p for p in ps if lo[p] <= a and b - 1 <= hi[p])
        if m:
            if out and out[-1][2] == m and out[-1][1] == a - 1:
                out[-1] = (out[-1][0], b - 1, m)
            else:
                out.append((a, b - 1, m))
    return out


def minimize(trans: np.ndarray, accepting: np.ndarray, moore_rounds: int = 64) -> ByteDFA:
    """An equivalent trimmed DFA; minimal unless Moore's refinement needs more than ``moore_rounds``.

    First an exact one-pass merge: states outside cycles are merged bottom-up by
    signature (acceptance and successors), which is exact and linear for the long
    acyclic chains that bounded repetitions make. Then Moore's refinement, one
    vectorized sort per round; it is dropped (the merged DFA kept as it is) when it
    has not converged within ``moore_rounds`` rounds.
    """
    trans, acc = _trim(trans, np.asarray(accepting, bool))
    if len(acc) == 0:
        return ByteDFA(np.full((1, 256), -1, np.int32), np.zeros(1, bool))
    trans, acc = _merge_acyclic(trans, acc)
    if len(acc) > 2:
        moore = _moore(trans, acc, moore_rounds)
        if moore is not None:
            trans, acc = moore
    return ByteDFA(np.ascontiguousarray(trans, dtype=np.int32), acc)


def _successors(trans: np.ndarray) -> list[list[int]]:
    srt = np.sort(trans, axis=1)
    keep = np.ones_like(srt, dtype=bool)
    keep[:, 1:] = srt[:, 1:] != srt[:, :-1]
    keep &= srt >= 0
    return [row[k].tolist() for row, k in zip(srt, keep)]


def _trim(trans: np.ndarray, acc: np.ndarray):
    """Keep the states reachable from 0 that can reach acceptance; renumber breadth-first."""
    n = len(acc)
    succ = _successors(trans)
    pred: list[list[int]] = [[] for _ in range(n)]
    for s, ts in enumerate(succ):
        for t in ts:
            pred[t].append(s)
    live = np.zeros(n, bool)
    stack = list(np.flatnonzero(acc))
    live[stack] = True
    while stack:
        for p in pred[stack.pop()]:
            if not live[p]:
                live[p] = True
                stack.append(p)
    if not live[0]:
        return trans[:0], acc[:0]
    index = {0: 0}
    order = [0]
    i = 0
    while i < len(order):
        for t in succ[order[i]]:
            if live[t] and t not in index:
                index[t] = len(order)
                order.append(t)
        i += 1
    remap = np.full(n + 1, -1, np.int32)
    for old, new in index.items():
        remap[old] = new
    o = np.array(order)
    return remap[trans[o]], acc[o]


def _merge_acyclic(trans: np.ndarray, acc: np.ndarray):
    n = len(acc)
    succ = _successors(trans)
    # Tarjan's SCCs, iteratively; SCCs come out in reverse topological order.
    index = [-1] * n
    low = [0] * n
    on = [False] * n
    stack: list[int] = []
    canon = np.full(n + 1, -1, np.int64)  # canon[-1] stays -1 for the dead state
    classes: dict[bytes, int] = {}
    counter = 0
    next_id = 0
    for root in range(n):
        if index[root] >= 0:
            continue
        work = [(root, 0)]
        while work:
            v, k = work[-1]
            if k == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on[v] = True
            ts = succ[v]
            if k < len(ts):
                work[-1] = (v, k + 1)
                w = ts[k]
                if index[w] < 0:
                    work.append((w, 0))
                elif on[w]:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                u = work[-1][0]
                low[u] = min(low[u], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) == 1 and v not in succ[v]:
                    key = (b"\1" if acc[v] else b"\0") + canon[trans[v]].tobytes()
                    c = classes.get(key)
                    if c is None:
                        c = classes[key] = next_id
                        next_id += 1
                    canon[v] = c
                else:
                    for w in comp:
                        canon[w] = next_id
                        next_id += 1
    if next_id == n:
        return trans, acc
    return _quotient(trans, acc, canon[:n])


def _quotient(trans: np.ndarray, acc: np.ndarray, block: np.ndarray):
    """The DFA of the blocks (state 0's block first, breadth-first), dead transitions kept."""
    n = len(acc)
    count = int(block.max()) + 1
    rep = np.full(count, -1, np.int64)
    rep[block[::-1]] = np.arange(n - 1, -1, -1)
    ext = np.append(block, -1)
    index = {int(block[0]): 0}
    order = [int(block[0])]
    i = 0
    while i < len(order):
        for t in set(ext[trans[rep[order[i]]]].tolist()):
            if t >= 0 and t not in index:
                index[t] = len(order)
                order.append(t)
        i += 1
    remap = np.full(count + 1, -1, np.int64)
    for b, j in index.items():
        remap[b] = j
    reps = rep[np.array(order)]
    out = remap[ext[trans[reps]]].astype(np.int32)
    return out, acc[reps].copy()


def _moore(trans: np.ndarray, acc: np.ndarray, max_rounds: int):
    n = len(acc)
    t = np.where(trans < 0, n, trans).astype(np.int32)
    t = np.vstack([t, np.full((1, 256), n, np.int32)])
    _, first_col = np.unique(t.T, axis=0, return_index=True)
    tc = np.ascontiguousarray(t[:, np.sort(first_col)])
    a = np.append(acc, False)
    block = a.astype(np.int32)
    count = len(np.unique(block))
    k = tc.shape[1] + 1
    for _ in range(max_rounds):
        sig = np.empty((n + 1, k), np.int32)
        sig[:, 0] = block
        sig[:, 1:] = block[tc]
        void = np.ascontiguousarray(sig).view(np.dtype((np.void, 4 * k))).reshape(-1)
        _, new = np.unique(void, return_inverse=True)
        block = new.reshape(-1).astype(np.int32)
        new_count = int(block.max()) + 1
        if new_count == count:
            break
        count = new_count
    else:
        return None
    if count == n + 1:
        return trans, acc
    # Blocks of the trimmed DFA: the sink's block holds no live state (all states are live).
    sink_block = block[n]
    b = block[:n].astype(np.int64)
    b[b > sink_block] -= 1
    return _quotient(trans, acc, b)


def dfa_intersects(a: ByteDFA, b: ByteDFA) -> bytes | None:
    """A shortest byte string accepted by both DFAs, or None when their languages are disjoint."""
    start = (0, 0)
    prev = {start: None}
    queue = [start]
    ta, tb = a.transitions, b.transitions
    i = 0
    while i < len(queue):
        x, y = queue[i]
        i += 1
        if a.accepting[x] and b.accepting[y]:
            out = []
            cur = (x, y)
            while prev[cur] is not None:
                cur, byte = prev[cur]
                out.append(byte)
            return bytes(reversed(out))
        ra, rb = ta[x], tb[y]
        both = np.flatnonzero((ra >= 0) & (rb >= 0))
        for byte in both:
            nxt = (int(ra[byte]), int(rb[byte]))
            if nxt not in prev:
                prev[nxt] = ((x, y), int(byte))
                queue.append(nxt)
    return None
