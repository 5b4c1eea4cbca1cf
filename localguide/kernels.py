"""All numba code of localguide, each kernel beside its plain-Python twin.

The twins (``py_*``) define what the kernels must compute; tests run both on the
same inputs and compare. Kernels are compiled with ``cache=True`` so a second
process loads machine code instead of compiling.

The vocabulary trie is stored in preorder: node ``n``'s subtree is the node range
``[n, subtree_end[n])``, so a walk skips a dead subtree with one assignment.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import carray, cfunc, njit, types
from numba.core import cgutils
from numba.extending import intrinsic


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
    subtree_end = np.arange(1, n_nodes + 1).astype(np.int32)
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


_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_INDEX = np.zeros(64, np.int32)
for _i in range(64):
    _DEBRUIJN_INDEX[((1 << _i) * 0x03F79D71B4CB0A89 & 0xFFFFFFFFFFFFFFFF) >> 58] = _i


@njit(cache=True)
def _lowest_bit(w):
    """Index of the lowest set bit of the uint64 ``w`` (non-zero)."""
    return _DEBRUIJN_INDEX[((w & (~w + np.uint64(1))) * _DEBRUIJN) >> np.uint64(58)]


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
    n_ids = np.max(order) + 1 if len(order) else 1
    slot = np.empty(n_ids, np.int32)
    bits = np.zeros((n_ids + 63) // 64, np.uint64)
    stack = np.empty(np.max(node_depth) + 1, np.int32)
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
    n_ids = np.max(order) + 1 if len(order) else 1
    # Room for up to 256 states' worth of edges up front: pages never written cost nothing.
    capacity = min(n_dfa, 256) * len(order) + 1024
    out_tok = np.empty(capacity, np.int32)
    out_next = np.empty(capacity, np.int32)
    stack = np.empty(np.max(node_depth) + 1, np.int32)
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
            grown[:count] = out_tok[:count]
            out_tok = grown
            grown = np.empty(size, np.int32)
            grown[:count] = out_next[:count]
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
    """Fewest tokens from each state to an accepting one (-1: never), by backward BFS.

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
    dist = np.full(n, -1, np.int32)
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
            if dist[s] < 0:
                dist[s] = dist[t] + 1
                queue[tail] = s
                tail += 1
    return dist


def py_distances(offsets, edge_next, accepting):
    """Twin of ``distances``: relax until nothing changes."""
    n = len(accepting)
    dist = [0 if accepting[s] else -1 for s in range(n)]
    changed = True
    while changed:
        changed = False
        for s in range(n):
            for e in range(offsets[s], offsets[s + 1]):
                t = edge_next[e]
                if t >= 0 and dist[t] >= 0 and (dist[s] < 0 or dist[t] + 1 < dist[s]):
                    dist[s] = dist[t] + 1
                    changed = True
    return np.array(dist, np.int32)


@njit(cache=True, nogil=True)
def finalize(offsets, edge_tok, edge_next, dist, accepting, stop_ids):
    """Prune edges into states that cannot finish, add stop tokens to accepting states.

    ``edge_next`` holds local state numbers; states with ``dist < 0`` are dropped and
    the rest renumbered in order. Returns (keep, new_offsets, tokens, nexts, max_next,
    hashes): stop tokens get next state -1, each state's tokens stay sorted, and
    ``hashes`` (one per kept state) lets the caller store identical masks once.
    """
    n = len(dist)
    renum = np.full(n, -1, np.int32)
    k = 0
    for s in range(n):
        if dist[s] >= 0:
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
            if dist[q] < 0:
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
    keep = [s for s in range(len(dist)) if dist[s] >= 0]
    renum = {s: i for i, s in enumerate(keep)}
    new_offsets, tokens, nexts, max_next, hashes = [0], [], [], [], []
    for s in keep:
        edges = [(int(edge_tok[e]), renum[int(edge_next[e])]) for e in range(offsets[s], offsets[s + 1])
                 if dist[edge_next[e]] >= 0]
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


@njit(cache=True)
def _grow(a, n):
    """A 1-D array twice as long (at least 16) holding ``a[:n]``; the rest is unset."""
    b = np.empty(max(2 * len(a), 16), a.dtype)
    b[:n] = a[:n]
    return b


# Work arrays. numba counts references to an array variable that a loop may reassign (a
# buffer that grows) at every iteration of that loop, atomically: most of the time of the
# tree walks (masks, and the subterminal trees of a compile). A kernel allocates such
# buffers into a list ``keep`` (one per dtype), which holds them for the call, and works on
# views without a count; it clears ``keep`` after its last use of the views, and returns
# copies, never the views.


@njit(cache=True, inline="always")
def _bare(a):
    """A view of ``a`` without reference counting: valid only while the caller holds ``a``."""
    return carray(_voidptr(a.ctypes.data), a.shape, a.dtype)


@njit(cache=True, inline="always")
def _work(keep, n):
    """A new 1-D work array of ``n`` entries of ``keep``'s dtype, held by ``keep``."""
    a = np.empty(n, keep[0].dtype)
    keep.append(a)
    return _bare(a)


@njit(cache=True, inline="always")
def _work2(keep, rows, cols):
    """A new 2-D work array (``rows`` × ``cols``, all -1) of ``keep``'s dtype, held by ``keep``."""
    a = np.full((rows, cols), -1, keep[0].dtype)
    keep.append(a)
    return _bare(a)


@njit(cache=True, inline="always")
def _work_grown(keep, a, n):
    """``_grow(a, n)`` as a ``_work`` array."""
    b = _work(keep, max(2 * len(a), 16))
    b[:n] = a[:n]
    return b


# --- DFA minimization ----------------------------------------------------------
#
# Valmari & Lehtinen's partition refinement ("Efficient minimization of DFAs with
# partial transition functions", 2008): Hopcroft's O(m log n) over the transitions
# that exist, with unreachable and dead-end states removed first. Labels are byte
# classes (bytes whose columns are equal in every row), so m stays small.


@njit(cache=True)
def _byte_classes(trans):
    """(class of each byte, first byte of each class, number of classes), classes numbered
    in the order of their first byte. Columns are compared by a hash taken row by row (the
    table is row-major), then checked row by row; a collision falls back to whole columns."""
    n = trans.shape[0]
    h = np.full(256, np.int64(1469598103934665603))
    for s in range(n):
        for b in range(256):
            h[b] = (h[b] ^ (trans[s, b] + 2)) * np.int64(1099511628211)
    cls, first, nc = _group_columns(trans, h, False)
    for s in range(n):
        for b in range(256):
            if trans[s, b] != trans[s, first[cls[b]]]:
                return _group_columns(trans, h, True)
    return cls, first, nc


@njit(cache=True)
def _group_columns(trans, h, exact):
    """Bytes grouped by column hash ``h`` (and, if ``exact``, by the whole column)."""
    cls = np.empty(256, np.int64)
    first = np.empty(256, np.int64)
    nc = 0
    for b in range(256):
        found = -1
        for c in range(nc):
            r = first[c]
            if h[r] != h[b]:
                continue
            same = True
            if exact:
                for s in range(trans.shape[0]):
                    if trans[s, r] != trans[s, b]:
                        same = False
                        break
            if same:
                found = c
                break
        if found < 0:
            found = nc
            first[nc] = b
            nc += 1
        cls[b] = found
    return cls, first, nc


@njit(cache=True)
def _mark(E, L, S, F, M, W, st, e):
    s = S[e]
    i = L[e]
    j = F[s] + M[s]
    E[i] = E[j]
    L[E[i]] = i
    E[j] = e
    L[e] = j
    if M[s] == 0:
        W[st[0]] = s
        st[0] += 1
    M[s] += 1


@njit(cache=True)
def _split(E, S, F, P, M, W, st, zi):
    """Split every touched set into its marked and unmarked parts; the smaller part is new."""
    while st[0] > 0:
        st[0] -= 1
        s = W[st[0]]
        j = F[s] + M[s]
        if j == P[s]:
            M[s] = 0
            continue
        z = st[zi]
        if M[s] <= P[s] - j:
            F[z] = F[s]
            P[z] = j
            F[s] = j
        else:
            P[z] = P[s]
            F[z] = j
            P[s] = j
        for i in range(F[z], P[z]):
            S[E[i]] = z
        M[s] = 0
        M[z] = 0
        st[zi] = z + 1


@njit(cache=True)
def _adjacent(K, m, n, A, Fa):
    """Transitions grouped by ``K`` (tails or heads): those of state q are ``A[Fa[q]:Fa[q + 1]]``."""
    Fa[:] = 0
    for t in range(m):
        Fa[K[t]] += 1
    for q in range(n):
        Fa[q + 1] += Fa[q]
    for t in range(m - 1, -1, -1):
        Fa[K[t]] -= 1
        A[Fa[K[t]]] = t


