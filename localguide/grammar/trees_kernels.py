"""Grammar kernels: DOMINO's subterminal trees over the vocabulary, and unions of their token groups."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..runtime.numba_tools import (
    _argsort_stable, _copy_rows, _counting_order, _radix_sort, _release, _sort_ints, _work, _work2, _work_grown,
)

# --- grammar engine: DOMINO's vocabulary-aligned subterminal trees ---------------------
#
# ``grammar_trees`` walks the vocabulary trie once per *origin*: one reading
# ``(terminal, DFA state)`` of the lexeme in progress, as a one-reading scanner state.
# For every token it records every way its bytes can be read from there: the
# terminals completed on the way (a node of the origin's *sequence tree*) and the
# scanner state it ends in. The lexeme in progress is never ended before the
# token's first byte (the caller handles that case with the parser at hand). After
# terminal ``T`` ends, the next lexeme starts in ``seed_tab[ctx, T]``, where ``ctx``
# is 1 + the terminal completed before ``T`` (0: unknown), so terminal trigrams the
# grammar cannot produce are never explored. The ignored run (``ign``) ends a
# lexeme without entering the sequence. Nothing here depends on the parser.


@njit(cache=True, nogil=True)
def grammar_trees(node_byte, node_depth, subtree_end, tok_start, tok_count, order,
                  ctrans, acc_offsets, acc_terms, seed_tab, ign, live_tab, rdist, origins, track,
                  vocab_size, max_cfg):
    """The subterminal trees of all ``origins`` (scanner states), in flat arrays.

    Returns (seq_parent, seq_term, tree_seq, grp_seq, grp_state, grp_lead, grp_off,
    grp_tok, unres_off, unres_tok). Tree ``i`` owns sequence nodes
    ``tree_seq[i]:tree_seq[i+1]``; its first node is the empty sequence (parent -1),
    node ``s`` extends ``seq_parent[s]`` by terminal ``seq_term[s]``. Group ``g``
    holds the sorted tokens ``grp_tok[grp_off[g]:grp_off[g+1]]`` that read as
    sequence ``grp_seq[g]`` ending in scanner state ``grp_state[g]``; groups are
    sorted by sequence node.

    Where ``track[i]`` (an origin inside the ignored run, whose length so far the
    caller knows and this walk does not), ``grp_lead[g]`` is how many bytes of the
    token that run takes: up to where it ends, or, when it does not end in the
    token, the token's length plus the fewest bytes that end it (``rdist`` of the
    end state). The caller keeps a group when the run stays within its limit.

    A reading (s1 + [T], c2) is not emitted when the token also reads as (s1, c1)
    with T live in c1 and a lead no longer (whenever the parser takes T after s1,
    that reading is viable too). Where a trie node has more than ``max_cfg``
    readings, the tokens below are listed in ``unres_tok[unres_off[i]:unres_off[i+1]]``
    for the caller to check one by one.
    """
    n_nodes = len(node_byte)
    n_terms = live_tab.shape[1]
    n_states = ctrans.shape[0]
    maxd = 1
    for i in range(n_nodes):
        if node_depth[i] + 1 > maxd:
            maxd = node_depth[i] + 1
    max_lead = maxd
    for c in range(n_states):
        if rdist[c] + maxd > max_lead:
            max_lead = rdist[c] + maxd
    clo_s = np.empty((maxd, max_cfg), np.int32)
    clo_c = np.empty((maxd, max_cfg), np.int32)
    clo_l = np.empty((maxd, max_cfg), np.int32)
    clo_n = np.zeros(maxd, np.int32)
    cur_s = np.empty(max_cfg, np.int32)
    cur_c = np.empty(max_cfg, np.int32)
    cur_l = np.empty(max_cfg, np.int32)
    eff = np.empty(max_cfg, np.int32)
    # the buffers that grow are work arrays (``_work``)
    k32 = [np.empty(0, np.int32)]
    k64 = [np.empty(0, np.int64)]
    k2 = [np.empty((0, 0), np.int32)]
    cap = 64
    child = _work2(k2, cap, n_terms)
    l_parent = _work(k32, cap)
    l_term = _work(k32, cap)
    l_parent[:] = -1
    l_term[:] = -1
    e_tok = _work(k32, 1 << 12)
    e_s = _work(k32, 1 << 12)
    e_c = _work(k32, 1 << 12)
    e_l = _work(k32, 1 << 12)
    u_tok = _work(k32, 16)
    n_orig = len(origins)
    # global outputs
    seq_parent = _work(k32, 1 << 10)
    seq_term = _work(k32, 1 << 10)
    n_gseq = 0
    tree_seq = np.zeros(n_orig + 1, np.int64)
    grp_seq = _work(k32, 1 << 10)
    grp_state = _work(k32, 1 << 10)
    grp_lead = _work(k32, 1 << 10)
    grp_off = _work(k64, 1 << 10)
    grp_off[:] = 0
    n_grp = 0
    grp_tok = _work(k32, 1 << 16)
    n_gtok = 0
    unres_off = np.zeros(n_orig + 1, np.int64)
    unres_tok = _work(k32, 16)
    n_unres = 0
    for oi in range(n_orig):
        start_c = origins[oi]
        n_seq = 1
        for j in range(n_terms):
            child[0, j] = -1
        l_parent[0] = -1
        l_term[0] = -1
        n_out = 0
        n_u = 0
        cur_s[0] = 0
        cur_c[0] = start_c
        cur_l[0] = -1 if track[oi] else 0
        m = 1
        n = 0
        while True:
            d = node_depth[n]
            if n > 0:
                b = node_byte[n]
                m = 0
                for i in range(clo_n[d - 1]):
                    c2 = ctrans[clo_c[d - 1, i], b]
                    if c2 < 0:
                        continue
                    s = clo_s[d - 1, i]
                    ld = clo_l[d - 1, i]
                    dup = False
                    for j in range(m):
                        if cur_s[j] == s and cur_c[j] == c2 and cur_l[j] == ld:
                            dup = True
                            break
                    if not dup:
                        cur_s[m] = s
                        cur_c[m] = c2
                        cur_l[m] = ld
                        m += 1
                if m == 0:
                    n = subtree_end[n]
                    if n >= n_nodes:
                        break
                    continue
                if tok_count[n] > 0:
                    for j in range(m):
                        eff[j] = cur_l[j] if cur_l[j] >= 0 else d + rdist[cur_c[j]]
                for k in range(tok_start[n], tok_start[n] + tok_count[n]):
                    for j in range(m):
                        s2 = cur_s[j]
                        if s2 != 0:
                            s1 = l_parent[s2]
                            t1 = l_term[s2]
                            dominated = False
                            for i in range(m):
                                if cur_s[i] == s1 and live_tab[cur_c[i], t1] and eff[i] <= eff[j]:
                                    dominated = True
                                    break
                            if dominated:
                                continue
                        if n_out == len(e_tok):
                            e_tok = _work_grown(k32, e_tok, n_out)
                            e_s = _work_grown(k32, e_s, n_out)
                            e_c = _work_grown(k32, e_c, n_out)
                            e_l = _work_grown(k32, e_l, n_out)
                        e_tok[n_out] = order[k]
                        e_s[n_out] = cur_s[j]
                        e_c[n_out] = cur_c[j]
                        e_l[n_out] = eff[j]
                        n_out += 1
            if subtree_end[n] > n + 1:
                # Keep every reading, and (below the root) also end the lexeme wherever one accepts.
                cl = 0
                for j in range(m):
                    clo_s[d, cl] = cur_s[j]
                    clo_c[d, cl] = cur_c[j]
                    clo_l[d, cl] = cur_l[j]
                    cl += 1
                overflow = False
                if n > 0:
                    for j in range(m):
                        if overflow:
                            break
                        c = cur_c[j]
                        s = cur_s[j]
                        ld = cur_l[j] if cur_l[j] >= 0 else d
                        ctx = l_term[s] + 1 if s > 0 else 0
                        for a in range(acc_offsets[c], acc_offsets[c + 1]):
                            t = acc_terms[a]
                            c2 = seed_tab[ctx, t]
                            if c2 < 0:
                                continue
                            if t == ign:
                                s2 = s
                            else:
                                s2 = child[s, t]
                                if s2 < 0:
                                    if n_seq == cap:
                                        cap *= 2
                                        gc = _work2(k2, cap, n_terms)
                                        _copy_rows(gc, child, n_seq)
                                        child = gc
                                        l_parent = _work_grown(k32, l_parent, n_seq)
                                        l_term = _work_grown(k32, l_term, n_seq)
                                    s2 = n_seq
                                    n_seq += 1
                                    for q in range(n_terms):
                                        child[s2, q] = -1
                                    child[s, t] = s2
                                    l_parent[s2] = s
                                    l_term[s2] = t
                            dup = False
                            for i in range(cl):
                                if clo_s[d, i] == s2 and clo_c[d, i] == c2 and clo_l[d, i] == ld:
                                    dup = True
                                    break
                            if not dup:
                                if cl == max_cfg:
                                    overflow = True
                                    break
                                clo_s[d, cl] = s2
                                clo_c[d, cl] = c2
                                clo_l[d, cl] = ld
                                cl += 1
                clo_n[d] = cl
                if overflow:
                    # Too many readings: the tokens below are left to the caller.
                    end = subtree_end[n]
                    for q in range(n + 1, end):
                        for k in range(tok_start[q], tok_start[q] + tok_count[q]):
                            if n_u == len(u_tok):
                                u_tok = _work_grown(k32, u_tok, n_u)
                            u_tok[n_u] = order[k]
                            n_u += 1
                    n = end
                    if n >= n_nodes:
                        break
                    continue
            n += 1
            if n >= n_nodes:
                break
        # -- this tree's sequence nodes
        base = n_gseq
        while n_gseq + n_seq > len(seq_parent):
            seq_parent = _work_grown(k32, seq_parent, n_gseq)
            seq_term = _work_grown(k32, seq_term, n_gseq)
        for s in range(n_seq):
            seq_parent[base + s] = l_parent[s] + base if s > 0 else -1
            seq_term[base + s] = l_term[s]
        n_gseq += n_seq
        tree_seq[oi + 1] = n_gseq
        # -- its groups: emissions sorted by (sequence, state, lead, token)
        if n_out > 0:
            if n_out * 16 < vocab_size:
                key = np.empty(n_out, np.int64)
                for i in range(n_out):
                    key[i] = (((np.int64(e_s[i]) * n_states + e_c[i]) * (max_lead + 1) + e_l[i]) * vocab_size
                              + e_tok[i])
                perm = _argsort_stable(key)
            else:
                perm = np.empty(n_out, np.int64)
                for i in range(n_out):
                    perm[i] = i
                perm = _counting_order(e_tok[:n_out], vocab_size, perm)
                if track[oi]:
                    perm = _counting_order(e_l[:n_out], max_lead + 1, perm)
                perm = _counting_order(e_c[:n_out], n_states, perm)
                perm = _counting_order(e_s[:n_out], n_seq, perm)
            while n_gtok + n_out > len(grp_tok):
                grp_tok = _work_grown(k32, grp_tok, n_gtok)
            prev_s = -1
            prev_c = -1
            prev_l = -1
            prev_t = -1
            for i in range(n_out):
                e = perm[i]
                if e_s[e] != prev_s or e_c[e] != prev_c or e_l[e] != prev_l:
                    if n_grp + 2 > len(grp_seq):
                        grp_seq = _work_grown(k32, grp_seq, n_grp)
                        grp_state = _work_grown(k32, grp_state, n_grp)
                        grp_lead = _work_grown(k32, grp_lead, n_grp)
                        grp_off = _work_grown(k64, grp_off, n_grp + 1)
                    grp_seq[n_grp] = e_s[e] + base
                    grp_state[n_grp] = e_c[e]
                    grp_lead[n_grp] = e_l[e]
                    grp_off[n_grp] = n_gtok
                    n_grp += 1
                    prev_s = e_s[e]
                    prev_c = e_c[e]
                    prev_l = e_l[e]
                    prev_t = -1
                if e_tok[e] != prev_t:  # a token may read the same way twice
                    grp_tok[n_gtok] = e_tok[e]
                    n_gtok += 1
                    prev_t = e_tok[e]
            grp_off[n_grp] = n_gtok
        # -- its unresolved tokens
        if n_u > 0:
            _sort_ints(u_tok, n_u)
            while n_unres + n_u > len(unres_tok):
                unres_tok = _work_grown(k32, unres_tok, n_unres)
            for i in range(n_u):
                if i == 0 or u_tok[i] != u_tok[i - 1]:
                    unres_tok[n_unres] = u_tok[i]
                    n_unres += 1
        unres_off[oi + 1] = n_unres
    grp_off[n_grp] = n_gtok
    out = (seq_parent[:n_gseq].copy(), seq_term[:n_gseq].copy(), tree_seq, grp_seq[:n_grp].copy(),
           grp_state[:n_grp].copy(), grp_lead[:n_grp].copy(), grp_off[:n_grp + 1].copy(),
           grp_tok[:n_gtok].copy(), unres_off, unres_tok[:n_unres].copy())
    _release(k32)  # the work arrays die here, after the copies
    _release(k64)
    _release(k2)
    return out


def py_grammar_trees(tokens, ctrans, accept_lists, seed_tab, ign, live_tab, rdist, origins, track):
    """Twin of ``grammar_trees``, token by token: per origin, the set of (token, sequence, state, lead).

    ``tokens`` maps token id → bytes (empty tokens are skipped, as the trie holds none).
    """
    out = []
    for start_c, tr in zip(origins, track):
        found = set()
        for tok, data in tokens.items():
            if not data:
                continue
            configs = {((), int(start_c), -1 if tr else 0)}
            for i, b in enumerate(data):
                closed = set(configs)
                if i > 0:
                    for seq, c, ld in configs:
                        ctx = seq[-1] + 1 if seq else 0
                        for t in accept_lists[c]:
                            c2 = int(seed_tab[ctx, t])
                            if c2 >= 0:
                                closed.add((seq if t == ign else seq + (t,), c2, ld if ld >= 0 else i))
                configs = {(seq, int(ctrans[c, b]), ld) for seq, c, ld in closed if ctrans[c, b] >= 0}
            eff = {(seq, c, ld): (ld if ld >= 0 else len(data) + int(rdist[c])) for seq, c, ld in configs}
            for seq, c, ld in configs:
                e = eff[(seq, c, ld)]
                if seq and any(s1 == seq[:-1] and live_tab[c1, seq[-1]] and eff[(s1, c1, l1)] <= e
                               for s1, c1, l1 in configs):
                    continue  # dominated by the reading that keeps the last terminal going
                found.add((tok, seq, c, e))
        out.append(found)
    return out


# --- grammar masks: unions of token groups -------------------------------------

@njit(cache=True)
def union_groups(grp_off, grp_tok, gids, extra, marks):
    """Sorted distinct token ids of the groups ``gids`` (tokens ``grp_tok[grp_off[g]:grp_off[g+1]]``)
    and of ``extra``.

    ``marks`` is scratch, one byte per token, all zero (and left so). A small union is
    sorted; a large one is read off the marks in one pass over the vocabulary. Ids outside
    the vocabulary are left out: a damaged cache file is not scanned whole at load.
    """
    nv = len(marks)
    total = len(extra)
    for k in range(len(gids)):
        total += grp_off[gids[k] + 1] - grp_off[gids[k]]
    buf = np.empty(total, np.int32)
    n = 0
    for k in range(len(gids)):
        g = gids[k]
        for i in range(grp_off[g], grp_off[g + 1]):
            t = grp_tok[i]
            if 0 <= t < nv and marks[t] == 0:
                marks[t] = 1
                buf[n] = t
                n += 1
    for k in range(len(extra)):
        t = extra[k]
        if 0 <= t < nv and marks[t] == 0:
            marks[t] = 1
            buf[n] = t
            n += 1
    if n * 16 < len(marks):
        out = _radix_sort(buf[:n], len(marks))
        for i in range(n):
            marks[out[i]] = 0
        return out
    out = buf[:n].copy()
    j = 0
    for t in range(len(marks)):
        if marks[t]:
            out[j] = t
            j += 1
            marks[t] = 0
    return out


def py_union_groups(grp_off, grp_tok, gids, extra, marks):
    """Twin of ``union_groups``."""
    parts = [grp_tok[grp_off[g]:grp_off[g + 1]] for g in gids] + [np.asarray(extra, np.int32)]
    out = np.unique(np.concatenate(parts)).astype(np.int32)
    return out[(out >= 0) & (out < len(marks))]


@njit(cache=True)
def union_bits(key, grp_off, grp_tok, big_min, g_row, gw, out):
    """Set in ``out`` the tokens of the groups in ``key`` (``-1 - t``: token ``t`` itself).

    A group of at least ``big_min`` tokens is or-ed in from its bitset, row ``g_row[g]`` of
    ``gw``, when it has one; returns the large groups that have none yet (set token by token).
    Ids past ``out``'s bits are left out (as in ``union_groups``).
    """
    missing = []
    nw = len(out)
    for k in range(len(key)):
        g = key[k]
        if g < 0:
            t = -1 - g
            out[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
            continue
        lo = grp_off[g]
        hi = grp_off[g + 1]
        if hi - lo >= big_min:
            r = g_row[g]
            if r >= 0:
                for w in range(nw):
                    out[w] |= gw[r, w]
                continue
            missing.append(g)
        for i in range(lo, hi):
            t = grp_tok[i]
            if 0 <= t and t >> 6 < nw:
                out[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    return np.array(missing, np.int64)


def py_union_bits(key, grp_off, grp_tok, big_min, g_row, gw, out):
    """Twin of ``union_bits``."""
    missing = []
    for g in (int(g) for g in key):
        if g < 0:
            toks = [-1 - g]
        elif grp_off[g + 1] - grp_off[g] >= big_min and g_row[g] >= 0:
            out |= gw[g_row[g]]
            continue
        else:
            if grp_off[g + 1] - grp_off[g] >= big_min:
                missing.append(g)
            toks = grp_tok[grp_off[g]:grp_off[g + 1]].tolist()
        for t in toks:
            if 0 <= t < 64 * len(out):
                out[t >> 6] = int(out[t >> 6]) | (1 << (t & 63))
    return np.array(missing, np.int64)
