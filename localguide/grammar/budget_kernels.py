"""Grammar kernels: budget bounds (the fewest bytes to finish from an Earley set), for budget-aware masks."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..distance import UNREACHABLE
from ..runtime.numba_tools import _grow, _lowest_bit, _sort_ints, lower_bound
from .arena_kernels import (
    AR_AFTER, AR_FINISH, AR_FINISH_DONE, AR_META, AR_SET_ALLOWED, AR_SET_KEYS, AR_SET_OFF, BG_BEST_LEN,
    BG_DCOST, BG_IS_PRED, BG_IT_OFF, BG_ITEM_LHS, BG_ITEMS, BG_LEXEME_ENDS, BG_NEXT_SYM, BG_PARAMS,
    BG_REST_LEN, BG_SUFFIX,
)


@njit(cache=True, inline="always")
def _any_allowed(set_allowed, q):
    for w in range(set_allowed.shape[1]):
        if set_allowed[q, w]:
            return True
    return False


# Budget bounds (``budget.Completer``, lengths only): ``B`` = (items of each DFA state (CSR),
# symbol after each item's dot, its lhs, byte length of the symbols after the dot, predicted
# companion flags, left-corner costs per DFA state (CSR rows (terminal, lhs, bytes after
# the terminal to the end of lhs), sorted by terminal), shortest lexeme per terminal,
# longest lexeme suffix per scanner state, (start nonterminal, first nonterminal id)).
#
# The arena's tables are sparse, so that a grammar of thousands of nonterminals and terminals
# costs per set only what the set uses:
# - ``A[AR_FINISH]``, a pool of (nonterminal, bytes) rows: each set's finish table
#   (``Completer.finish_table``: bytes after a nonterminal completes, having started in that set)
#   for the nonterminals the set waits on, sorted. Row 0 is a header: (rows used, full flag).
# - ``A[AR_FINISH_DONE]``, per set: where its rows are, ``start << 24 | (count + 1)`` (0: not made).
# - ``A[AR_AFTER]``, a hash table of (set * (terminals + 1) + terminal + 1, ``earley_after`` + 1);
#   the key of terminal index ``terminals`` holds the shortest new-lexeme completion. Row 0:
#   (entries, 0); its slots are the rows after it (a power of two, at most half full).
# A full pool sets the flag and makes nothing more: the caller grows it and walks again (the
# figures of that walk may be wrong: every memo they would go into is left as it was).

FIN_SHIFT = 24
_HASH = np.uint64(0x9E3779B97F4A7C15)


@njit(cache=True, inline="always")
def _fin_get(fin, done, o, a):
    """Set ``o``'s finish bytes for nonterminal index ``a`` (``UNREACHABLE`` if not in its rows)."""
    code = done[o]
    if code == 0:
        return UNREACHABLE
    start = code >> FIN_SHIFT
    count = (code & ((1 << FIN_SHIFT) - 1)) - 1
    s = _row_slot(fin[start:start + count, 0], count, a)
    return fin[start + s, 1] if s >= 0 else UNREACHABLE


@njit(cache=True, inline="always")
def _aft_key(A, x, t):
    """The after memo's key of arena set ``x`` and terminal index ``t`` (the number of terminals:
    the shortest new-lexeme completion)."""
    return x * (A[AR_SET_ALLOWED].shape[1] * 64 + 1) + t + 1


@njit(cache=True, inline="always")
def _aft_slot(aft, key):
    """The row of ``key`` in the after table, or of the empty slot where it would go."""
    mask = np.uint64(aft.shape[0] - 2)  # slots: rows 1 .. 2^k
    i = (np.uint64(key) * _HASH) >> np.uint64(20)
    while True:
        r = 1 + np.int64(i & mask)
        k = aft[r, 0]
        if k == key or k == 0:
            return r
        i += np.uint64(1)


@njit(cache=True, inline="always")
def _aft_get(aft, key):
    """The memo of ``key`` plus one (0: none)."""
    r = _aft_slot(aft, key)
    return aft[r, 1] if aft[r, 0] == key else 0


@njit(cache=True, inline="always")
def _aft_put(A, aft, key, value):
    """Memoize ``value`` (plus one) under ``key``, unless the pool is flagged full or the table
    is half full (it is grown between walks)."""
    if A[AR_FINISH][0, 1]:
        return
    if 2 * (aft[0, 0] + 1) > aft.shape[0] - 1:
        return
    r = _aft_slot(aft, key)
    if aft[r, 0] == 0:
        aft[r, 0] = key
        aft[0, 0] += 1
    aft[r, 1] = value + 1


@njit(cache=True, inline="always")
def _row_slot(keys, n, a):
    """The index of ``a`` in ``keys[:n]`` (sorted), or -1."""
    i = lower_bound(keys, 0, n, a)
    return i if i < n and keys[i] == a else -1


