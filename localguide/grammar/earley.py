"""An incremental Earley recognizer over terminals, with shared, canonical states.

Handles any context-free grammar: left recursion, ambiguity, empty rules.
Following Aycock & Horspool ("Practical Earley Parsing", 2002), Earley items are
grouped by the states of an LR(0) ε-DFA built lazily from the grammar: an entry
``(d, origin)`` stands for all dotted items of DFA state ``d`` started in
``origin``. Predictions and moves over nullable nonterminals are precomputed in
the DFA states (a *kernel* state and its *predicted* companion, whose items start
in the current set), so a set holds a handful of entries instead of dozens of items.

A ``PState`` is one Earley set together with (by reference) the sets its entries
started in. States are interned by content — the entries, each with the
*canonical* state it started in — so two texts that leave the parser in the same
situation share one object, and with it the memoized transitions (``feed``) and the
mask caches hung on it. An entry starts in the set that its completions reach past the
sets that only pass a nonterminal on (Leo's deterministic reductions, ``_leo_up``), so a
right-recursive rule leaves the same set at every depth instead of a chain that grows with
the text. Terminals are ints ``0..n_terminals-1``; ``allowed`` is the bitmask of terminals
the parser accepts next.
"""

from __future__ import annotations

import threading
from array import array
from functools import cached_property

import numpy as np

from .cfg import CFG
from .rows import Rows

# How many sets a deterministic reduction path is followed before its nonterminal comes back
# (``Grammar._leo_up``): the rules of one right-recursive cycle, written by a front end.
LEO_STEPS = 32
DFA_KEYS = ("dfa_items_off", "dfa_items", "dfa_allowed", "dfa_pred", "dfa_is_pred", "dfa_comp_off", "dfa_comp",
            "dfa_sh_off", "dfa_sh_sym", "dfa_sh_to")


class DState:
    """A state of the LR(0) ε-DFA: a set of dotted items with the same origin."""

    __slots__ = ("items", "shift", "complete", "allowed", "pred", "accept", "is_pred", "lhs")

    def __init__(self, items, shift, complete, allowed, pred, accept, is_pred, lhs=frozenset()):
        self.items = items  # tuple of dotted items
        self.shift = shift  # symbol -> DFA state id (lazy: None until needed)
        self.complete = complete  # nonterminals with a completed item here
        self.allowed = allowed  # bitmask of terminals with a shift
        self.pred = pred  # id of the predicted companion (items starting here), -1 if none
        self.accept = accept  # holds the completed start item
        self.is_pred = is_pred  # a predicted companion
        self.lhs = lhs  # the rules' left-hand sides: all an entry's origin is ever asked about


def _read_dstates(g: "Grammar", t: dict) -> Rows:
    """The states of an ε-DFA read back from ``Grammar.dfa_tables``, each made when first used."""
    allowed = t["dfa_allowed"]
    it_off, its, pred, is_pred, c_off, comp, s_off, s_sym, s_to = (_ints(t[k]) for k in (
        "dfa_items_off", "dfa_items", "dfa_pred", "dfa_is_pred", "dfa_comp_off", "dfa_comp", "dfa_sh_off",
        "dfa_sh_sym", "dfa_sh_to"))

    def make(d: int) -> DState:
        items = tuple(its[it_off[d]:it_off[d + 1]])
        a, b = s_off[d], s_off[d + 1]
        return DState(items, dict(zip(s_sym[a:b], s_to[a:b])), tuple(comp[c_off[d]:c_off[d + 1]]),
                      int.from_bytes(allowed[d].astype("<u8").tobytes(), "little"), pred[d], g.accept_item in items,
                      bool(is_pred[d]), g.lhs_set(g._items[2][list(items)].tolist()))

    return Rows(len(pred), make)