@njit(cache=True)
def _reach(BE, BL, st, q):
    i = BL[q]
    rr = st[3]
    if i >= rr:
        BE[i] = BE[rr]
        BL[BE[i]] = i
        BE[rr] = q
        BL[q] = rr
        st[3] = rr + 1


@njit(cache=True)
def _keep_reached(T, H, Lb, m, n, BE, BL, BP, A, Fa, st):
    """Reach along T → H from the states reached so far; drop transitions whose ``T`` end
    was not reached. Returns the new number of transitions."""
    _adjacent(T, m, n, A, Fa)
    i = 0
    while i < st[3]:
        q = BE[i]
        for j in range(Fa[q], Fa[q + 1]):
            _reach(BE, BL, st, H[A[j]])
        i += 1
    k = 0
    rr = st[3]
    for t in range(m):
        if BL[T[t]] < rr:
            H[k] = H[t]
            Lb[k] = Lb[t]
            T[k] = T[t]
            k += 1
    BP[0] = rr
    st[3] = 0
    return k


@njit(cache=True, nogil=True)
def minimize_dfa(trans, accepting):
    """The minimal DFA of ``(trans int32[n, 256], accepting bool[n])`` from state 0:
    (transitions int32[k, 256], accepting bool[k]), every state reachable and able to
    accept, numbered breadth-first from the start with successors in byte order. The
    empty language gives one non-accepting state without transitions."""
    n = trans.shape[0]
    cls, first, nc = _byte_classes(trans)
    m = 0
    for s in range(n):
        for c in range(nc):
            if trans[s, first[c]] >= 0:
                m += 1
    T = np.empty(m, np.int64)
    H = np.empty(m, np.int64)
    Lb = np.empty(m, np.int64)
    m = 0
    for s in range(n):
        for c in range(nc):
            t = trans[s, first[c]]
            if t >= 0:
                T[m] = s
                H[m] = t
                Lb[m] = c
                m += 1
    # st: [touched sets, blocks, cords, states reached]
    st = np.zeros(4, np.int64)
    BE = np.arange(n)
    BL = np.arange(n)
    BS = np.zeros(n, np.int64)
    BF = np.zeros(n + 1, np.int64)
    BP = np.zeros(n + 1, np.int64)
    BP[0] = n
    st[1] = 1
    A = np.empty(max(m, 1), np.int64)
    Fa = np.zeros(n + 1, np.int64)
    _reach(BE, BL, st, 0)
    m = _keep_reached(T, H, Lb, m, n, BE, BL, BP, A, Fa, st)
    for q in range(n):
        if accepting[q] and BL[q] < BP[0]:
            _reach(BE, BL, st, q)
    ff = st[3]
    m = _keep_reached(H, T, Lb, m, n, BE, BL, BP, A, Fa, st)
    live = BP[0]
    if BL[0] >= live:
        return np.full((1, 256), -1, np.int32), np.zeros(1, np.bool_)
    size = max(n, m) + 1
    M = np.zeros(size, np.int64)
    W = np.zeros(size, np.int64)
    if ff > 0:  # accepting states first: split them from the rest
        M[0] = ff
        W[0] = 0
        st[0] = 1
        _split(BE, BS, BF, BP, M, W, st, 1)
    # Cords: the transitions, partitioned by label.
    CE = _counting_order(Lb, nc, np.arange(m))
    CL = np.empty(max(m, 1), np.int64)
    CS = np.zeros(max(m, 1), np.int64)
    CF = np.zeros(m + 1, np.int64)
    CP = np.zeros(m + 1, np.int64)
    if m > 0:
        z = 0
        a = Lb[CE[0]]
        for i in range(m):
            t = CE[i]
            if Lb[t] != a:
                a = Lb[t]
                CP[z] = i
                z += 1
                CF[z] = i
            CS[t] = z
            CL[t] = i
        CP[z] = m
        st[2] = z + 1
    _adjacent(H, m, n, A, Fa)
    b = 1
    c = 0
    while c < st[2]:
        for i in range(CF[c], CP[c]):
            _mark(BE, BL, BS, BF, M, W, st, T[CE[i]])
        _split(BE, BS, BF, BP, M, W, st, 1)
        c += 1
        while b < st[1]:
            for i in range(BF[b], BP[b]):
                q = BE[i]
                for j in range(Fa[q], Fa[q + 1]):
                    _mark(CE, CL, CS, CF, M, W, st, A[j])
            _split(CE, CS, CF, CP, M, W, st, 2)
            b += 1
    # Number the blocks breadth-first from the start's, successors in byte order.
    nb = st[1]
    remap = np.full(nb, -1, np.int64)
    order = np.empty(nb, np.int64)
    remap[BS[0]] = 0
    order[0] = BS[0]
    k = 1
    i = 0
    while i < k:
        rep = BE[BF[order[i]]]
        for cc in range(nc):
            t = trans[rep, first[cc]]
            if t >= 0 and BL[t] < live and remap[BS[t]] < 0:
                remap[BS[t]] = k
                order[k] = BS[t]
                k += 1
        i += 1
    out = np.empty((k, 256), np.int32)
    acc = np.zeros(k, np.bool_)
    row = np.empty(nc, np.int32)
    for i in range(k):
        rep = BE[BF[order[i]]]
        acc[i] = accepting[rep]
        for cc in range(nc):
            t = trans[rep, first[cc]]
            row[cc] = remap[BS[t]] if t >= 0 and BL[t] < live else -1
        for byte in range(256):
            out[i, byte] = row[cls[byte]]
    return out, acc


def py_minimize_dfa(trans, accepting):
    """Twin of ``minimize_dfa``: Moore's refinement over byte classes (see ``refine``)."""
    n = len(accepting)
    sink = n
    t = np.where(trans < 0, sink, trans).astype(np.int64)
    t = np.vstack([t, np.full((1, 256), sink, np.int64)])
    _, first_col, byte_class = np.unique(t.T, axis=0, return_index=True, return_inverse=True)
    # Classes in the order of their first byte, so that the numbering below is canonical.
    by_first = np.argsort(first_col)
    rank = np.empty_like(by_first)
    rank[by_first] = np.arange(len(by_first))
    byte_class = rank[byte_class.reshape(-1)]
    tc = t[:, first_col[by_first]]  # [n+1, n_classes]
    acc = np.append(np.asarray(accepting, bool), False)
    block, count = refine(acc, tc)
    dead = block[sink]
    rep = {}
    for s in range(n + 1):
        rep.setdefault(int(block[s]), s)
    start = int(block[0])
    if start == dead:
        return np.full((1, 256), -1, np.int32), np.zeros(1, bool)
    index = {start: 0}
    order = [start]
    i = 0
    while i < len(order):
        for nxt in block[tc[rep[order[i]]]].tolist():
            if nxt != dead and nxt not in index:
                index[nxt] = len(order)
                order.append(nxt)
        i += 1
    remap = np.full(count, -1, np.int64)
    for b, k in index.items():
        remap[b] = k
    reps = np.array([rep[b] for b in order])
    out = remap[block[tc[reps]]][:, byte_class].astype(np.int32)
    return np.ascontiguousarray(out), acc[reps].copy()


_MIX = np.random.default_rng(0x10ca1).integers(1, 1 << 62, size=257, dtype=np.int64) | 1


def refine(acc: np.ndarray, tc: np.ndarray, max_rounds: int | None = None):
    """Moore's refinement of the states of ``tc`` (int[n, classes], every target a state):
    (block of each state, number of blocks), or None past ``max_rounds`` rounds."""
    got = _refine(acc, tc, hashed=True, max_rounds=max_rounds)
    if got is not None and not _stable(got[0], tc, acc):  # a hash collision merged two states
        got = _refine(acc, tc, hashed=False, max_rounds=max_rounds)
    return got


def _refine(acc: np.ndarray, tc: np.ndarray, hashed: bool, max_rounds: int | None = None):
    """Moore's refinement: (block of each state, number of blocks), None past ``max_rounds``.

    A state's signature is its block and its successors' blocks; ``hashed`` compares
    signatures by a 64-bit mix instead of whole rows (much faster, checked afterwards).
    """
    block = acc.astype(np.int64)
    count = int(block.max()) + 1
    mix = _MIX[: tc.shape[1] + 1]
    rounds = 0
    while True:
        rounds += 1
        if max_rounds is not None and rounds > max_rounds:
            return None
        sig = np.concatenate([block[:, None], block[tc]], axis=1)
        if hashed:
            _, new = np.unique(sig @ mix, return_inverse=True)
        else:
            _, new = np.unique(sig, axis=0, return_inverse=True)
        block = new.reshape(-1).astype(np.int64)
        found = int(block.max()) + 1
        if found == count:
            return block, count
        count = found


