"""Grammar kernels: a mask as a walk of the subterminal trees with the Earley arena (DOMINO, k = ∞)."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..distance import UNREACHABLE
from ..runtime.numba_tools import _copy_into, _grow, _lowest_bit, _release, _sort_ints, _work, _work_grown
from .arena_kernels import (
    AR_META, AR_SET_ALLOWED, AR_SET_KEYS, AR_SET_OFF, DF_IGNORED, EARLEY_GROW, EARLEY_NEED_TREE,
    EARLEY_UNRESOLVED, META_INITIAL, TR_R_ACC, TR_R_TERM, _ctx_tables, _feed_slot, earley_feed, earley_intern,
)
from .budget_kernels import _any_allowed, earley_group_cost, earley_visit_bound


@njit(cache=True)
def earley_mask_groups(ctx, p0, sc, ign, gmarks, do_bound, gcost):
    """(status, sorted groups, bound) that the readings of scanner state ``sc`` keep under
    arena set ``p0``: what ``MaskEngine.mask_key`` computes with the Python parser.

    A call, not inlined into ``earley_masks`` (compile time), that takes the context and makes
    its own views (``_ctx_tables``, inlined): views it was handed would be arrays it must count
    references to at every use, which made the first masks twice as slow.

    With ``do_bound``, ``bound`` is ``GrammarIndex.budget_bound``'s for this configuration:
    the largest ``earley_visit_bound`` over the tree nodes where groups are kept (``B``:
    ``arena.CompiledMasks.budget_tables``). Status 0, or ``EARLEY_GROW``,
    ``EARLEY_UNRESOLVED``, ``EARLEY_NEED_TREE - tree`` (no groups then). ``gmarks`` is
    scratch, one byte per group, all zero (and left so). With a ``gcost`` of one entry per
    group (else empty), ``gcost[g]`` is lowered to ``earley_group_cost`` wherever ``g`` is kept
    (``GrammarIndex.budget_info``'s group bounds).
    """
    A, D, T, B, S = _ctx_tables(ctx)
    st_off, st_rd = S[0], S[1]
    readings = st_rd[st_off[sc]:st_off[sc + 1]]
    bound = 0
    do_cost = len(gcost) > 0
    set_allowed = A[AR_SET_ALLOWED]
    n_bits = set_allowed.shape[1] * 64
    ign_w = D[DF_IGNORED]
    (ch_off, ch_term, ch_node, node_grp, grp_state, grp_lead, live_w, tree_root, tree_of, tree_lim, r_term,
     r_acc, r_base, has_unres) = T
    nw = set_allowed.shape[1]
    keep = [np.empty(0, np.int64)]  # the work arrays below, used through unmanaged views (``_work``)
    block = _work(keep, 288 + 2 * nw)  # (one allocation for them all, carved below)
    out = block[:64]
    nout = 0
    wq = block[64:80]  # (set, reading) pairs to walk
    wr = block[80:96]
    nwk = 0
    for i in range(len(readings)):
        r = readings[i]
        t = r_term[r]
        if ((set_allowed[p0, t >> 6] | ign_w[t >> 6]) >> np.uint64(t & 63)) & np.uint64(1):
            if nwk == len(wq):
                wq = _work_grown(keep, wq, nwk)
                wr = _work_grown(keep, wr, nwk)
            wq[nwk] = p0
            wr[nwk] = r
            nwk += 1
    done = block[96:160]  # pairs walked
    done[:] = 0
    nd = 0
    n_r = len(r_term)
    ss = block[160:224]  # (tree node, set) stack
    sq = block[224:288]
    al = block[288:288 + nw].view(np.uint64)  # what the set there allows, and the ignored terminal
    live = block[288 + nw:288 + 2 * nw].view(np.uint64)  # (``earley_visit_bound``'s scratch)
    status = 0
    while nwk > 0 and status == 0:
        nwk -= 1
        q0 = wq[nwk]
        r = wr[nwk]
        # each (set, reading) pair once: a small open-addressing set of pair keys
        if 2 * (nd + 1) > len(done):
            old = done
            done = _work(keep, 2 * len(old))
            done[:] = 0
            for j in range(len(old)):
                if old[j] != 0:
                    i = _feed_slot(old[j], len(done) - 1)
                    while done[i] != 0:
                        i = (i + 1) & (len(done) - 1)
                    done[i] = old[j]
        key = q0 * n_r + r + 1
        i = _feed_slot(key, len(done) - 1)
        while done[i] != 0 and done[i] != key:
            i = (i + 1) & (len(done) - 1)
        if done[i] == key:
            continue
        done[i] = key
        nd += 1
        tree = tree_of[r]
        root = tree_root[tree]
        if root < 0:
            status = EARLEY_NEED_TREE - tree
            break
        if has_unres[tree]:
            status = EARLEY_UNRESOLVED
            break
        lim = tree_lim[r]
        ss[0] = root
        sq[0] = q0
        m = 1
        while m > 0:
            m -= 1
            s = ss[m]
            q = sq[m]
            any_al = np.uint64(0)
            for w in range(nw):  # (one load per word, not one per group: the stores below may alias it)
                any_al |= set_allowed[q, w]
                al[w] = set_allowed[q, w] | ign_w[w]
            if not any_al:
                continue
            kept_any = False
            for g in range(node_grp[s], node_grp[s + 1]):
                if grp_lead[g] > lim or gmarks[g] != 0 and (kept_any or not do_bound) and not do_cost:
                    continue
                c = grp_state[g]
                for w in range(nw):
                    if live_w[c, w] & al[w]:
                        kept_any = True
                        if gmarks[g] == 0:
                            gmarks[g] = 1
                            if nout == len(out):
                                out = _work_grown(keep, out, nout)
                            out[nout] = g
                            nout += 1
                        if do_cost:
                            gc = earley_group_cost(A, D, B, q, c, ign)
                            if gc < gcost[g]:
                                gcost[g] = gc
                        break
            if do_bound and kept_any:
                vb = earley_visit_bound(A, D, B, node_grp, grp_state, live_w, s, q, ign, live)
                if vb > bound:
                    bound = vb
            for k in range(ch_off[s], ch_off[s + 1]):
                t = ch_term[k]
                if (set_allowed[q, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
                    q2 = earley_feed(A, D, q, t)
                    if q2 == EARLEY_GROW:
                        status = EARLEY_GROW
                        m = 0
                        break
                    if m == len(ss):
                        ss = _work_grown(keep, ss, m)
                        sq = _work_grown(keep, sq, m)
                    ss[m] = ch_node[k]
                    sq[m] = q2
                    m += 1
        if status != 0 or not r_acc[r]:
            continue
        # The lexeme may end right here, before the token's first byte.
        t = r_term[r]
        q2 = q0
        if t != ign:
            q2 = earley_feed(A, D, q0, t)
        if q2 == EARLEY_GROW:
            status = EARLEY_GROW
            break
        if q2 < 0 or not _any_allowed(set_allowed, q2):
            continue
        # the first readings of what may follow: the ignored run (after a real terminal) and
        # each terminal the parser allows (its set bits, lowest first)
        while nwk + 1 + n_bits > len(wq):
            wq = _work_grown(keep, wq, nwk)
            wr = _work_grown(keep, wr, nwk)
        if t != ign and ign >= 0:
            wq[nwk] = q2
            wr[nwk] = r_base[ign]
            nwk += 1
        for w in range(nw):
            word = set_allowed[q2, w]
            while word:
                wq[nwk] = q2
                wr[nwk] = r_base[(w << 6) + _lowest_bit(word)]
                nwk += 1
                word &= word - np.uint64(1)
    n_grp = len(grp_state)
    if status == 0 and 16 * nout > n_grp:
        # many groups kept (a few hundred, typically): reading them off the marks in id order
        # takes a third of the time of sorting them
        res = np.empty(nout, np.int64)
        j = 0
        for g in range(n_grp):
            if gmarks[g]:
                res[j] = g
                j += 1
                gmarks[g] = 0
    else:
        for i in range(nout):
            gmarks[out[i]] = 0
        res = np.empty(nout if status == 0 else 0, np.int64)
        _copy_into(res, 0, out, len(res))
        _sort_ints(res, len(res))
    _release(keep)  # the work arrays die here, after the last use of their views
    return status, res, bound


ACC_KNOWN = 2  # ``earley_masks``' flags beside "unresolved" (1): acceptance computed, and it holds
ACC_YES = 4


@njit(cache=True, inline="always")
def _set_accepts(A, d_accept, q):
    """Whether arena set ``q`` holds the completed start item begun in the initial set
    (``PState.accepting``); the arena must know its initial set."""
    set_off, set_keys, init = A[AR_SET_OFF], A[AR_SET_KEYS], A[AR_META][META_INITIAL]
    for e in range(set_off[q], set_off[q + 1]):
        k = set_keys[e]
        if d_accept[k >> 32]:
            o = (k & 0xFFFFFFFF) - 1
            if o == init or o < 0 and q == init:
                return True
    return False


@njit(cache=True, inline="always")
def _masks_failed(status, gcost):
    """``earley_masks``' answer when it stops early: the header only, and ``gcost`` reset (a walk
    may have lowered some)."""
    for i in range(len(gcost)):
        gcost[i] = UNREACHABLE
    out = np.zeros(3, np.int64)
    out[0] = status
    return out


@njit(cache=True)
def earley_masks(ctx, args, n_x, n_new, n_cfg, init_ref, ign, gmarks, do_bound, gcost):
    """``earley_mask_groups`` for several configurations at once, after interning new sets; the
    arena and tables come as a context (``CTX_SPEC``).

    ``args`` holds, one after the other, ``x_d`` and ``x_ref`` (``n_x`` each), ``x_off``
    (``n_new + 1``), ``cfg_ref`` and ``cfg_state`` (``n_cfg`` each). The new sets come first,
    in order: set ``i`` has entries ``(x_d[k], x_ref[k])`` for ``k`` in
    ``x_off[i]:x_off[i + 1]``, a reference being an arena id, -1 (the set itself), or
    ``-2 - j`` (new set ``j < i``). Configuration ``c`` is (set ``cfg_ref[c]``, a reference,
    scanner state ``cfg_state[c]``). One array in and one out: numba's unboxing and boxing
    cost some 0.3 µs an array. A new set of one entry ``(-1 - t, ref)`` is not given by entries
    but is the set after terminal ``t`` from the set ``ref`` (``earley_feed``, often memoized
    by the walk before); ``EARLEY_REJECT`` if that feed is rejected.

    ``init_ref`` is the grammar's initial set (a reference; -1: the arena knows it already).
    ``gcost`` as in ``earley_mask_groups`` (all ``UNREACHABLE``, and left so), the group costs
    are returned beside the union (else an empty array).

    Returns one array: (status, union length ``n``, costs length), then the arena ids of the
    new sets, each configuration's flags (1: its trees left tokens unresolved;
    ``ACC_KNOWN``: its acceptance computed, when the arena knows its initial set,
    ``ACC_YES``: it accepts), each one's budget bound with ``do_bound``, the offsets of each
    one's groups and, with several configurations, the groups; then the union of all
    configurations' groups (sorted) and their costs. Status 0, ``EARLEY_GROW`` or
    ``EARLEY_NEED_TREE - tree`` (then the header only; the new sets interned so far stay).
    """
    A, D, T, B, S = _ctx_tables(ctx)
    st_off, st_rd, d_accept = S
    r_term, r_acc = T[TR_R_TERM], T[TR_R_ACC]
    set_allowed = A[AR_SET_ALLOWED]
    x_d, x_ref = args[:n_x], args[n_x:2 * n_x]
    k0 = 2 * n_x + n_new + 1
    x_off, cfg_ref, cfg_state = args[2 * n_x:k0], args[k0:k0 + n_cfg], args[k0 + n_cfg:k0 + 2 * n_cfg]
    aids = np.empty(n_new, np.int64)
    g_off = np.zeros(n_cfg + 1, np.int64)
    unres = np.zeros(n_cfg, np.uint8)
    bounds = np.zeros(n_cfg, np.int64)
    groups = np.empty(0, np.int64)
    for i in range(n_new):
        n = x_off[i + 1] - x_off[i]
        if n == 1 and x_d[x_off[i]] < 0:  # made by a feed
            o = x_ref[x_off[i]]
            a = earley_feed(A, D, o if o >= 0 else aids[-2 - o], -1 - x_d[x_off[i]])
            if a < 0:
                return _masks_failed(a, gcost)
            aids[i] = a
            continue
        keys = np.empty(n, np.int64)
        for j in range(n):
            k = x_off[i] + j
            o = x_ref[k]
            if o < -1:
                o = aids[-2 - o]
            keys[j] = (x_d[k] << 32) | (o + 1)
        keys.sort()
        a = earley_intern(A, D, keys, n)
        if a == EARLEY_GROW:
            return _masks_failed(a, gcost)
        aids[i] = a
    if init_ref != -1:
        A[AR_META][META_INITIAL] = init_ref if init_ref >= 0 else aids[-2 - init_ref]
    for c in range(n_cfg):
        p = cfg_ref[c]
        if p < 0:
            p = aids[-2 - p]
        sc = cfg_state[c]
        rd = st_rd[st_off[sc]:st_off[sc + 1]]
        # acceptance (``GrammarIndex.accepting``): a lexeme that ends here completes a sentence
        acc = 0
        if A[AR_META][META_INITIAL] >= 0:
            acc = ACC_KNOWN
            for i in range(len(rd)):
                r = rd[i]
                t = r_term[r]
                if r_acc[r] and t != ign and (set_allowed[p, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
                    q2 = earley_feed(A, D, p, t)
                    if q2 == EARLEY_GROW:
                        return _masks_failed(q2, gcost)
                    if q2 >= 0 and _set_accepts(A, d_accept, q2):
                        acc = ACC_KNOWN | ACC_YES
                        break
        status, got, bounds[c] = earley_mask_groups(ctx, p, sc, ign, gmarks, do_bound, gcost)
        unres[c] = acc
        if status == EARLEY_UNRESOLVED:
            unres[c] |= 1
        elif status != 0:
            return _masks_failed(status, gcost)
        if n_cfg == 1:
            groups = got  # sorted and distinct: the union already
            g_off[1] = len(got)
            break
        if len(groups) < g_off[c] + len(got):
            groups = _grow(groups, g_off[c])
            while len(groups) < g_off[c] + len(got):
                groups = _grow(groups, g_off[c])
        _copy_into(groups, g_off[c], got, len(got))
        g_off[c + 1] = g_off[c] + len(got)
    any_unres = False
    for c in range(n_cfg):
        any_unres |= (unres[c] & 1) != 0
    if len(gcost) and any_unres:  # a walk stopped at an unresolved tree may have lowered some
        for i in range(len(gcost)):
            gcost[i] = UNREACHABLE
    # and the union over the configurations (sorted, distinct): the guide state's key
    if n_cfg == 1:
        union = groups
        n = len(groups)
    else:
        n = 0
        union = np.empty(g_off[n_cfg], np.int64)
        for i in range(g_off[n_cfg]):
            g = groups[i]
            if gmarks[g] == 0:
                gmarks[g] = 1
                union[n] = g
                n += 1
        for i in range(n):
            gmarks[union[i]] = 0
        _sort_ints(union, n)
    costs = np.empty(n if len(gcost) and not any_unres else 0, np.int64)
    for i in range(len(costs)):
        costs[i] = gcost[union[i]]
        gcost[union[i]] = UNREACHABLE
    n_g = g_off[n_cfg] if n_cfg > 1 else 0  # one configuration: its groups are the union
    out = np.empty(3 + n_new + 3 * n_cfg + 1 + n_g + n + len(costs), np.int64)
    out[0] = 0
    out[1] = n
    out[2] = len(costs)
    k = 3
    _copy_into(out, k, aids, n_new)
    k += n_new
    _copy_into(out, k, unres, n_cfg)
    k += n_cfg
    _copy_into(out, k, bounds, n_cfg)
    k += n_cfg
    _copy_into(out, k, g_off, n_cfg + 1)
    k += n_cfg + 1
    _copy_into(out, k, groups, n_g)
    k += n_g
    _copy_into(out, k, union, n)
    k += n
    _copy_into(out, k, costs, len(costs))
    return out
