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
(Hopcroft-style partition refinement, compiled). So the cost follows the size of the
result, not the size of the pattern text.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..automaton import ByteDFA, minimize
from ..automaton.utf8 import utf8_sequences
from ..runtime.numba_tools import compiled
from .ast import EMPTY, Alt, Auto, Cls, Lit, Node, Rep, Seq
from .subset_kernels import py_subset_dfa, subset_dfa
from ..runtime import oldpaths as _oldpaths

TWIN_INPUT_STATES = 1000  # states of the sub-automata glued (what the twin takes: see _determinize)


class TooLargeError(Exception):
    """The automaton would exceed the state budget."""


class Builder:
    """Builds minimal DFAs of AST nodes, each shared sub-expression once.

    A node's automaton is the determinization of a Glushkov-style glue of *atoms*:
    an atom is a leaf (literal, character class) or a shared sub-expression, already
    compiled to its own minimal DFA. An atom may be instantiated many times (each
    instance has its own continuation); a state of the result is a set of
    (instance, sub-DFA state) pairs, numbered globally.
    """

    def __init__(self, root: Node, max_states: int, give_up: float | None = None):
        """``give_up``: raise ``TooLargeError`` without determinizing when the sub-DFAs glued
        together hold more than ``give_up * max_states`` states (see ``dfa``)."""
        self.max_states = max_states
        self.give_up = give_up
        self.refs: dict[int, int] = {}
        self.memo: dict[int, ByteDFA] = {}  # by shape
        self.shapes: dict[int, int] = {}  # id(node) -> shape
        self.shape_ids: dict[tuple, int] = {}
        self.keep: list = []  # keeps the nodes of ``shapes`` alive (ids stay unique)
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

    def _shape(self, node: Node) -> int:
        """A number for the node's structure: equal numbers, equal languages. Schemas
        repeat sub-expressions as distinct objects (a ``$ref`` expanded at several depths,
        the same definition in several places); each is built once."""
        k = self.shapes.get(id(node))
        if k is not None:
            return k
        stack = [(node, False)]
        while stack:
            n, ready = stack.pop()
            if id(n) in self.shapes:
                continue
            if isinstance(n, (Seq, Alt)):
                kids = n.items
            elif isinstance(n, Rep):
                kids = (n.item,)
            else:
                kids = ()
            if not ready and any(id(c) not in self.shapes for c in kids):
                stack.append((n, True))
                stack.extend((c, False) for c in kids if id(c) not in self.shapes)
                continue
            if isinstance(n, Lit):
                key = ("L", n.text)
            elif isinstance(n, Cls):
                key = ("C", n.ranges)
            elif isinstance(n, Rep):
                key = ("R", n.lo, n.hi, self.shapes[id(n.item)])
            elif n is EMPTY:
                key = ("E",)
            elif isinstance(n, Auto):
                key = n.key
            else:
                key = ("S" if isinstance(n, Seq) else "A", tuple(self.shapes[id(c)] for c in kids))
            self.shapes[id(n)] = self.shape_ids.setdefault(key, len(self.shape_ids))
            self.keep.append(n)
        return self.shapes[id(node)]

    def dfa(self, node: Node) -> ByteDFA:
        shape = self._shape(node)
        hit = self.memo.get(shape)
        if hit is not None:
            return hit
        if isinstance(node, Lit):
            d = _lit_dfa(node.text)
        elif isinstance(node, Cls):
            d = _cls_dfa(node.ranges)
        elif isinstance(node, Auto):
            d = node.dfa
        elif isinstance(node, Alt) and len(node.items) > 64 and all(isinstance(x, Lit) for x in node.items):
            from ..automaton.literals import literals_dfa  # (an enum or choice of many words: built directly)

            d = literals_dfa([x.text.encode("utf-8", "surrogatepass") for x in node.items])
        else:
            atoms: list[ByteDFA] = []
            follow: list[set] = []
            first, last, nul = self._glue(node, atoms, follow, root=True)
            atoms, follow, first, last = _merge_instances(atoms, follow, first, last)
            # A guess, for callers with another way out: on MaskBench, no automaton whose
            # glued sub-DFAs held more than 1.4 times the budget fitted in it.
            if self.give_up is not None and sum(a.n_states for a in atoms) > self.give_up * self.max_states:
                raise TooLargeError(f"more than {self.max_states} automaton states (estimated)")
            d = _determinize(atoms, follow, first, last, nul, self.max_states)
        self.memo[shape] = d
        return d

    def _atom(self, d: ByteDFA, atoms, follow):
        if d.is_empty:
            return set(), set(), False
        i = len(atoms)
        atoms.append(d)
        follow.append(set())
        return {i}, {i}, bool(d.accepting[0])

    def _glue(self, node: Node, atoms, follow, root: bool = False):
        if isinstance(node, (Lit, Cls, Auto)) or (not root and self.refs.get(id(node), 0) > 1 and self._big(node)):
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
    if isinstance(node, Auto):
        return node.dfa.n_states
    return 0


