"""AST (``jsonschema_ast``) → minimal byte DFA, without going through pattern text.

The JSON Schema compiler writes its result both as an ECMA-262 pattern (the cache
key, and what ``localguide.regex.regex_to_dfa`` would build) and as an AST; this
module builds the same automaton from the AST directly, because the generic pattern
path is far too slow on the large patterns that schemas produce.

Construction: every leaf (literal, character class as UTF-8 byte ranges) and every
sub-expression used more than once (by identity: the compiler shares the nodes of a
``$ref`` target, of "any JSON value", of a JSON string character...) is compiled once to
a minimal DFA. A node's automaton is then Glushkov's construction over *instances* of
those sub-DFAs (instances with the same future are merged), determinized, and minimized
(an exact one-pass merge of acyclic states, then Moore's refinement when small). So the
cost follows the size of the result, not the size of the pattern text.
"""

from __future__ import annotations

import weakref

import numpy as np

from .automaton import ByteDFA, refine
from .jsonschema_ast import EMPTY, Alt, Cls, Lit, Node, Rep, Seq
from .utf8 import utf8_sequences


class TooLargeError(Exception):
    """The automaton would exceed the state budget."""


class _Builder:
    """Builds minimal DFAs of AST nodes, each shared sub-expression once.

    A node's automaton is the determinization of a Glushkov-style glue of *atoms*:
    an atom is a leaf (literal, character class) or a shared sub-expression, already
    compiled to its own minimal DFA. An atom may be instantiated many times (each
    instance has its own continuation); a state of the result is a set of
    (instance, sub-DFA state) pairs, numbered globally.
    """

    def __init__(self, root: Node, max_states: int):
        self.max_states = max_states
        self.refs: dict[int, int] = {}
        self.memo: dict[int, ByteDFA] = {}
        self.keep: list = []  # keeps memoized nodes alive (ids stay unique)
        self.big: dict[int, bool] = {}
        self._count(root)

    def _count(self, root: Node) -> None:
        refs = self.refs
        stack = [root]
        seen = {id(root)}
        while stack:
            n = stack.pop()
            if isinstance(n, (Seq, Alt)):
                kids = n.items
            elif isinstance(n, Rep):
                # copies of a bounded repetition are instances of one automaton
                kids = (n.item, n.item) if n.hi is not None and n.hi > 1 else (n.item,)
            else:
                continue
            for k in kids:
                refs[id(k)] = refs.get(id(k), 0) + 1
                if id(k) not in seen:
                    seen.add(id(k))
                    stack.append(k)

    def _big(self, node: Node) -> bool:
        """Worth an automaton of its own (else inlined at each use)."""
        k = id(node)
        b = self.big.get(k)
        if b is None:
            b = self.big[k] = _weight(node, 24) >= 24
        return b

    def dfa(self, node: Node) -> ByteDFA:
        hit = self.memo.get(id(node))
        if hit is not None:
            return hit
        if isinstance(node, Lit):
            d = _lit_dfa(node.text)
        elif isinstance(node, Cls):
            d = _cls_dfa(node.ranges)
        else:
            atoms: list[ByteDFA] = []
            follow: list[set] = []
            first, last, nul = self._glue(node, atoms, follow, root=True)
            atoms, follow, first, last = _merge_instances(atoms, follow, first, last)
            d = _determinize(atoms, follow, first, last, nul, self.max_states)
        self.memo[id(node)] = d
        self.keep.append(node)
        return d

    def _atom(self, d: ByteDFA, atoms, follow):
        if d.is_empty:
            return set(), set(), False
        i = len(atoms)
        atoms.append(d)
        follow.append(set())
        return {i}, {i}, bool(d.accepting[0])

    def _glue(self, node: Node, atoms, follow, root: bool = False):
        if isinstance(node, (Lit, Cls)) or (not root and self.refs.get(id(node), 0) > 1 and self._big(node)):
            return self._atom(self.dfa(node), atoms, follow)
        if isinstance(node, Seq):
            acc = (set(), set(), True)
            for x in node.items:
                acc = _seq(acc, self._glue(x, atoms, follow), follow)
            return acc
        if isinstance(node, Alt):
            first, last, nul = set(), set(), False
            for x in node.items:
                f, l, n = self._glue(x, atoms, follow)
                first |= f
                last |= l
                nul = nul or n
            return first, last, nul
        if isinstance(node, Rep):
            acc = (set(), set(), True)
            for _ in range(node.lo):
                acc = _seq(acc, self._glue(node.item, atoms, follow), follow)
            if node.hi is None:
                f, l, n = self._glue(node.item, atoms, follow)
                for i in l:
                    follow[i] |= f
                return _seq(acc, (f, l, True), follow)
            tail = (set(), set(), True)
            copies = [self._glue(node.item, atoms, follow) for _ in range(node.hi - node.lo)]
            for c in reversed(copies):
                f, l, n = _seq(c, tail, follow)
                tail = (f, l, True)
            return _seq(acc, tail, follow)
        if node is EMPTY:
            return set(), set(), False
        raise TypeError(node)


