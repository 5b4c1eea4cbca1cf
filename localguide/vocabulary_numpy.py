"""The vocabulary trie and token rows in numpy: a first use's path, before the kernels compile.

``build_trie`` returns what ``vocabulary_kernels.build_trie`` returns (a test compares them),
computed from the tokens sorted by their bytes: each token adds the nodes past its longest
common prefix with the one before it, in preorder.
"""

from __future__ import annotations

import numpy as np


class TokenRows:
    """The text tokens sorted by their bytes (``order``), as rows of a zero-padded byte matrix."""

    def __init__(self, flat: np.ndarray, offsets: np.ndarray, order: np.ndarray):
        order = np.asarray(order, np.int64)
        lengths = offsets[order + 1] - offsets[order]
        n = len(order)
        width = int(lengths.max()) if n else 0
        rows = np.repeat(np.arange(n), lengths)
        row_start = np.cumsum(lengths) - lengths
        cols = np.arange(int(lengths.sum())) - np.repeat(row_start, lengths)
        data = np.zeros((n, width + 1), np.uint8)  # (a last column of padding: every row ends in one)
        data[rows, cols] = flat[np.repeat(offsets[order], lengths) + cols]
        self.order = order
        self.lengths = lengths
        self.data = data


def sorted_rows(flat: np.ndarray, offsets: np.ndarray) -> TokenRows:
    """The non-empty tokens sorted by their bytes (equal ones by id), as ``TokenRows``.

    The rows are compared as fixed-width strings, in which a token equals itself followed by
    zero bytes: the length, compared next, puts the shorter (a prefix) first, as ``sorted`` does."""
    ids = np.flatnonzero(np.diff(offsets) > 0)
    rows = TokenRows(flat, offsets, ids)
    if len(ids):
        perm = np.lexsort((rows.lengths, rows.data.view(f"S{rows.data.shape[1]}").ravel()))
        rows.order, rows.lengths, rows.data = ids[perm], rows.lengths[perm], rows.data[perm]
    return rows


def build_trie(flat: np.ndarray, offsets: np.ndarray, order: np.ndarray, rows: TokenRows | None = None) -> tuple:
    """(node_byte, node_depth, subtree_end, tok_start, tok_count) of the tokens ``order``
    (sorted by their bytes, all non-empty), as ``vocabulary_kernels.build_trie``; ``rows``:
    their ``TokenRows``, when made already."""
    tr = TokenRows(flat, offsets, order) if rows is None else rows
    n = len(order)
    lengths, data = tr.lengths, tr.data
    lcp = np.zeros(n, np.int64)
    if n > 1:
        shorter = np.minimum(lengths[1:], lengths[:-1])
        differ = data[1:] != data[:-1]
        differ[np.arange(data.shape[1])[None, :] >= shorter[:, None]] = True
        lcp[1:] = np.argmax(differ, axis=1)
    new = lengths - lcp  # nodes each token adds (0: the same bytes as the token before)
    first = 1 + np.cumsum(new) - new  # its first new node
    n_nodes = 1 + int(new.sum())
    creator = np.repeat(np.arange(n), new)
    depth = np.arange(n_nodes - 1) - np.repeat(first - 1, new) + np.repeat(lcp, new) + 1
    node_byte = np.zeros(n_nodes, np.uint8)
    node_depth = np.zeros(n_nodes, np.int32)
    tok_start = np.zeros(n_nodes, np.int32)
    node_byte[1:] = data[creator, depth - 1]
    node_depth[1:] = depth
    tok_start[1:] = creator
    # Each token ends at its last new node, or where the token before it ends.
    end = np.where(new > 0, first + new - 1, 0)
    end = np.maximum.accumulate(end) if n else end
    tok_count = np.bincount(end, minlength=n_nodes).astype(np.int32)
    tok_count[0] = 0
    # A node at depth d made by token k ends where the first later token branching off above
    # depth d begins.
    subtree_end = np.full(n_nodes, n_nodes, np.int32)
    node = np.arange(1, n_nodes)
    for d in range(1, int(depth.max()) + 1 if n else 1):
        at = node[depth == d]
        branching = np.flatnonzero(lcp < d)
        branching = branching[branching > 0]
        nxt = np.searchsorted(branching, creator[at - 1], side="right")
        found = nxt < len(branching)
        subtree_end[at[found]] = first[branching[nxt[found]]]
    return node_byte, node_depth, subtree_end, tok_start, tok_count