@njit(cache=True)
def _earley_finish(A, D, B, x):
    """Fill the finish rows of arena set ``x`` and of the sets it depends on (origins first);
    stops, with the pool flagged full, where the pool has no room for a set's rows."""
    meta, set_off, set_keys, fin, done = A[AR_META], A[AR_SET_OFF], A[AR_SET_KEYS], A[AR_FINISH], A[AR_FINISH_DONE]
    it_off, items, ns, lhs_of, rest_len, params = B[BG_IT_OFF], B[BG_ITEMS], B[BG_NEXT_SYM], B[BG_ITEM_LHS], B[BG_REST_LEN], B[BG_PARAMS]
    start_lhs, nt = params[0], params[1]
    stack = np.empty(16, np.int64)
    stack[0] = x
    m = 1
    ia = np.empty(16, np.int64)  # items started in the set itself: (waited symbol, rest, lhs)
    ir = np.empty(16, np.int64)
    il = np.empty(16, np.int64)
    keys = np.empty(16, np.int64)  # the set's waited nonterminals, then sorted and unique
    vals = np.empty(16, np.int64)
    while m > 0:
        if fin[0, 1]:
            return
        y = stack[m - 1]
        if done[y]:
            m -= 1
            continue
        pushed = False
        for e in range(set_off[y], set_off[y + 1]):
            o = (set_keys[e] & 0xFFFFFFFF) - 1
            if o >= 0 and not done[o]:
                if m == len(stack):
                    stack = _grow(stack, m)
                stack[m] = o
                m += 1
                pushed = True
        if pushed:
            continue
        n = 0
        if y == meta[3]:
            keys[0] = start_lhs - nt
            n = 1
        for e in range(set_off[y], set_off[y + 1]):
            d = set_keys[e] >> 32
            for j in range(it_off[d], it_off[d + 1]):
                a = ns[items[j]]
                if a >= nt:
                    if n == len(keys):
                        keys = _grow(keys, n)
                    keys[n] = a - nt
                    n += 1
        _sort_ints(keys, n)
        u = 0
        for i in range(n):
            if u == 0 or keys[i] != keys[u - 1]:
                keys[u] = keys[i]
                u += 1
        n = u
        if len(vals) < n:
            vals = np.empty(len(keys), np.int64)
        for i in range(n):
            vals[i] = UNREACHABLE
        if y == meta[3]:
            vals[_row_slot(keys, n, start_lhs - nt)] = 0
        n_in = 0
        for e in range(set_off[y], set_off[y + 1]):
            k = set_keys[e]
            d = k >> 32
            o = (k & 0xFFFFFFFF) - 1
            for j in range(it_off[d], it_off[d + 1]):
                it = items[j]
                a = ns[it]
                if a < nt:
                    continue
                rest = rest_len[it + 1]
                lhs = lhs_of[it]
                if o < 0:
                    if n_in == len(ia):
                        ia = _grow(ia, n_in)
                        ir = _grow(ir, n_in)
                        il = _grow(il, n_in)
                    ia[n_in] = _row_slot(keys, n, a - nt)
                    ir[n_in] = rest
                    il[n_in] = _row_slot(keys, n, lhs - nt)
                    n_in += 1
                else:
                    tail = _fin_get(fin, done, o, lhs - nt)
                    s = _row_slot(keys, n, a - nt)
                    if tail < UNREACHABLE and rest + tail < vals[s]:
                        vals[s] = rest + tail
        changed = True
        while changed:
            changed = False
            for i in range(n_in):
                if il[i] < 0:
                    continue  # (an item whose lhs the set does not wait on: it completes nothing here)
                tail = vals[il[i]]
                if tail < UNREACHABLE and ir[i] + tail < vals[ia[i]]:
                    vals[ia[i]] = ir[i] + tail
                    changed = True
        start = fin[0, 0]
        if start + n > fin.shape[0]:
            fin[0, 1] = 1  # no room: the caller grows the pool and walks again
            return
        for i in range(n):
            fin[start + i, 0] = keys[i]
            fin[start + i, 1] = vals[i]
        fin[0, 0] = start + n
        done[y] = (start << FIN_SHIFT) | (n + 1)
        m -= 1


@njit(cache=True, inline="always")
def earley_after(A, D, B, x, t):
    """``Completer.after_terminal``'s length: the shortest completion (bytes) of arena set ``x``
    once it takes terminal ``t``; ``UNREACHABLE`` if none."""
    aft = A[AR_AFTER]
    memo = _aft_get(aft, _aft_key(A, x, t))
    if memo:
        return memo - 1
    return _earley_after_new(A, D, B, x, t)