def _weight(node: Node, limit: int) -> int:
    """Leaf count of the expanded node, counting stops past ``limit``."""
    if isinstance(node, Lit):
        return len(node.text)
    if isinstance(node, Cls):
        return 1 + len(node.ranges)
    if isinstance(node, (Seq, Alt)):
        total = 0
        for x in node.items:
            total += _weight(x, limit)
            if total >= limit:
                return total
        return total
    if isinstance(node, Rep):
        return _weight(node.item, limit) * max(1, node.hi if node.hi is not None else node.lo + 1)
    return 0


def _merge_instances(atoms, follow, first, last):
    """Merge instances of the same sub-DFA with the same future (a bisimulation of the glue)."""
    n = len(atoms)
    if n < 2:
        return atoms, follow, first, last
    keys: dict = {}
    cls = [keys.setdefault((id(atoms[i]), i in last), len(keys)) for i in range(n)]
    count = len(keys)
    while True:
        keys = {}
        new = [keys.setdefault((cls[i], frozenset(cls[j] for j in follow[i])), len(keys)) for i in range(n)]
        if len(keys) == count:
            break
        cls, count = new, len(keys)
    if count == n:
        return atoms, follow, first, last
    rep: dict[int, int] = {}
    for i in range(n):
        rep.setdefault(cls[i], len(rep))
    index = [rep[c] for c in cls]
    new_atoms = [None] * len(rep)
    new_follow = [set() for _ in range(len(rep))]
    for i in range(n):
        k = index[i]
        new_atoms[k] = atoms[i]
        new_follow[k] |= {index[j] for j in follow[i]}
    return new_atoms, new_follow, {index[i] for i in first}, {index[i] for i in last}


def _seq(a, b, follow):
    fa, la, na = a
    fb, lb, nb = b
    if fb:
        for i in la:
            follow[i] |= fb
    return (fa | fb if na else fa), (lb | la if nb else lb), na and nb


_leaf_cache: dict = {}


def _lit_dfa(text: str) -> ByteDFA:
    key = ("L", text)
    d = _leaf_cache.get(key)
    if d is None:
        data = text.encode("utf-8", "surrogatepass")
        trans = np.full((len(data) + 1, 256), -1, np.int32)
        for i, b in enumerate(data):
            trans[i, b] = i + 1
        acc = np.zeros(len(data) + 1, bool)
        acc[-1] = True
        d = _leaf_cache[key] = ByteDFA(trans, acc)
    return d


def _cls_dfa(ranges: tuple) -> ByteDFA:
    key = ("C", ranges)
    d = _leaf_cache.get(key)
    if d is None:
        # a trie of the UTF-8 byte-range sequences, then minimized
        seqs = [s for a, b in ranges for s in utf8_sequences(a, b)]
        nodes: list[dict] = [{}]
        ends = set()
        for s in seqs:
            cur = 0
            for k, r in enumerate(s):
                nxt = nodes[cur].get(r)
                if nxt is None:
                    nxt = nodes[cur][r] = len(nodes)
                    nodes.append({})
                cur = nxt
            ends.add(cur)
        trans = np.full((len(nodes), 256), -1, np.int32)
        for i, kids in enumerate(nodes):
            for (lo, hi), t in kids.items():
                trans[i, lo:hi + 1] = t
        acc = np.zeros(len(nodes), bool)
        acc[list(ends)] = True
        d = _leaf_cache[key] = minimize(trans, acc)
        if len(_leaf_cache) > 4096:
            _leaf_cache.clear()
    return d


