"""The compiled mask path: Earley sets in an arena and the tree walk, in numba.

``MaskEngine.mask_key(P, c)`` walks the subterminal trees of scanner state ``c``'s
readings, feeding the parser the terminals along each path. In Python that builds
some fifty Earley sets per new token (``earley.PState``); here the same sets live
in flat arrays (``kernels.earley_*``) and one kernel call does the whole walk.

The sets are those of ``earley.Grammar``, from the same LR(0) ε-DFA, explored in
full up front (a few hundred states for the shipped grammars; larger generated
grammars keep the Python path). A ``PState`` is copied into the arena the first
time a mask needs it, its origin sets first; arena sets are interned by content
with origins by arena id, so a ``PState`` and the arena set made by feeding the
same terminals are one set (where ``Grammar._project`` cut none of its origins); both
take Leo's deterministic reductions (``arena_kernels._leo_origin``). Tokens that a
tree leaves unresolved (checked one by one against the parser) send the mask to the
Python path.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import arena_kernels, masks_kernels
from .arena_kernels import (
    AR_AFTER, AR_FEED_KEYS, AR_FEED_SETS, AR_FINISH, AR_META, AR_SCRATCH, AR_SET_HASH, AR_SET_KEYS, AR_SET_OFF,
    DF_ALLOWED, META_KEYS, META_SETS, META_INITIAL,
)
from ..distance import UNREACHABLE
from ..runtime.numba_tools import read_only
from .earley import int_words

MAX_RULES = 10_000
MAX_DSTATES = 20_000
# The budget tables are sparse (``budget_kernels``): a set holds a finish length per nonterminal
# it waits on, and the after memo an entry per (set, terminal) asked; ``budget_bytes`` counts
# them against the index's cache bound.
FINISH_ROWS = 1 << 13  # the finish pool's first size (rows of 16 bytes), doubled when full
AFTER_SLOTS = 1 << 12  # the after memo's first size (a power of two), doubled when half full
# The seed: arena sets made at compile time from the initial set, breadth first, and kept
# in the cache file, so that the first masks of a loaded index (the start of every text,
# where closures are largest) find their sets made.
SEED_SETS = 1024
SEED_FEEDS = 16_384
SEED_KEYS = ("ar_set_off", "ar_set_keys", "ar_feed_keys", "ar_feed_sets")


class Walk(NamedTuple):
    """What ``CompiledMasks.walk`` gives for a list of configurations (None: the Python path answers)."""

    keys: list  # each configuration's mask key (``MaskEngine.mask_key``), or None
    bounds: list | None  # each one's ``GrammarIndex.budget_bound`` (with ``bounds``), or None
    union: bytes | None  # the keys' union, the guide state's mask key
    costs: list | None  # ``GrammarIndex.budget_info``'s sorted (bound, group) pairs (with ``costs``)


def budget_tables(grammar, completer, scanner) -> tuple:
    """``budget_kernels.earley_after`` and ``earley_visit_bound``'s tables (lengths of ``completer``'s bytes)."""
    g, comp = grammar, completer
    nt = g.n_terminals
    tables = g.dfa_tables()  # (arrays: making every state's ``DState`` would leave an object per state)
    is_pred = tables["dfa_is_pred"].tolist()
    dc_off, dc_t, dc_lhs, dc_len = [0], [], [], []
    for d in range(len(is_pred)):
        if not is_pred[d]:
            for t, rows in sorted(comp.dcost(d).items()):
                for lhs, w in rows:
                    dc_t.append(t)
                    dc_lhs.append(lhs)
                    dc_len.append(len(w))
        dc_off.append(len(dc_t))
    sfx, sx_off, sx_t, sx_len = [], [0], [], []
    for c in range(scanner.n_states):
        ends = comp.lexeme_suffix(c)
        sfx.append(max((len(w) for _, w in ends), default=0))
        for t, w in ends:
            sx_t.append(t)
            sx_len.append(len(w))
        sx_off.append(len(sx_t))

    def a(x):
        return np.array(x, np.int64)

    return (a(tables["dfa_items_off"]), a(tables["dfa_items"]), a(g.next_sym), a(g.item_lhs),
            a([len(w) for w in comp.rest_of]), np.array(is_pred, np.uint8), (a(dc_off), a(dc_t), a(dc_lhs), a(dc_len)),
            a([len(comp.best[t]) for t in range(nt)]), a(sfx), a([comp.start_lhs, nt]), (a(sx_off), a(sx_t), a(sx_len)))


def seed_arrays(grammar) -> dict:
    """``SEED_KEYS``: the seed of ``grammar``'s arena (``arena_kernels.earley_seed``), empty arrays
    for no grammar or one the compiled path does not take."""
    empty = {"ar_set_off": np.zeros(1, np.int64), "ar_set_keys": np.zeros(0, np.int64),
             "ar_feed_keys": np.zeros(0, np.int64), "ar_feed_sets": np.zeros(0, np.int64)}
    if grammar is None or grammar.n_rules > MAX_RULES or not grammar.explore(MAX_DSTATES):
        return empty
    D = _dfa_tables(grammar)
    n = 2 * SEED_SETS
    A = _new_arena(n, D[DF_ALLOWED].shape[1], 4 * SEED_FEEDS, CompiledMasks.scratch)  # room for the seed
    keys = np.array(sorted(d << 32 for d, _ in grammar.initial.entries), np.int64)  # no origins: all 0
    arena_kernels.earley_seed(A, D, arena_kernels.earley_intern(A, D, keys, len(keys)), SEED_SETS, SEED_FEEDS)
    meta, set_off, set_keys, fk, fv = (A[AR_META], A[AR_SET_OFF], A[AR_SET_KEYS], A[AR_FEED_KEYS],
                                         A[AR_FEED_SETS])
    ns, nk = int(meta[META_SETS]), int(meta[META_KEYS])
    used = fk != 0
    return {"ar_set_off": set_off[:ns + 1].copy(), "ar_set_keys": set_keys[:nk].copy(),
            "ar_feed_keys": fk[used], "ar_feed_sets": fv[used]}


def _dfa_tables(grammar) -> tuple:
    """``D`` of the kernels: ``grammar``'s explored ε-DFA as read-only arrays."""
    t = {k: read_only(v) for k, v in grammar.dfa_tables().items()}
    w = t["dfa_allowed"].shape[1]
    return (t["dfa_allowed"], t["dfa_pred"], t["dfa_comp_off"], t["dfa_comp"], t["dfa_sh_off"], t["dfa_sh_sym"],
            t["dfa_sh_to"], int_words(grammar.ignore_mask, w), *(read_only(x) for x in grammar.leo_tables()))


