"""Token masks: the precomputed subterminal trees, consulted with the parser.

For a scanner state ``c`` the tree (``SubterminalTree``, from the numba walk) groups
the vocabulary by *how* each token reads from ``c``: the terminals it completes
(a path of the tree) and the scanner state it ends in. The mask of a parser state
``P`` is then a walk of that small tree: follow a terminal only where the parser
takes it (``PState.feed``, memoized), keep a group when one of its final readings
is a terminal the parser allows there. The union of kept groups is cached twice:
on the parser state (by ``c``), and in the tree by the set of kept groups.
"""

from __future__ import annotations

import numpy as np

from .. import kernels

MAX_READINGS = 256


class SubterminalTree:
    __slots__ = ("groups", "children", "union_cache", "n_tokens", "arrays", "unresolved")

    def __init__(self, out_tok, out_seq, out_state, seq_parent, seq_term, n_seq):
        self.union_cache: dict = {}
        groups: list[list] = [[] for _ in range(n_seq)]
        self.arrays: list[np.ndarray] = []
        bad = out_seq < 0
        self.unresolved = np.unique(out_tok[bad]).astype(np.int32)
        if bad.any():
            out_tok, out_seq, out_state = out_tok[~bad], out_seq[~bad], out_state[~bad]
        if len(out_tok):
            key = out_seq.astype(np.int64) << 32 | out_state.astype(np.int64)
            perm = np.lexsort((out_tok, key))
            key, tok = key[perm], out_tok[perm]
            cuts = np.flatnonzero(np.diff(key)) + 1
            starts = np.concatenate([[0], cuts])
            ends = np.concatenate([cuts, [len(key)]])
            for gid, (a, b) in enumerate(zip(starts, ends)):
                k = int(key[a])
                arr = tok[a:b].copy()
                arr.flags.writeable = False
                groups[k >> 32].append((gid, k & 0xFFFFFFFF, arr))
                self.arrays.append(arr)
        # Keep only sequence nodes with a group somewhere below.
        useful = [bool(g) for g in groups]
        for s in range(n_seq - 1, 0, -1):
            if useful[s]:
                useful[int(seq_parent[s])] = True
        children: list[list] = [[] for _ in range(n_seq)]
        for s in range(1, n_seq):
            if useful[s]:
                children[int(seq_parent[s])].append((int(seq_term[s]), s))
        self.groups = groups
        self.children = children
        self.n_tokens = len(out_tok)


class MaskEngine:
    """Computes and caches ``mask(P, c)`` for one compiled grammar and vocabulary."""

    def __init__(self, scanner, vocabulary, viable=None):
        self.scanner = scanner
        self.viable = viable  # viable(p, c, data) -> bool, for tokens left unresolved
        n = scanner.n_states
        self.live_tab = np.zeros((n, scanner.n_terminals), np.bool_)
        for c, rs in enumerate(scanner.readings):
            for t, _ in rs:
                self.live_tab[c, t] = True
        self.vocabulary = vocabulary
        self.trees: dict[int, SubterminalTree] = {}
        self.vocab_size = vocabulary.size

    def tree(self, c: int) -> SubterminalTree:
        t = self.trees.get(c)
        if t is None:
            sc = self.scanner
            res = kernels.subterminal_walk(*self.vocabulary.trie.arrays, sc.trans, sc.acc_offsets,
                                           sc.acc_terms, sc.after, sc.is_ignore, self.live_tab,
                                           sc.n_terminals, c, MAX_READINGS)
            out_tok, out_s, out_c, _, seq_parent, seq_term, n_seq, overflow = res
            t = self.trees[c] = SubterminalTree(out_tok, out_s, out_c, seq_parent, seq_term, n_seq)
        return t

    def mask(self, p, c: int) -> np.ndarray:
        """Sorted token ids (no stop ids) that keep (parser state ``p``, scanner state ``c``) viable."""
        m = p.masks.get(c)
        if m is not None:
            return m
        tree = self.tree(c)
        live = self.scanner.live
        ign = self.scanner.ignore_mask
        kept = []
        stack = [(0, p)]
        while stack:
            s, q = stack.pop()
            ok = q.allowed | ign
            for gid, cc, arr in tree.groups[s]:
                if live[cc] & ok:
                    kept.append(gid)
            for t, s2 in tree.children[s]:
                q2 = q.feed(t)
                if q2 is not None:
                    stack.append((s2, q2))
        key = tuple(sorted(kept))
        if len(tree.unresolved):
            vocab = self.vocabulary
            extra = [int(t) for t in tree.unresolved if self.viable(p, c, vocab[int(t)])]
            key = key + tuple(-1 - t for t in extra)
        m = tree.union_cache.get(key)
        if m is None:
            arrays = [tree.arrays[g] for g in key if g >= 0]
            extra = [-1 - g for g in key if g < 0]
            if extra:
                arrays.append(np.array(sorted(extra), np.int32))
            m = union(arrays, self.vocab_size)
            tree.union_cache[key] = m
        p.masks[c] = m
        return m


def union(arrays, size: int) -> np.ndarray:
    """The sorted union of sorted int32 arrays."""
    if not arrays:
        out = np.zeros(0, np.int32)
    elif len(arrays) == 1:
        out = arrays[0]
    else:
        flags = np.zeros(size, bool)
        for a in arrays:
            flags[a] = True
        out = np.flatnonzero(flags).astype(np.int32)
    out.flags.writeable = False
    return out