def _determinize(atoms: list, follow: list, first: set, last: set, nul: bool, max_states: int) -> ByteDFA:
    """Subset construction over instances of minimal sub-DFAs (see ``_Builder``).

    An element of a subset is a global state number (instance offset + sub-DFA state),
    or, for an instance that has just finished (its dead-end final state), the negative
    number of its exit (the instances that follow, and whether the whole may end):
    finishing two different literals into the same continuation is then one state.
    """
    offs = [0]
    for d in atoms:
        offs.append(offs[-1] + d.n_states)
    inst_of = np.repeat(np.arange(len(atoms)), [d.n_states for d in atoms]).tolist()
    exits: dict = {}
    exit_of = []
    exit_info = []  # per exit: (follow atoms, accepting)
    for a in range(len(atoms)):
        k = (tuple(sorted(follow[a])), a in last)
        e = exits.get(k)
        if e is None:
            e = exits[k] = -1 - len(exit_info)
            exit_info.append(k)
        exit_of.append(e)
    row_cache: dict[int, tuple] = {}
    groups_of = [_groups(d) for d in atoms]
    final_of = [_final(d) for d in atoms]

    def row(a: int, q: int):
        """(offset, dfa, state, values, inverse): the state's targets, globally numbered."""
        g = offs[a] + q
        r = row_cache.get(g)
        if r is None:
            d = atoms[a]
            off = offs[a]
            vals, inv = groups_of[a][q]
            fin = final_of[a]
            gv = [(exit_of[a] if v == fin else v + off) for v in vals]
            r = row_cache[g] = (off, d, q, gv, inv, exit_of[a], a)
        return r

    merge_cache: dict = {}
    start_key = ("start",)
    ids: dict = {start_key: 0}
    order = [start_key]
    rows_out: list[np.ndarray] = []
    acc_out: list[bool] = []
    i = 0
    while i < len(order):
        key = order[i]
        i += 1
        rows = []
        acc = False
        if key is start_key:
            acc = nul
            rows = [row(f, 0) for f in sorted(first)]
        else:
            for g in key:
                if g < 0:
                    fol, fin = exit_info[-1 - g]
                    acc = acc or fin
                    rows += [row(f, 0) for f in fol]
                    continue
                a = inst_of[g]
                q = g - offs[a]
                rows.append(row(a, q))
                if atoms[a].accepting[q]:
                    if a in last:
                        acc = True
                    for f in follow[a]:
                        rows.append(row(f, 0))
        if len(rows) > 1:
            finals = [final_of[r[6]] for r in rows]
            exit_of_row = [r[5] for r in rows]
        if len(rows) == 1:
            off, d, q, gv, inv = rows[0][:5]
            tids = []
            for v in gv:
                tids.append(_intern((v,), ids, order))
            tids.append(-1)
            out = np.array(tids, np.int32)[inv]
        elif rows:
            lk = tuple((id(r[1]), r[2]) for r in rows)
            merged = merge_cache.get(lk)
            if merged is None:
                merged = merge_cache[lk] = _merge_rows(rows)
            inv, classes = merged
            tids = []
            for members in classes:
                gl = set()
                for j, v in members:
                    off = rows[j][0]
                    gl.add(exit_of_row[j] if v == finals[j] else v + off)
                tids.append(_intern(tuple(sorted(gl)), ids, order))
            tids.append(-1)
            out = np.array(tids, np.int32)[inv]
        else:
            out = np.full(256, -1, np.int32)
        if len(order) > max_states:
            raise TooLargeError(f"more than {max_states} automaton states")
        rows_out.append(out)
        acc_out.append(acc)
    return minimize(np.stack(rows_out), np.array(acc_out, bool))


_NO = -(1 << 40)  # no transition (exits are small negative numbers)


