"""Grammar kernels: the Earley arena (interned Earley sets and memoized feeds) and the kernel context."""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from ..runtime.numba_tools import _bare, _grow, _sort_ints, _voidptr

# --- grammar masks: Earley sets and the tree walk, compiled ----------------------
#
# The twin of this section is the Python mask path itself (``MaskEngine`` with its
# ``PState``s): tests compare the groups both keep, state by state.
#
# ``A`` is an arena of interned Earley sets, grown by the caller when a kernel says
# ``EARLEY_GROW``: (meta [sets, entry keys, feed entries], set_off, set_keys (each set's
# entry keys, sorted: DFA state << 32 | origin set + 1, 0 for the set itself),
# set_allowed (terminal bit words), set_hash, ht (open addressing: set + 1), fk/fv
# (memoized feeds: set * n_terminals + terminal + 1 -> set, EARLEY_REJECT)).
# ``D`` is the LR(0) epsilon-DFA (``earley.Grammar``): allowed words, predicted
# companion, completed nonterminals (CSR), shifts (CSR, sorted by symbol), ignored words,
# left-hand sides (CSR), the nonterminal a state only passes on.
# ``T`` holds the subterminal trees (``masks``) and the readings' tables.

# Unmanaged views. The kernels below pass the arena and tables as tuples of arrays; numba
# counts references to every array a helper takes out of them, with an atomic add and a
# call to release each, where its pruning pass cannot prove them balanced (helpers with
# early returns), a large share of the time of a new set (``earley_feed``). The entry kernels
# take views without a reference count (``_bare``, or a context below) of arrays that their
# caller holds for the whole call, and never return them or views of them.


# The tables the kernels take, as tuples of arrays; a name for each slot.
# ``A``, the arena: meta ([sets, entry keys, feed entries, the initial set or -1]), set_off,
# set_keys (each set's entry keys, sorted: DFA state << 32 | origin set + 1, 0 for the set
# itself), set_allowed (terminal bit words), set_hash, ht (open addressing: set + 1), fk/fv
# (memoized feeds: set * n_terminals + terminal + 1 -> set, EARLEY_REJECT), the budget's
# sparse tables (``budget_kernels``: finish rows, where each set's are, the after memo) and the
# scratch of ``_earley_make``.
(AR_META, AR_SET_OFF, AR_SET_KEYS, AR_SET_ALLOWED, AR_SET_HASH, AR_HT, AR_FEED_KEYS, AR_FEED_SETS, AR_FINISH,
 AR_FINISH_DONE, AR_AFTER, AR_SCRATCH) = range(12)
(META_SETS, META_KEYS, META_FEEDS, META_INITIAL) = range(4)  # AR_META's entries
# ``D``, the LR(0) epsilon-DFA (``earley.Grammar``): allowed words, predicted companion,
# completed nonterminals (CSR), shifts (CSR, sorted by symbol), ignored words, the items'
# left-hand sides (CSR), the one nonterminal each state only passes on or -1
# (``earley.Grammar.leo_tables``).
(DF_ALLOWED, DF_PRED, DF_COMP_OFF, DF_COMP, DF_SH_OFF, DF_SH_SYM, DF_SH_TO, DF_IGNORED, DF_LHS_OFF, DF_LHS,
 DF_PASS) = range(11)
# ``T``, the subterminal trees (``masks``: children CSR, each node's groups, each group's
# scanner state and lead token, live words, tree roots) and the readings' tables.
(TR_CH_OFF, TR_CH_TERM, TR_CH_NODE, TR_NODE_GRP, TR_GRP_STATE, TR_GRP_LEAD, TR_LIVE_W, TR_TREE_ROOT,
 TR_TREE_OF, TR_TREE_LIM, TR_R_TERM, TR_R_ACC, TR_R_BASE, TR_HAS_UNRES) = range(14)