def _new_arena(n: int, n_words: int, f: int, scratch: int) -> tuple:
    """Empty arena tables (``A`` of the kernels) for ``n`` sets (a power of two) and a feed table
    of ``f`` slots (a power of two, kept at most half full), without the finish tables of
    budget bounds (``AR_FINISH`` to ``AR_AFTER``, one row each)."""
    meta = np.array([0, 0, 0, -1], np.int64)  # sets, entry keys, feeds, the initial set (-1: not in yet)
    return (meta, np.zeros(n + 1, np.int64), np.zeros(8 * n, np.int64), np.zeros((n, n_words), np.uint64),
            np.zeros(n, np.uint64), np.zeros(4 * n, np.int64), np.zeros(f, np.int64), np.zeros(f, np.int64),
            np.zeros((1, 1), np.int64), np.zeros(1, np.int64), np.zeros((1, 1), np.int64),
            np.zeros(4 * scratch, np.int64))


_z = np.zeros(1, np.int64)
_NO_BUDGET = (_z, _z, _z, _z, _z, np.zeros(1, np.uint8), (_z, _z, _z, _z), _z, _z, np.array([0, 0], np.int64),
              (_z, _z, _z))
_NO_COSTS = np.zeros(0, np.int64)
_NO_FEEDS = np.zeros(0, np.int64)
_warmed = False