class Grammar:
    """Rule tables of a normalized ``CFG`` (dotted items are ints) and the lazy ε-DFA.

    ``arrays`` (from ``arrays()``, kept in the disk cache) give the nullable symbols and,
    when it was explored in full, the ε-DFA: its states are then read from them as they
    are first used, where exploring it again costs 0.1 s on a large schema grammar.
    """

    def __init__(self, cfg: CFG, arrays: dict | None = None):
        self.cfg = cfg
        nt = self.n_terminals = cfg.n_terminals
        self.cfg_rules = cfg.rule_arrays()  # also written to the cache file (``cfg_arrays``)
        n_nt, lhs_i, lens, rhs, start_i = self.cfg_rules
        self.n_nonterminals = n_nt
        self.n_rules = len(lens)
        # Dotted items: item k of rule r is first_item[r] + dot; built flat (large schema grammars
        # have 10⁵ items, and this runs at every load).
        lhs_ids = lhs_i + nt
        flat = np.where(rhs >= 0, rhs, nt - 1 - rhs)
        first = np.zeros(len(lens) + 1, np.int64)
        np.cumsum(lens + 1, out=first[1:])
        next_sym = np.full(int(first[-1]), -1, np.int64)  # symbol after the dot, -1 when complete
        starts = np.zeros(len(lens), np.int64)  # each rule's first symbol in ``flat``
        np.cumsum(lens[:-1], out=starts[1:])
        next_sym[np.repeat(first[:-1] - starts, lens) + np.arange(len(flat))] = flat
        self._rule_arrays = (lhs_ids, lens, flat)
        # Indexed one by one by the Python code below, as ``array.array``s (made when first used):
        # as lists they cost 5 ms at every load of a 29k-rule grammar (2·10⁵ int objects).
        self._items = (first[:-1], next_sym, np.repeat(lhs_ids, lens + 1), lhs_i)
        if arrays is not None:
            self.nullable = set(arrays["g_nullable"].tolist())
        else:
            self.nullable = _nullable(self.rules, nt)
        start_rule = int(np.argmax(lhs_i == start_i))
        self.accept_item = int(first[start_rule]) + int(lens[start_rule])
        self.ignore_mask = 0
        for t in cfg.ignore:
            self.ignore_mask |= 1 << t
        self._lock = threading.RLock()  # creating ε-DFA states (a background thread may explore)
        self._canon: dict = {}  # item -> its canonical item (``_canonical``)
        self._by_suffix: dict = {}  # (lhs, symbols after the dot) -> canonical item
        self._dstate_ids: dict = {}
        # (one object per distinct set of left-hand sides: states share a few, and each object is
        # one more for the cycle collector to walk as long as the grammar lives)
        self._lhs_sets: dict = {}
        self._pred_ids: dict = {}  # nonterminals after the dots -> predicted companion (-1: none)
        self._table: dict = {}
        self._unions: dict = {}  # uids of pooled sets -> their union (``union``)
        self._pass: dict = {}  # ε-DFA state -> the one nonterminal it only passes on, or -1 (``_passes``)
        self._uid = 0
        self.initial = None
        self._dfa = None  # the explored ε-DFA as arrays (``dfa_tables``)
        if arrays is not None and len(arrays["dfa_pred"]):
            self._dfa = {k: arrays[k] for k in DFA_KEYS}
            self.dstates = _read_dstates(self, self._dfa)
            self._explored = True
            k0 = 0
        else:
            self.dstates: list[DState] = []
            self._explored = False
            k0 = self._dstate(self._advance_nullable([self.first_item[start_rule]]))
        self.initial = self._make([(k0, None)])

    @cached_property
    def first_item(self) -> array:
        """Each rule's first dotted item (dot before its first symbol)."""
        return _ints(self._items[0])

    @cached_property
    def next_sym(self) -> array:
        """Each dotted item's symbol after the dot, -1 when the dot is at the end."""
        return _ints(self._items[1])

    @cached_property
    def item_lhs(self) -> array:
        """Each dotted item's left-hand side."""
        return _ints(self._items[2])

    @cached_property
    def _lhs_first(self) -> tuple[array, array]:
        """The first items of each nonterminal's rules: ``a[o[A - nt]:o[A - nt + 1]]`` of ``(a, o)``."""
        first, lhs_i = self._items[0], self._items[3]
        off = np.zeros(self.n_nonterminals + 1, np.int64)
        np.cumsum(np.bincount(lhs_i, minlength=self.n_nonterminals), out=off[1:])
        return _ints(first[np.argsort(lhs_i, kind="stable")]), _ints(off)

    @cached_property
    def rules(self) -> list[tuple[int, tuple]]:
        """(lhs id, rhs ids) of each rule; nonterminal ``i`` of ``cfg.nonterminals()`` is ``n_terminals + i``."""
        lhs_ids, lens, flat = self._rule_arrays
        syms = flat.tolist()
        out, pos = [], 0
        for lhs, k in zip(lhs_ids.tolist(), lens.tolist()):
            out.append((lhs, tuple(syms[pos:pos + k])))
            pos += k
        return out

    @cached_property
    def nt_names(self) -> list[str]:
        return self.cfg.nonterminals()

    @cached_property
    def nt_id(self) -> dict[str, int]:
        nt = self.n_terminals
        return {n: nt + i for i, n in enumerate(self.nt_names)}

    # -- persistence ---------------------------------------------------------------------
    def explore(self, max_states: int) -> bool:
        """Build every state of the ε-DFA; False (and stop) once there are more than ``max_states``."""
        with self._lock:
            if not self._explored:
                ds = self.dstates
                i = 0
                while i < len(ds):
                    self.shifts(i)
                    i += 1
                    if len(ds) > max_states:
                        return False
                self._explored = True
        return True

    def state_items(self, d: int):
        """ε-DFA state ``d``'s items, read from ``dfa_tables`` where the grammar keeps them, without
        making the state's ``DState``: a table over every state then leaves no object per state
        for the cycle collector to walk as long as the grammar lives."""
        t = self._dfa
        if t is None:
            return self.dstates[d].items
        off = t["dfa_items_off"]
        return t["dfa_items"][off[d]:off[d + 1]].tolist()

    def dfa_tables(self) -> dict:
        """The explored ε-DFA (``explore`` first) as arrays, ``DFA_KEYS``: each state's items,
        allowed terminals (64-bit words), predicted companion, completed left-hand sides and
        shifts, the last three as offsets into flat arrays."""
        with self._lock:
            if self._dfa is None:
                if not self._explored:
                    raise ValueError("the ε-DFA is not explored")
                w = max(1, (self.n_terminals + 63) // 64)
                ds = self.dstates
                allowed = np.zeros((len(ds), w), np.uint64)
                it_off, items, comp_off, comp, sh_off, sh_sym, sh_to = [0], [], [0], [], [0], [], []
                for d, st in enumerate(ds):
                    if st.allowed:
                        allowed[d] = int_words(st.allowed, w)
                    items += st.items
                    it_off.append(len(items))
                    comp += st.complete
                    comp_off.append(len(comp))
                    for sym, to in sorted(st.shift.items()):
                        sh_sym.append(sym)
                        sh_to.append(to)
                    sh_off.append(len(sh_sym))

                def a(x):
                    return np.array(x, np.int64)

                self._dfa = {"dfa_items_off": a(it_off), "dfa_items": a(items), "dfa_allowed": allowed,
                             "dfa_pred": a([st.pred for st in ds]), "dfa_is_pred": a([st.is_pred for st in ds]),
                             "dfa_comp_off": a(comp_off), "dfa_comp": a(comp), "dfa_sh_off": a(sh_off),
                             "dfa_sh_sym": a(sh_sym), "dfa_sh_to": a(sh_to)}
            return self._dfa

    def leo_tables(self) -> tuple:
        """For the explored ε-DFA (``explore`` first): each state's left-hand sides (offsets and
        nonterminals, sorted) and the nonterminal it only passes on or -1 (``_passes``): what the
        compiled arena's deterministic reductions read (``arena_kernels._leo_origin``)."""
        t = self.dfa_tables()
        off, items = t["dfa_items_off"], t["dfa_items"]
        n = len(off) - 1
        lhs = np.asarray(self._items[2])[items]
        state = np.repeat(np.arange(n), np.diff(off))
        pairs = np.unique(np.stack([state, lhs], axis=1), axis=0) if n else np.zeros((0, 2), np.int64)
        lhs_off = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(pairs[:, 0], minlength=n), out=lhs_off[1:])
        n_lhs = np.diff(lhs_off)
        open_items = np.bincount(state[np.asarray(self._items[1])[items] >= 0], minlength=n)
        accept = np.zeros(n, bool)
        accept[state[items == self.accept_item]] = True
        only = (n_lhs == 1) & (open_items == 0) & ~accept
        passes = np.full(n, -1, np.int64)
        passes[only] = pairs[lhs_off[:-1][only], 1]
        return lhs_off, pairs[:, 1].astype(np.int64), passes

    def arrays(self, max_states: int) -> dict:
        """What ``Grammar(cfg, arrays)`` reads back: the nullable symbols and, when it has at most
        ``max_states`` states (explored here), the ε-DFA."""
        out = {"g_nullable": np.array(sorted(self.nullable), np.int64)}
        if max_states > 0 and self.explore(max_states):
            out.update(self.dfa_tables())
        else:
            out.update({k: np.zeros(1 if k.endswith("_off") else 0, np.int64) for k in DFA_KEYS})
            out["dfa_allowed"] = np.zeros((0, 1), np.uint64)
        return out

    def _by_lhs(self, sym: int) -> list[int]:
        """The first items of ``sym``'s rules."""
        i = sym - self.n_terminals
        a, o = self._lhs_first
        return a[o[i]:o[i + 1]]

    # -- the ε-DFA -----------------------------------------------------------------------
    def lhs_set(self, symbols) -> frozenset:
        """``DState.lhs``: the set of ``symbols``, one shared object per distinct set."""
        s = frozenset(symbols)
        return self._lhs_sets.setdefault(s, s)

    def _advance_nullable(self, items) -> frozenset:
        """``items`` plus every item reached from them by moving the dot over nullable symbols."""
        out = set(items)
        stack = list(items)
        ns, nullable = self.next_sym, self.nullable
        while stack:
            it = stack.pop()
            if ns[it] in nullable and it + 1 not in out:
                out.add(it + 1)
                stack.append(it + 1)
        canon, canonical = self._canon, self._canonical
        return frozenset([c if (c := canon.get(it)) is not None else canonical(it) for it in out])

    def _canonical(self, it: int) -> int:
        """The item that stands for every item with ``it``'s left-hand side and the same symbols
        after the dot: their futures are the same, so the ε-DFA keeps one of them. Sets then
        merge as soon as what told two parses apart is behind the dot (``SELECT DISTINCT x FROM``
        read with the keyword, or with a column ``distinct`` aliased ``x``)."""
        ns = self.next_sym
        j = it
        while ns[j] >= 0:
            j += 1
        c = self._canon[it] = self._by_suffix.setdefault((self.item_lhs[it], tuple(ns[it:j])), it)
        return c

    def _predict(self, syms) -> frozenset:
        """The items predicted by the nonterminals ``syms`` after the dots (dot at the start,
        then over nullables), closed."""
        ns, nt = self.next_sym, self.n_terminals
        out: set = set()
        done: set = set()
        stack = list(syms)
        while stack:
            sym = stack.pop()
            if sym in done:
                continue
            done.add(sym)
            new = self._advance_nullable(self._by_lhs(sym))
            for it in new:
                if it not in out:
                    out.add(it)
                    if ns[it] >= nt and ns[it] not in done:
                        stack.append(ns[it])
        return frozenset(out)

    def _dstate(self, items: frozenset, predicted: bool = False) -> int:
        key = (items, predicted)
        d = self._dstate_ids.get(key)
        if d is not None:
            return d
        d = self._dstate_ids[key] = len(self.dstates)
        ns, nt, lhs = self.next_sym, self.n_terminals, self.item_lhs
        allowed = 0
        complete = []
        for it in items:
            s = ns[it]
            if 0 <= s < nt:
                allowed |= 1 << s
            elif s < 0:
                complete.append(lhs[it])
        st = DState(tuple(sorted(items)), None, tuple(sorted(set(complete))), allowed, -1,
                    self.accept_item in items, predicted, self.lhs_set(lhs[it] for it in items))
        self.dstates.append(st)
        if not predicted:
            # the predicted companion depends only on the nonterminals after the dots, which
            # many kernel states share
            syms = frozenset(ns[it] for it in items if ns[it] >= nt)
            if syms:
                p = self._pred_ids.get(syms)
                if p is None:
                    pred = self._predict(syms)
                    p = self._pred_ids[syms] = self._dstate(pred, True) if pred else -1
                st.pred = p
        return d

    def shifts(self, d: int) -> dict:
        st = self.dstates[d]
        if st.shift is None:
            with self._lock:
                if st.shift is None:
                    groups: dict[int, list] = {}
                    ns = self.next_sym
                    for it in st.items:
                        s = ns[it]
                        if s >= 0:
                            groups.setdefault(s, []).append(it + 1)
                    st.shift = {s: self._dstate(self._advance_nullable(its)) for s, its in groups.items()}
        return st.shift

    # -- Earley sets ---------------------------------------------------------------------------
    def _make(self, kernel) -> "PState":
        """Close ``kernel`` (entries (DFA state, origin state)) and intern the set.

        An entry's key is ``(d << 32) | (origin uid + 1, 0 for this set)``: it dedups the
        entries, and the sorted keys are the set's content key.
        """
        dstates = self.dstates
        project = self._project
        seen = set()
        entries = []
        work = []
        for d, o in kernel:
            if o is not None:
                o = project(o, d)
            k = (d << 32) | (0 if o is None else o.uid + 1)
            if k in seen:
                continue
            seen.add(k)
            entries.append((d, o))
            if o is not None:
                work.append((d, o))
            p = dstates[d].pred
            if p >= 0 and (p << 32) not in seen:
                seen.add(p << 32)
                entries.append((p, None))
        while work:
            d, o = work.pop()
            for a in dstates[d].complete:
                for d2, o2 in o.waiting(a):
                    o2 = project(o2, d2)
                    k = (d2 << 32) | (o2.uid + 1)
                    if k in seen:
                        continue
                    seen.add(k)
                    entries.append((d2, o2))
                    work.append((d2, o2))
                    p = dstates[d2].pred
                    if p >= 0 and (p << 32) not in seen:
                        seen.add(p << 32)
                        entries.append((p, None))
        ckey = tuple(sorted(seen))
        st = self._table.get(ckey)
        if st is None:
            st = PState(self, tuple(entries), self._uid)
            self._uid += 1
            self._table[ckey] = st
        return st

    def union(self, states) -> "PState":
        """One set whose future is the union of ``states``' futures (none of them the initial set).

        Sets of readings that end at the same point of the terminal sequence (the same next
        terminal, since their configurations share a scanner state) differ only in what they
        started where: their entries can be pooled, each entry "started here" meaning the
        same next terminal for all, and every origin kept by reference. Feeding the union is
        the union of feeding each, so the readings of a lexically ambiguous text stay one set
        per scanner state instead of one per way of cutting it into lexemes.
        """
        key = frozenset(p.uid for p in states)
        got = self._unions.get(key)
        if got is None:
            got = self._unions[key] = self._make([e for p in states for e in p.entries])
        return got

    def _project(self, o: "PState", d: int) -> "PState":
        """``o`` cut down to what an entry (``d``, ``o``) can ask of it (``_cut``), and moved up
        past the sets whose completions only pass one nonterminal on (``_leo_up``).

        An entry only ever completes the left-hand sides of its items, so it only reads
        ``o.waiting(A)`` for those ``A``; the set that answers that is all the entry needs.
        """
        if o is self.initial:
            return o  # acceptance is told by the start item's origin being the initial set
        want = self.dstates[d].lhs
        proj = o._proj
        if proj is None:
            proj = o._proj = {}
        got = proj.get(want)
        if got is not None:
            return got
        path = [proj]
        while True:
            cut = self._cut(o, want)
            up = self._leo_up(cut, want)
            if up is None:
                got = cut
                break
            if up is self.initial:
                got = up
                break
            o = up
            proj = o._proj
            if proj is None:
                proj = o._proj = {}
            got = proj.get(want)
            if got is not None:
                break
            path.append(proj)
        for proj in path:
            proj[want] = got
        return got

    def _cut(self, o: "PState", want: frozenset) -> "PState":
        """``o`` cut down to the entries that ``o.waiting(A)`` reads for ``A`` in ``want``.

        Besides those, through the entries of ``o`` that start in ``o`` itself, it reads
        the left-hand sides of theirs. Interning that part of ``o`` instead of ``o`` makes
        two sets that differ only in what no longer matters one set: the two readings of
        ``FROM t1 WHERE`` (table ``t1``, or table ``t`` aliased ``1``) continue as one
        configuration instead of doubling at every nesting level.
        """
        dstates, shifts = self.dstates, self.shifts
        ents = o.entries
        need = set(want)
        keep = [False] * len(ents)
        changed = True
        while changed:
            changed = False
            for i, (d2, o2) in enumerate(ents):
                if not keep[i] and not need.isdisjoint(shifts(d2)):
                    keep[i] = changed = True
                    if o2 is None:
                        need |= dstates[d2].lhs
        if all(keep):
            return o
        sub = tuple(e for e, k in zip(ents, keep) if k)
        ckey = _content_key(sub)
        got = self._table.get(ckey)
        if got is None:
            got = PState(self, sub, self._uid)
            self._uid += 1
            self._table[ckey] = got
        return got

    def _leo_up(self, o: "PState", want: frozenset) -> "PState | None":
        """The older set ``u`` that an entry started in ``o`` can start in instead, None if none.

        Leo's deterministic reductions (Leo, "A general context-free parsing algorithm
        running in linear time on every LR(k) grammar", 1991). Say ``o`` has one entry
        waiting for ``A``, started in ``o2``, that ``A`` takes to an ε-DFA state whose items
        all complete one nonterminal ``B`` (``B -> x A •``: it only passes ``B`` on).
        Completing ``A`` in ``o`` adds that entry, which nothing can read (it shifts nothing
        and accepts nothing), and completes ``B`` in ``o2`` (``o`` itself for an entry
        started there); and so on, until ``A`` itself is completed, in a set ``u`` (within
        ``LEO_STEPS`` steps). Where that holds for every ``A`` of ``want`` with the same
        ``u`` older than ``o``, starting the entry in ``u`` gives the same sets less those
        entries. A right-recursive rule (``body ::= "" | [a-z] body``,
        or ``members ::= member ("," members)?`` through the rules of its group) then leaves
        a set of a few entries at any depth, not a chain of entries that grows with the
        text: the same set at every position, so its feeds and masks are memoized.
        """
        up = None
        for a in want:
            q, s = o, a
            for _ in range(LEO_STEPS):
                w = q.waiting(s)
                if not w:
                    return None
                d2, o2 = w[0]
                s = self._passes(d2)
                if s < 0:
                    return None
                for x, y in w:
                    if x != d2 or y is not o2:
                        return None
                q = o2
                if s == a:
                    break
            else:
                return None
            if q is o or up is not None and q is not up:
                return None
            up = q
        return up

    def _passes(self, d: int) -> int:
        """The nonterminal that ε-DFA state ``d`` completes, when its items all end with it and
        it does not accept (a state that only passes one nonterminal on); -1 otherwise."""
        got = self._pass.get(d)
        if got is None:
            st = self.dstates[d]
            ns = self.next_sym
            ok = len(st.complete) == 1 and not st.accept and all(ns[it] < 0 for it in st.items)
            got = self._pass[d] = st.complete[0] if ok else -1
        return got

    @property
    def n_states(self) -> int:
        return len(self._table)

    def flush(self) -> None:
        """Forget the interned sets and everything memoized on them.

        Sets still referenced (by guides in use) stay valid: they recompute what they
        need, and the sets made from them are interned afresh. Uids keep growing, so
        content keys never collide with those of the forgotten sets.
        """
        for st in self._table.values():
            st._waiting = None
            st._feeds = {}
            st._peeks = None
            st._climb = None
            st._proj = None
            st.masks = {}
            st.ends = {}
            st.rkept = {}
            st.budget = None
        init = self.initial
        self._table = {_content_key(init.entries): init}
        self._unions = {}


