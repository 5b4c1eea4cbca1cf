"""A small regular-expression AST over characters, used by the JSON Schema compiler.

Nodes are immutable: ``Lit`` (a literal string), ``Cls`` (a set of code points as
sorted ranges), ``Seq``, ``Alt``, ``Rep`` (bounded or unbounded repetition), ``Auto`` (a
language only an automaton writes compactly: integers by their residue) and the
two constants ``EMPTY`` (matches nothing) and ``EPS`` (matches only ""). The smart
constructors ``seq``, ``alt``, ``rep``, ``opt`` simplify as they build, so a branch
that became impossible (a recursion cut off, a ``false`` schema) disappears.

``emit.to_regex`` writes a node as an ECMA-262 pattern that ``localguide.regex`` accepts;
``ast_dfa`` turns the same node into a byte DFA without going through text.
"""

from __future__ import annotations
from ..runtime import oldpaths as _oldpaths


MAX_CP = 0x10FFFF


class Node:
    __slots__ = ()


class _Empty(Node):
    __slots__ = ()

    def __repr__(self) -> str:
        return "EMPTY"


class Lit(Node):
    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        return f"Lit({self.text!r})"


class Cls(Node):
    __slots__ = ("ranges",)

    def __init__(self, ranges: tuple):
        self.ranges = ranges

    def __repr__(self) -> str:
        return f"Cls({self.ranges!r})"


class Seq(Node):
    __slots__ = ("items",)

    def __init__(self, items: tuple):
        self.items = items

    def __repr__(self) -> str:
        return f"Seq{self.items!r}"


class Alt(Node):
    __slots__ = ("items",)

    def __init__(self, items: tuple):
        self.items = items

    def __repr__(self) -> str:
        return f"Alt{self.items!r}"


class Ref(Node):
    """The value of a recursive definition, compiled once (``CompiledSchema.rules[key]``).

    Only the grammar route (``jsonschema_grammar``) reads it: there it is a nonterminal.
    """

    __slots__ = ("key",)

    def __init__(self, key):
        self.key = key

    def __repr__(self) -> str:
        return f"Ref({self.key!r})"


class Auto(Node):
    """The language of a minimal byte DFA over the UTF-8 text (``automaton.ByteDFA``), as one leaf.

    For languages whose every regex is exponentially larger than their automaton (the integers
    that 7 divides, or 3 but not 8). ``dfa_ast.auto_tree`` gives the same language as ordinary nodes when that
    stays under ``TREE_WEIGHT`` leaves (for ``emit.to_regex``), else None."""

    __slots__ = ("dfa", "key", "_tree")
    TREE_WEIGHT = 50_000

    def __init__(self, dfa):
        self.dfa = dfa
        self.key = ("A", dfa.transitions.tobytes(), dfa.accepting.tobytes())
        self._tree = False

    def __repr__(self) -> str:
        return f"Auto({self.dfa.n_states} states)"


class Rep(Node):
    __slots__ = ("item", "lo", "hi")

    def __init__(self, item: Node, lo: int, hi: int | None):
        self.item, self.lo, self.hi = item, lo, hi

    def __repr__(self) -> str:
        return f"Rep({self.item!r}, {self.lo}, {self.hi})"


EMPTY = _Empty()
EPS = Seq(())


# -- ranges ---------------------------------------------------------------------------------

def norm_ranges(ranges) -> tuple:
    """Sorted, merged, non-empty inclusive ranges."""
    out: list[list[int]] = []
    for lo, hi in sorted((int(a), int(b)) for a, b in ranges if a <= b):
        if out and lo <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return tuple((a, b) for a, b in out)


def complement(ranges, lo: int = 0, hi: int = MAX_CP) -> tuple:
    out, nxt = [], lo
    for a, b in norm_ranges(ranges):
        if a > nxt:
            out.append((nxt, min(a - 1, hi)))
        nxt = max(nxt, b + 1)
    if nxt <= hi:
        out.append((nxt, hi))
    return tuple((a, b) for a, b in out if a <= b)