def _stable(block: np.ndarray, tc: np.ndarray, acc: np.ndarray) -> bool:
    """Whether states in the same block agree on acceptance and have successors in the same
    blocks: then merging each block keeps the language, whatever hashing did."""
    rep = np.zeros(int(block.max()) + 1, np.int64)
    rep[block] = np.arange(len(block))  # one state of each block
    same = rep[block]
    return bool(np.array_equal(acc, acc[same]) and np.array_equal(block[tc], block[tc][same]))


# --- subset construction over sub-automaton instances (JSON Schema) ---------------
#
# ``jsonschema_dfa`` glues minimal sub-DFAs ("instances", each with its continuations)
# Glushkov-style; a state of the result is a set of elements: a global state ``g >= 0``
# (instance offset + the sub-DFA's state) or ``-1 - k`` for exit ``k`` (an instance that
# has just entered its dead-end final state; instances with the same continuations share
# an exit). The start state reads the rows ``start`` as they are; any other state also
# reads, for each accepting element, the starts of the instances that follow it.


@njit(cache=True, inline="always")
def _target(tabs, inst_tab, inst_goff, inst_final, inst_exit, g_inst, g, b):
    a = g_inst[g]
    v = tabs[inst_tab[a] + g - inst_goff[a], b]
    if v < 0:
        return np.int64(1) << 40  # none
    if v == inst_final[a]:
        return -1 - inst_exit[a]
    return inst_goff[a] + v


@njit(cache=True, nogil=True)
def subset_dfa(tabs, acc_tab, inst_tab, inst_goff, inst_final, inst_exit, inst_last, g_inst,
               fol_off, fol, exit_acc, exit_off, exit_fol, start, start_acc, max_states):
    """(transitions int32[n, 256], accepting bool[n], ok): the subset construction described
    above, states numbered as first met (breadth-first, bytes in order); ``ok`` is False when
    it would exceed ``max_states`` states."""
    none = np.int64(1) << 40
    # Bytes with equal columns in every sub-DFA lead to the same sets: one pass per class.
    cls, first, nc = _byte_classes(tabs)
    per_class = np.full(nc, -1, np.int32)
    cap = 64
    trans = np.full((cap, 256), -1, np.int32)
    acc = np.zeros(cap, np.bool_)
    store = np.empty(1024, np.int64)  # the element sets, one after another
    key_off = np.zeros(cap + 1, np.int64)  # set i is store[key_off[i]:key_off[i + 1]]; set 0 unused
    hashes = np.zeros(cap, np.int64)
    ht = np.full(1024, -1, np.int64)
    n = 1
    rows = np.empty(64, np.int64)
    buf = np.empty(64, np.int64)
    i = 0
    while i < n:
        # the rows this state reads, and whether it accepts
        k = 0
        if i == 0:
            a_ = start_acc
            rows, k = _append_range(rows, k, start, 0, len(start))
        else:
            a_ = False
            for p in range(key_off[i], key_off[i + 1]):
                el = store[p]
                if el >= 0:
                    rows, k = _append_range(rows, k, store, p, p + 1)
                    a = g_inst[el]
                    if acc_tab[inst_tab[a] + el - inst_goff[a]]:
                        if inst_last[a]:
                            a_ = True
                        rows, k = _append_range(rows, k, fol, fol_off[a], fol_off[a + 1])
                else:
                    e = -1 - el
                    if exit_acc[e]:
                        a_ = True
                    rows, k = _append_range(rows, k, exit_fol, exit_off[e], exit_off[e + 1])
        acc[i] = a_
        if len(buf) < k:
            buf = np.empty(2 * k, np.int64)
        per_class[:] = -1
        for cc in range(nc):
            b = first[cc]
            m = 0
            for j in range(k):
                t = _target(tabs, inst_tab, inst_goff, inst_final, inst_exit, g_inst, rows[j], b)
                if t == none:
                    continue
                # insertion into the sorted, duplicate-free buffer
                p = m
                while p > 0 and buf[p - 1] > t:
                    p -= 1
                if p > 0 and buf[p - 1] == t:
                    continue
                for q in range(m, p, -1):
                    buf[q] = buf[q - 1]
                buf[p] = t
                m += 1
            if m == 0:
                continue
            h = np.int64(1469598103934665603)
            for j in range(m):
                h = (h ^ buf[j]) * np.int64(1099511628211)
            mask = len(ht) - 1
            slot = h & mask
            found = -1
            while ht[slot] >= 0:
                c = ht[slot]
                if hashes[c] == h and key_off[c + 1] - key_off[c] == m:
                    same = True
                    for j in range(m):
                        if store[key_off[c] + j] != buf[j]:
                            same = False
                            break
                    if same:
                        found = c
                        break
                slot = (slot + 1) & mask
            if found < 0:
                if n >= max_states:
                    return trans[:n], acc[:n], False
                found = n
                if n == cap:
                    cap *= 2
                    t2 = np.full((cap, 256), -1, np.int32)
                    t2[:n] = trans[:n]
                    trans = t2
                    acc = _grow(acc, n)
                    key_off = _grow(key_off, n + 1)
                    hashes = _grow(hashes, n)
                end = key_off[n]
                while end + m > len(store):
                    store = _grow(store, end)
                store[end:end + m] = buf[:m]
                key_off[n + 1] = end + m
                hashes[n] = h
                ht[slot] = n
                n += 1
                if 2 * n > len(ht):  # keep the table at most half full
                    ht = np.full(2 * len(ht), -1, np.int64)
                    mask = len(ht) - 1
                    for c in range(1, n):
                        s2 = hashes[c] & mask
                        while ht[s2] >= 0:
                            s2 = (s2 + 1) & mask
                        ht[s2] = c
            per_class[cc] = found
        for b in range(256):
            trans[i, b] = per_class[cls[b]]
        i += 1
    return trans[:n], acc[:n], True




@njit(cache=True, inline="always")
def _append_range(rows, k, src, lo, hi):
    """``src[lo:hi]`` appended to ``rows[:k]`` (grown as needed): (rows, new k)."""
    for j in range(lo, hi):
        if k == len(rows):
            rows = _grow(rows, k)
        rows[k] = src[j]
        k += 1
    return rows, k


def py_subset_dfa(tabs, acc_tab, inst_tab, inst_goff, inst_final, inst_exit, inst_last, g_inst,
                  fol_off, fol, exit_acc, exit_off, exit_fol, start, start_acc, max_states):
    """Twin of ``subset_dfa``."""
    def target(g, b):
        a = int(g_inst[g])
        v = int(tabs[inst_tab[a] + g - inst_goff[a], b])
        if v < 0:
            return None
        return -1 - int(inst_exit[a]) if v == inst_final[a] else int(inst_goff[a]) + v

    ids: dict = {}
    keys: list = [None]
    rows_out, acc_out = [], []
    i = 0
    while i < len(keys):
        if i == 0:
            rows, accepting = [int(x) for x in start], bool(start_acc)
        else:
            rows, accepting = [], False
            for el in keys[i]:
                if el >= 0:
                    rows.append(el)
                    a = int(g_inst[el])
                    if acc_tab[inst_tab[a] + el - inst_goff[a]]:
                        accepting = accepting or bool(inst_last[a])
                        rows += fol[fol_off[a]:fol_off[a + 1]].tolist()
                else:
                    e = -1 - el
                    accepting = accepting or bool(exit_acc[e])
                    rows += exit_fol[exit_off[e]:exit_off[e + 1]].tolist()
        row = np.full(256, -1, np.int32)
        for b in range(256):
            key = tuple(sorted({t for t in (target(g, b) for g in rows) if t is not None}))
            if not key:
                continue
            if key not in ids:
                if len(keys) >= max_states:
                    return (np.array(rows_out + [row], np.int32).reshape(-1, 256),
                            np.array(acc_out + [accepting], bool), False)
                ids[key] = len(keys)
                keys.append(key)
            row[b] = ids[key]
        rows_out.append(row)
        acc_out.append(accepting)
        i += 1
    return np.array(rows_out, np.int32).reshape(-1, 256), np.array(acc_out, bool), True


@intrinsic
def _voidptr(typingctx, address):
    """An integer address as a ``void*`` that ``numba.carray`` accepts."""
    sig = types.voidptr(address)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


@njit(cache=True)
def mask_candidates_at(array_address, tokens, exclude):
    """Apply a mask to the ``llama_token_data_array`` at ``array_address``, in place.

    The struct is (data pointer, size, ...): both are read here and the new size is
    written back, so the caller makes a single call. With ``exclude`` false,
    ``tokens`` are the allowed ids and the candidates are compacted to them
    (O(len(tokens))); with ``exclude`` true they are the forbidden ids, whose logits
    become -inf (O(len(tokens))), which is cheaper for masks that allow most tokens.
    The array must be llama.cpp's fresh one, in token-id order (the guide sampler
    comes first in its chain): returns False, leaving the size as it was, if it is not.
    """
    header = carray(_voidptr(array_address), (2,), np.int64)
    data = carray(_voidptr(header[0]), (header[1], 3), np.int32)
    if exclude:
        header[1] = exclude_candidates(data, tokens)
        return True
    k = keep_in_id_order(data, tokens)
    if k < 0:
        return False
    header[1] = k
    return True


