"""Numba kernel of the grammar engine, beside its plain-Python twin.

``subterminal_walk`` walks the vocabulary trie (see ``localguide.kernels``) from
one scanner state and records, for every token, every way its bytes can be read:
the terminals it completes on the way (a node of the *sequence tree*) and the
scanner state it ends in. Ignored terminals end a lexeme without entering the
sequence (they do not move the parser). Nothing here depends on the parser: the
result is DOMINO's vocabulary-aligned subterminal tree for that scanner state.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def subterminal_walk(node_byte, node_depth, subtree_end, tok_start, tok_count, order,
                     ctrans, acc_offsets, acc_terms, after, is_ignore, live_tab, n_terms, start_c, max_cfg):
    """Returns (out_tok, out_seq, out_state, n_out, seq_parent, seq_term, n_seq, n_overflow).

    Sequence node 0 is the empty sequence; node ``s`` extends ``seq_parent[s]`` by
    terminal ``seq_term[s]``. A reading (s2, c2) with s2 = s1 + [T] is not emitted
    when the token also has a reading (s1, c1) in which T is still live: whenever the
    parser takes T after s1, that reading is viable too (it dominates). Where a trie
    node has more than ``max_cfg`` readings, the tokens below it are emitted with
    sequence -1 (unresolved: the caller checks them one by one); ``n_overflow`` counts them.
    """
    n_nodes = len(node_byte)
    maxd = 1
    for i in range(n_nodes):
        if node_depth[i] + 1 > maxd:
            maxd = node_depth[i] + 1
    clo_s = np.empty((maxd, max_cfg), np.int32)
    clo_c = np.empty((maxd, max_cfg), np.int32)
    clo_n = np.zeros(maxd, np.int32)
    cur_s = np.empty(max_cfg, np.int32)
    cur_c = np.empty(max_cfg, np.int32)
    cap = 256
    child = np.full((cap, n_terms), -1, np.int32)
    seq_parent = np.full(cap, -1, np.int32)
    seq_term = np.full(cap, -1, np.int32)
    n_seq = 1
    out_cap = 1 << 16
    out_tok = np.empty(out_cap, np.int32)
    out_s = np.empty(out_cap, np.int32)
    out_c = np.empty(out_cap, np.int32)
    n_out = 0
    n_overflow = 0
    # Depth 0: the start state and the lexemes that can end right away.
    cur_s[0] = 0
    cur_c[0] = start_c
    m = 1
    d = 0
    n = 0
    while True:
        if n > 0:
            d = node_depth[n]
            b = node_byte[n]
            m = 0
            for i in range(clo_n[d - 1]):
                c2 = ctrans[clo_c[d - 1, i], b]
                if c2 < 0:
                    continue
                s = clo_s[d - 1, i]
                dup = False
                for j in range(m):
                    if cur_s[j] == s and cur_c[j] == c2:
                        dup = True
                        break
                if not dup:
                    cur_s[m] = s
                    cur_c[m] = c2
                    m += 1
            if m == 0:
                n = subtree_end[n]
                if n >= n_nodes:
                    break
                continue
            for k in range(tok_start[n], tok_start[n] + tok_count[n]):
                for j in range(m):
                    s2 = cur_s[j]
                    if s2 != 0:
                        s1 = seq_parent[s2]
                        t1 = seq_term[s2]
                        dominated = False
                        for i in range(m):
                            if cur_s[i] == s1 and live_tab[cur_c[i], t1]:
                                dominated = True
                                break
                        if dominated:
                            continue
                    if n_out == out_cap:
                        out_cap *= 2
                        g1 = np.empty(out_cap, np.int32)
                        g1[:n_out] = out_tok
                        out_tok = g1
                        g2 = np.empty(out_cap, np.int32)
                        g2[:n_out] = out_s
                        out_s = g2
                        g3 = np.empty(out_cap, np.int32)
                        g3[:n_out] = out_c
                        out_c = g3
                    out_tok[n_out] = order[k]
                    out_s[n_out] = cur_s[j]
                    out_c[n_out] = cur_c[j]
                    n_out += 1
        if subtree_end[n] > n + 1:
            # Closure: keep every reading, and also end the lexeme wherever one accepts.
            cl = 0
            overflow = False
            for j in range(m):
                clo_s[d, cl] = cur_s[j]
                clo_c[d, cl] = cur_c[j]
                cl += 1
            for j in range(m):
                if overflow:
                    break
                c = cur_c[j]
                for a in range(acc_offsets[c], acc_offsets[c + 1]):
                    t = acc_terms[a]
                    if is_ignore[t]:
                        s2 = cur_s[j]
                    else:
                        s2 = child[cur_s[j], t]
                        if s2 < 0:
                            if n_seq == cap:
                                cap *= 2
                                gc = np.full((cap, n_terms), -1, np.int32)
                                gc[:n_seq] = child
                                child = gc
                                gp = np.full(cap, -1, np.int32)
                                gp[:n_seq] = seq_parent
                                seq_parent = gp
                                gt = np.full(cap, -1, np.int32)
                                gt[:n_seq] = seq_term
                                seq_term = gt
                            s2 = n_seq
                            n_seq += 1
                            child[cur_s[j], t] = s2
                            seq_parent[s2] = cur_s[j]
                            seq_term[s2] = t
                    c2 = after[t]
                    dup = False
                    for i in range(cl):
                        if clo_s[d, i] == s2 and clo_c[d, i] == c2:
                            dup = True
                            break
                    if not dup:
                        if cl == max_cfg:
                            overflow = True
                            break
                        clo_s[d, cl] = s2
                        clo_c[d, cl] = c2
                        cl += 1
            clo_n[d] = cl
            if overflow:
                # Too many readings: the tokens below are left to the caller.
                end = subtree_end[n]
                for q in range(n + 1, end):
                    for k in range(tok_start[q], tok_start[q] + tok_count[q]):
                        if n_out == out_cap:
                            out_cap *= 2
                            g1 = np.empty(out_cap, np.int32)
                            g1[:n_out] = out_tok
                            out_tok = g1
                            g2 = np.empty(out_cap, np.int32)
                            g2[:n_out] = out_s
                            out_s = g2
                            g3 = np.empty(out_cap, np.int32)
                            g3[:n_out] = out_c
                            out_c = g3
                        out_tok[n_out] = order[k]
                        out_s[n_out] = -1
                        out_c[n_out] = -1
                        n_out += 1
                        n_overflow += 1
                n = end
                if n >= n_nodes:
                    break
                continue
        n += 1
        if n >= n_nodes:
            break
    return (out_tok[:n_out].copy(), out_s[:n_out].copy(), out_c[:n_out].copy(), n_out,
            seq_parent[:n_seq].copy(), seq_term[:n_seq].copy(), n_seq, n_overflow)


def py_subterminal_walk(tokens, ctrans, accept_lists, after, is_ignore, live_tab, start_c):
    """Twin of ``subterminal_walk``, token by token: the set of (token, terminal sequence, state).

    ``tokens`` maps token id → bytes (empty tokens are skipped, as the trie holds none).
    """
    out = set()
    for tok, data in tokens.items():
        if not data:
            continue
        configs = {((), start_c)}
        for b in data:
            closed = set(configs)
            for seq, c in configs:
                for t in accept_lists[c]:
                    closed.add((seq if is_ignore[t] else seq + (t,), int(after[t])))
            configs = {(seq, int(ctrans[c, b])) for seq, c in closed if ctrans[c, b] >= 0}
        for seq, c in configs:
            if seq and any(s1 == seq[:-1] and live_tab[c1, seq[-1]] for s1, c1 in configs):
                continue  # dominated by the reading that keeps the last terminal going
            out.add((tok, seq, c))
    return out
