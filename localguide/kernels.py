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
    path = np.zeros(512, np.int32)  # path[d] = node at depth d on the current branch
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
def _walk(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans, s,
          out_tok, out_next, count, stack):
    """Write (token, next state) for every token readable from DFA state ``s`` at ``count``.

    The caller guarantees room for every token; returns the new count.
    """
    n_nodes = len(node_byte)
    stack[0] = s
    n = 1
    while n < n_nodes:
        d = node_depth[n]
        q = trans[stack[d - 1], node_byte[n]]
        if q < 0:
            n = subtree_end[n]
            continue
        stack[d] = q
        for k in range(tok_start[n], tok_start[n] + tok_count[n]):
            out_tok[count] = order[k]
            out_next[count] = q
            count += 1
        n += 1
    return count


@njit(cache=True)
def _sort_edges(out_tok, out_next, start, count, slot):
    """Order the edges ``start:count`` by token id.

    Large outputs scatter into ``slot`` (a vocabulary-sized array of -1) and sweep it,
    which is cheaper than a comparison sort; small ones are sorted directly.
    """
    m = count - start
    if m * 16 < len(slot):
        perm = np.argsort(out_tok[start:count], kind="mergesort")
        out_tok[start:count] = out_tok[start:count][perm]
        out_next[start:count] = out_next[start:count][perm]
        return
    lo = len(slot)
    hi = 0
    for e in range(start, count):
        t = out_tok[e]
        slot[t] = out_next[e]
        lo = min(lo, t)
        hi = max(hi, t)
    e = start
    for t in range(lo, hi + 1):
        q = slot[t]
        if q >= 0:
            out_tok[e] = t
            out_next[e] = q
            slot[t] = -1
            e += 1


@njit(cache=True)
def explore(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans):
    """All DFA states reachable from state 0 through whole tokens, with their edges.

    Returns (states, edge_offsets, edge_tokens, edge_next): ``states[i]`` is a DFA
    state, its edges are ``edge_offsets[i]:edge_offsets[i+1]``, sorted by token id,
    and ``edge_next`` holds DFA state numbers.
    """
    n_dfa = trans.shape[0]
    seen = np.full(n_dfa, -1, np.int32)
    states = np.empty(n_dfa, np.int32)
    offsets = np.zeros(n_dfa + 1, np.int64)
    out_tok = np.empty(1024, np.int32)
    out_next = np.empty(1024, np.int32)
    stack = np.empty(np.max(node_depth) + 1, np.int32)
    slot = np.full(np.max(order) + 1 if len(order) else 1, -1, np.int32)
    count = 0
    n_states = 1
    states[0] = 0
    seen[0] = 0
    i = 0
    while i < n_states:
        start = count
        if count + len(order) > len(out_tok):
            size = max(2 * len(out_tok), count + len(order))
            grown = np.empty(size, np.int32)
            grown[:count] = out_tok[:count]
            out_tok = grown
            grown = np.empty(size, np.int32)
            grown[:count] = out_next[:count]
            out_next = grown
        count = _walk(node_byte, node_depth, subtree_end, tok_start, tok_count,
                      order, trans, states[i], out_tok, out_next, count, stack)
        _sort_edges(out_tok, out_next, start, count, slot)
        for e in range(start, count):
            q = out_next[e]
            if seen[q] < 0:
                seen[q] = n_states
                states[n_states] = q
                n_states += 1
        i += 1
        offsets[i] = count
    return states[:n_states].copy(), offsets[:n_states + 1].copy(), out_tok[:count].copy(), out_next[:count].copy()


def py_explore(node_byte, node_depth, subtree_end, tok_start, tok_count, order, trans):
    """Twin of ``explore``, token by token without the trie."""
    # Recover each token's bytes from the trie so the twin sees the same vocabulary.
    token_bytes = {}
    path = []
    for n in range(1, len(node_byte)):
        path = path[: node_depth[n] - 1] + [int(node_byte[n])]
        for k in range(tok_start[n], tok_start[n] + tok_count[n]):
            token_bytes[int(order[k])] = bytes(path)
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
            np.array(toks, np.int32), np.array(nexts, np.int32))


@njit(cache=True)
def distances(offsets, edge_next, accepting):
    """Fewest tokens from each state to an accepting one (-1: never), by backward BFS.

    ``edge_next`` holds local state numbers (positions in ``offsets``).
    """
    n = len(accepting)
    # Reverse edges in CSR form.
    rcount = np.zeros(n + 1, np.int64)
    for e in range(len(edge_next)):
        rcount[edge_next[e] + 1] += 1
    for s in range(n):
        rcount[s + 1] += rcount[s]
    rsrc = np.empty(len(edge_next), np.int32)
    fill = rcount[:-1].copy()
    for s in range(n):
        for e in range(offsets[s], offsets[s + 1]):
            t = edge_next[e]
            rsrc[fill[t]] = s
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
                if dist[t] >= 0 and (dist[s] < 0 or dist[t] + 1 < dist[s]):
                    dist[s] = dist[t] + 1
                    changed = True
    return np.array(dist, np.int32)