@njit(cache=True)
def exclude_candidates(data, forbidden):
    """Set the logit of every ``forbidden`` id to -inf; return the (unchanged) size."""
    size = data.shape[0]
    logits = data[:, 1:2].view(np.float32)
    if _at_own_index(data, forbidden):
        for t in forbidden:
            logits[t, 0] = -np.inf
        return size
    for i in range(size):
        pos = np.searchsorted(forbidden, data[i, 0])
        if pos < len(forbidden) and forbidden[pos] == data[i, 0]:
            logits[i, 0] = -np.inf
    return size


def py_exclude_candidates(data, forbidden):
    """Twin of ``exclude_candidates``."""
    bad = set(int(t) for t in forbidden)
    logits = data[:, 1:2].view(np.float32)
    for i in range(data.shape[0]):
        if int(data[i, 0]) in bad:
            logits[i, 0] = -np.inf
    return data.shape[0]


@njit(cache=True)
def _at_own_index(data, ids):
    """True when every id in ``ids`` sits at row ``id`` (llama.cpp's fresh id-ordered array)."""
    size = data.shape[0]
    for t in ids:
        if t < 0 or t >= size or data[t, 0] != t:
            return False
    return True


@njit(cache=True)
def keep_candidates(data, allowed):
    """Compact an ``int32[size, 3]`` view of (id, logit bits, p bits) records to the ``allowed`` ids.

    ``allowed`` is sorted and ids are unique. When every allowed id sits at its own
    row (our sampler runs first, on llama.cpp's id-ordered array) this costs
    O(len(allowed)); otherwise O(size log len(allowed)). Returns the new size.
    """
    k = len(allowed)
    if _at_own_index(data, allowed):
        for j in range(k):
            t = allowed[j]
            if t != j:
                data[j, 0] = data[t, 0]
                data[j, 1] = data[t, 1]
                data[j, 2] = data[t, 2]
        return k
    j = 0
    for i in range(data.shape[0]):
        pos = np.searchsorted(allowed, data[i, 0])
        if pos < k and allowed[pos] == data[i, 0]:
            data[j, 0] = data[i, 0]
            data[j, 1] = data[i, 1]
            data[j, 2] = data[i, 2]
            j += 1
    return j


@njit(cache=True)
def keep_in_id_order(data, allowed):
    """``keep_candidates`` for llama.cpp's fresh array, where row ``i`` holds token ``i``: one pass.

    The native sampler runs first in its chain, so it always gets that array; each row
    read and each row overwritten is still checked, and -1 is returned (the rows before
    the mismatch already rewritten) if the array was not in id order after all.
    """
    k = len(allowed)
    n = data.shape[0]
    for j in range(k):
        t = allowed[j]
        if t >= n or data[t, 0] != t or data[j, 0] != j:
            return -1
        if t != j:
            data[j, 0] = t
            data[j, 1] = data[t, 1]
            data[j, 2] = data[t, 2]
    return k


def py_keep_in_id_order(data, allowed):
    """Twin of ``keep_in_id_order``."""
    n = data.shape[0]
    for j, t in enumerate(int(t) for t in allowed):
        if t >= n or int(data[t, 0]) != t or int(data[j, 0]) != j:
            return -1
    return py_keep_candidates(data, allowed)


def py_keep_candidates(data, allowed):
    """Twin of ``keep_candidates``: a stable filter of the rows whose id is allowed."""
    allowed_set = set(int(t) for t in allowed)
    rows = [data[i].copy() for i in range(data.shape[0]) if int(data[i, 0]) in allowed_set]
    for j, row in enumerate(rows):
        data[j] = row
    return len(rows)


# --- native sampler: llama.cpp calls these directly, no Python per token --------------
#
# A guide block is an int64 array: the cursor (state, remaining budget, finished,
# error) followed by the addresses of the Index arrays. llama.cpp hands it to the
# callbacks as the sampler's ctx pointer.

B_STATE, B_REMAINING, B_FINISHED, B_ERROR, B_ERROR_TOKEN = 0, 1, 2, 3, 4
(B_STATE_MASK, B_MASK_OFFSETS, B_MASK_TOKENS, B_EXCL_OFFSETS, B_EXCL_TOKENS, B_NEXT_OFFSETS,
 B_NEXT_STATES, B_DISTANCE, B_MAX_NEXT, B_SIZES) = range(5, 15)
BLOCK_LEN = 15
ERROR_FINISHED, ERROR_NOT_ALLOWED, ERROR_OVER_BUDGET, ERROR_ORDER = 1, 2, 3, 4
_BIG = 1 << 40  # carray needs a shape; bounds come from the offsets


@njit(cache=True, inline="always")
def _i32(address):
    return carray(_voidptr(address), (_BIG,), np.int32)


@njit(cache=True, inline="always")
def _i64(address):
    return carray(_voidptr(address), (_BIG,), np.int64)


@njit(cache=True, inline="always")
def _state_mask(block, s):
    """(mask id, allowed token ids) of state ``s`` of the Index behind ``block``."""
    m = _i32(block[B_STATE_MASK])[s]
    mo = _i64(block[B_MASK_OFFSETS])
    return m, _i32(block[B_MASK_TOKENS])[mo[m]:mo[m + 1]]


@njit(cache=True)
def block_apply(block, array_address):
    """The guide's mask applied to the candidate array (see ``mask_candidates_at``)."""
    header = carray(_voidptr(array_address), (2,), np.int64)
    data = carray(_voidptr(header[0]), (header[1], 3), np.int32)
    if block[B_FINISHED]:
        block[B_ERROR] = ERROR_FINISHED
        return
    s = block[B_STATE]
    m, tokens = _state_mask(block, s)
    r = block[B_REMAINING]
    if r >= 0 and _i32(block[B_MAX_NEXT])[s] > r - 1:
        no = _i64(block[B_NEXT_OFFSETS])
        kept = np.empty(len(tokens), np.int32)
        k = within_budget(tokens, _i32(block[B_NEXT_STATES])[no[s]:no[s + 1]], _i32(block[B_DISTANCE]),
                          r - 1, kept)
        tokens = kept[:k]
    else:
        eo = _i64(block[B_EXCL_OFFSETS])
        if 2 * len(tokens) > block[B_SIZES]:
            header[1] = exclude_candidates(data, _i32(block[B_EXCL_TOKENS])[eo[m]:eo[m + 1]])
            return
    k = keep_in_id_order(data, tokens)
    if k < 0:  # reported after this sample; an empty array would abort llama.cpp
        block[B_ERROR] = ERROR_ORDER
        return
    header[1] = k


@njit(cache=True)
def block_accept(block, token):
    """Advance the guide block past ``token`` (errors are flagged in the block, not raised)."""
    if block[B_ERROR] == ERROR_ORDER:  # this token was not sampled under the mask
        return
    if block[B_FINISHED]:
        block[B_ERROR] = ERROR_FINISHED
        block[B_ERROR_TOKEN] = token
        return
    s = block[B_STATE]
    _, tokens = _state_mask(block, s)
    pos = np.searchsorted(tokens, token)
    if pos >= len(tokens) or tokens[pos] != token:
        block[B_ERROR] = ERROR_NOT_ALLOWED
        block[B_ERROR_TOKEN] = token
        return
    nxt = _i32(block[B_NEXT_STATES])[_i64(block[B_NEXT_OFFSETS])[s] + pos]
    if nxt < 0:
        block[B_FINISHED] = 1
        return
    r = block[B_REMAINING]
    if r >= 0:
        if _i32(block[B_DISTANCE])[nxt] > r - 1:
            block[B_ERROR] = ERROR_OVER_BUDGET
            block[B_ERROR_TOKEN] = token
            return
        block[B_REMAINING] = r - 1
    block[B_STATE] = nxt


@lru_cache(maxsize=None)
def native_callbacks():
    """(apply, accept) as C function pointers for ``llama_sampler_i``, compiled on first use.

    ``smpl`` is llama.cpp's ``{iface, ctx}`` struct; ctx is the guide block.
    """

    @cfunc(types.void(types.voidptr, types.voidptr), cache=True)
    def native_apply(smpl, cur_p):
        ctx = carray(smpl, (2,), np.int64)[1]
        block_apply(_i64(ctx), cur_p)

    @cfunc(types.void(types.voidptr, types.int32), cache=True)
    def native_accept(smpl, token):
        ctx = carray(smpl, (2,), np.int64)[1]
        block_accept(_i64(ctx), token)

    return native_apply.address, native_accept.address


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