# ``B``, budget bounds (``budget_kernels``); BG_DCOST and BG_LEXEME_ENDS are tuples (CSR).
(BG_IT_OFF, BG_ITEMS, BG_NEXT_SYM, BG_ITEM_LHS, BG_REST_LEN, BG_IS_PRED, BG_DCOST, BG_BEST_LEN, BG_SUFFIX,
 BG_PARAMS, BG_LEXEME_ENDS) = range(11)
# ``S``, the scanner states' readings (CSR) and which DFA states hold the completed start item.
(SC_ST_OFF, SC_ST_RD, SC_ACCEPT) = range(3)


@njit(cache=True, inline="always")
def _bare_arena(A):
    return (_bare(A[AR_META]), _bare(A[AR_SET_OFF]), _bare(A[AR_SET_KEYS]), _bare(A[AR_SET_ALLOWED]),
            _bare(A[AR_SET_HASH]), _bare(A[AR_HT]), _bare(A[AR_FEED_KEYS]), _bare(A[AR_FEED_SETS]),
            _bare(A[AR_FINISH]), _bare(A[AR_FINISH_DONE]), _bare(A[AR_AFTER]), _bare(A[AR_SCRATCH]))


@njit(cache=True, inline="always")
def _bare_dfa(D):
    return (_bare(D[DF_ALLOWED]), _bare(D[DF_PRED]), _bare(D[DF_COMP_OFF]), _bare(D[DF_COMP]), _bare(D[DF_SH_OFF]),
            _bare(D[DF_SH_SYM]), _bare(D[DF_SH_TO]), _bare(D[DF_IGNORED]), _bare(D[DF_LHS_OFF]), _bare(D[DF_LHS]),
            _bare(D[DF_PASS]))


# A context: the arrays of ``A``, ``D``, ``T``, ``B`` and ``S`` (the scanner states'
# readings, CSR, and which DFA states hold the completed start item) in that order (nested
# tuples flattened), each as three int64s (address, rows, columns), in one array that
# ``arena.CompiledMasks`` makes again when one of them changes. Passing it instead of the
# tuples saves numba's unboxing of some fifty arrays per call (4 µs of a mask). Its arrays
# must be C-contiguous, of the dtypes and dimensions of ``CTX_SPEC``, and held by the caller.
CTX_SPEC = (
    ("i8", 1), ("i8", 1), ("i8", 1), ("u8", 2), ("u8", 1), ("i8", 1), ("i8", 1), ("i8", 1),  # A
    ("i8", 2), ("i8", 1), ("i8", 2), ("i8", 1),
    ("u8", 2), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("u8", 1),  # D
    ("i8", 1), ("i8", 1), ("i8", 1),
    ("i8", 1), ("i4", 1), ("i4", 1), ("i8", 1), ("i4", 1), ("i4", 1), ("u8", 2), ("i8", 1),  # T
    ("i8", 1), ("i8", 1), ("i8", 1), ("b", 1), ("i8", 1), ("b", 1),
    ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("b", 1), ("i8", 1), ("i8", 1),  # B
    ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1),
    ("i8", 1), ("i4", 1), ("b", 1))  # S
CTX_DTYPES = {"i8": np.int64, "u8": np.uint64, "i4": np.int32, "b": np.uint8}
CTX_A, CTX_D, CTX_T, CTX_B, CTX_S = 0, 12, 23, 37, 53  # where each table's slots start (B's tuples flattened)
CTX_ARENA = CTX_D  # the first slots: the arena, written by the kernels


@njit(cache=True, inline="always")
def _c1(ctx, i, dt):
    return carray(_voidptr(ctx[3 * i]), (ctx[3 * i + 1],), dt)


@njit(cache=True, inline="always")
def _c2(ctx, i, dt):
    return carray(_voidptr(ctx[3 * i]), (ctx[3 * i + 1], ctx[3 * i + 2]), dt)