def _warm(core: "CompiledMasks") -> None:
    """Load the kernels a first pass may need later (a grown arena) once per process, now:
    loading one from numba's cache takes milliseconds, too much for one mask."""
    global _warmed
    if not _warmed:
        set_hash, ht, fk, fv = core.A[AR_SET_HASH:AR_FEED_SETS + 1]
        arena_kernels.earley_rehash(0, set_hash, np.zeros_like(ht), np.zeros_like(fk), np.zeros_like(fv), fk, fv)
        _warmed = True


_ACC_KNOWN, _ACC_YES = masks_kernels.ACC_KNOWN, masks_kernels.ACC_YES


def _accept_states(grammar) -> np.ndarray:
    """One flag per state of ``grammar``'s explored ε-DFA: it holds the completed start item."""
    t = grammar.dfa_tables()
    off, items = t["dfa_items_off"], t["dfa_items"]
    out = np.zeros(len(off) - 1, np.uint8)
    out[np.searchsorted(off, np.flatnonzero(items == grammar.accept_item), side="right") - 1] = 1
    return out


def _flat(tables) -> list:
    out = []
    for x in tables:
        out += _flat(x) if isinstance(x, tuple) else [x]
    return out


def kernel_context(A, D, T, B, S) -> tuple:
    """(``arena_kernels.CTX_SPEC``'s context of the tables, the arrays it points into): a read-only
    table that does not match its slot is copied to one that does, and the copy held there; an
    arena array (which the kernels write) must match."""
    arrays = _flat((A, D, T, B, S))
    if len(arrays) != len(arena_kernels.CTX_SPEC):
        raise ValueError(f"{len(arrays)} tables for a kernel context of {len(arena_kernels.CTX_SPEC)}")
    ctx = np.zeros(3 * len(arrays), np.int64)
    for i, (a, (code, ndim)) in enumerate(zip(arrays, arena_kernels.CTX_SPEC)):
        dt = arena_kernels.CTX_DTYPES[code]
        if a.ndim != ndim:
            raise ValueError(f"table {i} of a kernel context has {a.ndim} dimensions, not {ndim}")
        if a.dtype != dt or not a.flags.c_contiguous:
            if i < arena_kernels.CTX_ARENA:
                raise ValueError(f"arena array {i} is {a.dtype}, not {np.dtype(dt)} (C-contiguous)")
            a = arrays[i] = np.ascontiguousarray(a, dt)
        ctx[3 * i] = a.ctypes.data
        ctx[3 * i + 1:3 * i + 1 + ndim] = a.shape
    return ctx, arrays


def _longer(a: np.ndarray, n: int, used: int) -> np.ndarray:
    """The first ``used`` rows of ``a`` followed by zeros, ``n`` rows in all (the rows past
    ``used`` are zeros: fresh memory is slow to touch the first time, about 2 µs a page on a VM)."""
    out = np.zeros((n,) + a.shape[1:], a.dtype)
    out[:used] = a[:used]
    return out