@njit(cache=True)
def _counting_order(keys, n_keys, perm):
    """Stable reordering of ``perm`` by ``keys[perm]`` (values in ``[0, n_keys)``)."""
    count = np.zeros(n_keys + 1, np.int64)
    for i in range(len(perm)):
        count[keys[perm[i]] + 1] += 1
    for k in range(n_keys):
        count[k + 1] += count[k]
    out = np.empty(len(perm), np.int64)
    for i in range(len(perm)):
        k = keys[perm[i]]
        out[count[k]] = perm[i]
        count[k] += 1
    return out


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
                                        gc[:n_seq] = child[:n_seq]
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
            perm = np.arange(n_out)
            if n_out * 16 < vocab_size:
                key = np.empty(n_out, np.int64)
                for i in range(n_out):
                    key[i] = (((np.int64(e_s[i]) * n_states + e_c[i]) * (max_lead + 1) + e_l[i]) * vocab_size
                              + e_tok[i])
                perm = np.argsort(key, kind="mergesort")
            else:
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
            us = np.unique(u_tok[:n_u])
            while n_unres + len(us) > len(unres_tok):
                unres_tok = _work_grown(k32, unres_tok, n_unres)
            unres_tok[n_unres:n_unres + len(us)] = us
            n_unres += len(us)
        unres_off[oi + 1] = n_unres
    grp_off[n_grp] = n_gtok
    out = (seq_parent[:n_gseq].copy(), seq_term[:n_gseq].copy(), tree_seq, grp_seq[:n_grp].copy(),
           grp_state[:n_grp].copy(), grp_lead[:n_grp].copy(), grp_off[:n_grp + 1].copy(),
           grp_tok[:n_gtok].copy(), unres_off, unres_tok[:n_unres].copy())
    k32.clear()  # the work arrays die here, after the copies
    k64.clear()
    k2.clear()
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


@njit(cache=True)
def _radix_sort(a, bound):
    """``a`` (ints in ``0..bound-1``) sorted: LSD radix sort, 11 bits a pass.

    Cheaper than ``np.sort`` here, and loading numba's cached ``np.sort`` costs half a
    second per process.
    """
    out = a.copy()
    tmp = np.empty_like(a)
    counts = np.zeros(2049, np.int64)
    shift = 0
    while (bound - 1) >> shift > 0:
        counts[:] = 0
        for i in range(len(out)):
            counts[((out[i] >> shift) & 2047) + 1] += 1
        for k in range(2048):
            counts[k + 1] += counts[k]
        for i in range(len(out)):
            d = (out[i] >> shift) & 2047
            tmp[counts[d]] = out[i]
            counts[d] += 1
        out, tmp = tmp, out
        shift += 11
    return out


def py_union_groups(grp_off, grp_tok, gids, extra, marks):
    """Twin of ``union_groups``."""
    parts = [grp_tok[grp_off[g]:grp_off[g + 1]] for g in gids] + [np.asarray(extra, np.int32)]
    out = np.unique(np.concatenate(parts)).astype(np.int32)
    return out[(out >= 0) & (out < len(marks))]


# --- grammar scanner: subset construction over terminal readings -----------------

@njit(cache=True, nogil=True)
def scanner_closure(r_next, h1, h2, st_off, st_rd, max_states):
    """The scanner's combined DFA, from its seed states outward.

    A state is a sorted set of readings (``st_rd[st_off[i]:st_off[i+1]]``; the seeds come
    first); ``r_next[r, b]`` is reading ``r`` after byte ``b`` (``len(r_next) - 1``: dead).
    States are found breadth first, bytes in order, and keyed by the sums of the random
    hashes ``h1``/``h2`` of their readings. Returns (trans (n, 256), st_off, st_rd); n is 0
    when more than ``max_states`` states would be needed.
    """
    dead = len(r_next) - 1
    n = len(st_off) - 1
    cap = max(64, 2 * n)
    trans = np.full((cap, 256), -1, np.int32)
    off = np.zeros(cap + 1, np.int64)
    off[:n + 1] = st_off
    rd = _grow(st_rd.astype(np.int32), len(st_rd))
    n_rd = len(st_rd)
    size = 1 << 10
    while size < 4 * n:
        size <<= 1
    t1 = np.zeros(size, np.uint64)
    t2 = np.zeros(size, np.uint64)
    tid = np.full(size, -1, np.int64)
    for i in range(n):
        k1 = np.uint64(0)
        k2 = np.uint64(0)
        for j in range(off[i], off[i + 1]):
            k1 += h1[rd[j]]
            k2 += h2[rd[j]]
        _key_put(t1, t2, tid, k1, k2, i)
    stamp = np.zeros(dead + 1, np.int64)
    buf = np.empty(dead + 1, np.int32)
    tick = 0
    i = 0
    while i < n:
        a, b_ = off[i], off[i + 1]
        for byte in range(256):
            tick += 1
            m = 0
            k1 = np.uint64(0)
            k2 = np.uint64(0)
            for j in range(a, b_):
                r2 = r_next[rd[j], byte]
                if r2 != dead and stamp[r2] != tick:
                    stamp[r2] = tick
                    buf[m] = r2
                    m += 1
                    k1 += h1[r2]
                    k2 += h2[r2]
            if m == 0:
                continue
            c = _key_get(t1, t2, tid, k1, k2)
            if c < 0:
                if n >= max_states:
                    return trans[:0], off[:1], rd[:0]
                c = n
                if n + 1 >= len(trans):
                    t = np.full((2 * len(trans), 256), -1, np.int32)
                    t[:n] = trans[:n]
                    trans = t
                    o = np.zeros(2 * len(off), np.int64)
                    o[:n + 1] = off[:n + 1]
                    off = o
                for x in range(1, m):  # insertion sort: sets are small
                    v = buf[x]
                    y = x - 1
                    while y >= 0 and buf[y] > v:
                        buf[y + 1] = buf[y]
                        y -= 1
                    buf[y + 1] = v
                while n_rd + m > len(rd):
                    rd = _grow(rd, n_rd)
                rd[n_rd:n_rd + m] = buf[:m]
                n_rd += m
                off[n + 1] = n_rd
                n += 1
                if len(tid) < 4 * n:
                    t1, t2, tid = _key_rehash(t1, t2, tid)
                _key_put(t1, t2, tid, k1, k2, c)
            trans[i, byte] = c
        i += 1
    return trans[:n].copy(), off[:n + 1].copy(), rd[:n_rd].copy()


@njit(cache=True, inline="always")
def _key_slot(k1, k2, mask):
    return np.int64((k1 ^ (k2 * np.uint64(0x9E3779B97F4A7C15))) >> np.uint64(7)) & mask


@njit(cache=True)
def _key_get(t1, t2, tid, k1, k2):
    mask = len(tid) - 1
    s = _key_slot(k1, k2, mask)
    while tid[s] >= 0:
        if t1[s] == k1 and t2[s] == k2:
            return tid[s]
        s = (s + 1) & mask
    return -1


@njit(cache=True)
def _key_put(t1, t2, tid, k1, k2, v):
    mask = len(tid) - 1
    s = _key_slot(k1, k2, mask)
    while tid[s] >= 0:
        s = (s + 1) & mask
    t1[s] = k1
    t2[s] = k2
    tid[s] = v


@njit(cache=True)
def _key_rehash(t1, t2, tid):
    n1 = np.zeros(2 * len(tid), np.uint64)
    n2 = np.zeros(2 * len(tid), np.uint64)
    nid = np.full(2 * len(tid), -1, np.int64)
    for s in range(len(tid)):
        if tid[s] >= 0:
            _key_put(n1, n2, nid, t1[s], t2[s], tid[s])
    return n1, n2, nid


def py_scanner_closure(r_next, h1, h2, st_off, st_rd, max_states):
    """Twin of ``scanner_closure``."""
    dead = len(r_next) - 1
    states = [st_rd[st_off[i]:st_off[i + 1]].tolist() for i in range(len(st_off) - 1)]
    ids = {(int(h1[s].sum()), int(h2[s].sum())): i for i, s in enumerate(states)}
    rows = []
    i = 0
    while i < len(states):
        row = [-1] * 256
        for byte in range(256):
            nxt = sorted({int(r_next[r, byte]) for r in states[i]} - {dead})
            if not nxt:
                continue
            key = (int(h1[nxt].sum()), int(h2[nxt].sum()))
            c = ids.get(key)
            if c is None:
                if len(states) >= max_states:
                    return np.zeros((0, 256), np.int32), np.zeros(1, np.int64), np.zeros(0, np.int32)
                c = ids[key] = len(states)
                states.append(nxt)
            row[byte] = c
        rows.append(row)
        i += 1
    off = np.zeros(len(states) + 1, np.int64)
    np.cumsum([len(s) for s in states], out=off[1:])
    return (np.array(rows, np.int32).reshape(-1, 256), off,
            np.array([r for s in states for r in s], np.int32))


