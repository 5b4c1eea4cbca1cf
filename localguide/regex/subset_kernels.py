"""Subset construction over sub-automaton instances, beside its plain-Python twin.

Used by ``ast_dfa`` to glue the minimal DFAs of an AST's atoms into one DFA.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ..automaton.minimize_kernels import _byte_classes
from ..runtime.numba_tools import _copy_into, _copy_rows, _grow

# --- subset construction over sub-automaton instances (JSON Schema) ---------------
#
# ``jsonschema_dfa`` glues minimal sub-DFAs ("instances", each with its continuations)
# Glushkov-style; a state of the result is a set of elements: a global state ``g >= 0``
# (instance offset + the sub-DFA's state) or ``-1 - k`` for exit ``k`` (an instance that
# has just entered its dead-end final state; instances with the same continuations share
# an exit). The start state reads the rows ``start`` as they are; any other state also
# reads, for each accepting element, the starts of the instances that follow it.



WORK_PER_STATE = 256  # rows read per state made, on average, before the construction gives up

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
    it would exceed ``max_states`` states, or its work (the rows its states read, summed)
    ``WORK_PER_STATE * max_states``: nested repetitions make large sets long before many states."""
    none = np.int64(1) << 40
    work, max_work = 0, np.int64(WORK_PER_STATE) * max_states
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
        work += k
        if work > max_work:
            return trans[:n], acc[:n], False
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
                    _copy_rows(t2, trans, n)
                    trans = t2
                    acc = _grow(acc, n)
                    key_off = _grow(key_off, n + 1)
                    hashes = _grow(hashes, n)
                end = key_off[n]
                while end + m > len(store):
                    store = _grow(store, end)
                _copy_into(store, end, buf, m)
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
    work = 0
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
        work += len(rows)
        if work > WORK_PER_STATE * max_states:
            return (np.array(rows_out, np.int32).reshape(-1, 256), np.array(acc_out, bool), False)
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
