"""The subterminal trees in numpy: a first use's path, before ``trees_kernels`` compiles.

``grammar_trees`` takes and returns what ``trees_kernels.grammar_trees`` does. The kernel
walks the vocabulary trie depth first with a stack of readings; this walks it one depth at
a time, every reading of every trie node of that depth as a row of a few arrays. The
trees are the same: the same (token, terminal sequence, scanner state, lead) per origin,
the same tokens left unresolved; only the numbering of the sequence nodes may differ
(each tree's nodes still come parents first, its groups sorted by node). A test compares
the two.
"""

from __future__ import annotations

import numpy as np

_LEVELS: dict = {}  # id(node_depth) -> (node_depth, levels): a vocabulary's trie by depth


def _levels(node_depth: np.ndarray) -> list:
    """The trie's node ids at each depth, sorted (preorder keeps each depth sorted)."""
    got = _LEVELS.get(id(node_depth))
    if got is not None and got[0] is node_depth:
        return got[1]
    order = np.argsort(node_depth, kind="stable")
    bounds = np.searchsorted(node_depth[order], np.arange(int(node_depth.max()) + 2 if len(node_depth) else 1))
    levels = [order[bounds[d]:bounds[d + 1]].astype(np.int64) for d in range(len(bounds) - 1)]
    _LEVELS.clear()  # one vocabulary at a time
    _LEVELS[id(node_depth)] = (node_depth, levels)
    return levels


def _unique_rows(key: np.ndarray) -> np.ndarray:
    """Indices of the first row of each distinct ``key``, in key order."""
    return np.unique(key, return_index=True)[1]


def _ranges(starts: np.ndarray, counts: np.ndarray) -> tuple:
    """(which range, ``starts[range] + i``) for every i below ``counts[range]``."""
    which = np.repeat(np.arange(len(starts)), counts)
    first = np.cumsum(counts) - counts
    return which, np.repeat(starts - first, counts) + np.arange(int(counts.sum()))


def grammar_trees(node_byte, node_depth, subtree_end, tok_start, tok_count, order,
                  ctrans, acc_offsets, acc_terms, seed_tab, ign, live_tab, rdist, origins, track,
                  vocab_size, max_cfg):
    """``trees_kernels.grammar_trees``, one trie depth at a time."""
    levels = _levels(node_depth)
    n_states = ctrans.shape[0]
    maxd = len(levels)
    n_lead = maxd + (int(rdist.max()) if len(rdist) else 0) + 2
    acc_offsets = np.asarray(acc_offsets, np.int64)
    acc_n = np.diff(acc_offsets)
    parts = [_one_tree(levels, node_byte, subtree_end, tok_start, tok_count, order, ctrans, acc_offsets, acc_n,
                       acc_terms, seed_tab, ign, live_tab, rdist, int(o), bool(tr), n_states, n_lead,
                       max_cfg, live_tab.shape[1])
             for o, tr in zip(np.asarray(origins).tolist(), np.asarray(track).tolist())]
    n_orig = len(parts)
    tree_seq = np.zeros(n_orig + 1, np.int64)
    unres_off = np.zeros(n_orig + 1, np.int64)
    seq_parent, seq_term, grp_seq, grp_state, grp_lead, grp_sizes, grp_tok, unres_tok = ([] for _ in range(8))
    base = 0
    for i, (sp, st, gs, gst, gl, gsz, gt, ut) in enumerate(parts):
        seq_parent.append(np.where(sp >= 0, sp + base, -1))
        seq_term.append(st)
        grp_seq.append(gs + base)
        grp_state.append(gst)
        grp_lead.append(gl)
        grp_sizes.append(gsz)
        grp_tok.append(gt)
        unres_tok.append(ut)
        base += len(sp)
        tree_seq[i + 1] = base
        unres_off[i + 1] = unres_off[i] + len(ut)
    sizes = np.concatenate(grp_sizes) if parts else np.zeros(0, np.int64)
    grp_off = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=grp_off[1:])

    def cat(xs, dt):
        return np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt)

    return (cat(seq_parent, np.int32), cat(seq_term, np.int32), tree_seq, cat(grp_seq, np.int32),
            cat(grp_state, np.int32), cat(grp_lead, np.int32), grp_off, cat(grp_tok, np.int32), unres_off,
            cat(unres_tok, np.int32))