# --- grammar masks: Earley sets and the tree walk, compiled ----------------------
#
# The twin of this section is the Python mask path itself (``MaskEngine`` with its
# ``PState``s): tests compare the groups both keep, state by state.
#
# ``A`` is an arena of interned Earley sets, grown by the caller when a kernel says
# ``EARLEY_GROW``: (meta [sets, entry keys, feed entries], set_off, set_keys (each set's
# entry keys, sorted: DFA state << 32 | origin set + 1, 0 for the set itself),
# set_allowed (terminal bit words), set_hash, ht (open addressing: set + 1), fk/fv
# (memoized feeds: set * n_terminals + terminal + 1 -> set, EARLEY_REJECT)).
# ``D`` is the LR(0) epsilon-DFA (``earley.Grammar``): allowed words, predicted
# companion, completed nonterminals (CSR), shifts (CSR, sorted by symbol), ignored words.
# ``T`` holds the subterminal trees (``masks``) and the readings' tables.

# Unmanaged views. The kernels below pass the arena and tables as tuples of arrays; numba
# counts references to every array a helper takes out of them, with an atomic add and a
# call to release each, where its pruning pass cannot prove them balanced (helpers with
# early returns). That was half the time of a new set (``earley_feed``: 2.3 to 1.1 µs on
# sql's seed). The entry kernels take views without a reference count (``_bare``, or a
# context below) of arrays that their caller holds for the whole call, and never return
# them or views of them.


@njit(cache=True, inline="always")
def _bare_arena(A):
    return (_bare(A[0]), _bare(A[1]), _bare(A[2]), _bare(A[3]), _bare(A[4]), _bare(A[5]), _bare(A[6]), _bare(A[7]),
            _bare(A[8]), _bare(A[9]), _bare(A[10]), _bare(A[11]))


@njit(cache=True, inline="always")
def _bare_dfa(D):
    return (_bare(D[0]), _bare(D[1]), _bare(D[2]), _bare(D[3]), _bare(D[4]), _bare(D[5]), _bare(D[6]), _bare(D[7]))


# A context: the arrays of ``A``, ``D``, ``T``, ``B`` and ``S`` (the scanner states'
# readings, CSR, and which DFA states hold the completed start item) in that order (nested
# tuples flattened), each as three int64s (address, rows, columns), in one array that
# ``arena.CompiledMasks`` makes again when one of them changes. Passing it instead of the
# tuples saves numba's unboxing of some fifty arrays per call (4 µs of a mask). Its arrays
# must be C-contiguous, of the dtypes and dimensions of ``CTX_SPEC``, and held by the caller.
CTX_SPEC = (
    ("i8", 1), ("i8", 1), ("i8", 1), ("u8", 2), ("u8", 1), ("i8", 1), ("i8", 1), ("i8", 1),  # A
    ("i8", 2), ("b", 1), ("i8", 2), ("i8", 1),
    ("u8", 2), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("u8", 1),  # D
    ("i8", 1), ("i4", 1), ("i4", 1), ("i8", 1), ("i4", 1), ("i4", 1), ("u8", 2), ("i8", 1),  # T
    ("i8", 1), ("i8", 1), ("i8", 1), ("b", 1), ("i8", 1), ("b", 1),
    ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("b", 1), ("i8", 1), ("i8", 1),  # B
    ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1), ("i8", 1),
    ("i8", 1), ("i4", 1), ("b", 1))  # S
CTX_DTYPES = {"i8": np.int64, "u8": np.uint64, "i4": np.int32, "b": np.uint8}
CTX_ARENA = 12  # the first slots: the arena, written by the kernels


@njit(cache=True, inline="always")
def _c1(ctx, i, dt):
    return carray(_voidptr(ctx[3 * i]), (ctx[3 * i + 1],), dt)


@njit(cache=True, inline="always")
def _c2(ctx, i, dt):
    return carray(_voidptr(ctx[3 * i]), (ctx[3 * i + 1], ctx[3 * i + 2]), dt)


@njit(cache=True, inline="always")
def _ctx_tables(ctx):
    """(A, D, T, B, S) of a context (``CTX_SPEC``), as views without reference counting."""
    i8, u8, i4, b = np.int64, np.uint64, np.int32, np.uint8
    A = (_c1(ctx, 0, i8), _c1(ctx, 1, i8), _c1(ctx, 2, i8), _c2(ctx, 3, u8), _c1(ctx, 4, u8), _c1(ctx, 5, i8),
         _c1(ctx, 6, i8), _c1(ctx, 7, i8), _c2(ctx, 8, i8), _c1(ctx, 9, b), _c2(ctx, 10, i8), _c1(ctx, 11, i8))
    D = (_c2(ctx, 12, u8), _c1(ctx, 13, i8), _c1(ctx, 14, i8), _c1(ctx, 15, i8), _c1(ctx, 16, i8), _c1(ctx, 17, i8),
         _c1(ctx, 18, i8), _c1(ctx, 19, u8))
    T = (_c1(ctx, 20, i8), _c1(ctx, 21, i4), _c1(ctx, 22, i4), _c1(ctx, 23, i8), _c1(ctx, 24, i4), _c1(ctx, 25, i4),
         _c2(ctx, 26, u8), _c1(ctx, 27, i8), _c1(ctx, 28, i8), _c1(ctx, 29, i8), _c1(ctx, 30, i8), _c1(ctx, 31, b),
         _c1(ctx, 32, i8), _c1(ctx, 33, b))
    B = (_c1(ctx, 34, i8), _c1(ctx, 35, i8), _c1(ctx, 36, i8), _c1(ctx, 37, i8), _c1(ctx, 38, i8), _c1(ctx, 39, b),
         (_c1(ctx, 40, i8), _c1(ctx, 41, i8), _c1(ctx, 42, i8), _c1(ctx, 43, i8)), _c1(ctx, 44, i8),
         _c1(ctx, 45, i8), _c1(ctx, 46, i8), (_c1(ctx, 47, i8), _c1(ctx, 48, i8), _c1(ctx, 49, i8)))
    S = (_c1(ctx, 50, i8), _c1(ctx, 51, i4), _c1(ctx, 52, b))
    return A, D, T, B, S


EARLEY_REJECT = -1
EARLEY_GROW = -2
EARLEY_UNRESOLVED = -3  # a tree has tokens to check one by one: the Python path answers
EARLEY_NEED_TREE = -4  # minus the tree: build that tree and call again


@njit(cache=True, inline="always")
def _shift_to(sh_off, sh_sym, sh_to, d, sym):
    lo = sh_off[d]
    hi = sh_off[d + 1]
    while lo < hi:
        mid = (lo + hi) >> 1
        s = sh_sym[mid]
        if s < sym:
            lo = mid + 1
        elif s > sym:
            hi = mid
        else:
            return sh_to[mid]
    return -1


@njit(cache=True, inline="always")
def _keys_hash(keys, n):
    h = np.uint64(14695981039346656037)
    for i in range(n):
        h = (h ^ np.uint64(keys[i])) * np.uint64(1099511628211)
    return h


@njit(cache=True, inline="always")
def earley_intern(A, D, keys, n):
    """The arena id of the set whose sorted entry keys are ``keys[:n]``: found, or added.

    ``EARLEY_GROW`` when there is no room to add it.
    """
    meta, set_off, set_keys, set_allowed, set_hash, ht = A[0], A[1], A[2], A[3], A[4], A[5]
    h = _keys_hash(keys, n)
    mask = len(ht) - 1
    i = np.int64(h & np.uint64(mask))
    while ht[i] != 0:
        s = ht[i] - 1
        if set_hash[s] == h and set_off[s + 1] - set_off[s] == n:
            b = set_off[s]
            same = True
            for j in range(n):
                if set_keys[b + j] != keys[j]:
                    same = False
                    break
            if same:
                return s
        i = (i + 1) & mask
    ns = meta[0]
    nk = meta[1]
    if ns + 2 > len(set_off) or nk + n > len(set_keys) or 2 * (ns + 1) > len(ht):
        return EARLEY_GROW
    d_allowed = D[0]
    nw = set_allowed.shape[1]
    for w in range(nw):
        set_allowed[ns, w] = 0
    for j in range(n):
        k = keys[j]
        set_keys[nk + j] = k
        d = k >> 32
        for w in range(nw):
            set_allowed[ns, w] |= d_allowed[d, w]
    set_off[ns + 1] = nk + n
    set_hash[ns] = h
    ht[i] = ns + 1
    meta[0] = ns + 1
    meta[1] = nk + n
    return ns


@njit(cache=True)
def earley_rehash(n_sets, set_hash, ht, fk, fv, old_fk, old_fv):
    """Fill the new (larger, zeroed) tables ``ht`` and ``fk``/``fv`` from the arena's sets and
    the old feed table."""
    mask = len(ht) - 1
    for s in range(n_sets):
        i = np.int64(set_hash[s] & np.uint64(mask))
        while ht[i] != 0:
            i = (i + 1) & mask
        ht[i] = s + 1
    mask = len(fk) - 1
    for j in range(len(old_fk)):
        key = old_fk[j]
        if key != 0:
            i = _feed_slot(key, mask)
            while fk[i] != 0:
                i = (i + 1) & mask
            fk[i] = key
            fv[i] = old_fv[j]


