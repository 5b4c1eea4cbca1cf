"""DFA minimization kernel (Valmari & Lehtinen), beside its plain-Python twin."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..runtime.numba_tools import _counting_order

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
