"""Grammar scanner kernel: subset construction over terminal readings, beside its twin."""

from __future__ import annotations

import numpy as np
from numba import njit

from ..runtime.numba_tools import _copy_into, _copy_rows, _grow, _sort_ints

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
                    _copy_rows(t, trans, n)
                    trans = t
                    o = np.zeros(2 * len(off), np.int64)
                    _copy_into(o, 0, off, n + 1)
                    off = o
                _sort_ints(buf, m)
                while n_rd + m > len(rd):
                    rd = _grow(rd, n_rd)
                _copy_into(rd, n_rd, buf, m)
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
