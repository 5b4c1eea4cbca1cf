"""Candidate compaction: a mask applied to llama.cpp's ``llama_token_data`` array in place.

The array comes fresh from llama.cpp in token-id order (row ``i`` holds token ``i``);
the kernels keep the allowed rows (ids, forbidden ids or a bitset of the vocabulary),
each beside its plain-Python twin.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from ..numba_tools import _lowest_bit, _popcount, _voidptr

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


# --- grammar masks as bitsets ------------------------------------------------------

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


@njit(cache=True)
def mask_candidates_bits(array_address, words):
    """The mask ``words`` on the ``llama_token_data_array`` at ``array_address``, in place: the
    allowed rows compacted to the front (``keep_bits_in_id_order``) or, when the mask keeps more
    than half of them, the others' logits set to -inf (``mark_bits_in_id_order``: a grammar mask
    that allows any identifier keeps most of the vocabulary, and moving those rows took longer
    than the rest of the mask). The new size, or -1 (size unchanged) if the array was not in
    token-id order, or 0 (size unchanged) if the mask allows no token."""
    header = carray(_voidptr(array_address), (2,), np.int64)
    data = carray(_voidptr(header[0]), (header[1], 3), np.int32)
    kept = np.uint64(0)
    for w in range(len(words)):
        kept += _popcount(words[w])
    if kept == 0:
        return 0  # (the size stays: llama.cpp aborts on an empty array; the caller reports it)
    if 2 * np.int64(kept) > header[1]:
        return mark_bits_in_id_order(data, words)
    k = keep_bits_in_id_order(data, words)
    if k >= 0:
        header[1] = k
    return k


# --- a compacted array built from the logits ----------------------------------------

@njit(cache=True)
def gather_bits(words, logits_address, n_vocab, out_address, limit):
    """The candidate array ``keep_bits_in_id_order`` would leave of llama.cpp's fresh one, written
    from the logits instead: a (id, logit, p = 0) record per id set in ``words`` (below ``n_vocab``),
    in id order, at ``out_address`` (room for ``limit`` records), O(words + kept). The count, or
    -1 (nothing written) where more than ``limit`` ids are set."""
    kept = np.uint64(0)
    for w in range(len(words)):
        kept += _popcount(words[w])
    if np.int64(kept) > limit:
        return -1
    logits = carray(_voidptr(logits_address), (n_vocab,), np.float32)
    ids = carray(_voidptr(out_address), (max(limit, 1), 3), np.int32)
    values = carray(_voidptr(out_address), (max(limit, 1), 3), np.float32)
    one = np.uint64(1)
    j = 0
    for w in range(len(words)):
        word = words[w]
        while word:
            t = (w << 6) + _lowest_bit(word)
            word &= word - one
            if t >= n_vocab:
                return j
            ids[j, 0] = t
            values[j, 1] = logits[t]
            values[j, 2] = 0.0
            j += 1
    return j


def py_gather_bits(words, logits, out, limit):
    """Twin of ``gather_bits``, on arrays: ``logits`` float32[n_vocab], ``out`` the records
    (``llama_token_data``'s dtype)."""
    ids = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little"))
    if len(ids) > limit:
        return -1
    ids = ids[ids < len(logits)]
    out["id"][:len(ids)] = ids
    out["logit"][:len(ids)] = logits[ids]
    out["p"][:len(ids)] = 0.0
    return len(ids)