def intersect(r1, r2) -> tuple:
    out = []
    r2 = norm_ranges(r2)
    for a, b in norm_ranges(r1):
        for c, d in r2:
            lo, hi = max(a, c), min(b, d)
            if lo <= hi:
                out.append((lo, hi))
    return norm_ranges(out)


def subtract(r1, r2) -> tuple:
    return intersect(r1, complement(r2))


def contains(ranges, cp: int) -> bool:
    return any(a <= cp <= b for a, b in ranges)


def size(ranges) -> int:
    return sum(b - a + 1 for a, b in ranges)


# -- smart constructors ---------------------------------------------------------------------

def cls(ranges) -> Node:
    r = norm_ranges(ranges)
    if not r:
        return EMPTY
    if len(r) == 1 and r[0][0] == r[0][1]:
        return Lit(chr(r[0][0]))
    return Cls(r)


def char(c: str) -> Node:
    return Lit(c)


def seq(*items: Node) -> Node:
    out: list[Node] = []
    for it in items:
        if it is EMPTY:
            return EMPTY
        parts = it.items if isinstance(it, Seq) else (it,)
        for p in parts:
            if isinstance(p, Lit) and out and isinstance(out[-1], Lit):
                out[-1] = Lit(out[-1].text + p.text)
            else:
                out.append(p)
    if len(out) == 1:
        return out[0]
    return Seq(tuple(out)) if out else EPS


def alt(*items: Node) -> Node:
    out: list[Node] = []
    seen: set = set()
    for it in items:
        if it is EMPTY:
            continue
        for p in (it.items if isinstance(it, Alt) else (it,)):
            key = _key(p)
            if key in seen:
                continue
            seen.add(key)
            out.append(p)
    if not out:
        return EMPTY
    if len(out) == 1:
        return out[0]
    # Single characters and classes merge into one class.
    singles = [p for p in out if _is_charset(p)]
    if len(singles) > 1:
        merged = cls([r for p in singles for r in _charset(p)])
        rest = [p for p in out if not _is_charset(p)]
        out = [merged] + rest
        if len(out) == 1:
            return out[0]
    return Alt(tuple(out))


def _key(p: Node):
    if isinstance(p, Lit):
        return ("L", p.text)
    if isinstance(p, Cls):
        return ("C", p.ranges)
    if isinstance(p, Auto):
        return p.key
    return id(p)


def _is_charset(p: Node) -> bool:
    return isinstance(p, Cls) or (isinstance(p, Lit) and len(p.text) == 1)


def _charset(p: Node) -> tuple:
    return p.ranges if isinstance(p, Cls) else ((ord(p.text), ord(p.text)),)


def rep(item: Node, lo: int, hi: int | None) -> Node:
    if hi is not None and hi < lo:
        return EMPTY
    if item is EMPTY:
        return EPS if lo == 0 else EMPTY
    if item is EPS or hi == 0:
        return EPS
    if lo == 1 and hi == 1:
        return item
    if isinstance(item, Rep) and item.lo == 0 and item.hi is None:
        return item  # (x*)* = x*, (x*){n} = x*
    return Rep(item, lo, hi)


def opt(item: Node) -> Node:
    return rep(item, 0, 1)


def star(item: Node) -> Node:
    return rep(item, 0, None)


def plus(item: Node) -> Node:
    return rep(item, 1, None)


def map_leaves(node: Node, leaf) -> Node:
    """``node`` with each leaf (what is not a ``Seq``, ``Alt`` or ``Rep``) replaced by ``leaf(it)``;
    a part shared in the tree is mapped once."""
    memo: dict[int, Node] = {}

    def go(n: Node) -> Node:
        k = id(n)
        if k in memo:
            return memo[k]
        if isinstance(n, Seq):
            r = seq(*[go(x) for x in n.items])
        elif isinstance(n, Alt):
            r = alt(*[go(x) for x in n.items])
        elif isinstance(n, Rep):
            r = rep(go(n.item), n.lo, n.hi)
        else:
            r = leaf(n)
        memo[k] = r
        return r

    return go(node)