def _merge_instances(atoms, follow, first, last):
    """Merge instances of the same sub-DFA with the same future (a bisimulation of the glue).

    Partition refinement from (sub-DFA, whether it may end), by the classes of what
    follows. Only a class with a member whose successors moved is split again, and the
    largest part keeps its number: a long sequence costs a pass per change, not a pass
    over all instances per round.
    """
    n = len(atoms)
    if n < 2:
        return atoms, follow, first, last
    keys: dict = {}
    cls = [keys.setdefault((id(atoms[i]), i in last), len(keys)) for i in range(n)]
    if len(keys) == n:  # no two instances of one sub-DFA: nothing to merge
        return atoms, follow, first, last
    members: list[set] = [set() for _ in keys]
    for i in range(n):
        members[cls[i]].add(i)
    preds: list[list[int]] = [[] for _ in range(n)]
    for i in range(n):
        for j in follow[i]:
            preds[j].append(i)
    # Class -> members whose successors moved since it was last split (all, at first). The
    # other members still share one signature, computed once.
    work = {c: set(m) for c, m in enumerate(members) if len(m) > 1}
    while work:
        c, dirty = work.popitem()
        mem = members[c]
        dirty &= mem
        if len(mem) < 2 or not dirty:
            continue
        groups: dict = {}
        for i in dirty:
            groups.setdefault(frozenset([cls[j] for j in follow[i]]), set()).add(i)
        clean = mem - dirty
        if clean:
            i = next(iter(clean))
            groups.setdefault(frozenset([cls[j] for j in follow[i]]), set()).update(clean)
        if len(groups) == 1:
            continue
        parts = sorted(groups.values(), key=len, reverse=True)
        members[c] = parts[0]
        moved = []
        for part in parts[1:]:
            c2 = len(members)
            members.append(part)
            for i in part:
                cls[i] = c2
            moved += part
        for i in moved:
            for p in preds[i]:
                if len(members[cls[p]]) > 1:
                    work.setdefault(cls[p], set()).add(p)
    if len(members) == n:
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
    """Subset construction over instances of minimal sub-DFAs (see ``Builder``), compiled:
    ``kernels.subset_dfa`` (whose comment says what a subset holds), then minimized.

    An instance that has just entered its dead-end final state is represented by its
    *exit* (the instances that follow, and whether the whole may end): finishing two
    different literals into the same continuation is then one state.
    """
    if not atoms:
        return minimize(np.full((1, 256), -1, np.int32), np.array([nul], bool))
    tab_of: dict[int, int] = {}
    tabs, acc_tab = [], []
    size = 0
    for d in atoms:
        if id(d) not in tab_of:
            tab_of[id(d)] = size
            size += d.n_states
            tabs.append(d.transitions)
            acc_tab.append(d.accepting)
    sizes = np.array([d.n_states for d in atoms], np.int64)
    goff = np.zeros(len(atoms) + 1, np.int64)
    np.cumsum(sizes, out=goff[1:])
    exits: dict = {}
    exit_of = []
    for a in range(len(atoms)):
        exit_of.append(exits.setdefault((tuple(sorted(follow[a])), a in last), len(exits)))
    fol = [[int(goff[f]) for f in sorted(follow[a])] for a in range(len(atoms))]
    exit_fol = [[int(goff[f]) for f in key[0]] for key in exits]

    def csr(lists):
        off = np.zeros(len(lists) + 1, np.int64)
        np.cumsum([len(x) for x in lists], out=off[1:])
        return off, np.array([x for xs in lists for x in xs], np.int64)

    fol_off, fol_flat = csr(fol)
    exit_off, exit_flat = csr(exit_fol)
    # Small inputs take the plain-Python twin (the same result, about 0.4 ms per state made) until
    # the kernel is compiled: compiling it costs some 8 s on a first use.
    run = subset_dfa if size > TWIN_INPUT_STATES or compiled(subset_dfa) else py_subset_dfa
    trans, acc, ok = run(
        np.ascontiguousarray(np.concatenate(tabs), dtype=np.int32), np.concatenate(acc_tab).astype(np.bool_),
        np.array([tab_of[id(d)] for d in atoms], np.int64), goff,
        np.array([_final(d) for d in atoms], np.int64), np.array(exit_of, np.int64),
        np.array([a in last for a in range(len(atoms))], np.bool_),
        np.repeat(np.arange(len(atoms), dtype=np.int64), sizes),
        fol_off, fol_flat, np.array([key[1] for key in exits], np.bool_), exit_off, exit_flat,
        np.array(sorted(int(goff[f]) for f in first), np.int64), bool(nul), int(max_states))
    if not ok:
        raise TooLargeError(f"more than {max_states:,} states (or the work of {max_states:,})")
    return minimize(trans, acc)


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
    return Builder(node, max_states).dfa(node)


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


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