def _nullable(rules, n_terminals: int) -> set[int]:
    """The nonterminals that derive the empty string: each rule counts its symbols not yet
    known nullable, and a symbol found nullable decrements the rules it occurs in (linear,
    where passes until nothing changes were quadratic on large schema grammars)."""
    left = []
    uses: dict[int, list[int]] = {}
    work = []
    for r, (lhs, rhs) in enumerate(rules):
        k = 0
        for x in rhs:
            if x < n_terminals:
                k = -1
                break
            k += 1
        left.append(k)
        if k > 0:
            for x in rhs:
                uses.setdefault(x, []).append(r)
        elif k == 0:
            work.append(lhs)
    nullable: set[int] = set()
    while work:
        a = work.pop()
        if a in nullable:
            continue
        nullable.add(a)
        for r in uses.get(a, ()):
            left[r] -= 1
            if left[r] == 0:
                work.append(rules[r][0])
    return nullable


def _ints(a: np.ndarray) -> array:
    """``a`` as an ``array.array`` of 64-bit ints (a copy of its bytes; items read as ``int``)."""
    return array("q", np.ascontiguousarray(a, np.int64).tobytes())


def int_words(x: int, n: int) -> np.ndarray:
    """Bit mask ``x`` as ``n`` little-endian 64-bit words."""
    return np.frombuffer(x.to_bytes(8 * n, "little"), "<u8").astype(np.uint64)


