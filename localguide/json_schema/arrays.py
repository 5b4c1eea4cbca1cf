"""JSON arrays for the schema compiler: items and prefixItems, ``uniqueItems`` over a small finite
item set, and ``contains`` (one with counts, or several read together). ``Arrays`` is a part of
``compiler.Compiler`` (a mixin): it reads the compiler's ``value``, ``any_value``, ``accepts``,
``sep``, ``wrap``, ``literal``, ``note_any``, ``problems`` and ``fl``.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations, permutations

from ..regex.ast import EMPTY, EPS, Lit, Node, alt, opt, rep, seq, star
from .flat import Flat, FromNegation, json_eq
from .resolve import Neg

MAX_UNIQUE_SEQUENCES = 500  # orders of a unique array's items written out; past it, the schema's order
MAX_CONTAINS = 4  # contains (each without maxContains) read together: 2**n - 1 kinds of item
MAX_CONTAINS_STATES = 1_024  # their states: items counted times each one's matches counted


class Arrays:
    """The array keywords of ``Compiler``."""

    def array(self, f: Flat, depth: int) -> Node:
        if f.unconstrained("array"):
            self.note_any(f.ptr, "type")
            return self.any_array(self.any_depth, depth)
        lo, hi = f.min_items, f.max_items
        if hi is not None and hi > self.max_items and lo <= self.max_items:
            self.problems.approx(f.ptr, "maxItems", f"maxItems {hi} is tracked up to {self.max_items} items: "
                                                    "longer arrays are rejected")
            hi = self.max_items
        item_subs = f.items
        if f.contains:
            return self.array_contains(f, depth, lo, hi)
        item = self.item_value(item_subs, depth + 1, f.ptr)
        prefix = [self.value(p, depth + 1) for p in f.prefix]
        if f.unique is not None:
            finite = self.finite_values(item_subs) if not f.prefix else None
            if finite is not None and not f.prefix:
                return self.unique_array(finite, lo, hi, depth, f.unique)
            if hi is None or hi > 1:
                hi = 1
                self.problems.approx(f.unique, "uniqueItems", "items are not from a small finite set: "
                                                              "arrays of at most one item")
        if hi is not None and lo > hi:
            return EMPTY
        sep = self.sep(depth + 1)
        k = len(prefix)
        n = k
        for i, p in enumerate(prefix):
            if p is EMPTY:
                n = i  # no array can reach item i
                break
        if hi is not None:
            n = min(n, hi)
        if k == 0:
            if item is EMPTY or hi == 0:
                return Lit("[]") if lo == 0 else EMPTY
            first = max(lo, 1)
            content = seq(item, rep(seq(sep, item), first - 1, None if hi is None else hi - 1))
            return self.wrap("[", "]", content, lo == 0, depth)
        if n < k:
            if lo > n:
                return EMPTY
            tail = EPS
        else:
            t_lo = max(0, lo - k)
            t_hi = None if hi is None else hi - k
            if item is EMPTY:
                tail = EPS if t_lo == 0 else EMPTY
            else:
                tail = rep(seq(sep, item), t_lo, t_hi)
        if n == 0:
            return Lit("[]") if lo == 0 else EMPTY
        chain = seq(prefix[n - 1], tail)
        for i in reversed(range(n - 1)):
            rest = seq(sep, chain)
            chain = seq(prefix[i], rest if i + 1 < lo else opt(rest))
        return self.wrap("[", "]", chain, lo == 0, depth)

    def item_value(self, subs: list, depth: int, ptr: str) -> Node:
        if not subs or all(s.schema is True for s in subs):
            self.note_any(ptr, "items", self.any_depth - 1)
            return self.any_value(self.any_depth - 1, depth)
        return self.value(subs, depth)

    def finite_values(self, subs: list):
        """The values allowed by ``subs`` when they are few and listed (enum/const/booleans/null)."""
        flats = [Flat()]
        for s in subs:
            flats = self.fl.conj(flats, self.fl.dnf(s))
        values = []
        for f in flats:
            if f.enum is not None:
                vals = [v for v in f.enum if self.accepts(f, v)]
            elif f.types <= {"null", "boolean", "integer"} and (
                    "integer" not in f.types or _small_range(f) is not None):
                vals = [v for v in ([None] if "null" in f.types else []) + (
                    [True, False] if "boolean" in f.types else []) + (
                    _small_range(f) if "integer" in f.types else []) if self.accepts(f, v)]
            else:
                return None
            for v in vals:
                if not any(json_eq(v, w) and type(v) is type(w) for w in values):
                    values.append(v)
        return values

    def unique_array(self, values: list, lo: int, hi, depth: int, ptr: str) -> Node:
        m = len(values)
        hi = m if hi is None else min(hi, m)
        if lo > hi:
            return EMPTY
        # distinct values by JSON equality
        distinct = []
        for v in values:
            if not any(json_eq(v, w) for w in distinct):
                distinct.append(v)
        m = len(distinct)
        hi = min(hi, m)
        count = sum(_perm(m, n) for n in range(lo, hi + 1))
        sep = self.sep(depth + 1)
        lits = [self.literal(v, depth + 1) for v in distinct]
        if count <= MAX_UNIQUE_SEQUENCES:
            seqs = []
            for n in range(max(lo, 1), hi + 1):
                for perm in permutations(range(m), n):
                    seqs.append(seq(lits[perm[0]], *[seq(sep, lits[i]) for i in perm[1:]]))
            return self.wrap("[", "]", alt(*seqs), lo == 0, depth)
        self.problems.approx(ptr, "uniqueItems", "items in the order the schema lists them")
        return self.wrap("[", "]", self.join([(x, False) for x in lits], sep, max(lo, 1), hi), lo == 0, depth)

    def array_contains(self, f: Flat, depth: int, lo: int, hi: int | None) -> Node:
        """Arrays of ``lo``..``hi`` items of which ``minContains``..``maxContains`` match ``contains``.

        The items are read by a small automaton over (items so far, matches so far), each
        count saturating where it stops mattering; written as nested alternatives, with a
        loop where a state repeats. Without ``maxContains`` any item may be skipped over;
        with it, the items that do not match are the items' schema and ``not contains``.
        Items that match are evaluated, so ``unevaluatedItems`` applies only to the others.
        """
        if len(f.contains) > 1 and not f.prefix and f.unique is None and not f.uneval_items and \
                len(f.contains) <= MAX_CONTAINS and all(c[2] is None for c in f.contains) and \
                _contains_states(f.contains, lo, hi) <= MAX_CONTAINS_STATES:
            return self.array_contains_all(f, depth, lo, hi)
        if len(f.contains) > 1 or f.prefix or f.unique is not None:
            # (these arrays are rejected: a subset; where that leaves no document, the loose compile
            # drops the contains instead: a superset)
            whats = [(c[3].rsplit("/", 1) if "/" in c[3] else ("", "not")) if isinstance(c[3], FromNegation)
                     else (c[3], "contains") for c in f.contains]
            why = (f"contains beside prefixItems, uniqueItems, more than {MAX_CONTAINS} contains, several with "
                   f"maxContains or unevaluatedItems, or counts past {MAX_CONTAINS_STATES} states")
            if self.fl.loose:
                for where, kw in whats:
                    self.problems.loosen(where, kw, f"{why}: not enforced (the subset accepted no document)")
                g = f.copy()
                g.contains = []
                if f.uneval_items:  # (what the contains would have evaluated is unknown: any item)
                    self.problems.loosen(f.ptr, "unevaluatedItems", f"{why}: not enforced")
                    g.items, g.has_items, g.uneval_items = [], False, False
                return self.array(g, depth)
            for where, kw in whats:
                self.problems.approx(where, kw, f"{why}: such arrays are rejected here")
            self.problems.loosenable += 1
            return EMPTY
        sub, cmin, cmax, ptr = f.contains[0]
        if cmax is not None and cmax < cmin or hi is not None and lo > hi or hi is not None and cmin > hi:
            return EMPTY
        if max(lo, cmin, cmax or 0, hi or 0) > 64:
            self.problems.error(ptr, "contains", "contains with counts above 64 (minItems, maxItems, "
                                                 "minContains, maxContains) is not supported")
            return EMPTY
        item = self.item_value(f.items, depth + 1, f.ptr)
        if f.uneval_items:  # what ``contains`` matches is evaluated: unevaluatedItems does not apply
            hit = self.value([sub], depth + 1)
            item = alt(hit, item)
        else:
            hit = self.value(f.items + [sub], depth + 1)
        if cmax is None:
            miss = item
        else:
            miss = self.value(f.items + [replace(sub, schema=Neg(sub))], depth + 1)
        sep = self.sep(depth + 1)
        memo: dict = {}

        def rest(c: int, h: int) -> Node:
            """What may follow ``c`` items with ``h`` matches (each further item after a separator)."""
            key = (c, h)
            got = memo.get(key)
            if got is not None:
                return got
            done = EPS if c >= lo and h >= cmin else EMPTY
            nc = c + 1 if hi is not None or c < lo else c
            nh = h + 1 if cmax is not None or h < cmin else h
            can_hit = cmax is None or h < cmax
            # Each step raises a count, except where one has saturated: that state loops.
            if hi is not None and c >= hi:
                node = done
            elif (nc, h) == key and (not can_hit or (nc, nh) == key):
                # only loops left: any number of further items (matches, too, when they are free)
                node = seq(star(seq(sep, item if can_hit else miss)), done)
            elif (nc, h) == key:  # more items that are not counted as matches, then a match
                node = seq(star(seq(sep, miss)), alt(done, seq(sep, hit, rest(nc, nh))) if can_hit else done)
            else:
                node = alt(done, seq(sep, miss, rest(nc, h)), seq(sep, hit, rest(nc, nh)) if can_hit else EMPTY)
            memo[key] = node
            return node

        # the first item has no separator before it
        c1 = 1 if hi is not None or lo > 0 else 0
        first = [seq(miss, rest(c1, 0))]
        if cmax is None or cmax > 0:
            first.append(seq(hit, rest(c1, 1 if cmax is not None or cmin > 0 else 0)))
        content = alt(*first) if hi is None or hi > 0 else EMPTY
        if content is EMPTY:
            return Lit("[]") if lo == 0 and cmin == 0 else EMPTY
        return self.wrap("[", "]", content, lo == 0 and cmin == 0, depth)

    def array_contains_all(self, f: Flat, depth: int, lo: int, hi: int | None) -> Node:
        """Arrays of ``lo``..``hi`` items that hold, for each ``contains`` (none with a maximum), at
        least its ``minContains`` matches: an item may match several, so the states are the
        matches so far of each (saturating), and an item is read as the conjunction of the
        ``contains`` it matches (every subset of them)."""
        parts = f.contains
        mins = tuple(c[1] for c in parts)
        if hi is not None and (lo > hi or any(m > hi for m in mins)):
            return EMPTY
        if max(lo, hi or 0, *mins) > 64:
            self.problems.error(parts[0][3], "contains", "contains with counts above 64 (minItems, maxItems, "
                                                         "minContains, maxContains) is not supported")
            return EMPTY
        item = self.item_value(f.items, depth + 1, f.ptr)
        hits = []  # (which parts an item matches, its language)
        for r in range(1, len(parts) + 1):
            for which in combinations(range(len(parts)), r):
                node = self.value(f.items + [parts[i][0] for i in which], depth + 1)
                if node is not EMPTY:
                    hits.append((which, node))
        sep = self.sep(depth + 1)
        memo: dict = {}

        def after(c: int, h: tuple, which) -> tuple:
            nc = c + 1 if hi is not None or c < lo else c
            return nc, tuple(min(x + (i in which), mins[i]) for i, x in enumerate(h))

        def steps(c: int, h: tuple, lead: Node) -> list:
            """The next item (after ``lead``) and what may follow it, where that changes the state."""
            if hi is not None and c >= hi:
                return []
            out = []
            for which, node in hits:
                nxt = after(c, h, which)
                if nxt[1] != h:  # (a match that changes nothing is an ordinary item)
                    out.append(seq(lead, node, rest(*nxt)))
            nxt = after(c, h, ())
            if nxt != (c, h):
                out.append(seq(lead, item, rest(*nxt)))
            return out

        def rest(c: int, h: tuple) -> Node:
            """What may follow ``c`` items with ``h`` matches."""
            key = (c, h)
            got = memo.get(key)
            if got is None:
                done = EPS if c >= lo and h == mins else EMPTY
                more = alt(done, *steps(c, h, sep))
                loops = hi is None and after(c, h, ()) == key
                got = memo[key] = seq(star(seq(sep, item)), more) if loops else more
            return got

        h0 = (0,) * len(parts)
        first = steps(0, h0, EPS)
        if after(0, h0, ()) == (0, h0):  # (no count to raise: any first item)
            first.append(seq(item, rest(0, h0)))
        content = alt(*first)
        if content is EMPTY:
            return Lit("[]") if lo == 0 and h0 == mins else EMPTY
        return self.wrap("[", "]", content, lo == 0 and h0 == mins, depth)


def _perm(m: int, n: int) -> int:
    out = 1
    for i in range(n):
        out *= m - i
    return out


def _contains_states(parts: list, lo: int, hi: int | None) -> int:
    n = (hi if hi is not None else lo) + 1
    for c in parts:
        n *= c[1] + 1
    return n


SMALL_RANGE = 16  # integers of a bounded range up to this many: uniqueItems over them is exact


def _small_range(f) -> list | None:
    """The integers a bounded ``minimum``..``maximum`` allows, when there are at most ``SMALL_RANGE``."""
    import math

    if f.lo is None or f.hi is None:
        return None
    lo = math.floor(f.lo) + 1 if f.lo_x and float(f.lo).is_integer() else math.ceil(f.lo)
    hi = math.ceil(f.hi) - 1 if f.hi_x and float(f.hi).is_integer() else math.floor(f.hi)
    if hi - lo + 1 > SMALL_RANGE:
        return None
    return list(range(lo, hi + 1))