@njit(cache=True)
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
    return keep, new_offsets, tokens[:c].copy(), nexts[:c].copy(), max_next, hashes


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
    """
    header = carray(_voidptr(array_address), (2,), np.int64)
    data = carray(_voidptr(header[0]), (header[1], 3), np.int32)
    if exclude:
        header[1] = exclude_candidates(data, tokens)
    else:
        header[1] = keep_candidates(data, tokens)


@njit(cache=True)
def exclude_candidates(data, forbidden):
    """Set the logit of every ``forbidden`` id to -inf; return the (unchanged) size."""
    size = data.shape[0]
    logits = data[:, 1:2].view(np.float32)
    in_order = size == 0 or (data[0, 0] == 0 and data[size - 1, 0] == size - 1)
    if in_order:
        for t in forbidden:
            if t < size:
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
def keep_candidates(data, allowed):
    """Compact an ``int32[size, 3]`` view of (id, logit bits, p bits) records to the ``allowed`` ids.

    ``allowed`` is sorted. When the array is still in id order (our sampler runs
    first) this costs O(len(allowed)); otherwise O(size log len(allowed)).
    Returns the new size.
    """
    size = data.shape[0]
    k = len(allowed)
    in_order = size > 0 and data[0, 0] == 0 and data[size - 1, 0] == size - 1
    if in_order:
        for j in range(k):
            t = allowed[j]
            if t != j:
                data[j, 0] = data[t, 0]
                data[j, 1] = data[t, 1]
                data[j, 2] = data[t, 2]
        return k
    j = 0
    for i in range(size):
        pos = np.searchsorted(allowed, data[i, 0])
        if pos < k and allowed[pos] == data[i, 0]:
            data[j, 0] = data[i, 0]
            data[j, 1] = data[i, 1]
            data[j, 2] = data[i, 2]
            j += 1
    return j


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
ERROR_FINISHED, ERROR_NOT_ALLOWED, ERROR_OVER_BUDGET = 1, 2, 3
_BIG = 1 << 40  # carray needs a shape; bounds come from the offsets


@njit(cache=True, inline="always")
def _i32(address):
    return carray(_voidptr(address), (_BIG,), np.int32)


@njit(cache=True, inline="always")
def _i64(address):
    return carray(_voidptr(address), (_BIG,), np.int64)


@njit(cache=True)
def block_apply(block, array_address):
    """The guide's mask applied to the candidate array (see ``mask_candidates_at``)."""
    header = carray(_voidptr(array_address), (2,), np.int64)
    data = carray(_voidptr(header[0]), (header[1], 3), np.int32)
    if block[B_FINISHED]:
        block[B_ERROR] = ERROR_FINISHED
        return
    s = block[B_STATE]
    m = _i32(block[B_STATE_MASK])[s]
    mo = _i64(block[B_MASK_OFFSETS])
    tokens = _i32(block[B_MASK_TOKENS])[mo[m]:mo[m + 1]]
    r = block[B_REMAINING]
    if r >= 0 and _i32(block[B_MAX_NEXT])[s] > r - 1:
        no = _i64(block[B_NEXT_OFFSETS])
        nexts = _i32(block[B_NEXT_STATES])[no[s]:no[s + 1]]
        dist = _i32(block[B_DISTANCE])
        kept = np.empty(len(tokens), np.int32)
        k = 0
        for i in range(len(tokens)):
            q = nexts[i]
            if q < 0 or dist[q] <= r - 1:
                kept[k] = tokens[i]
                k += 1
        header[1] = keep_candidates(data, kept[:k])
        return
    eo = _i64(block[B_EXCL_OFFSETS])
    if 2 * len(tokens) > block[B_SIZES]:
        header[1] = exclude_candidates(data, _i32(block[B_EXCL_TOKENS])[eo[m]:eo[m + 1]])
    else:
        header[1] = keep_candidates(data, tokens)


@njit(cache=True)
def block_accept(block, token):
    """Advance the guide block past ``token`` (errors are flagged in the block, not raised)."""
    if block[B_FINISHED]:
        block[B_ERROR] = ERROR_FINISHED
        block[B_ERROR_TOKEN] = token
        return
    s = block[B_STATE]
    m = _i32(block[B_STATE_MASK])[s]
    mo = _i64(block[B_MASK_OFFSETS])
    tokens = _i32(block[B_MASK_TOKENS])[mo[m]:mo[m + 1]]
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
# ``subterminal_walk`` walks the vocabulary trie from one scanner state and records,
# for every token, every way its bytes can be read: the terminals it completes on
# the way (a node of the *sequence tree*) and the scanner state it ends in. Ignored
# terminals end a lexeme without entering the sequence (they do not move the
# parser). Nothing here depends on the parser.

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