def _content_key(entries) -> tuple:
    """The interning key of an Earley set: its entries, origins by uid (None: the set itself)."""
    return tuple(sorted((d << 32) | (0 if o is None else o.uid + 1) for d, o in entries))


class PState:
    """One canonical Earley set. Use ``feed(t)`` (memoized) and ``allowed``/``accepting``."""

    __slots__ = ("g", "entries", "uid", "allowed", "accepting", "_waiting", "_feeds", "_peeks", "_climb", "masks",
                 "ends", "rkept", "budget", "_proj", "src", "__weakref__")

    def __init__(self, g: Grammar, entries, uid: int):
        self.g = g
        self.entries = entries  # (DFA state, origin PState; None: this set)
        self.uid = uid
        allowed = 0
        accepting = False
        dstates = g.dstates
        for d, o in entries:
            st = dstates[d]
            allowed |= st.allowed
            if st.accept and (o is g.initial or (o is None and g.initial is None)):
                accepting = True
        self.allowed = allowed
        self.accepting = accepting
        self._waiting = None
        self._feeds: dict[int, PState | None] = {}
        self._peeks = None
        self._climb = None
        self._proj = None  # DFA states' left-hand sides -> this set cut down to them (``Grammar._project``)
        self.masks: dict = {}  # scanner state -> token mask (``MaskEngine``)
        self.ends: dict = {}  # scanner state -> whether a lexeme ending there completes a sentence
        self.rkept: dict = {}  # reading -> kept groups (``MaskEngine``)
        self.budget = None  # shortest completion (``budget.Completer``)
        self.src = None  # (uid of a state, terminal) whose feed first made this one (``arena``)

    @property
    def items(self):
        """The dotted items of this set, each with its origin (None: this set)."""
        dstates = self.g.dstates
        return [(it, o) for d, o in self.entries for it in dstates[d].items]

    def waiting(self, sym: int):
        """Entries advanced over nonterminal ``sym``: (DFA state after it, origin resolved)."""
        w = self._waiting
        if w is None:
            w = self._waiting = {}
        got = w.get(sym)
        if got is None:
            shifts = self.g.shifts
            got = w[sym] = [(sh[sym], self if o is None else o)
                            for d, o in self.entries for sh in (shifts(d),) if sym in sh]
        return got

    def feed(self, t: int) -> "PState | None":
        """The state after terminal ``t``; None if the parser rejects it (ignored terminals: self)."""
        try:
            return self._feeds[t]
        except KeyError:
            pass
        if (self.allowed >> t) & 1:
            g = self.g
            dstates = g.dstates
            kernel = []
            for d, o in self.entries:
                sh = dstates[d].shift
                if sh is None:
                    sh = g.shifts(d)
                d2 = sh.get(t)
                if d2 is not None:
                    kernel.append((d2, self if o is None else o))
            res = g._make(kernel)
            if res.src is None and res is not self:
                res.src = (self.uid, t)
        elif (self.g.ignore_mask >> t) & 1:
            res = self
        else:
            res = None
        self._feeds[t] = res
        return res

    def peek(self, t: int) -> int:
        """``self.feed(t).allowed`` for a terminal the parser allows, without building that state."""
        f = self._feeds.get(t)
        if f is not None:
            return f.allowed
        pk = self._peeks
        if pk is None:
            pk = self._peeks = {}
        a = pk.get(t)
        if a is None:
            g = self.g
            shifts = g.shifts
            a = 0
            for d, o in self.entries:
                sh = shifts(d)
                if t in sh:
                    a |= _reach(g, sh[t], self if o is None else o)
            pk[t] = a
        return a

    def climb(self, sym: int) -> int:
        """Terminals allowed right after nonterminal ``sym``, completed from this set, ends here.

        The terminals of every (set, nonterminal) that completing ``sym`` here climbs to, found
        by one walk that visits each once (a cycle of unit rules adds nothing new): memoizing
        only whole answers keeps a cut-off cycle's partial answer out of the memo, and the walk
        keeps an ambiguous grammar's nested climbs from being redone at every level.
        """
        c = self._climb
        if c is None:
            c = self._climb = {}
        a = c.get(sym)
        if a is not None:
            return a
        dstates = self.g.dstates
        a = 0
        seen = {(self.uid, sym)}
        todo = [(self, sym)]
        while todo:
            o, s = todo.pop()
            for d2, o2 in o.waiting(s):
                st = dstates[d2]
                a |= _shifted(dstates, st)
                if st.complete:
                    memo = o2._climb
                    for b in st.complete:
                        got = None if memo is None else memo.get(b)
                        if got is not None:
                            a |= got
                        elif (o2.uid, b) not in seen:
                            seen.add((o2.uid, b))
                            todo.append((o2, b))
        c[sym] = a
        return a

    def __repr__(self) -> str:
        return f"PState({self.uid}, {len(self.entries)} entries, accepting={self.accepting})"


def _shifted(dstates, st: DState) -> int:
    """Terminals that DFA state ``st`` and its predicted companion shift."""
    return st.allowed | (dstates[st.pred].allowed if st.pred >= 0 else 0)


def _reach(g: Grammar, d: int, o: PState) -> int:
    """Terminals allowed after entry (DFA state ``d``, origin ``o``) is added to a new set."""
    st = g.dstates[d]
    a = _shifted(g.dstates, st)
    for b in st.complete:
        a |= o.climb(b)
    return a