def _one_tree(levels, node_byte, subtree_end, tok_start, tok_count, order, ctrans, acc_offsets, acc_n, acc_terms,
              seed_tab, ign, live_tab, rdist, origin, track, n_states, n_lead, max_cfg, n_terms):
    """One origin's tree: (seq_parent, seq_term, grp_seq, grp_state, grp_lead, group sizes,
    grp_tok, unresolved tokens)."""
    seq_parent = [-1]
    seq_term = [-1]
    child: dict = {}  # (sequence node, terminal) -> sequence node
    # The readings after the trie node at the previous depth: node, sequence, scanner state, lead.
    f_node = np.zeros(1, np.int64)
    f_s = np.zeros(1, np.int64)
    f_c = np.full(1, origin, np.int64)
    f_l = np.full(1, -1 if track else 0, np.int64)
    e_tok, e_s, e_c, e_l, unres = [], [], [], [], []
    for d in range(1, len(levels)):
        if len(f_node) == 0:
            break
        # -- the children (at depth d) of the nodes with readings, each with all of their readings
        u_node, u_first, u_n = np.unique(f_node, return_index=True, return_counts=True)
        at = levels[d]
        lo = np.searchsorted(at, u_node + 1)
        hi = np.searchsorted(at, subtree_end[u_node])
        which, kid = _ranges(lo, hi - lo)
        n = at[kid]
        rows, cfg = _ranges(u_first[which], u_n[which])
        n = n[rows]
        c = ctrans[f_c[cfg], node_byte[n]].astype(np.int64)
        ok = c >= 0
        n, s, c, l = n[ok], f_s[cfg][ok], c[ok], f_l[cfg][ok]
        n_seq = len(seq_parent)
        keep = _unique_rows(((n * n_seq + s) * n_states + c) * n_lead + (l + 1))
        n, s, c, l = n[keep], s[keep], c[keep], l[keep]
        if len(n) == 0:
            break
        # -- the tokens that end here, under every reading that no other one dominates
        ends = tok_count[n] > 0
        if ends.any():
            _emit(n[ends], s[ends], c[ends], l[ends], d, tok_start, tok_count, order, live_tab, rdist,
                  np.asarray(seq_parent, np.int64), np.asarray(seq_term, np.int64), n_seq, n_states,
                  e_tok, e_s, e_c, e_l)
        # -- below: every reading, and also the lexeme ended wherever one accepts
        inner = subtree_end[n] > n + 1
        n, s, c, l = n[inner], s[inner], c[inner], l[inner]
        if len(n) == 0:
            break
        which, a = _ranges(acc_offsets[c], acc_n[c])
        t = acc_terms[a].astype(np.int64)
        ctx = np.asarray(seq_term, np.int64)[s[which]] + 1
        c2 = seed_tab[ctx, t].astype(np.int64)
        ok = c2 >= 0
        which, t, c2 = which[ok], t[ok], c2[ok]
        s1 = s[which]
        s2 = s1.copy()
        grows = t != ign
        if grows.any():
            pairs = s1[grows] * n_terms + t[grows]
            u_pairs, inv = np.unique(pairs, return_inverse=True)
            ids = np.empty(len(u_pairs), np.int64)
            for i, p in enumerate(u_pairs.tolist()):
                sp, tt = divmod(p, n_terms)
                got = child.get((sp, tt))
                if got is None:
                    got = child[(sp, tt)] = len(seq_parent)
                    seq_parent.append(sp)
                    seq_term.append(tt)
                ids[i] = got
            s2[grows] = ids[inv.reshape(-1)]
        ld = np.where(l[which] >= 0, l[which], d)
        n = np.concatenate([n, n[which]])
        s = np.concatenate([s, s2])
        c = np.concatenate([c, c2])
        l = np.concatenate([l, ld])
        n_seq = len(seq_parent)
        keep = _unique_rows(((n * n_seq + s) * n_states + c) * n_lead + (l + 1))
        n, s, c, l = n[keep], s[keep], c[keep], l[keep]
        # -- too many readings at a node: the tokens below it are left to the caller
        u_node, u_n = np.unique(n, return_counts=True)
        over = u_node[u_n > max_cfg]
        if len(over):
            for q in over.tolist():
                below = np.arange(q + 1, int(subtree_end[q]))
                unres.append(order[_ranges(tok_start[below].astype(np.int64), tok_count[below].astype(np.int64))[1]])
            drop = np.isin(n, over)
            n, s, c, l = n[~drop], s[~drop], c[~drop], l[~drop]
        f_node, f_s, f_c, f_l = n, s, c, l
    return _groups(seq_parent, seq_term, e_tok, e_s, e_c, e_l, unres, n_states, n_lead)