@njit(cache=True)
def _earley_after_new(A, D, B, x, t):
    """``earley_after`` not in the memo: a call, not inlined (``earley_feed`` says why)."""
    set_off, set_keys, fin, done, aft = A[AR_SET_OFF], A[AR_SET_KEYS], A[AR_FINISH], A[AR_FINISH_DONE], A[AR_AFTER]
    is_pred, dc_off, dc_t, dc_lhs, dc_len, params = B[BG_IS_PRED], B[BG_DCOST][0], B[BG_DCOST][1], B[BG_DCOST][2], B[BG_DCOST][3], B[BG_PARAMS]
    nt = params[1]
    res = UNREACHABLE
    for e in range(set_off[x], set_off[x + 1]):
        k = set_keys[e]
        d = k >> 32
        if is_pred[d]:
            continue  # a predicted companion: its items are reached through the kernel's left corners
        o = (k & 0xFFFFFFFF) - 1
        if o < 0:
            o = x
        lo = dc_off[d]
        hi = dc_off[d + 1]
        while lo < hi:  # the first row of terminal t
            mid = (lo + hi) >> 1
            if dc_t[mid] < t:
                lo = mid + 1
            else:
                hi = mid
        if lo < dc_off[d + 1] and dc_t[lo] == t:
            _earley_finish(A, D, B, o)
            while lo < dc_off[d + 1] and dc_t[lo] == t:
                tail = _fin_get(fin, done, o, dc_lhs[lo] - nt)
                if tail < UNREACHABLE and dc_len[lo] + tail < res:
                    res = dc_len[lo] + tail
                lo += 1
    _aft_put(A, aft, _aft_key(A, x, t), res)
    return res


@njit(cache=True, inline="always")
def earley_visit_bound(A, D, B, node_grp, grp_state, live_w, s, q, ign, live):
    """``Completer.visit_bound(s, q)``: the longest lexeme suffix of tree node ``s``'s groups
    plus the longest completion after a terminal they may end in, from arena set ``q``.
    ``live`` is scratch of one word per 64 terminals."""
    set_allowed = A[AR_SET_ALLOWED]
    sfx_state = B[BG_SUFFIX]
    nw = set_allowed.shape[1]
    live[:] = 0
    sfx = 0
    for g in range(node_grp[s], node_grp[s + 1]):
        c = grp_state[g]
        if sfx_state[c] > sfx:
            sfx = sfx_state[c]
        for w in range(nw):
            live[w] |= live_w[c, w]
    worst = 0
    for w in range(nw):
        bits = live[w] & set_allowed[q, w]
        while bits:
            a = earley_after(A, D, B, q, (w << 6) + _lowest_bit(bits))
            a = min(a, UNREACHABLE)
            if a > worst:
                worst = a
            bits &= bits - np.uint64(1)
    if ign >= 0 and (live[ign >> 6] >> np.uint64(ign & 63)) & np.uint64(1) and _any_allowed(set_allowed, q):
        best = _earley_nonempty(A, D, B, q)
        a = min(best, UNREACHABLE)
        if a > worst:
            worst = a
    return sfx + worst


@njit(cache=True, inline="always")
def _earley_nonempty(A, D, B, q):
    """``Completer._nonempty``'s length: the shortest completion of arena set ``q`` that starts a
    new lexeme (memoized in ``A[AR_AFTER]`` under the terminal index past the last)."""
    best = _aft_get(A[AR_AFTER], _aft_key(A, q, A[AR_SET_ALLOWED].shape[1] * 64)) - 1
    if best < 0:
        best = _earley_nonempty_new(A, D, B, q)
    return best


@njit(cache=True)
def _earley_nonempty_new(A, D, B, q):
    """``_earley_nonempty`` not in the memo: a call, not inlined (``earley_feed`` says why)."""
    set_allowed = A[AR_SET_ALLOWED]
    best_len = B[BG_BEST_LEN]
    n_t = set_allowed.shape[1] * 64
    best = UNREACHABLE
    for w in range(set_allowed.shape[1]):
        bits = set_allowed[q, w]
        while bits:
            t = (w << 6) + _lowest_bit(bits)
            bits &= bits - np.uint64(1)
            a = earley_after(A, D, B, q, t)
            if a < UNREACHABLE and best_len[t] + a < best:
                best = best_len[t] + a
    _aft_put(A, A[AR_AFTER], _aft_key(A, q, n_t), best)
    return best


@njit(cache=True, inline="always")
def earley_group_cost(A, D, B, q, c, ign):
    """``Completer.node_cost`` (bytes): the shortest completion of configuration (arena set ``q``,
    scanner state ``c``): a lexeme suffix of ``c``'s readings, then the parser's completion
    after that terminal (a new lexeme after the ignored run); ``UNREACHABLE`` if none."""
    set_allowed = A[AR_SET_ALLOWED]
    sx_off, sx_t, sx_len = B[BG_LEXEME_ENDS]
    res = UNREACHABLE
    if _any_allowed(set_allowed, q):
        for k in range(sx_off[c], sx_off[c + 1]):
            t = sx_t[k]
            if t == ign:
                tail = _earley_nonempty(A, D, B, q)
            elif (set_allowed[q, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
                tail = earley_after(A, D, B, q, t)
            else:
                continue
            if tail < UNREACHABLE and sx_len[k] + tail < res:
                res = sx_len[k] + tail
    return min(res, UNREACHABLE)