@njit(cache=True, inline="always")
def _feed_slot(key, mask):
    return np.int64(((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(29)) & np.uint64(mask))


# ``A[11]`` is scratch for ``_earley_make`` (the arena's only user, one call at a time),
# four areas of a quarter each (a power of two): keys, seen (a hash set), the work stack's
# states and origins. A set's closure runs in it instead of in arrays allocated per call,
# which took most of the time of a new set of a few entries; larger sets allocate.
SCRATCH = 256  # entries of each area (``arena.CompiledMasks.scratch``)


@njit(cache=True, inline="always")
def _sort_small(a, n):
    """Sort ``a[:n]`` in place: insertion sort for the few keys of a set, else numpy's."""
    if n > 32:
        a[:n] = np.sort(a[:n])
        return
    for i in range(1, n):
        x = a[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@njit(cache=True, inline="always")
def _earley_make(A, D, sd, so, nk):
    """Close the kernel entries ``(sd[i], so[i])`` (DFA state, origin set) and intern the set.

    ``sd`` and ``so`` are the work stack and are overwritten (scratch or fresh arrays).
    """
    set_off, set_keys, scratch = A[1], A[2], A[11]
    d_pred, comp_off, comp_nt, sh_off, sh_sym, sh_to = D[1], D[2], D[3], D[4], D[5], D[6]
    cap = len(scratch) >> 2
    keys = scratch[:cap]
    n = 0
    seen = scratch[cap:2 * cap]  # the keys so far, open addressing (key + 1; 0: empty)
    seen[:] = 0
    m = nk
    while m > 0:
        m -= 1
        d = sd[m]
        o = so[m]
        key = (d << 32) | (o + 1)
        mask = len(seen) - 1
        i = _feed_slot(key + 1, mask)
        while seen[i] != 0 and seen[i] != key + 1:
            i = (i + 1) & mask
        if seen[i] != 0:
            continue
        seen[i] = key + 1
        if n == len(keys):
            keys = _grow(keys, n)
        keys[n] = key
        n += 1
        if 2 * n > len(seen):  # keep it at most half full
            seen = np.zeros(4 * len(seen), np.int64)
            mask = len(seen) - 1
            for j in range(n):
                i = _feed_slot(keys[j] + 1, mask)
                while seen[i] != 0:
                    i = (i + 1) & mask
                seen[i] = keys[j] + 1
        p = d_pred[d]
        if p >= 0:
            if m == len(sd):
                sd = _grow(sd, m)
                so = _grow(so, m)
            sd[m] = p
            so[m] = -1
            m += 1
        if o >= 0:
            # completions: entries of the origin set waiting for each nonterminal completed here
            for c in range(comp_off[d], comp_off[d + 1]):
                a = comp_nt[c]
                for e in range(set_off[o], set_off[o + 1]):
                    k2 = set_keys[e]
                    d2 = _shift_to(sh_off, sh_sym, sh_to, k2 >> 32, a)
                    if d2 >= 0:
                        o2 = (k2 & 0xFFFFFFFF) - 1
                        if m == len(sd):
                            sd = _grow(sd, m)
                            so = _grow(so, m)
                        sd[m] = d2
                        so[m] = o if o2 < 0 else o2
                        m += 1
    _sort_small(keys, n)
    return earley_intern(A, D, keys, n)


@njit(cache=True, inline="always")
def _feed_find(fk, key):
    """The slot of ``key`` in the feed table: where it is, or the empty slot where it goes."""
    mask = len(fk) - 1
    i = _feed_slot(key, mask)
    while fk[i] != 0 and fk[i] != key:
        i = (i + 1) & mask
    return i


@njit(cache=True, inline="always")
def earley_feed(A, D, s, t):
    """The set after terminal ``t`` from set ``s`` (memoized): ``EARLEY_REJECT``, or ``s``
    itself for an ignored terminal the grammar does not take; ``EARLEY_GROW``.

    Inlined, with ``_earley_make`` and ``earley_intern``: as calls, each passed the arena and
    tables (twenty array structures) and counted references to them, and a new set took
    2.2 µs in ``earley_seed`` on sql; inlined, 0.6 µs."""
    meta, set_off, set_keys, set_allowed, fk, fv = A[0], A[1], A[2], A[3], A[6], A[7]
    sh_off, sh_sym, sh_to, ign_w = D[4], D[5], D[6], D[7]
    key = s * (set_allowed.shape[1] * 64) + t + 1
    i = _feed_find(fk, key)
    if fk[i] == key:
        return fv[i]
    if 2 * (meta[2] + 1) > len(fk):
        return EARLEY_GROW
    if (set_allowed[s, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
        nk = set_off[s + 1] - set_off[s]
        cap = len(A[11]) >> 2
        if nk <= cap:
            kd = A[11][2 * cap:3 * cap]
            ko = A[11][3 * cap:]
        else:
            kd = np.empty(nk, np.int64)
            ko = np.empty(nk, np.int64)
        n = 0
        for e in range(set_off[s], set_off[s + 1]):
            k = set_keys[e]
            d2 = _shift_to(sh_off, sh_sym, sh_to, k >> 32, t)
            if d2 >= 0:
                o = (k & 0xFFFFFFFF) - 1
                kd[n] = d2
                ko[n] = s if o < 0 else o
                n += 1
        res = _earley_make(A, D, kd, ko, n)
        if res == EARLEY_GROW:
            return res
    elif (ign_w[t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
        res = s
    else:
        res = EARLEY_REJECT
    fk[i] = key
    fv[i] = res
    meta[2] += 1
    return res


@njit(cache=True)
def earley_seed(A, D, root, max_sets, max_feeds):
    """Feed every terminal each set allows, breadth first from arena set ``root``, until the
    arena holds ``max_sets`` sets or ``max_feeds`` feeds: the sets near the start of every
    text, made once at compile time and kept in the cache file (``arena.seed_arrays``)."""
    A = _bare_arena(A)
    D = _bare_dfa(D)
    meta, set_allowed = A[0], A[3]
    n_bits = set_allowed.shape[1] * 64
    queue = np.empty(max_sets + 1, np.int64)
    queue[0] = root
    head = 0
    tail = 1
    while head < tail:
        s = queue[head]
        head += 1
        for t in range(n_bits):
            if not (set_allowed[s, t >> 6] >> np.uint64(t & 63)) & np.uint64(1):
                continue
            if meta[0] >= max_sets or meta[2] >= max_feeds:
                return
            before = meta[0]
            r = earley_feed(A, D, s, t)
            if r == EARLEY_GROW:
                return
            if meta[0] > before and tail <= max_sets:
                queue[tail] = r
                tail += 1


def py_earley_seed(A, D, root, max_sets, max_feeds):
    """``earley_seed``'s twin: the same breadth-first feeds, one ``earley_feed`` call each."""
    meta, set_allowed = A[0], A[3]
    queue = [root]
    head = 0
    while head < len(queue):
        s = queue[head]
        head += 1
        for t in range(set_allowed.shape[1] * 64):
            if not (int(set_allowed[s, t >> 6]) >> (t & 63)) & 1:
                continue
            if meta[0] >= max_sets or meta[2] >= max_feeds:
                return
            before = meta[0]
            r = earley_feed(A, D, s, t)
            if r == EARLEY_GROW:
                return
            if meta[0] > before and len(queue) <= max_sets:
                queue.append(r)


@njit(cache=True)
def earley_restore(A, D, set_off, set_keys, feed_keys, feed_sets):
    """Load a seed (``earley_seed``'s sets and feeds) into the new arena ``A`` (all zeros), which
    has room for it: each set interned again in order, then the feeds. False when the seed does
    not fit these tables (a damaged cache file); the arena is then of no use."""
    A = _bare_arena(A)
    D = _bare_dfa(D)
    fk, fv = A[6], A[7]
    n_d = D[0].shape[0]
    ns = len(set_off) - 1
    n_bits = A[3].shape[1] * 64
    if not (ns >= 0 and set_off[0] == 0 and set_off[ns] == len(set_keys) and len(feed_keys) == len(feed_sets)
            and 2 * (len(feed_keys) + 1) <= len(fk)):
        return False
    for i in range(ns):
        if set_off[i + 1] < set_off[i]:
            return False
        for j in range(set_off[i], set_off[i + 1]):
            d = set_keys[j] >> 32
            o = (set_keys[j] & 0xFFFFFFFF) - 1
            if d < 0 or d >= n_d or o >= i or o < -1 or (j > set_off[i] and set_keys[j] <= set_keys[j - 1]):
                return False  # an entry's origin is an earlier set; keys sorted, distinct
    for i in range(len(feed_keys)):
        k = feed_keys[i] - 1
        if k < 0 or k // n_bits >= ns or feed_sets[i] < EARLEY_REJECT or feed_sets[i] >= ns:
            return False
    for i in range(ns):
        n = set_off[i + 1] - set_off[i]
        if earley_intern(A, D, set_keys[set_off[i]:set_off[i + 1]], n) != i:
            return False  # no room, or a set twice
    earley_rehash(0, A[4], A[5], fk, fv, feed_keys, feed_sets)
    A[0][2] = len(feed_keys)
    return True


@njit(cache=True, inline="always")
def _any_allowed(set_allowed, q):
    for w in range(set_allowed.shape[1]):
        if set_allowed[q, w]:
            return True
    return False


@njit(cache=True, inline="always")
def earley_mask_groups(A, D, T, B, p0, readings, ign, gmarks, do_bound, gcost):
    """(status, sorted groups, bound) that the readings ``readings`` of a scanner state keep
    under arena set ``p0``: what ``MaskEngine.mask_key`` computes with the Python parser.

    With ``do_bound``, ``bound`` is ``GrammarIndex.budget_bound``'s for this configuration:
    the largest ``earley_visit_bound`` over the tree nodes where groups are kept (``B``:
    ``arena.CompiledMasks.budget_tables``). Status 0, or ``EARLEY_GROW``,
    ``EARLEY_UNRESOLVED``, ``EARLEY_NEED_TREE - tree`` (no groups then). ``gmarks`` is
    scratch, one byte per group, all zero (and left so). With a ``gcost`` of one entry per
    group (else empty), ``gcost[g]`` is lowered to ``earley_group_cost`` wherever ``g`` is kept
    (``GrammarIndex.budget_info``'s group bounds).
    """
    bound = 0
    do_cost = len(gcost) > 0
    set_allowed = A[3]
    n_bits = set_allowed.shape[1] * 64
    ign_w = D[7]
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
        res = np.sort(out[:nout]) if status == 0 else np.empty(0, np.int64)
    keep.clear()  # the work arrays die here, after the last use of their views
    return status, res, bound


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


# --- grammar masks as bitsets ------------------------------------------------------

MASK_BITS = 2  # ``sampler_mask`` mode: a bitset of the vocabulary (0: allowed ids, 1: forbidden ids)


def py_keep_bits(data, words):
    """A stable filter of the rows whose id's bit is set in ``words``; the new size (``py_keep_candidates``
    on the bitset's ids)."""
    allowed = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))
    return py_keep_candidates(data, allowed)


@njit(cache=True)
def keep_bits_in_id_order(data, words):
    """``py_keep_bits`` for llama.cpp's fresh array, where row ``i`` holds token ``i``: it visits only
    the set bits, O(words + kept), not every row. Each row read and each row overwritten is
    checked; -1 if the array was not in id order after all (rows before the mismatch rewritten)."""
    n = data.shape[0]
    one = np.uint64(1)
    j = 0
    for w in range(len(words)):
        word = words[w]
        while word:
            t = (w << 6) + _lowest_bit(word)
            word &= word - one
            if t >= n:
                return j  # ids beyond the candidates: none left to keep
            if data[t, 0] != t or data[j, 0] != j:
                return -1
            if t != j:
                data[j, 0] = t
                data[j, 1] = data[t, 1]
                data[j, 2] = data[t, 2]
            j += 1
    return j


def py_keep_bits_in_id_order(data, words):
    """Twin of ``keep_bits_in_id_order``."""
    n = data.shape[0]
    ids = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))
    for j, t in enumerate(int(t) for t in ids[ids < n]):
        if int(data[t, 0]) != t or int(data[j, 0]) != j:
            return -1
    return py_keep_bits(data, words)


NEG_INF_BITS = -8388608  # float32 -inf (0xFF800000) read as int32: a llama_token_data logit


@njit(cache=True)
def mark_bits_in_id_order(data, words):
    """For a mask that keeps most of llama.cpp's fresh array (row ``i`` holds token ``i``): the
    rows of the tokens it does not allow (ids past its bits included) get a logit of -inf, in
    place, visiting only those rows, O(words + dropped); the size stays. Each row marked is
    checked; -1 if the array was not in id order after all (rows before the mismatch marked).
    Samplers give a -inf logit no probability, so this samples as ``keep_bits_in_id_order`` does."""
    n = data.shape[0]
    nw = len(words)
    one = np.uint64(1)
    for w in range(nw):
        word = ~words[w]
        while word:
            t = (w << 6) + _lowest_bit(word)
            word &= word - one
            if t >= n:
                return n
            if data[t, 0] != t:
                return -1
            data[t, 1] = NEG_INF_BITS
    for t in range(64 * nw, n):
        if data[t, 0] != t:
            return -1
        data[t, 1] = NEG_INF_BITS
    return n


def py_mark_bits_in_id_order(data, words):
    """Twin of ``mark_bits_in_id_order``."""
    n = data.shape[0]
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")
    for t in range(n):
        if t < len(bits) and bits[t]:
            continue
        if int(data[t, 0]) != t:
            return -1
        data[t, 1] = NEG_INF_BITS
    return n


@njit(cache=True, inline="always")
def _popcount(w):
    w = w - ((w >> np.uint64(1)) & np.uint64(0x5555555555555555))
    w = (w & np.uint64(0x3333333333333333)) + ((w >> np.uint64(2)) & np.uint64(0x3333333333333333))
    w = (w + (w >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (w * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True)
def mask_candidates_bits(array_address, words):
    """The mask ``words`` on the ``llama_token_data_array`` at ``array_address``, in place: the
    allowed rows compacted to the front (``keep_bits_in_id_order``) or, when the mask keeps more
    than half of them, the others' logits set to -inf (``mark_bits_in_id_order``: a grammar mask
    that allows any identifier keeps most of the vocabulary, and moving those rows took longer
    than the rest of the mask). The new size, or -1 (size unchanged) if the array was not in
    token-id order."""
    header = carray(_voidptr(array_address), (2,), np.int64)
    data = carray(_voidptr(header[0]), (header[1], 3), np.int32)
    kept = np.uint64(0)
    for w in range(len(words)):
        kept += _popcount(words[w])
    if 2 * np.int64(kept) > header[1]:
        return mark_bits_in_id_order(data, words)
    k = keep_bits_in_id_order(data, words)
    if k >= 0:
        header[1] = k
    return k


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


ACC_KNOWN = 2  # ``earley_masks``' flags beside "unresolved" (1): acceptance computed, and it holds
ACC_YES = 4


@njit(cache=True, inline="always")
def _set_accepts(A, d_accept, q):
    """Whether arena set ``q`` holds the completed start item begun in the initial set
    (``PState.accepting``); the arena must know its initial set."""
    set_off, set_keys, init = A[1], A[2], A[0][3]
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
        gcost[i] = BUDGET_BIG
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
    ``gcost`` as in ``earley_mask_groups`` (all ``BUDGET_BIG``, and left so), the group costs
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
    r_term, r_acc = T[10], T[11]
    set_allowed = A[3]
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
        A[0][3] = init_ref if init_ref >= 0 else aids[-2 - init_ref]
    for c in range(n_cfg):
        p = cfg_ref[c]
        if p < 0:
            p = aids[-2 - p]
        sc = cfg_state[c]
        rd = st_rd[st_off[sc]:st_off[sc + 1]]
        # acceptance (``GrammarIndex.accepting``): a lexeme that ends here completes a sentence
        acc = 0
        if A[0][3] >= 0:
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
        status, got, bounds[c] = earley_mask_groups(A, D, T, B, p, rd, ign, gmarks, do_bound, gcost)
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
        groups[g_off[c]:g_off[c] + len(got)] = got
        g_off[c + 1] = g_off[c] + len(got)
    if len(gcost) and (unres & 1).any():  # a walk stopped at an unresolved tree may have lowered some
        for i in range(len(gcost)):
            gcost[i] = BUDGET_BIG
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
        union = np.sort(union[:n])
    costs = np.empty(n if len(gcost) and not (unres & 1).any() else 0, np.int64)
    for i in range(len(costs)):
        costs[i] = gcost[union[i]]
        gcost[union[i]] = BUDGET_BIG
    n_g = g_off[n_cfg] if n_cfg > 1 else 0  # one configuration: its groups are the union
    out = np.empty(3 + n_new + 3 * n_cfg + 1 + n_g + n + len(costs), np.int64)
    out[0] = 0
    out[1] = n
    out[2] = len(costs)
    k = 3
    out[k:k + n_new] = aids
    k += n_new
    out[k:k + n_cfg] = unres
    k += n_cfg
    out[k:k + n_cfg] = bounds
    k += n_cfg
    out[k:k + n_cfg + 1] = g_off
    k += n_cfg + 1
    out[k:k + n_g] = groups[:n_g]
    k += n_g
    out[k:k + n] = union[:n]
    k += n
    out[k:] = costs
    return out
