"""An incremental Earley recognizer over terminals, with shared, canonical states.

Handles any context-free grammar: left recursion, ambiguity, empty rules (the
Aycock–Horspool fix: predicting a nullable nonterminal also moves past it).

A ``PState`` is one Earley set together with (by reference) the sets its items
started in. States are interned by content — the items, each with the *canonical*
state it started in — so two texts that leave the parser in the same situation
share one object, and with it the memoized transitions (``feed``) and the mask
caches hung on it. Terminals are ints ``0..n_terminals-1``; ``allowed`` is the
bitmask of terminals the parser accepts next.
"""

from __future__ import annotations

from .cfg import CFG, START


class Grammar:
    """Rule tables of a normalized ``CFG`` (dotted items are ints)."""

    def __init__(self, cfg: CFG):
        self.cfg = cfg
        nt = len(cfg.terminals)
        self.n_terminals = nt
        names = cfg.nonterminals()
        self.nt_id = {n: nt + i for i, n in enumerate(names)}
        self.nt_names = names
        self.rules = []  # (lhs id, rhs ids)
        for lhs, rhs in cfg.rules:
            self.rules.append((self.nt_id[lhs], tuple(s if isinstance(s, int) else self.nt_id[s] for s in rhs)))
        # Dotted items: item k of rule r is first_item[r] + dot.
        self.first_item = []
        self.next_sym = []  # symbol after the dot, -1 when complete
        self.item_lhs = []
        for lhs, rhs in self.rules:
            self.first_item.append(len(self.next_sym))
            for d in range(len(rhs) + 1):
                self.next_sym.append(rhs[d] if d < len(rhs) else -1)
                self.item_lhs.append(lhs)
        self.by_lhs: dict[int, list[int]] = {}
        for r, (lhs, _) in enumerate(self.rules):
            self.by_lhs.setdefault(lhs, []).append(self.first_item[r])
        nullable: set[int] = set()
        changed = True
        while changed:
            changed = False
            for lhs, rhs in self.rules:
                if lhs not in nullable and all(s in nullable for s in rhs):
                    nullable.add(lhs)
                    changed = True
        self.nullable = nullable
        start_rule = next(r for r, (lhs, _) in enumerate(self.rules) if lhs == self.nt_id[START])
        self.accept_item = self.first_item[start_rule] + len(self.rules[start_rule][1])
        self.ignore_mask = 0
        for t in cfg.ignore:
            self.ignore_mask |= 1 << t
        self._table: dict = {}
        self._uid = 0
        self.initial = None
        self.initial = self._make([(self.first_item[start_rule], None)], None)

    def _make(self, kernel, parent_for_accept) -> "PState | None":
        """Close ``kernel`` (items (dotted item, origin state or None for this set)) and intern it."""
        next_sym, item_lhs, nt = self.next_sym, self.item_lhs, self.n_terminals
        seen = set()
        items = []
        work = []
        for it, o in kernel:
            key = (it, id(o))
            if key not in seen:
                seen.add(key)
                items.append((it, o))
                work.append((it, o))
        predicted = set()
        while work:
            it, o = work.pop()
            sym = next_sym[it]
            new = []
            if sym < 0:
                if o is None:
                    continue  # an empty derivation: handled when the nonterminal was predicted
                for it2, o2 in o.waiting(item_lhs[it]):
                    new.append((it2 + 1, o2))
            elif sym >= nt:
                if sym not in predicted:
                    predicted.add(sym)
                    for it2 in self.by_lhs.get(sym, ()):
                        new.append((it2, None))
                if sym in self.nullable:
                    new.append((it + 1, o))
            for item in new:
                key = (item[0], id(item[1]))
                if key not in seen:
                    seen.add(key)
                    items.append(item)
                    work.append(item)
        ckey = frozenset((it, -1 if o is None else o.uid) for it, o in items)
        st = self._table.get(ckey)
        if st is None:
            st = PState(self, items, self._uid)
            self._uid += 1
            self._table[ckey] = st
        return st

    @property
    def n_states(self) -> int:
        return len(self._table)


class PState:
    """One canonical Earley set. Use ``feed(t)`` (memoized) and ``allowed``/``accepting``."""

    __slots__ = ("g", "items", "uid", "allowed", "accepting", "_waiting", "_feeds", "masks", "__weakref__")

    def __init__(self, g: Grammar, items, uid: int):
        self.g = g
        self.items = items
        self.uid = uid
        nt = g.n_terminals
        allowed = 0
        accepting = False
        for it, o in items:
            s = g.next_sym[it]
            if 0 <= s < nt:
                allowed |= 1 << s
            elif it == g.accept_item and (o is g.initial or (o is None and g.initial is None)):
                accepting = True
        self.allowed = allowed
        self.accepting = accepting
        self._waiting = None
        self._feeds: dict[int, PState | None] = {}
        self.masks: dict = {}

    def waiting(self, sym: int):
        """Items of this set with ``sym`` after the dot, origins resolved."""
        w = self._waiting
        if w is None:
            w = {}
            ns = self.g.next_sym
            for it, o in self.items:
                w.setdefault(ns[it], []).append((it, self if o is None else o))
            self._waiting = w
        return w.get(sym, ())

    def feed(self, t: int) -> "PState | None":
        """The state after terminal ``t``; None if the parser rejects it (ignored terminals: self)."""
        try:
            return self._feeds[t]
        except KeyError:
            pass
        if (self.allowed >> t) & 1:
            res = self.g._make([(it + 1, o) for it, o in self.waiting(t)], self)
        elif (self.g.ignore_mask >> t) & 1:
            res = self
        else:
            res = None
        self._feeds[t] = res
        return res

    def __repr__(self) -> str:
        return f"PState({self.uid}, {len(self.items)} items, accepting={self.accepting})"
