"""Grammar kernels: budget bounds (the fewest bytes to finish from an Earley set), for budget-aware masks."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..numba_tools import _grow, _lowest_bit

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
# The arena's ``A[8]`` holds each set's finish table (``Completer.finish_table``: bytes
# after a nonterminal completes, having started in that set), ``A[9]`` which are filled,
# ``A[10]`` its ``earley_after`` per terminal and then the shortest new-lexeme completion
# (each plus one; 0: not computed).

EARLEY_INF = 1 << 40
BUDGET_BIG = 1 << 30  # ``Completer.visit_bound``'s "no completion"


@njit(cache=True, inline="always")
def _earley_finish(A, D, B, x):
    """Fill the finish tables of arena set ``x`` and of the sets it depends on (origins first)."""
    meta, set_off, set_keys, fin, fin_done = A[0], A[1], A[2], A[8], A[9]
    it_off, items, ns, lhs_of, rest_len, params = B[0], B[1], B[2], B[3], B[4], B[9]
    start_lhs, nt = params[0], params[1]
    stack = np.empty(16, np.int64)
    stack[0] = x
    m = 1
    ia = np.empty(16, np.int64)  # items started in the set itself: (waited symbol, rest, lhs)
    ir = np.empty(16, np.int64)
    il = np.empty(16, np.int64)
    while m > 0:
        y = stack[m - 1]
        if fin_done[y]:
            m -= 1
            continue
        pushed = False
        for e in range(set_off[y], set_off[y + 1]):
            o = (set_keys[e] & 0xFFFFFFFF) - 1
            if o >= 0 and not fin_done[o]:
                if m == len(stack):
                    stack = _grow(stack, m)
                stack[m] = o
                m += 1
                pushed = True
        if pushed:
            continue
        for a in range(fin.shape[1]):
            fin[y, a] = EARLEY_INF
        if y == meta[3]:
            fin[y, start_lhs - nt] = 0
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
                    ia[n_in] = a - nt
                    ir[n_in] = rest
                    il[n_in] = lhs - nt
                    n_in += 1
                else:
                    tail = fin[o, lhs - nt]
                    if tail < EARLEY_INF and rest + tail < fin[y, a - nt]:
                        fin[y, a - nt] = rest + tail
        changed = True
        while changed:
            changed = False
            for i in range(n_in):
                tail = fin[y, il[i]]
                if tail < EARLEY_INF and ir[i] + tail < fin[y, ia[i]]:
                    fin[y, ia[i]] = ir[i] + tail
                    changed = True
        fin_done[y] = 1
        m -= 1


@njit(cache=True, inline="always")
def earley_after(A, D, B, x, t):
    """``Completer.after_terminal``'s length: the shortest completion (bytes) of arena set ``x``
    once it takes terminal ``t``; ``EARLEY_INF`` if none."""
    set_off, set_keys, fin, aft = A[1], A[2], A[8], A[10]
    memo = aft[x, t]
    if memo:
        return memo - 1
    is_pred, dc_off, dc_t, dc_lhs, dc_len, params = B[5], B[6][0], B[6][1], B[6][2], B[6][3], B[9]
    nt = params[1]
    res = EARLEY_INF
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
                tail = fin[o, dc_lhs[lo] - nt]
                if tail < EARLEY_INF and dc_len[lo] + tail < res:
                    res = dc_len[lo] + tail
                lo += 1
    aft[x, t] = res + 1
    return res


@njit(cache=True, inline="always")
def earley_visit_bound(A, D, B, node_grp, grp_state, live_w, s, q, ign, live):
    """``Completer.visit_bound(s, q)``: the longest lexeme suffix of tree node ``s``'s groups
    plus the longest completion after a terminal they may end in, from arena set ``q``.
    ``live`` is scratch of one word per 64 terminals."""
    set_allowed = A[3]
    sfx_state = B[8]
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
            a = BUDGET_BIG if a >= EARLEY_INF else a
            if a > worst:
                worst = a
            bits &= bits - np.uint64(1)
    if ign >= 0 and (live[ign >> 6] >> np.uint64(ign & 63)) & np.uint64(1) and _any_allowed(set_allowed, q):
        best = _earley_nonempty(A, D, B, q)
        a = BUDGET_BIG if best >= EARLEY_INF else best
        if a > worst:
            worst = a
    return sfx + worst


@njit(cache=True, inline="always")
def _earley_nonempty(A, D, B, q):
    """``Completer._nonempty``'s length: the shortest completion of arena set ``q`` that starts a
    new lexeme (memoized in the last column of ``A[10]``)."""
    set_allowed, aft = A[3], A[10]
    best_len = B[7]
    col = aft.shape[1] - 1
    best = aft[q, col] - 1
    if best < 0:
        best = EARLEY_INF
        for t in range(set_allowed.shape[1] * 64):
            if (set_allowed[q, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
                a = earley_after(A, D, B, q, t)
                if a < EARLEY_INF and best_len[t] + a < best:
                    best = best_len[t] + a
        aft[q, col] = best + 1
    return best


@njit(cache=True, inline="always")
def earley_group_cost(A, D, B, q, c, ign):
    """``Completer.node_cost`` (bytes): the shortest completion of configuration (arena set ``q``,
    scanner state ``c``): a lexeme suffix of ``c``'s readings, then the parser's completion
    after that terminal (a new lexeme after the ignored run); ``BUDGET_BIG`` if none."""
    set_allowed = A[3]
    sx_off, sx_t, sx_len = B[10]
    res = EARLEY_INF
    if _any_allowed(set_allowed, q):
        for k in range(sx_off[c], sx_off[c + 1]):
            t = sx_t[k]
            if t == ign:
                tail = _earley_nonempty(A, D, B, q)
            elif (set_allowed[q, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
                tail = earley_after(A, D, B, q, t)
            else:
                continue
            if tail < EARLEY_INF and sx_len[k] + tail < res:
                res = sx_len[k] + tail
    return BUDGET_BIG if res >= EARLEY_INF else res