def nullable(node: Node) -> bool:
    if isinstance(node, Seq):
        return all(nullable(x) for x in node.items)
    if isinstance(node, Alt):
        return any(nullable(x) for x in node.items)
    if isinstance(node, Rep):
        return node.lo == 0 or nullable(node.item)
    if isinstance(node, Auto):
        return bool(node.dfa.accepting[0])
    return False


def length_range(node: Node, _memo: dict | None = None) -> tuple[int, int | None]:
    """(min, max) number of characters of the strings of ``node``; max None = unbounded.

    Each shared sub-node is measured once (a regex read back from an automaton shares many)."""
    if isinstance(node, Lit):
        return len(node.text), len(node.text)
    if isinstance(node, Cls):
        return 1, 1
    if node is EMPTY:
        return 0, 0
    memo = {} if _memo is None else _memo
    got = memo.get(id(node))
    if got is not None:
        return got[0]
    if isinstance(node, Seq):
        lo, hi = 0, 0
        for x in node.items:
            a, b = length_range(x, memo)
            lo += a
            hi = None if hi is None or b is None else hi + b
        out = lo, hi
    elif isinstance(node, Alt):
        rs = [length_range(x, memo) for x in node.items]
        out = min(r[0] for r in rs), (None if any(r[1] is None for r in rs) else max(r[1] for r in rs))
    elif isinstance(node, Rep):
        a, b = length_range(node.item, memo)
        hi = None if node.hi is None or b is None else b * node.hi
        if b == 0:
            hi = 0
        out = a * node.lo, hi
    elif isinstance(node, Auto):
        out = _dfa_lengths(node.dfa)
    else:
        raise TypeError(node)
    memo[id(node)] = (out, node)  # (the node kept alive: its id is not reused while the memo lives)
    return out


def _dfa_lengths(dfa) -> tuple[int, int | None]:
    """(min, max) length of the strings of a minimal (trimmed) byte DFA; max None on a cycle.

    Counted in bytes: the ``Auto`` leaves built so far are ASCII, where bytes are characters."""
    import numpy as np

    n = dfa.n_states
    succ = [sorted({int(t) for t in np.unique(dfa.transitions[s]) if t >= 0}) for s in range(n)]
    # shortest: breadth first; longest: over a topological order, None if a cycle is reachable
    dist = {0: 0}
    frontier = [0]
    while frontier:
        nxt = []
        for s in frontier:
            for t in succ[s]:
                if t not in dist:
                    dist[t] = dist[s] + 1
                    nxt.append(t)
        frontier = nxt
    acc = [s for s in dist if dfa.accepting[s]]
    if not acc:
        return 0, 0
    lo = min(dist[s] for s in acc)
    indeg = {s: 0 for s in dist}
    for s in dist:
        for t in succ[s]:
            indeg[t] += 1
    order, ready = [], [s for s in dist if indeg[s] == 0]
    while ready:
        s = ready.pop()
        order.append(s)
        for t in succ[s]:
            indeg[t] -= 1
            if indeg[t] == 0:
                ready.append(t)
    if len(order) < len(dist):
        return lo, None
    longest = {s: (0 if s == 0 else -1) for s in dist}
    for s in order:
        if longest[s] >= 0:
            for t in succ[s]:
                longest[t] = max(longest[t], longest[s] + 1)
    return lo, max(longest[s] for s in acc)


def size_estimate(node: Node, _memo=None) -> int:
    """Roughly the number of positions (characters) of the expanded node."""
    if isinstance(node, Lit):
        return len(node.text)
    if isinstance(node, Cls):
        return 1
    if isinstance(node, (Seq, Alt)):
        return sum(size_estimate(x) for x in node.items)
    if isinstance(node, Rep):
        return size_estimate(node.item) * max(1, node.hi if node.hi is not None else node.lo + 1)
    if isinstance(node, Auto):
        return node.dfa.n_states
    return 0


ANY_CHAR_RANGES = ((0, MAX_CP),)


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
