"""Index construction kernels (Willard & Louf, Algorithms 3 and 4), each beside its twin.

From every automaton state reachable through whole tokens, a walk over the vocabulary
trie finds the allowed tokens and their next states (``explore``); ``distances`` gives
each state's fewest tokens to acceptance; ``finalize`` prunes dead ends and adds the
stop tokens; ``within_budget`` filters a mask on the per-token path, ``next_state`` and
``next_row`` read the next states in the form an Index keeps them (``packed``: each state's row
whole, or its usual next state and the positions that lead elsewhere).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..distance import UNREACHABLE
from ..runtime.numba_tools import _copy_into, _lowest_bit, _max_of, lower_bound

# --- index construction --------------------------------------------------------

@njit(cache=True)
def _walk(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans, s, slot, bits, stack):
    """Mark every token readable from DFA state ``s``: its bit in ``bits`` (a zeroed
    bitset over token ids) and its next state in ``slot[token]``. Returns how many."""
    n_nodes = len(node_byte)
    one = np.uint64(1)
    stack[0] = s
    n = 1
    count = 0
    while n < n_nodes:
        d = node_depth[n]
        q = trans[stack[d - 1], node_byte[n]]
        if q < 0:
            n = subtree_end[n]
            continue
        stack[d] = q
        for k in range(tok_start[n], tok_start[n] + tok_count[n]):
            t = order[k]
            slot[t] = q
            bits[t >> 6] |= one << np.uint64(t & 63)
        count += tok_count[n]
        n += 1
    return count


@njit(cache=True)
def _sweep(bits, slot, out_tok, out_next, count):
    """Write (token, slot[token]) for each set bit in id order from ``count``, clearing ``bits``."""
    one = np.uint64(1)
    for w in range(len(bits)):
        word = bits[w]
        if word == 0:
            continue
        bits[w] = 0
        while word:
            t = (w << 6) + _lowest_bit(word)
            out_tok[count] = t
            out_next[count] = slot[t]
            count += 1
            word &= word - one
    return count


@njit(cache=True, nogil=True)
def state_edges(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans, s):
    """(tokens sorted by id, next DFA states) of the tokens readable from DFA state ``s``:
    one state's row of ``explore``, for indexes built state by state."""
    n_ids = _max_of(order, 0) + 1
    slot = np.empty(n_ids, np.int32)
    bits = np.zeros((n_ids + 63) // 64, np.uint64)
    stack = np.empty(_max_of(node_depth, 0) + 1, np.int32)
    m = _walk(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans, s, slot, bits, stack)
    toks = np.empty(m, np.int32)
    nexts = np.empty(m, np.int32)
    _sweep(bits, slot, toks, nexts, 0)
    return toks, nexts


def py_state_edges(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans, s):
    """Twin of ``state_edges``, token by token without the trie."""
    toks, nexts = [], []
    for tok, data in sorted(_trie_tokens(node_byte, node_depth, tok_start, tok_count, order).items()):
        q = s
        for byte in data:
            q = trans[q, byte]
            if q < 0:
                break
        if q >= 0:
            toks.append(tok)
            nexts.append(q)
    return np.array(toks, np.int32), np.array(nexts, np.int32)


def _trie_tokens(node_byte, node_depth, tok_start, tok_count, order) -> dict:
    """Each token's bytes, recovered from the trie (so twins see the same vocabulary)."""
    token_bytes = {}
    path = []
    for n in range(1, len(node_byte)):
        path = path[: node_depth[n] - 1] + [int(node_byte[n])]
        for k in range(tok_start[n], tok_start[n] + tok_count[n]):
            token_bytes[int(order[k])] = bytes(path)
    return token_bytes


@njit(cache=True, nogil=True)
def explore(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans):
    """All DFA states reachable from state 0 through whole tokens, with their edges.

    Returns (states, edge_offsets, edge_tokens, edge_next): ``states[i]`` is a DFA
    state, its edges are ``edge_offsets[i]:edge_offsets[i+1]``, sorted by token id,
    and ``edge_next`` holds local state numbers (positions in ``states``). Each walk
    scatters into a token-id bitset, and sweeping its set bits yields the edges in id
    order without a sort.
    """
    n_dfa = trans.shape[0]
    seen = np.full(n_dfa, -1, np.int32)
    states = np.empty(n_dfa, np.int32)
    offsets = np.zeros(n_dfa + 1, np.int64)
    n_ids = _max_of(order, 0) + 1
    # Room for up to 256 states' worth of edges up front: pages never written cost nothing.
    capacity = min(n_dfa, 256) * len(order) + 1024
    out_tok = np.empty(capacity, np.int32)
    out_next = np.empty(capacity, np.int32)
    stack = np.empty(_max_of(node_depth, 0) + 1, np.int32)
    slot = np.empty(n_ids, np.int32)
    bits = np.zeros((n_ids + 63) // 64, np.uint64)
    count = 0
    n_states = 1
    states[0] = 0
    seen[0] = 0
    i = 0
    while i < n_states:
        m = _walk(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans, states[i],
                  slot, bits, stack)
        if count + m > len(out_tok):
            size = max(2 * len(out_tok), count + m)
            grown = np.empty(size, np.int32)
            _copy_into(grown, 0, out_tok, count)
            out_tok = grown
            grown = np.empty(size, np.int32)
            _copy_into(grown, 0, out_next, count)
            out_next = grown
        if m:
            end = _sweep(bits, slot, out_tok, out_next, count)
            for e in range(count, end):
                q = out_next[e]
                if seen[q] < 0:
                    seen[q] = n_states
                    states[n_states] = q
                    n_states += 1
                out_next[e] = seen[q]
            count = end
        i += 1
        offsets[i] = count
    return states[:n_states].copy(), offsets[:n_states + 1].copy(), out_tok[:count], out_next[:count]


def py_explore(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans):
    """Twin of ``explore``, token by token without the trie."""
    token_bytes = _trie_tokens(node_byte, node_depth, tok_start, tok_count, order)
    states, offsets, toks, nexts = [0], [0], [], []
    seen = {0: 0}
    i = 0
    while i < len(states):
        edges = []
        for tok in sorted(token_bytes):
            q = states[i]
            for byte in token_bytes[tok]:
                q = trans[q, byte]
                if q < 0:
                    break
            if q >= 0:
                edges.append((tok, q))
                if q not in seen:
                    seen[q] = len(states)
                    states.append(q)
        toks += [t for t, _ in edges]
        nexts += [q for _, q in edges]
        offsets.append(len(toks))
        i += 1
    return (np.array(states, np.int32), np.array(offsets, np.int64),
            np.array(toks, np.int32), np.array([seen[q] for q in nexts], np.int32))


@njit(cache=True, nogil=True)
def distances(offsets, edge_next, accepting):
    """Fewest tokens from each state to an accepting one (``UNREACHABLE``: never), by backward BFS.

    ``edge_next`` holds local state numbers (positions in ``offsets``); -1 is no edge.
    """
    n = len(accepting)
    # Distinct (source, target) pairs first: a state has thousands of token edges but
    # few distinct successors. Then the reverse edges in CSR form.
    mark = np.full(n, -1, np.int64)
    psrc = np.empty(len(edge_next), np.int32)
    pdst = np.empty(len(edge_next), np.int32)
    m = 0
    for s in range(n):
        for e in range(offsets[s], offsets[s + 1]):
            t = edge_next[e]
            if t >= 0 and mark[t] != s:
                mark[t] = s
                psrc[m] = s
                pdst[m] = t
                m += 1
    rcount = np.zeros(n + 1, np.int64)
    for p in range(m):
        rcount[pdst[p] + 1] += 1
    for s in range(n):
        rcount[s + 1] += rcount[s]
    rsrc = np.empty(m, np.int32)
    fill = rcount[:-1].copy()
    for p in range(m):
        t = pdst[p]
        rsrc[fill[t]] = psrc[p]
        fill[t] += 1
    dist = np.full(n, UNREACHABLE, np.int64)
    queue = np.empty(n, np.int32)
    head = 0
    tail = 0
    for s in range(n):
        if accepting[s]:
            dist[s] = 0
            queue[tail] = s
            tail += 1
    while head < tail:
        t = queue[head]
        head += 1
        for e in range(rcount[t], rcount[t + 1]):
            s = rsrc[e]
            if dist[s] == UNREACHABLE:
                dist[s] = dist[t] + 1
                queue[tail] = s
                tail += 1
    return dist


def py_distances(offsets, edge_next, accepting):
    """Twin of ``distances``: relax until nothing changes."""
    n = len(accepting)
    dist = [0 if accepting[s] else UNREACHABLE for s in range(n)]
    changed = True
    while changed:
        changed = False
        for s in range(n):
            for e in range(offsets[s], offsets[s + 1]):
                t = edge_next[e]
                if t >= 0 and dist[t] + 1 < dist[s]:
                    dist[s] = dist[t] + 1
                    changed = True
    return np.array(dist, np.int64)


@njit(cache=True, nogil=True)
def finalize(offsets, edge_tok, edge_next, dist, accepting, stop_ids):
    """Prune edges into states that cannot finish, add stop tokens to accepting states.

    ``edge_next`` holds local state numbers; states at ``UNREACHABLE`` are dropped and
    the rest renumbered in order. Returns (keep, new_offsets, tokens, nexts, max_next,
    hashes): stop tokens get next state -1, each state's tokens stay sorted, and
    ``hashes`` (one per kept state) lets the caller store identical masks once.
    """
    n = len(dist)
    renum = np.full(n, -1, np.int32)
    k = 0
    for s in range(n):
        if dist[s] < UNREACHABLE:
            renum[s] = k
            k += 1
    keep = np.empty(k, np.int32)
    new_offsets = np.zeros(k + 1, np.int64)
    tokens = np.empty(len(edge_tok) + k * len(stop_ids), np.int32)
    nexts = np.empty(len(tokens), np.int32)
    max_next = np.zeros(k, np.int32)
    hashes = np.zeros(k, np.uint64)
    c = 0
    for s in range(n):
        r = renum[s]
        if r < 0:
            continue
        keep[r] = s
        j = 0  # merge position in stop_ids
        h = np.uint64(1469598103934665603)
        m = 0
        for e in range(offsets[s], offsets[s + 1] + 1):
            t = edge_tok[e] if e < offsets[s + 1] else 2147483647
            if accepting[s]:
                while j < len(stop_ids) and stop_ids[j] < t:
                    tokens[c] = stop_ids[j]
                    nexts[c] = -1
                    h = (h ^ np.uint64(stop_ids[j])) * np.uint64(1099511628211)
                    c += 1
                    j += 1
            if e == offsets[s + 1]:
                break
            q = edge_next[e]
            if dist[q] >= UNREACHABLE:
                continue
            tokens[c] = t
            nexts[c] = renum[q]
            h = (h ^ np.uint64(t)) * np.uint64(1099511628211)
            if dist[q] > m:
                m = dist[q]
            c += 1
        new_offsets[r + 1] = c
        max_next[r] = m
        hashes[r] = h
    return keep, new_offsets, tokens[:c], nexts[:c], max_next, hashes


def py_finalize(offsets, edge_tok, edge_next, dist, accepting, stop_ids):
    """Twin of ``finalize`` (hashes are Python's own: compare them only for equality)."""
    keep = [s for s in range(len(dist)) if dist[s] < UNREACHABLE]
    renum = {s: i for i, s in enumerate(keep)}
    new_offsets, tokens, nexts, max_next, hashes = [0], [], [], [], []
    for s in keep:
        edges = [(int(edge_tok[e]), renum[int(edge_next[e])]) for e in range(offsets[s], offsets[s + 1])
                 if dist[edge_next[e]] < UNREACHABLE]
        max_next.append(max((int(dist[keep[q]]) for _, q in edges), default=0))
        if accepting[s]:
            edges = sorted(edges + [(int(t), -1) for t in stop_ids])
        tokens += [t for t, _ in edges]
        nexts += [q for _, q in edges]
        new_offsets.append(len(tokens))
        hashes.append(hash(tuple(t for t, _ in edges)))
    return (np.array(keep, np.int32), np.array(new_offsets, np.int64), np.array(tokens, np.int32),
            np.array(nexts, np.int32), np.array(max_next, np.int32), hashes)


# --- per-token work --------------------------------------------------------------

@njit(cache=True)
def within_budget(tokens, next_states, dist, limit, out):
    """Write to ``out`` the tokens whose next state can finish in ``limit`` tokens; return the count.

    A ``next_states`` entry of -1 (a stop token) always qualifies.
    """
    k = 0
    for i in range(len(tokens)):
        q = next_states[i]
        if q < 0 or dist[q] <= limit:
            out[k] = tokens[i]
            k += 1
    return k


def py_within_budget(tokens, next_states, dist, limit, out):
    kept = [t for t, q in zip(tokens, next_states) if q < 0 or dist[q] <= limit]
    out[: len(kept)] = kept
    return len(kept)


DENSE = -2  # ``next_default`` of a state whose row of next states is stored whole


@njit(cache=True, inline="always")
def next_state(default, value_offsets, values, position_offsets, positions, s, p):
    """The state the ``p``-th token of state ``s``'s mask leads to (-1: a stop token)."""
    d = default[s]
    if d == DENSE:
        return values[value_offsets[s] + p]
    a, b = position_offsets[s], position_offsets[s + 1]
    i = lower_bound(positions, a, b, p)
    if i < b and positions[i] == p:
        return values[value_offsets[s] + i - a]
    return d


def py_next_state(default, value_offsets, values, position_offsets, positions, s, p):
    d = int(default[s])
    if d == DENSE:
        return int(values[value_offsets[s] + p])
    a, b = int(position_offsets[s]), int(position_offsets[s + 1])
    row = [int(x) for x in positions[a:b]]
    return int(values[value_offsets[s] + row.index(p)]) if p in row else d


@njit(cache=True)
def next_row(default, value_offsets, values, position_offsets, positions, s, out):
    """Write state ``s``'s next states (as many as ``out`` holds: its mask's length) to ``out``."""
    d = default[s]
    v = value_offsets[s]
    if d == DENSE:
        for i in range(len(out)):
            out[i] = values[v + i]
        return
    out[:] = d
    a = position_offsets[s]
    for j in range(position_offsets[s + 1] - a):
        out[positions[a + j]] = values[v + j]


def py_next_row(default, value_offsets, values, position_offsets, positions, s, out):
    for i in range(len(out)):
        out[i] = py_next_state(default, value_offsets, values, position_offsets, positions, s, i)


@njit(cache=True, inline="always")
def mask_position(mask_sizes, mask_offsets, mask_tokens, excl_offsets, excl_tokens, vocab_size, m, t):
    """Where token ``t`` (an id of the vocabulary) stands among mask ``m``'s ids; -1 if not there.
    A large mask is its exclusions: ``t`` stands after the ids below it less those excluded."""
    if 2 * mask_sizes[m] > vocab_size:
        lo, hi = excl_offsets[m], excl_offsets[m + 1]
        i = lower_bound(excl_tokens, lo, hi, t)
        if i < hi and excl_tokens[i] == t:
            return -1
        return t - (i - lo)
    lo, hi = mask_offsets[m], mask_offsets[m + 1]
    i = lower_bound(mask_tokens, lo, hi, t)
    if i < hi and mask_tokens[i] == t:
        return i - lo
    return -1


def py_mask_position(mask_sizes, mask_offsets, mask_tokens, excl_offsets, excl_tokens, vocab_size, m, t):
    if 2 * int(mask_sizes[m]) > vocab_size:
        excluded = [int(x) for x in excl_tokens[excl_offsets[m]:excl_offsets[m + 1]]]
        return -1 if t in excluded else t - sum(x < t for x in excluded)
    ids = [int(x) for x in mask_tokens[mask_offsets[m]:mask_offsets[m + 1]]]
    return ids.index(t) if t in ids else -1


@njit(cache=True)
def large_mask_ids(excluded, vocab_size, out):
    """Write the ids of ``range(vocab_size)`` not in ``excluded`` (sorted) to ``out``."""
    k = 0
    j = 0
    for t in range(vocab_size):
        if j < len(excluded) and excluded[j] == t:
            j += 1
        else:
            out[k] = t
            k += 1


def py_large_mask_ids(excluded, vocab_size, out):
    out[:] = sorted(set(range(vocab_size)) - {int(x) for x in excluded})