_group_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _merge_rows(rows) -> tuple:
    """For rows (sub-DFA states): inverse [256] into byte classes, and per class the
    (row index, local target) pairs; the last class index means no transition."""
    cols = list(zip(*[r[1].transitions[r[2]].tolist() for r in rows]))
    index: dict = {}
    inv = []
    for col in cols:
        c = index.get(col)
        if c is None:
            c = index[col] = len(index)
        inv.append(c)
    classes = []
    remap = []
    for col in index:
        members = [(j, v) for j, v in enumerate(col) if v >= 0]
        if members:
            remap.append(len(classes))
            classes.append(members)
        else:
            remap.append(-1)
    none = len(classes)
    remap = np.array([none if r < 0 else r for r in remap], np.int64)
    return remap[np.array(inv)], classes


def _groups(d: ByteDFA) -> list:
    """Per state: (distinct targets, inverse [256] into them, -1 targets at index len)."""
    g = _group_cache.get(d)
    if g is None:
        t = d.transitions
        n = len(t)
        order = np.argsort(t, axis=1, kind="stable")
        srt = np.take_along_axis(t, order, axis=1)
        new = np.ones_like(srt, dtype=bool)
        new[:, 1:] = srt[:, 1:] != srt[:, :-1]
        gid = np.cumsum(new, axis=1) - 1
        inv = np.empty_like(gid)
        np.put_along_axis(inv, order, gid, axis=1)
        g = []
        for q in range(n):
            vals = srt[q][new[q]].tolist()
            iv = inv[q]
            if vals and vals[0] == -1:  # -1 sorts first: move it to the end
                vals = vals[1:]
                iv = np.where(iv == 0, len(vals), iv - 1)
            g.append((vals, iv))
        _group_cache[d] = g
    return g


def _final(d: ByteDFA) -> int:
    """The dead-end accepting state of a minimal DFA (no way out), or -2 if none."""
    f = _final_cache.get(d)
    if f is None:
        dead = np.flatnonzero(d.accepting & (d.transitions < 0).all(axis=1))
        f = _final_cache[d] = int(dead[0]) if len(dead) else -2
    return f


_final_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def ast_to_dfa(node: Node, max_states: int = 400_000) -> ByteDFA:
    """The minimal byte DFA of the strings of ``node``."""
    return _Builder(node, max_states).dfa(node)


MAX_MOORE = 4000  # beyond, the (near-minimal) result of the acyclic merge is kept
MAX_MINIMIZE = 60000


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
    if len(acc) > MAX_MINIMIZE:
        return ByteDFA(np.ascontiguousarray(trans, dtype=np.int32), acc)
    trans, acc = _merge_acyclic(trans, acc)
    if 2 < len(acc) <= MAX_MOORE:
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
    """The DFA of the blocks (state 0's block first), dead transitions kept. All states are reachable."""
    n = len(acc)
    count = int(block.max()) + 1
    rep = np.full(count, n, np.int64)
    np.minimum.at(rep, block, np.arange(n))
    order = np.argsort(rep, kind="stable")
    remap = np.empty(count + 1, np.int64)
    remap[order] = np.arange(count)
    remap[count] = -1
    ext = np.append(block, count)  # -1 (dead) maps to the extra slot
    reps = rep[order]
    out = remap[ext[trans[reps]]].astype(np.int32)
    return out, acc[reps].copy()


def _moore(trans: np.ndarray, acc: np.ndarray, max_rounds: int):
    n = len(acc)
    t = np.where(trans < 0, n, trans).astype(np.int32)
    t = np.vstack([t, np.full((1, 256), n, np.int32)])
    _, first_col = np.unique(t.T, axis=0, return_index=True)
    tc = np.ascontiguousarray(t[:, np.sort(first_col)])
    a = np.append(acc, False)
    got = refine(a, tc.astype(np.int64), max_rounds)
    if got is None:
        return None
    block, count = got
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


def _intern(key: tuple, ids: dict, order: list) -> int:
    """The number of DFA state ``key`` (a set of NFA positions), numbering it if new."""
    t = ids.get(key)
    if t is None:
        t = ids[key] = len(order)
        order.append(key)
    return t
