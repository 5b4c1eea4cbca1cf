"""The vocabulary trie kernel, beside its plain-Python twin.

The trie is stored in preorder: node ``n``'s subtree is the node range
``[n, subtree_end[n])``, so a walk skips a dead subtree with one assignment.
"""

from __future__ import annotations

import numpy as np
from numba import njit


# --- vocabulary trie ---------------------------------------------------------

@njit(cache=True)
def build_trie(flat, offsets, order):
    """Preorder byte trie of the tokens ``order`` (sorted by their bytes, all non-empty).

    Returns (node_byte, node_depth, subtree_end, tok_start, tok_count): the tokens
    ending at node ``n`` are ``order[tok_start[n] : tok_start[n] + tok_count[n]]``.
    """
    total = 0
    for k in range(len(order)):
        t = order[k]
        total += offsets[t + 1] - offsets[t]
    cap = total + 1
    node_byte = np.zeros(cap, np.uint8)
    node_depth = np.zeros(cap, np.int32)
    parent = np.zeros(cap, np.int32)
    tok_start = np.zeros(cap, np.int32)
    tok_count = np.zeros(cap, np.int32)
    longest = 0
    for k in range(len(order)):
        longest = max(longest, offsets[order[k] + 1] - offsets[order[k]])
    path = np.zeros(longest + 1, np.int32)  # path[d] = node at depth d on the current branch
    n_nodes = 1
    prev = -1
    for k in range(len(order)):
        t = order[k]
        a, b = offsets[t], offsets[t + 1]
        length = b - a
        lcp = 0
        if prev >= 0:
            pa, pb = offsets[prev], offsets[prev + 1]
            m = min(length, pb - pa)
            while lcp < m and flat[a + lcp] == flat[pa + lcp]:
                lcp += 1
        for d in range(lcp, length):
            node = n_nodes
            n_nodes += 1
            node_byte[node] = flat[a + d]
            node_depth[node] = d + 1
            parent[node] = path[d]
            tok_start[node] = k
            path[d + 1] = node
        end = path[length]
        if tok_count[end] == 0:
            tok_start[end] = k
        tok_count[end] += 1
        prev = t
    subtree_end = np.empty(n_nodes, np.int32)
    for n in range(n_nodes):
        subtree_end[n] = n + 1
    for n in range(n_nodes - 1, 0, -1):
        p = parent[n]
        if subtree_end[n] > subtree_end[p]:
            subtree_end[p] = subtree_end[n]
    return (node_byte[:n_nodes].copy(), node_depth[:n_nodes].copy(), subtree_end,
            tok_start[:n_nodes].copy(), tok_count[:n_nodes].copy())


def py_build_trie(flat, offsets, order):
    """Twin of ``build_trie``: an explicit dict trie flattened in preorder."""
    root: dict = {"children": {}, "tokens": []}
    for k, t in enumerate(order):
        node = root
        for byte in bytes(flat[offsets[t]:offsets[t + 1]]):
            node = node["children"].setdefault(byte, {"children": {}, "tokens": []})
        node["tokens"].append(k)
    node_byte, node_depth, subtree_end, tok_start, tok_count = [], [], [], [], []

    def visit(node, byte, depth):
        me = len(node_byte)
        node_byte.append(byte)
        node_depth.append(depth)
        subtree_end.append(0)
        tok_start.append(node["tokens"][0] if node["tokens"] else 0)
        tok_count.append(len(node["tokens"]))
        for b in sorted(node["children"]):
            visit(node["children"][b], b, depth + 1)
        subtree_end[me] = len(node_byte)

    visit(root, 0, 0)
    return tuple(np.array(a) for a in (node_byte, node_depth, subtree_end, tok_start, tok_count))
