"""The scanner: every terminal DFA run side by side, keeping every viable reading.

A *reading* is a pair ``(terminal, DFA state)``; readings are numbered globally
(``r_term``, ``r_q``) and step independently (``r_next``). A scanner state is a set
of readings of the current partial lexeme, determinized into one combined DFA over
bytes (``trans``). Nothing is ever committed: a lexeme may end wherever one of its
readings accepts, and may also go on. After a lexeme of terminal ``T`` ends, the
next one starts in the *seed* state ``after[T]``: the terminals that can follow
``T`` in the grammar (its FOLLOW set) plus the ignored run; after the ignored run,
every other terminal (the ignored run never follows itself). Seeds
over-approximate; the parser filters readings by the terminals it allows.

For the subterminal trees the scanner also has sharper seeds: ``seed_tab[ctx, T]``
holds, for ``T`` completed right after terminal ``ctx - 1`` (``ctx = 0``: unknown),
the terminals of the grammar's trigrams ``(ctx - 1, T, ·)``, and one-reading
states (``single[r]``), the origins of the trees. Readings of the limited ignored
run that differ only in how many bytes the run has taken share one tree
(``tree_of``, the canonical reading with the fewest), which the mask engine
filters by the bytes left (``tree_lim``).
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from ..distance import byte_distances
from . import lexer_kernels as kernels
from ..runtime import warmup
from .earley import Grammar
from ..errors import GrammarError
from .rows import Rows


# -- terminal adjacency --------------------------------------------------------------

def _propagate(values: dict, edges: dict) -> None:
    """Close ``values`` (symbol → bitmask) under ``values[b] ⊇ values[a]`` for every edge a → b."""
    work = [a for a in edges if values.get(a)]
    while work:
        a = work.pop()
        va = values[a]
        for b in edges.get(a, ()):
            vb = values[b]
            if vb | va != vb:
                values[b] = vb | va
                work.append(b)


def symbol_sets(g: Grammar):
    """FIRST, LAST, FOLLOW and PRECEDE bitmasks of terminals, for every symbol id.

    Each set is its constant part plus inclusions along the rules, closed by a
    worklist (linear in the grammar per change, not per pass over all rules).
    """
    got = g.__dict__.get("_symbol_sets")
    if got is not None:
        return got
    nt = g.n_terminals
    nullable = g.nullable
    syms = list(range(nt)) + list(g.nt_id.values())
    first = {s: (1 << s if s < nt else 0) for s in syms}
    last = dict(first)
    f_edges: dict = {}  # X -> [lhs]: FIRST(lhs) ⊇ FIRST(X)
    l_edges: dict = {}
    for lhs, rhs in g.rules:
        for seq, edges in ((rhs, f_edges), (rhs[::-1], l_edges)):
            for s in seq:
                edges.setdefault(s, []).append(lhs)
                if s not in nullable:
                    break
    _propagate(first, f_edges)
    _propagate(last, l_edges)
    follow = {s: 0 for s in syms}
    precede = {s: 0 for s in syms}
    fo_edges: dict = {}  # lhs -> [s]: FOLLOW(s) ⊇ FOLLOW(lhs) (what follows s in the rule may vanish)
    pr_edges: dict = {}
    for lhs, rhs in g.rules:
        trailer, vanish = 0, True
        for s in reversed(rhs):
            follow[s] |= trailer
            if vanish:
                fo_edges.setdefault(lhs, []).append(s)
            trailer = (trailer | first[s]) if s in nullable else first[s]
            vanish = vanish and s in nullable
        leader, vanish = 0, True
        for s in rhs:
            precede[s] |= leader
            if vanish:
                pr_edges.setdefault(lhs, []).append(s)
            leader = (leader | last[s]) if s in nullable else last[s]
            vanish = vanish and s in nullable
    _propagate(follow, fo_edges)
    _propagate(precede, pr_edges)
    got = g.__dict__["_symbol_sets"] = (first, last, follow, precede)
    return got


def follow_sets(g: Grammar) -> list[int]:
    """For each terminal, the bitmask of terminals that can come right after it."""
    _, _, follow, _ = symbol_sets(g)
    return [follow[t] for t in range(g.n_terminals)]


def _pairs_add(d: dict, left: int, right: int) -> bool:
    """Add left × right (bitmasks) to the pair set ``d`` (left terminal → right bitmask)."""
    changed = False
    while left:
        low = left & -left
        a = low.bit_length() - 1
        left ^= low
        old = d.get(a, 0)
        if old | right != old:
            d[a] = old | right
            changed = True
    return changed


def trigrams(g: Grammar) -> dict:
    """``(a, b) → bitmask of c`` for every trigram ``a b c`` of terminals in some sentence.

    Each ``b`` is an occurrence in a rule ``B → α b β``: ``a`` ends a non-empty string
    of α, or comes before ``B`` when α is nullable; ``c`` likewise on the right. When
    both α and β vanish, ``a`` and ``c`` must surround the same occurrence of ``B``:
    the context pairs ``CTX(B)``, computed by the same case analysis one level up
    (a worklist along those occurrences).
    """
    first, last, follow, precede = symbol_sets(g)
    nullable = g.nullable
    nt = g.n_terminals

    # The four cases for every symbol occurrence, once: (symbol, lhs, L(α), α nullable, F(β), β nullable).
    occ = []
    for lhs, rhs in g.rules:
        n = len(rhs)
        fb = [0] * (n + 1)
        bn = [True] * (n + 1)
        for i in range(n - 1, -1, -1):
            s = rhs[i]
            fb[i] = (first[s] | fb[i + 1]) if s in nullable else first[s]
            bn[i] = bn[i + 1] and s in nullable
        la, an = 0, True
        for i, s in enumerate(rhs):
            occ.append((s, lhs, la, an, fb[i + 1], bn[i + 1]))
            la = (la | last[s]) if s in nullable else last[s]
            an = an and s in nullable

    def pairs(lhs, la, an, fb, bn, d):
        _pairs_add(d, la, fb)
        if an:
            _pairs_add(d, precede[lhs], fb)
        if bn:
            _pairs_add(d, la, follow[lhs])

    ctx: dict[int, dict] = {n: {} for n in g.nt_id.values()}
    inherit: dict[int, list] = {}  # B -> [s]: CTX(s) ⊇ CTX(B) (s alone in a rule of B, up to nullables)
    for s, lhs, la, an, fb, bn in occ:
        if s < nt:
            continue
        pairs(lhs, la, an, fb, bn, ctx[s])
        if an and bn:
            inherit.setdefault(lhs, []).append(s)
    work = [b for b in inherit if ctx[b]]
    while work:
        b = work.pop()
        src = ctx[b]
        for s in inherit[b]:
            d = ctx[s]
            changed = False
            for a, cm in src.items():
                old = d.get(a, 0)
                if old | cm != old:
                    d[a] = old | cm
                    changed = True
            if changed and s in inherit:
                work.append(s)
    out: dict[tuple, int] = {}
    for s, lhs, la, an, fb, bn in occ:
        if s >= nt:
            continue
        d: dict = {}
        pairs(lhs, la, an, fb, bn, d)
        if an and bn:
            for a, cm in ctx[lhs].items():
                _pairs_add(d, 1 << a, cm)
        for a, cm in d.items():
            out[(a, s)] = out.get((a, s), 0) | cm
    return out


# -- the combined DFA -------------------------------------------------------------------

class Scanner:
    """The combined DFA of all terminals, built from the seed states outward."""

    def __init__(self, g: Grammar, max_states: int = 50000, arrays: dict | None = None):
        cfg = g.cfg
        self.n_terminals = nt = g.n_terminals
        self.ignore_mask = g.ignore_mask
        self.ign = next(iter(cfg.ignore)) if cfg.ignore else -1
        # per terminal only as arrays: a large schema's grammar has 10³ terminals
        sizes, self.r_acc = cfg.terminal_arrays()
        self.r_base = np.zeros(nt + 1, np.int64)
        np.cumsum(sizes, out=self.r_base[1:])
        n_r = int(self.r_base[-1])
        self.r_term = np.repeat(np.arange(nt, dtype=np.int32), sizes)
        self.r_q = (np.arange(n_r) - np.repeat(self.r_base[:-1], sizes)).astype(np.int32)
        self._run_readings(g.cfg)
        if arrays is not None:
            self._load(arrays)
        else:
            self._build(g, n_r, max_states)
            self._derive()
        self._rows()

    # -- construction ---------------------------------------------------------------------
    def _run_readings(self, cfg) -> None:
        """Which tree each reading uses, and the bytes the ignored run has left there."""
        n_r = len(self.r_term)
        big = 1 << 30
        self.r_dist = np.zeros(n_r, np.int64)  # fewest bytes to end the ignored run (0 elsewhere)
        self.tree_lim = np.full(n_r, big, np.int64)
        canon = np.arange(n_r)
        ign = self.ign
        if ign >= 0:
            dfa = cfg.terminal_dfa(ign)
            base = int(self.r_base[ign])
            self.r_dist[base:base + dfa.n_states] = byte_distances(dfa)
            if cfg.max_ignored_run is not None:
                labels = cfg.ignore_labels
                depth = np.full(dfa.n_states, -1, np.int64)  # = bytes taken: every path to (q, k) has k
                depth[0] = 0
                frontier = [0]
                while frontier:
                    nxt = []
                    for x in frontier:
                        for y in set(dfa.transitions[x].tolist()):
                            if y >= 0 and depth[y] < 0:
                                depth[y] = depth[x] + 1
                                nxt.append(y)
                    frontier = nxt
                first: dict = {}
                for x in np.argsort(depth, kind="stable").tolist():
                    first.setdefault(int(labels[x]), x)
                for x in range(dfa.n_states):
                    canon[base + x] = base + first[int(labels[x])]
                    self.tree_lim[base + x] = cfg.max_ignored_run - depth[x]
        uniq, self.tree_of = np.unique(canon, return_inverse=True)
        self.tree_of = self.tree_of.astype(np.int32)
        self.tree_reading = uniq.astype(np.int32)  # the canonical reading of each tree
        self.tree_track = np.zeros(len(uniq), np.bool_)
        if ign >= 0 and cfg.max_ignored_run is not None:
            self.tree_track[self.r_term[uniq] == ign] = True

    def reading_moves(self, cfg) -> np.ndarray:
        """``r_next[r, b]``: reading ``r`` after byte ``b`` (row and value ``n_readings``: dead)."""
        n_r = self.n_readings
        r_next = np.full((n_r + 1, 256), n_r, np.int64)
        for t in range(self.n_terminals):
            tr = cfg.terminal_dfa(t).transitions
            b = self.r_base[t]
            r_next[b:b + len(tr)] = np.where(tr >= 0, tr + b, n_r)
        return r_next

    def _build(self, g: Grammar, n_r: int, max_states: int) -> None:
        nt, ign = self.n_terminals, self.ign
        if nt == 0 or n_r == 0:
            raise GrammarError("the grammar has no terminals: its only sentence is the empty text, which "
                               "leaves nothing to generate", source=g.cfg.source)
        r_next = self.reading_moves(g.cfg)
        rng = np.random.default_rng(0x10CA1)
        h1 = rng.integers(1, 2 ** 63, n_r + 1, dtype=np.int64).astype(np.uint64)
        h2 = rng.integers(1, 2 ** 63, n_r + 1, dtype=np.int64).astype(np.uint64)
        h1[n_r] = h2[n_r] = 0
        ids: dict = {}
        states: list[np.ndarray] = []

        def intern(rs: np.ndarray) -> int:
            if len(rs) == 0:
                return -1
            key = (int(h1[rs].sum()), int(h2[rs].sum()))
            c = ids.get(key)
            if c is None:
                c = ids[key] = len(states)
                states.append(rs.astype(np.int32))
                if len(states) > max_states:
                    raise GrammarError(f"the terminals overlap too much: the scanner needs more than "
                                       f"{max_states} states", source=g.cfg.source)
            return c

        seeded: dict[int, int] = {}
        n_bytes = (nt + 7) // 8

        def seed(mask: int) -> int:
            # (a large schema's grammar has 10³ terminals and asks for 10⁵ seeds, most of them
            # alike: one bit walk in C per distinct mask)
            c = seeded.get(mask)
            if c is None:
                bits = np.unpackbits(np.frombuffer(mask.to_bytes(n_bytes, "little"), np.uint8), bitorder="little")
                c = seeded[mask] = intern(self.r_base[np.flatnonzero(bits)])
            return c

        every = (1 << nt) - 1
        ign_bit = g.ignore_mask
        real = every & ~ign_bit
        follow = follow_sets(g)
        self.start = seed(every)
        self.after = np.full(nt, -1, np.int32)
        for t in range(nt):
            self.after[t] = seed(real) if t == ign else seed((follow[t] & real) | ign_bit)
        tri = trigrams(g)
        seed_tab = np.full((nt + 1, nt), -1, np.int32)
        seed_tab[0] = self.after
        for a in range(nt):
            if a == ign:
                continue
            if ign >= 0:
                seed_tab[a + 1, ign] = seed(follow[a] & real)
            f = follow[a] & real
            while f:
                low = f & -f
                t = low.bit_length() - 1
                f ^= low
                seed_tab[a + 1, t] = seed((tri.get((a, t), 0) & real) | ign_bit)
        self.seed_tab = seed_tab
        # One state per reading alone: its key is the reading's own hashes (as ``intern`` sums them).
        self.single = np.empty(n_r, np.int32)
        for r, key in enumerate(zip(h1[:n_r].tolist(), h2[:n_r].tolist())):
            c = ids.get(key)
            if c is None:
                c = ids[key] = len(states)
                states.append(np.array([r], np.int32))
            self.single[r] = c
        if len(states) > max_states:
            raise GrammarError(f"the terminals overlap too much: the scanner needs more than {max_states} states",
                               source=g.cfg.source)
        off = np.zeros(len(states) + 1, np.int64)
        np.cumsum([len(x) for x in states], out=off[1:])
        rd = np.concatenate(states).astype(np.int32) if states else np.zeros(0, np.int32)
        closure = kernels.scanner_closure if warmup.ready() else kernels.py_scanner_closure
        self.trans, self.st_off, self.st_rd = closure(r_next, h1, h2, off, rd, max_states)
        if len(self.trans) == 0:
            raise GrammarError(f"the terminals overlap too much: the scanner needs more than {max_states} states",
                               source=g.cfg.source)

    def arrays(self) -> dict:
        """What ``Scanner(g, arrays=...)`` needs to skip the construction."""
        return {"sc_trans": self.trans, "sc_off": self.st_off, "sc_rd": self.st_rd, "sc_after": self.after,
                "sc_seed": self.seed_tab, "sc_single": self.single, "sc_start": np.array([self.start]),
                "sc_live_w": self.live_w, "sc_acc_off": self.acc_offsets, "sc_acc_terms": self.acc_terms,
                "sc_rdist": self.rdist}

    def _load(self, a: dict) -> None:
        self.trans, self.st_off, self.st_rd = a["sc_trans"], a["sc_off"], a["sc_rd"]
        self.after, self.seed_tab, self.single = a["sc_after"], a["sc_seed"], a["sc_single"]
        self.start = int(a["sc_start"][0])
        self.live_w, self.acc_offsets, self.acc_terms = a["sc_live_w"], a["sc_acc_off"], a["sc_acc_terms"]
        self.rdist = a["sc_rdist"]

    def _derive(self) -> None:
        """Per scanner state: the terminals it reads (``live_w``), those whose lexeme may end
        there (``acc_offsets``, ``acc_terms``) and the fewest bytes to end the ignored run, from
        the readings. Sparse: a grammar route of a large JSON schema has some 10⁴ states and
        10³ terminals (``arrays()`` keeps the result: 4 ms at every load)."""
        n = len(self.trans)
        nt = self.n_terminals
        off = self.st_off
        rd = self.st_rd
        st_of = np.repeat(np.arange(n, dtype=np.int64), np.diff(off))
        terms = self.r_term[rd].astype(np.int64)
        self.rdist = np.zeros(n, np.int32)  # fewest bytes to end the ignored run
        if self.ign >= 0:
            np.maximum.at(self.rdist, st_of, self.r_dist[rd].astype(np.int32))
        acc = self.r_acc[rd]
        live_keys = _sorted_set(st_of * nt + terms)
        acc_keys = _sorted_set(st_of[acc] * nt + terms[acc])
        self.live_w = _bitmasks(live_keys, n, nt)
        self.acc_offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(acc_keys // nt, minlength=n), out=self.acc_offsets[1:])
        self.acc_terms = (acc_keys % nt).astype(np.int32)

    def _rows(self) -> None:
        """``live``, ``accept_lists`` and ``is_ignore`` from the arrays of ``_derive``."""
        n, nt = len(self.trans), self.n_terminals
        # As Python values for the byte-by-byte advance, made when a state is first read: a
        # large schema's scanner has 10⁴ states, and loading one from the cache reads few.
        live_w, acc_off, acc_terms = self.live_w, self.acc_offsets, self.acc_terms
        self.live = Rows(n, lambda c: int.from_bytes(live_w[c].astype("<u8").tobytes(), "little"))
        self.accept_lists = Rows(n, lambda c: acc_terms[acc_off[c]:acc_off[c + 1]].tolist())
        self.is_ignore = np.zeros(nt, np.int8)
        if self.ign >= 0:
            self.is_ignore[self.ign] = 1

    @cached_property
    def live_tab(self) -> np.ndarray:
        """``bool[state, terminal]``: the terminals each state reads (for building trees)."""
        bits = np.unpackbits(np.ascontiguousarray(self.live_w).view(np.uint8), axis=1, bitorder="little")
        return bits[:, :self.n_terminals].astype(np.bool_)

    # -- queries ----------------------------------------------------------------------------
    def readings(self, c: int) -> list[tuple[int, int]]:
        """The readings ``(terminal, DFA state)`` of scanner state ``c``."""
        rs = self.st_rd[self.st_off[c]:self.st_off[c + 1]]
        return list(zip(self.r_term[rs].tolist(), self.r_q[rs].tolist()))

    def reading_ids(self, c: int) -> list[int]:
        return self.st_rd[self.st_off[c]:self.st_off[c + 1]].tolist()

    @property
    def n_states(self) -> int:
        return len(self.trans)

    @property
    def n_readings(self) -> int:
        return len(self.r_term)


def _sorted_set(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)``, whose first call in a process costs some 15 ms of set-up."""
    a = np.sort(a)
    return a[np.concatenate(([True], a[1:] != a[:-1]))] if len(a) else a


def _bitmasks(keys: np.ndarray, n: int, nt: int) -> np.ndarray:
    """For each of ``n`` rows, the terminals ``t`` with ``row * nt + t`` in ``keys``, as
    ``uint64[n, words]`` (bit ``t`` of word ``t >> 6``)."""
    nw = max(1, (nt + 63) >> 6)
    t = keys % nt
    words = np.zeros(n * nw, np.uint64)
    if len(keys):
        # keys are sorted, so each word's bits are a run: or-reduced per run (ufunc.at is slow)
        at = (keys // nt) * nw + (t >> 6)
        starts = np.flatnonzero(np.concatenate(([True], at[1:] != at[:-1])))
        words[at[starts]] = np.bitwise_or.reduceat(np.left_shift(np.uint64(1), (t & 63).astype(np.uint64)), starts)
    return words.reshape(n, nw)