def _emit(n, s, c, l, d, tok_start, tok_count, order, live_tab, rdist, seq_parent, seq_term, n_seq, n_states,
          e_tok, e_s, e_c, e_l) -> None:
    """Record the tokens ending at nodes ``n`` under the readings (``s``, ``c``, ``l``) that are
    not dominated: by a reading of the same node with the sequence one terminal shorter, that
    terminal still live in its state, and a lead no longer."""
    eff = np.where(l >= 0, l, d + rdist[c])
    dominated = np.zeros(len(n), bool)
    longer = np.flatnonzero(s != 0)
    if len(longer):
        key = n * n_seq + s
        by_key = np.argsort(key, kind="stable")
        sorted_key = key[by_key]
        want = n[longer] * n_seq + seq_parent[s[longer]]
        lo = np.searchsorted(sorted_key, want)
        hi = np.searchsorted(sorted_key, want, side="right")
        which, pos = _ranges(lo, hi - lo)
        j = longer[which]
        i = by_key[pos]
        hit = live_tab[c[i], seq_term[s[j]]].astype(bool) & (eff[i] <= eff[j])
        dominated[j[hit]] = True
    ok = ~dominated
    n, s, c, eff = n[ok], s[ok], c[ok], eff[ok]
    which, k = _ranges(tok_start[n].astype(np.int64), tok_count[n].astype(np.int64))
    e_tok.append(order[k])
    e_s.append(s[which])
    e_c.append(c[which])
    e_l.append(eff[which])


def _groups(seq_parent, seq_term, e_tok, e_s, e_c, e_l, unres, n_states, n_lead) -> tuple:
    """A tree's arrays from its emissions: groups by (sequence, state, lead), tokens sorted."""
    sp = np.asarray(seq_parent, np.int64)
    st = np.asarray(seq_term, np.int64)
    if e_tok:
        tok, s, c, l = (np.concatenate(x).astype(np.int64) for x in (e_tok, e_s, e_c, e_l))
        perm = np.lexsort((tok, l, c, s))
        tok, s, c, l = tok[perm], s[perm], c[perm], l[perm]
        new_grp = np.ones(len(tok), bool)
        new_grp[1:] = (s[1:] != s[:-1]) | (c[1:] != c[:-1]) | (l[1:] != l[:-1])
        fresh = new_grp.copy()
        fresh[1:] |= tok[1:] != tok[:-1]  # a token may read the same way twice
        tok, new_grp = tok[fresh], new_grp[fresh]
        starts = np.flatnonzero(new_grp)
        sizes = np.diff(np.append(starts, len(tok)))
        first = np.flatnonzero(fresh)[starts]
        gs, gst, gl = s[first], c[first], l[first]
    else:
        tok = gs = gst = gl = sizes = np.zeros(0, np.int64)
    ut = np.unique(np.concatenate(unres)) if unres else np.zeros(0, np.int64)
    return sp, st, gs, gst, gl, sizes, tok, ut


# --- unions of token groups -------------------------------------------------------------

def union_groups(grp_off, grp_tok, gids, extra, marks):
    """``trees_kernels.union_groups``: sorted distinct ids of the groups ``gids`` and ``extra``
    (``marks`` is not used)."""
    gids = np.asarray(gids, np.int64)
    toks = grp_tok[_ranges(grp_off[gids], grp_off[gids + 1] - grp_off[gids])[1]]
    out = np.unique(np.concatenate([toks, np.asarray(extra, np.int32)])).astype(np.int32)
    return out[(out >= 0) & (out < len(marks))]


def union_bits(key, grp_off, grp_tok, big_min, g_row, gw, out):
    """``trees_kernels.union_bits``: the tokens of the groups ``key`` set in the bitset ``out``;
    returns the large groups without a row of ``gw``."""
    key = np.asarray(key, np.int64)
    singles = -1 - key[key < 0]
    g = key[key >= 0]
    size = grp_off[g + 1] - grp_off[g]
    large = size >= big_min
    row = np.where(large, g_row[g] if len(g_row) else -1, -1) if len(g) else np.zeros(0, np.int64)
    whole = large & (row >= 0)
    for r in row[whole].tolist():
        out |= gw[r]
    rest = ~whole
    toks = grp_tok[_ranges(grp_off[g[rest]], size[rest])[1]].astype(np.int64)
    toks = np.concatenate([toks, singles])
    toks = toks[(toks >= 0) & ((toks >> 6) < len(out))]
    if len(toks):
        flags = np.zeros(64 * len(out), bool)
        flags[toks] = True
        out |= np.packbits(flags, bitorder="little").view(np.uint64)
    return g[large & (row < 0)]