@njit(cache=True, inline="always")
def _ctx_tables(ctx):
    """(A, D, T, B, S) of a context (``CTX_SPEC``), as views without reference counting.

    Inlined, so that the caller sees the views hold no reference (as a call, every use of them
    counts references, which makes the first masks slow). numba inlines by copying IR and
    analysing the caller again at each call site: call it in few places (``earley_masks`` and
    ``earley_mask_groups``), and give a callee on the hot path the context, not the views."""
    i8, u8, i4, b = np.int64, np.uint64, np.int32, np.uint8
    A = (_c1(ctx, CTX_A + AR_META, i8), _c1(ctx, CTX_A + AR_SET_OFF, i8), _c1(ctx, CTX_A + AR_SET_KEYS, i8),
         _c2(ctx, CTX_A + AR_SET_ALLOWED, u8), _c1(ctx, CTX_A + AR_SET_HASH, u8), _c1(ctx, CTX_A + AR_HT, i8),
         _c1(ctx, CTX_A + AR_FEED_KEYS, i8), _c1(ctx, CTX_A + AR_FEED_SETS, i8), _c2(ctx, CTX_A + AR_FINISH, i8),
         _c1(ctx, CTX_A + AR_FINISH_DONE, i8), _c2(ctx, CTX_A + AR_AFTER, i8), _c1(ctx, CTX_A + AR_SCRATCH, i8))
    D = (_c2(ctx, CTX_D + DF_ALLOWED, u8), _c1(ctx, CTX_D + DF_PRED, i8), _c1(ctx, CTX_D + DF_COMP_OFF, i8),
         _c1(ctx, CTX_D + DF_COMP, i8), _c1(ctx, CTX_D + DF_SH_OFF, i8), _c1(ctx, CTX_D + DF_SH_SYM, i8),
         _c1(ctx, CTX_D + DF_SH_TO, i8), _c1(ctx, CTX_D + DF_IGNORED, u8), _c1(ctx, CTX_D + DF_LHS_OFF, i8),
         _c1(ctx, CTX_D + DF_LHS, i8), _c1(ctx, CTX_D + DF_PASS, i8))
    T = (_c1(ctx, CTX_T + TR_CH_OFF, i8), _c1(ctx, CTX_T + TR_CH_TERM, i4), _c1(ctx, CTX_T + TR_CH_NODE, i4),
         _c1(ctx, CTX_T + TR_NODE_GRP, i8), _c1(ctx, CTX_T + TR_GRP_STATE, i4), _c1(ctx, CTX_T + TR_GRP_LEAD, i4),
         _c2(ctx, CTX_T + TR_LIVE_W, u8), _c1(ctx, CTX_T + TR_TREE_ROOT, i8), _c1(ctx, CTX_T + TR_TREE_OF, i8),
         _c1(ctx, CTX_T + TR_TREE_LIM, i8), _c1(ctx, CTX_T + TR_R_TERM, i8), _c1(ctx, CTX_T + TR_R_ACC, b),
         _c1(ctx, CTX_T + TR_R_BASE, i8), _c1(ctx, CTX_T + TR_HAS_UNRES, b))
    # BG_DCOST holds four arrays, so the slots after it sit three further on in the context.
    dc, after = CTX_B + BG_DCOST, CTX_B + 3
    B = (_c1(ctx, CTX_B + BG_IT_OFF, i8), _c1(ctx, CTX_B + BG_ITEMS, i8), _c1(ctx, CTX_B + BG_NEXT_SYM, i8),
         _c1(ctx, CTX_B + BG_ITEM_LHS, i8), _c1(ctx, CTX_B + BG_REST_LEN, i8), _c1(ctx, CTX_B + BG_IS_PRED, b),
         (_c1(ctx, dc, i8), _c1(ctx, dc + 1, i8), _c1(ctx, dc + 2, i8), _c1(ctx, dc + 3, i8)),
         _c1(ctx, after + BG_BEST_LEN, i8), _c1(ctx, after + BG_SUFFIX, i8), _c1(ctx, after + BG_PARAMS, i8),
         (_c1(ctx, after + BG_LEXEME_ENDS, i8), _c1(ctx, after + BG_LEXEME_ENDS + 1, i8),
          _c1(ctx, after + BG_LEXEME_ENDS + 2, i8)))
    S = (_c1(ctx, CTX_S + SC_ST_OFF, i8), _c1(ctx, CTX_S + SC_ST_RD, i4), _c1(ctx, CTX_S + SC_ACCEPT, b))
    return A, D, T, B, S


