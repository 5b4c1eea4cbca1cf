"""The index build in numpy: what a first use takes while the kernels are not compiled yet.

Compiling ``build_kernels`` costs seconds once per machine; for a small automaton these
vectorized walks give the same arrays in milliseconds (tests compare them with the kernels).
A state's walk reads every token byte by byte, all tokens at once, dropping each token at
the first byte the automaton rejects.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from ..distance import UNREACHABLE
from ..vocabulary_numpy import TokenRows

# The walks of one state over all tokens cost about 2e-8 s per token here (2 s for 463 states
# of Gemma's 262,144 tokens); compiling the index kernels costs about 5 s. Past this many
# token walks, the kernels pay for their compile.
WORK = 2 * 10 ** 8


def state_budget(n_tokens: int) -> int:
    """The most automaton states the numpy build takes on a vocabulary of ``n_tokens``."""
    return max(256, WORK // max(1, n_tokens))


def state_edges(rows: TokenRows, trans: np.ndarray, s: int, n_ids: int) -> tuple[np.ndarray, np.ndarray]:
    """(tokens sorted by id, next automaton states) of the tokens readable from state ``s``."""
    data, lengths = rows.data, rows.lengths
    q = trans[s, data[:, 0]]
    at = np.flatnonzero(q >= 0)
    q = q[at]
    slot = np.full(n_ids, -1, np.int32)
    j = 1
    while len(at):
        done = lengths[at] == j
        if done.any():
            slot[rows.order[at[done]]] = q[done]
            at, q = at[~done], q[~done]
        q = trans[q, data[at, j]]
        alive = q >= 0
        at, q = at[alive], q[alive]
        j += 1
    toks = np.flatnonzero(slot >= 0).astype(np.int32)
    return toks, slot[toks]


def explore(rows: TokenRows, trans: np.ndarray, n_ids: int, max_states: int | None = None):
    """``build_kernels.explore``'s (states, edge_offsets, edge_tokens, edge_next), or None when
    more than ``max_states`` (default: ``state_budget(n_ids)``) states are reachable."""
    if max_states is None:
        max_states = state_budget(n_ids)
    local = np.full(trans.shape[0], -1, np.int64)
    local[0] = 0
    states, offsets, toks, nexts = [0], [0], [], []
    i = 0
    while i < len(states):
        t, q = state_edges(rows, trans, states[i], n_ids)
        values, first = np.unique(q, return_index=True)
        for v in values[np.argsort(first)]:  # new states numbered as first met, in token order
            if local[v] < 0:
                local[v] = len(states)
                states.append(int(v))
        if len(states) > max_states:
            return None
        toks.append(t)
        nexts.append(local[q].astype(np.int32))
        offsets.append(offsets[-1] + len(t))
        i += 1
    return (np.array(states, np.int32), np.array(offsets, np.int64),
            np.concatenate(toks), np.concatenate(nexts))


def distances(offsets: np.ndarray, edge_next: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """``build_kernels.distances``: fewest tokens to acceptance, by backward BFS over the
    distinct (state, next state) pairs."""
    n = len(accepting)
    src = np.repeat(np.arange(n), np.diff(offsets))
    ok = edge_next >= 0
    pairs = np.unique(src[ok] * n + edge_next[ok])
    back: dict[int, list[int]] = {}
    for s, t in zip((pairs // n).tolist(), (pairs % n).tolist()):
        back.setdefault(t, []).append(s)
    dist = np.full(n, UNREACHABLE, np.int64)
    start = np.flatnonzero(accepting)
    dist[start] = 0
    queue = deque(start.tolist())
    while queue:
        t = queue.popleft()
        for s in back.get(t, ()):
            if dist[s] == UNREACHABLE:
                dist[s] = dist[t] + 1
                queue.append(s)
    return dist


def finalize(offsets, edge_tok, edge_next, dist, accepting, stop_ids) -> tuple:
    """``build_kernels.finalize``'s (keep, new_offsets, tokens, nexts, max_next, hashes); the
    hashes are other numbers, equal for equal masks as theirs are."""
    keep = np.flatnonzero(dist < UNREACHABLE).astype(np.int32)
    renum = np.full(len(dist), -1, np.int32)
    renum[keep] = np.arange(len(keep), dtype=np.int32)
    stop_ids = np.asarray(stop_ids, np.int32)
    new_offsets = np.zeros(len(keep) + 1, np.int64)
    max_next = np.zeros(len(keep), np.int32)
    hashes = []
    tokens, nexts = [], []
    for r, s in enumerate(keep.tolist()):
        t = edge_tok[offsets[s]:offsets[s + 1]]
        q = edge_next[offsets[s]:offsets[s + 1]]
        live = dist[q] < UNREACHABLE
        t, q = t[live], q[live]
        if len(q):
            max_next[r] = dist[q].max()
        q = renum[q]
        if accepting[s] and len(stop_ids):
            t = np.concatenate([t, stop_ids])
            q = np.concatenate([q, np.full(len(stop_ids), -1, np.int32)])
            by_id = np.argsort(t, kind="stable")
            t, q = t[by_id], q[by_id]
        tokens.append(t)
        nexts.append(q)
        new_offsets[r + 1] = new_offsets[r] + len(t)
        hashes.append(hash(t.tobytes()))
    return (keep, new_offsets, np.concatenate(tokens or [np.zeros(0, np.int32)]).astype(np.int32),
            np.concatenate(nexts or [np.zeros(0, np.int32)]).astype(np.int32), max_next, hashes)