class CompiledMasks:
    """The compiled ``mask_key`` of one grammar index (not thread-safe, as the index)."""

    # Arena capacity to start with (a power of two), doubled as needed (growing copies it all,
    # a millisecond or more once it holds thousands of sets). Not larger: the hash tables are
    # touched at random, and larger ones (2 MB at 8,192 sets) slow every first-pass mask.
    initial_sets = 2048
    scratch = arena_kernels.SCRATCH  # entries of each scratch area of ``arena_kernels._earley_make`` (a power of two)

    def __init__(self, grammar, engine, tables, seed: dict | None = None):
        self.grammar = grammar
        self.seed = seed if seed is not None and len(seed["ar_set_off"]) > 1 else None
        self.engine = engine
        self.D = tables
        self.n_words = tables[DF_ALLOWED].shape[1]
        self.ign = engine.ign
        sc = engine.scanner
        self.live_w = read_only(sc.live_w)
        self.readings = (sc.tree_of.astype(np.int64), sc.tree_lim.astype(np.int64), sc.r_term.astype(np.int64),
                         sc.r_acc.astype(np.uint8), sc.r_base.astype(np.int64))
        self.S = (sc.st_off, sc.st_rd, _accept_states(grammar))  # each scanner state's readings; the accepting DFA states
        self._T = None
        self._T_version = -1
        self.last = ((), None)  # the last key made and its array: ``MaskEngine.bits_of`` takes it next
        self._gmarks = np.zeros(0, np.uint8)
        self._gcost = np.zeros(0, np.int64)  # scratch of ``masks_kernels.earley_masks``: all UNREACHABLE
        self.n_nt = grammar.n_nonterminals
        self.B = _NO_BUDGET
        self.budget = False  # whether budget bounds come from here (``enable_budget``)
        self._ctx = (None, None)  # (what ``kernel_context`` was made of, it)
        # ``_args_one``'s kernel arguments, filled in place (no new array per mask)
        self._held = np.array([0, 0, 0], np.int64)
        self._fed = np.array([0, 0, 0, 1, -2, 0], np.int64)
        self.reset()
        _warm(self)

    @classmethod
    def build(cls, grammar, engine, seed: dict | None = None) -> "CompiledMasks | None":
        """The compiled path for ``grammar``, or None when its ε-DFA is too large to explore up front;
        its arena starts from ``seed`` (``seed_arrays``, from the cache file) when it is one."""
        if grammar.n_rules > MAX_RULES or not grammar.explore(MAX_DSTATES):
            return None
        return cls(grammar, engine, _dfa_tables(grammar), seed)

    # -- the arena ---------------------------------------------------------------------
    def reset(self) -> None:
        """Forget every arena set but the seed's (with ``Grammar.flush``: parser states are copied in again)."""
        self._aid: dict = {}  # PState uid -> arena id
        n = self.initial_sets
        seed = self.seed
        while seed is not None and (n < 2 * len(seed["ar_set_off"]) or 8 * n < len(seed["ar_set_keys"])
                                    or 4 * n < len(seed["ar_feed_keys"]) + 1):
            n *= 2
        A = _new_arena(n, self.n_words, 8 * n, self.scratch)
        self.A = A[:AR_FINISH] + self._finish_arrays(n) + A[AR_SCRATCH:]
        if seed is not None and not arena_kernels.earley_restore(self.A, self.D, *(seed[k] for k in SEED_KEYS)):
            self.seed = None  # a damaged cache file: start empty
            self.reset()

    def _finish_arrays(self, n: int) -> tuple:
        """The budget's sparse tables (``budget_kernels``): the finish pool, where each of ``2 n``
        sets has its rows (twice the arena's capacity: copied at every other growth of the
        arena only), the after memo; stubs when budget bounds are not computed here."""
        if not self.budget:
            return np.zeros((1, 2), np.int64), np.zeros(1, np.int64), np.zeros((2, 2), np.int64)
        fin = np.zeros((FINISH_ROWS, 2), np.int64)
        fin[0, 0] = 1  # (row 0: rows used, full flag)
        return fin, np.zeros(2 * n, np.int64), np.zeros((1 + AFTER_SLOTS, 2), np.int64)

    def _budget_room(self) -> bool:
        """After a walk: grow the finish pool if the walk found it full (True: walk again, its
        figures may be wrong) and the after memo if it is half full (its entries are dropped)."""
        meta, set_off, set_keys, set_allowed, set_hash, ht, fk, fv, fin, done, aft, scratch = self.A
        again = bool(fin[0, 1])
        if again:
            fin = _longer(fin, 2 * len(fin), int(fin[0, 0]))
            fin[0, 1] = 0
        if 2 * (int(aft[0, 0]) + 1) > len(aft) - 1:
            aft = np.zeros((1 + 2 * (len(aft) - 1), 2), np.int64)
        elif not again:
            return False
        self.A = (meta, set_off, set_keys, set_allowed, set_hash, ht, fk, fv, fin, done, aft, scratch)
        return again

    def enable_budget(self, completer) -> bool:
        """Compute budget bounds here from now on (``budget_tables``); False where they cannot be."""
        if not self.budget:
            if not completer.bytewise:
                return False
            self.B = budget_tables(self.grammar, completer, self.engine.scanner)
            self.budget = True
            self.A = (self.A[:AR_FINISH] + self._finish_arrays(len(self.A[AR_SET_OFF]) - 1)
                      + self.A[AR_SCRATCH:])
        return True

    @property
    def n_sets(self) -> int:
        return int(self.A[AR_META][META_SETS])

    @property
    def budget_bytes(self) -> int:
        """Bytes of the budget tables (the finish rows made, the after memo, where each set's rows
        are): counted against the index's cache bound."""
        if not self.budget:
            return 0
        fin, aft = self.A[AR_FINISH], self.A[AR_AFTER]
        return int(fin[0, 0]) * fin.itemsize * 2 + aft.nbytes + 8 * self.n_sets

    def _grow(self) -> None:
        """Double what is at least half full (the entry keys when nothing else is); rehash."""
        meta, set_off, set_keys, set_allowed, set_hash, ht, fk, fv, fin, fin_done, aft, scratch = self.A
        ns, nk, nf = meta.tolist()[:3]
        sets_full = 2 * (ns + 2) > len(set_off)
        feeds_full = 4 * (nf + 1) > len(fk)
        if sets_full:  # (rows past the sets made so far are zeros: not copied)
            cap = 2 * (len(set_off) - 1)
            set_off = _longer(set_off, cap + 1, ns + 1)
            set_allowed = _longer(set_allowed, cap, ns)
            set_hash = _longer(set_hash, cap, ns)
            if self.budget and cap > len(fin_done):
                fin_done = _longer(fin_done, 2 * cap, ns)
        if 2 * nk > len(set_keys) or not (sets_full or feeds_full):
            set_keys = _longer(set_keys, 2 * len(set_keys), nk)
        # Only the tables that grew are made again (fresh memory is slow to touch at first).
        if sets_full:
            ht = np.zeros(4 * (len(set_off) - 1), np.int64)
            arena_kernels.earley_rehash(ns, set_hash, ht, fk, fv, _NO_FEEDS, _NO_FEEDS)
        if feeds_full:
            fk2, fv2 = np.zeros(2 * len(fk), np.int64), np.zeros(2 * len(fk), np.int64)
            arena_kernels.earley_rehash(0, set_hash, ht, fk2, fv2, fk, fv)
            fk, fv = fk2, fv2
        self.A = (meta, set_off, set_keys, set_allowed, set_hash, ht, fk, fv, fin, fin_done, aft, scratch)

    # -- masks ---------------------------------------------------------------------------
    def _trees(self) -> tuple:
        eng = self.engine
        if self._T_version != eng.version:
            with eng._install_lock:
                n_nodes, n_edges, n_grp = eng.n_nodes, eng.n_edges, eng.n_grp
                # The roots are copied with the lengths: a tree that another thread installs
                # later must not show through before its arrays do.
                # read-only views, loaded or built (one type each for numba)
                self._T = (*(read_only(x) for x in (eng.a_ch_off[:n_nodes + 1], eng.a_ch_term[:n_edges],
                                                    eng.a_ch_node[:n_edges], eng.a_node_grp[:n_nodes + 1],
                                                    eng.a_grp_state[:n_grp], eng.a_grp_lead[:n_grp])), self.live_w,
                           eng.a_root.copy(), *self.readings, eng.a_unres.copy())
                self._T_version = eng.version
                if len(self._gmarks) < n_grp:
                    self._gmarks = np.zeros(2 * n_grp, np.uint8)
        return self._T

    def mask_key(self, p, c: int) -> bytes | None:
        """``MaskEngine.mask_key(p, c)`` computed in the arena; None: ask the Python path."""
        return self.walk([(p, c)]).keys[0]

    def walk(self, configs, bounds: bool = False, costs: bool = False) -> Walk:
        """The mask keys of the (parser state, scanner state) pairs ``configs`` and their union,
        in one kernel call that also copies in the parser states the arena lacks (origins first)
        and records on each parser state whether a lexeme ending there completes a sentence
        (``PState.ends``, read by ``GrammarIndex.accepting``).

        With ``bounds`` (after ``enable_budget``) also their budget bounds, and with ``costs``
        the groups' costs. A configuration whose trees leave tokens unresolved has no key or
        bound, and then the union and costs are None too.
        """
        aid = self._aid
        initial = self.grammar.initial if self.A[AR_META][META_INITIAL] < 0 else None  # (acceptance reads its arena id)
        got = self._args_one(configs[0]) if len(configs) == 1 and initial is None else None
        if got is None:
            new, flat, n_x, init_ref = self._args(configs, initial)
        else:
            new, flat, n_x = got
            init_ref = -1
        n_cfg, n_new = len(configs), len(new)
        while True:
            T = self._trees()
            gcost = _NO_COSTS
            if costs:
                if len(self._gcost) < len(self._gmarks):
                    self._gcost = np.full(len(self._gmarks), UNREACHABLE, np.int64)
                gcost = self._gcost
            out = masks_kernels.earley_masks(self._context(T), flat, n_x, n_new, n_cfg, init_ref, self.ign, self._gmarks,
                                       bounds, gcost)
            head = out[:3 + n_new + 2 * n_cfg].tolist()  # (one conversion for all, not one per value)
            status, n_u, n_c = head[:3]
            if self.budget and self._budget_room() and status == 0:
                # The finish pool was full, so the bounds and costs may be wrong: walk again, with
                # the parser states the walk copied in now held by the arena.
                for q, a in zip(new, head[3:3 + n_new]):
                    aid[q.uid] = a
                initial = self.grammar.initial if self.A[AR_META][META_INITIAL] < 0 else None
                new, flat, n_x, init_ref = self._args(configs, initial)
                n_new = len(new)
                continue
            if status == 0:
                break
            if status == arena_kernels.EARLEY_GROW:
                self._grow()
            elif status == arena_kernels.EARLEY_REJECT:  # (never, while the arena follows the parser): copy them in
                new, flat, n_x, init_ref = self._args(configs, initial, via_feed=False)
                n_new = len(new)
            else:
                self.engine.root(arena_kernels.EARLEY_NEED_TREE - status)
        k = 3 + n_new
        if new:
            for q, a in zip(new, head[3:k]):
                aid[q.uid] = a
        fl = head[k:k + n_cfg]
        for (p, c), f in zip(configs, fl):
            if f & _ACC_KNOWN:
                p.ends[c] = bool(f & _ACC_YES)
        if n_cfg == 1 and not costs:
            # the usual case: one configuration, whose key is the union
            b = head[k + 1]
            if fl[0] & 1:
                return Walk([None], [None] if bounds else None, None, None)
            union = out[len(out) - n_u:]
            key = union.tobytes()
            self.last = (key, union)
            return Walk([key], [b] if bounds else None, key, None)
        bnd = out[k + n_cfg:k + 2 * n_cfg].tolist()
        off = out[k + 2 * n_cfg:k + 3 * n_cfg + 1].tolist()
        k += 3 * n_cfg + 1
        end = len(out) - n_c
        union = out[end - n_u:end]
        groups = union if n_cfg == 1 else out[k:k + off[-1]]
        un = [f & 1 for f in fl]
        keys = [None if un[i] else groups[off[i]:off[i + 1]].tobytes() for i in range(n_cfg)]
        whole = not any(un)
        return Walk(keys,
                    [None if un[i] else b for i, b in enumerate(bnd)] if bounds else None,
                    union.tobytes() if whole else None,
                    sorted(zip(out[end:].tolist(), union.tolist())) if costs and whole else None)

    def _args_one(self, config, via_feed: bool = True) -> tuple | None:
        """``_args`` of one configuration (less ``init_ref``) whose parser state, the state it was fed
        from, or else all of its origins, the arena holds (the usual case: the state the last
        token made); None otherwise. Its arrays are filled in place.

        A parser state made by feeding a terminal to one the arena holds is made there the same
        way (``PState.src``): the walk before has often made that set already, and sets fed from
        it, where a copy of the state's entries is a new set (``Grammar._project`` cuts origins
        the arena keeps) whose every feed is new."""
        aid = self._aid
        p, c = config
        a = aid.get(p.uid)
        if a is not None:
            args = self._held
            args[1] = a
            args[2] = c
            return (), args, 0
        src = p.src
        if src is not None and via_feed:
            a = aid.get(src[0])
            if a is not None:
                args = self._fed
                args[0] = -1 - src[1]
                args[1] = a
                args[5] = c
                return (p,), args, 1
        ents = p.entries
        refs = []
        for _, o in ents:
            if o is None:
                refs.append(-1)
                continue
            r = aid.get(o.uid)
            if r is None:
                return None
            refs.append(r)
        return (p,), np.array([d for d, _ in ents] + refs + [0, len(ents), -2, c], np.int64), len(ents)

    def _args(self, configs, initial, via_feed: bool = True) -> tuple:
        """(the parser states to copy in, origins first; the kernel's arguments in one array: their
        entries' DFA states, their references, offsets, the configurations' sets and scanner
        states; the entry count; the reference of ``initial``, or -1). A state made by a feed from
        one the arena holds or one made before it here (``PState.src``) is made by that feed
        (``_args_one``)."""
        aid = self._aid
        new: list = []
        pos: dict = {}  # uid -> index in ``new``
        fed: dict = {}  # uid -> (arena id of the state fed, terminal)
        for p in [p for p, _ in configs] + ([initial] if initial is not None else []):
            if p.uid in aid:
                continue
            stack = [p]
            while stack:
                q = stack[-1]
                if q.uid in aid or q.uid in pos:
                    stack.pop()
                    continue
                src = q.src if via_feed else None
                parent = None
                if src is not None:
                    parent = aid.get(src[0])
                    if parent is None and src[0] in pos:
                        parent = -2 - pos[src[0]]
                if parent is not None:
                    fed[q.uid] = (parent, src[1])
                    pos[q.uid] = len(new)
                    new.append(q)
                    stack.pop()
                    continue
                missing = [o for _, o in q.entries if o is not None and o.uid not in aid and o.uid not in pos]
                if missing:
                    stack += missing
                    continue
                pos[q.uid] = len(new)
                new.append(q)
                stack.pop()

        def ref(q) -> int:
            a = aid.get(q.uid)
            return a if a is not None else -2 - pos[q.uid]

        x_d, x_ref, x_off = [], [], [0]
        for q in new:
            f = fed.get(q.uid)
            if f is not None:
                x_d.append(-1 - f[1])
                x_ref.append(f[0])
            else:
                for d, o in q.entries:
                    x_d.append(d)
                    x_ref.append(-1 if o is None else ref(o))
            x_off.append(len(x_d))
        flat = np.array(x_d + x_ref + x_off + [ref(p) for p, _ in configs] + [c for _, c in configs], np.int64)
        return new, flat, len(x_d), -1 if initial is None else ref(initial)

    def _context(self, T) -> np.ndarray:
        """The kernel context of the arena and tables now (made again when one was replaced)."""
        src, ctx = self._ctx
        if src is None or src[0] is not self.A or src[1] is not T or src[2] is not self.B:
            src = (self.A, T, self.B)
            ctx, held = kernel_context(self.A, self.D, T, self.B, self.S)
            self._ctx = ((*src, held), ctx)  # the arrays stay alive while the context is in use
        return ctx