EARLEY_REJECT = -1
EARLEY_GROW = -2
EARLEY_UNRESOLVED = -3  # a tree has tokens to check one by one: the Python path answers
EARLEY_NEED_TREE = -4  # minus the tree: build that tree and call again


@njit(cache=True, inline="always")
def _shift_to(sh_off, sh_sym, sh_to, d, sym):
    lo = sh_off[d]
    hi = sh_off[d + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        s = sh_sym[mid]
        if s < sym:
            lo = mid + 1
        elif s > sym:
            hi = mid
        else:
            return sh_to[mid]
    return -1


@njit(cache=True, inline="always")
def _keys_hash(keys, n):
    h = np.uint64(14695981039346656037)
    for i in range(n):
        h = (h ^ np.uint64(keys[i])) * np.uint64(1099511628211)
    return h


@njit(cache=True, inline="always")
def earley_intern(A, D, keys, n):
    """The arena id of the set whose sorted entry keys are ``keys[:n]``: found, or added.

    ``EARLEY_GROW`` when there is no room to add it.
    """
    meta, set_off, set_keys, set_allowed, set_hash, ht = A[AR_META], A[AR_SET_OFF], A[AR_SET_KEYS], A[AR_SET_ALLOWED], A[AR_SET_HASH], A[AR_HT]
    h = _keys_hash(keys, n)
    mask = len(ht) - 1
    i = np.int64(h & np.uint64(mask))
    while ht[i] != 0:
        s = ht[i] - 1
        if set_hash[s] == h and set_off[s + 1] - set_off[s] == n:
            b = set_off[s]
            same = True
            for j in range(n):
                if set_keys[b + j] != keys[j]:
                    same = False
                    break
            if same:
                return s
        i = (i + 1) & mask
    ns = meta[0]
    nk = meta[1]
    if ns + 2 > len(set_off) or nk + n > len(set_keys) or 2 * (ns + 1) > len(ht):
        return EARLEY_GROW
    d_allowed = D[DF_ALLOWED]
    nw = set_allowed.shape[1]
    for w in range(nw):
        set_allowed[ns, w] = 0
    for j in range(n):
        k = keys[j]
        set_keys[nk + j] = k
        d = k >> 32
        for w in range(nw):
            set_allowed[ns, w] |= d_allowed[d, w]
    set_off[ns + 1] = nk + n
    set_hash[ns] = h
    ht[i] = ns + 1
    meta[0] = ns + 1
    meta[1] = nk + n
    return ns


@njit(cache=True)
def earley_rehash(n_sets, set_hash, ht, fk, fv, old_fk, old_fv):
    """Fill the new (larger, zeroed) tables ``ht`` and ``fk``/``fv`` from the arena's sets and
    the old feed table."""
    mask = len(ht) - 1
    for s in range(n_sets):
        i = np.int64(set_hash[s] & np.uint64(mask))
        while ht[i] != 0:
            i = (i + 1) & mask
        ht[i] = s + 1
    mask = len(fk) - 1
    for j in range(len(old_fk)):
        key = old_fk[j]
        if key != 0:
            i = _feed_slot(key, mask)
            while fk[i] != 0:
                i = (i + 1) & mask
            fk[i] = key
            fv[i] = old_fv[j]


@njit(cache=True, inline="always")
def _feed_slot(key, mask):
    return np.int64(((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(29)) & np.uint64(mask))


LEO_STEPS = 32  # (``earley.LEO_STEPS``)


@njit(cache=True, inline="always")
def _leo_origin(A, D, d, o):
    """The set that an entry (DFA state ``d``, started in arena set ``o``) starts in instead
    (``earley.Grammar._leo_up``): where completing each left-hand side ``a`` of ``d`` there only
    passes nonterminals on, one entry at a time, until ``a`` itself is completed in one older set."""
    set_off, set_keys = A[AR_SET_OFF], A[AR_SET_KEYS]
    sh_off, sh_sym, sh_to = D[DF_SH_OFF], D[DF_SH_SYM], D[DF_SH_TO]
    lhs_off, lhs, passes = D[DF_LHS_OFF], D[DF_LHS], D[DF_PASS]
    while o >= 0:
        up = -1
        for j in range(lhs_off[d], lhs_off[d + 1]):
            a = lhs[j]
            q = o
            s = a
            back = False
            for _ in range(LEO_STEPS):
                d2 = -1
                o2 = -1
                for e in range(set_off[q], set_off[q + 1]):
                    k = set_keys[e]
                    x = _shift_to(sh_off, sh_sym, sh_to, k >> 32, s)
                    if x >= 0:
                        y = (k & 0xFFFFFFFF) - 1
                        if y < 0:
                            y = q
                        if d2 >= 0 and (x != d2 or y != o2):
                            return o  # a second entry
                        d2 = x
                        o2 = y
                if d2 < 0 or passes[d2] < 0:
                    return o
                s = passes[d2]
                q = o2
                if s == a:
                    back = True
                    break
            if not back or q == o or (up >= 0 and q != up):
                return o
            up = q
        if up < 0:
            return o
        o = up
    return o


# ``A[AR_SCRATCH]`` is scratch for ``_earley_make`` (the arena's only user, one call at a time),
# four areas of a quarter each (a power of two): keys, seen (a hash set), the work stack's
# states and origins. A set's closure runs in it instead of in arrays allocated per call,
# which would take most of the time of a new set of a few entries; larger sets allocate.
SCRATCH = 256  # entries of each area (``arena.CompiledMasks.scratch``)


@njit(cache=True, inline="always")
def _earley_make(A, D, sd, so, nk):
    """Close the kernel entries ``(sd[i], so[i])`` (DFA state, origin set) and intern the set.

    ``sd`` and ``so`` are the work stack and are overwritten (scratch or fresh arrays).
    """
    set_off, set_keys, scratch = A[AR_SET_OFF], A[AR_SET_KEYS], A[AR_SCRATCH]
    d_pred, comp_off, comp_nt, sh_off, sh_sym, sh_to = D[DF_PRED], D[DF_COMP_OFF], D[DF_COMP], D[DF_SH_OFF], D[DF_SH_SYM], D[DF_SH_TO]
    cap = len(scratch) >> 2
    keys = scratch[:cap]
    n = 0
    seen = scratch[cap:2 * cap]  # the keys so far, open addressing (key + 1; 0: empty)
    seen[:] = 0
    m = nk
    while m > 0:
        m -= 1
        d = sd[m]
        o = so[m]
        if o >= 0:
            o = _leo_origin(A, D, d, o)
        key = (d << 32) | (o + 1)
        mask = len(seen) - 1
        i = _feed_slot(key + 1, mask)
        while seen[i] != 0 and seen[i] != key + 1:
            i = (i + 1) & mask
        if seen[i] != 0:
            continue
        seen[i] = key + 1
        if n == len(keys):
            keys = _grow(keys, n)
        keys[n] = key
        n += 1
        if 2 * n > len(seen):  # keep it at most half full
            seen = np.zeros(4 * len(seen), np.int64)
            mask = len(seen) - 1
            for j in range(n):
                i = _feed_slot(keys[j] + 1, mask)
                while seen[i] != 0:
                    i = (i + 1) & mask
                seen[i] = keys[j] + 1
        p = d_pred[d]
        if p >= 0:
            if m == len(sd):
                sd = _grow(sd, m)
                so = _grow(so, m)
            sd[m] = p
            so[m] = -1
            m += 1
        if o >= 0:
            # completions: entries of the origin set waiting for each nonterminal completed here
            for c in range(comp_off[d], comp_off[d + 1]):
                a = comp_nt[c]
                for e in range(set_off[o], set_off[o + 1]):
                    k2 = set_keys[e]
                    d2 = _shift_to(sh_off, sh_sym, sh_to, k2 >> 32, a)
                    if d2 >= 0:
                        o2 = (k2 & 0xFFFFFFFF) - 1
                        if m == len(sd):
                            sd = _grow(sd, m)
                            so = _grow(so, m)
                        sd[m] = d2
                        so[m] = o if o2 < 0 else o2
                        m += 1
    _sort_ints(keys, n)
    return earley_intern(A, D, keys, n)


@njit(cache=True, inline="always")
def _feed_find(fk, key):
    """The slot of ``key`` in the feed table: where it is, or the empty slot where it goes."""
    mask = len(fk) - 1
    i = _feed_slot(key, mask)
    while fk[i] != 0 and fk[i] != key:
        i = (i + 1) & mask
    return i


@njit(cache=True, inline="always")
def earley_feed(A, D, s, t):
    """The set after terminal ``t`` from set ``s`` (memoized): ``EARLEY_REJECT``, or ``s``
    itself for an ignored terminal the grammar does not take; ``EARLEY_GROW``.

    The memo lookup is inlined; a feed not seen before is a call (``_earley_feed_new``).
    Inlining that too, with ``_earley_make`` and ``earley_intern``, at each of the feed's
    call sites makes ``earley_masks`` a function LLVM takes minutes to compile; the call
    passes views without reference counts, and happens once per new feed. ``s`` and ``t`` go
    to it as int64s: a caller's int32 terminal (a tree's) would compile it once more."""
    fk, fv = A[AR_FEED_KEYS], A[AR_FEED_SETS]
    key = s * (A[AR_SET_ALLOWED].shape[1] * 64) + t + 1
    i = _feed_find(fk, key)
    if fk[i] == key:
        return fv[i]
    return _earley_feed_new(A, D, np.int64(s), np.int64(t), i, key)


@njit(cache=True)
def _earley_feed_new(A, D, s, t, i, key):
    """``earley_feed`` of a feed not in the memo, whose slot there is ``i``."""
    meta, set_off, set_keys, set_allowed, fk, fv = A[AR_META], A[AR_SET_OFF], A[AR_SET_KEYS], A[AR_SET_ALLOWED], A[AR_FEED_KEYS], A[AR_FEED_SETS]
    sh_off, sh_sym, sh_to, ign_w = D[DF_SH_OFF], D[DF_SH_SYM], D[DF_SH_TO], D[DF_IGNORED]
    if 2 * (meta[2] + 1) > len(fk):
        return EARLEY_GROW
    if (set_allowed[s, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
        nk = set_off[s + 1] - set_off[s]
        cap = len(A[AR_SCRATCH]) >> 2
        if nk <= cap:
            kd = A[AR_SCRATCH][2 * cap:3 * cap]
            ko = A[AR_SCRATCH][3 * cap:]
        else:
            kd = np.empty(nk, np.int64)
            ko = np.empty(nk, np.int64)
        n = 0
        for e in range(set_off[s], set_off[s + 1]):
            k = set_keys[e]
            d2 = _shift_to(sh_off, sh_sym, sh_to, k >> 32, t)
            if d2 >= 0:
                o = (k & 0xFFFFFFFF) - 1
                kd[n] = d2
                ko[n] = s if o < 0 else o
                n += 1
        res = _earley_make(A, D, kd, ko, n)
        if res == EARLEY_GROW:
            return res
    elif (ign_w[t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
        res = s
    else:
        res = EARLEY_REJECT
    fk[i] = key
    fv[i] = res
    meta[2] += 1
    return res


@njit(cache=True)
def earley_seed(A, D, root, max_sets, max_feeds):
    """Feed every terminal each set allows, breadth first from arena set ``root``, until the
    arena holds ``max_sets`` sets or ``max_feeds`` feeds: the sets near the start of every
    text, made once at compile time and kept in the cache file (``arena.seed_arrays``)."""
    A = _bare_arena(A)
    D = _bare_dfa(D)
    meta, set_allowed = A[AR_META], A[AR_SET_ALLOWED]
    n_bits = set_allowed.shape[1] * 64
    queue = np.empty(max_sets + 1, np.int64)
    queue[0] = root
    head = 0
    tail = 1
    while head < tail:
        s = queue[head]
        head += 1
        for t in range(n_bits):
            if not (set_allowed[s, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
                continue
            if meta[0] >= max_sets or meta[2] >= max_feeds:
                return
            before = meta[0]
            r = earley_feed(A, D, s, t)
            if r == EARLEY_GROW:
                return
            if meta[0] > before and tail <= max_sets:
                queue[tail] = r
                tail += 1


def py_earley_seed(A, D, root, max_sets, max_feeds):
    """``earley_seed``'s twin: the same breadth-first feeds, one ``earley_feed`` call each."""
    meta, set_allowed = A[AR_META], A[AR_SET_ALLOWED]
    queue = [root]
    head = 0
    while head < len(queue):
        s = queue[head]
        head += 1
        for t in range(set_allowed.shape[1] * 64):
            if not (int(set_allowed[s, t >> 6]) >> (t & 63)) & 1:
                continue
            if meta[0] >= max_sets or meta[2] >= max_feeds:
                return
            before = meta[0]
            r = earley_feed(A, D, s, t)
            if r == EARLEY_GROW:
                return
            if meta[0] > before and len(queue) <= max_sets:
                queue.append(r)


@njit(cache=True)
def earley_restore(A, D, set_off, set_keys, feed_keys, feed_sets):
    """Load a seed (``earley_seed``'s sets and feeds) into the new arena ``A`` (all zeros), which
    has room for it: each set interned again in order, then the feeds. False when the seed does
    not fit these tables (a damaged cache file); the arena is then of no use."""
    A = _bare_arena(A)
    D = _bare_dfa(D)
    fk, fv = A[AR_FEED_KEYS], A[AR_FEED_SETS]
    n_d = D[DF_ALLOWED].shape[0]
    ns = len(set_off) - 1
    n_bits = A[AR_SET_ALLOWED].shape[1] * 64
    if not (ns >= 0 and set_off[0] == 0 and set_off[ns] == len(set_keys) and len(feed_keys) == len(feed_sets)
            and 2 * (len(feed_keys) + 1) <= len(fk)):
        return False
    for i in range(ns):
        if set_off[i + 1] < set_off[i]:
            return False
        for j in range(set_off[i], set_off[i + 1]):
            d = set_keys[j] >> 32
            o = (set_keys[j] & 0xFFFFFFFF) - 1
            if d < 0 or d >= n_d or o >= i or o < -1 or (j > set_off[i] and set_keys[j] <= set_keys[j - 1]):
                return False  # an entry's origin is an earlier set; keys sorted, distinct
    for i in range(len(feed_keys)):
        k = feed_keys[i] - 1
        if k < 0 or k // n_bits >= ns or feed_sets[i] < EARLEY_REJECT or feed_sets[i] >= ns:
            return False
    for i in range(ns):
        n = set_off[i + 1] - set_off[i]
        if earley_intern(A, D, set_keys[set_off[i]:set_off[i + 1]], n) != i:
            return False  # no room, or a set twice
    earley_rehash(0, A[AR_SET_HASH], A[AR_HT], fk, fv, feed_keys, feed_sets)
    A[AR_META][META_FEEDS] = len(feed_keys)
    return True
