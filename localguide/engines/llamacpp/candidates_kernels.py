"""Candidate compaction: a mask applied to llama.cpp's ``llama_token_data`` array in place.

The array comes fresh from llama.cpp in token-id order (row ``i`` holds token ``i``);
the kernels keep the allowed rows (ids, forbidden ids or a bitset of the vocabulary),
each beside its plain-Python twin.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit

from ...runtime.numba_tools import _lowest_bit, _popcount, _voidptr
from ...protocol import MaskKind

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
    that allows any identifier keeps most of the vocabulary, and moving those rows takes longer
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


# --- the top-k candidates of a dense mask, from the logits ------------------------------

# (``MaskKind``'s values, as plain ints for the kernels)
KIND_ALLOWED, KIND_EXCLUDED, KIND_BITS = int(MaskKind.ALLOWED), int(MaskKind.EXCLUDED), int(MaskKind.BITS)


@njit(cache=True)
def _lowest(top_v):
    """The place of the lowest of the kept logits."""
    at = 0
    for j in range(1, len(top_v)):
        if top_v[j] < top_v[at]:
            at = j
    return at


@njit(cache=True)
def _allowed(kind, words, listed, t, e):
    """Whether token ``t`` is allowed; ``e`` the place in the sorted ``listed`` ids to look from
    (the ids are asked in increasing order). (allowed, the place to look from next)."""
    if kind == KIND_BITS:
        return ((words[t >> 6] >> np.uint64(t & 63)) & np.uint64(1)) != 0, e
    n = len(listed)
    if e < n and listed[e] < t:
        e += np.searchsorted(listed[e:], t)  # (tokens asked are far apart: most logits are passed by)
    found = e < n and listed[e] == t
    return (not found) if kind == KIND_EXCLUDED else found, e


TOP_BLOCK = 128  # logits looked at against the lowest kept at once (a loop the compiler vectorizes)
# Logits kept, then passed by a higher one, at most per sample: random logits take about
# k ln(vocabulary / k) (some 360 for k = 40 of 262,144); logits rising with the id would take
# one per token, and llama.cpp's sort is the quicker way there.
TOP_KEEPS = 4096


@njit(cache=True)
def _passes(logits, t, low):
    """Whether one of the ``TOP_BLOCK`` logits from ``t`` on is above ``low`` or NaN. (A slice and a
    fixed count of iterations, so that the compiler vectorizes the loop; indexing ``logits[t + u]``
    instead, which may be negative to numba, keeps it from doing so.)"""
    block = logits[t:t + TOP_BLOCK]
    above = False
    for u in range(TOP_BLOCK):
        above |= not block[u] <= low
    return above


@njit(cache=True)
def gather_top(kind, mask_address, mask_len, logits_address, n_vocab, k, out_address):
    """What llama.cpp's top-k sampler (``k``) keeps of the candidates the guide sampler leaves, as
    records (id, logit, p = 0) in id order at ``out_address`` (room for ``k``), read from the
    logits in one pass: the ``k`` highest logits of the tokens the mask allows (``kind``: 0 the
    allowed ids, 1 the excluded ids, both sorted int32, 2 a bitset of uint64 words; ``mask_len``
    entries at ``mask_address``). ``k``, or -1 (nothing to rely on) where llama.cpp's result would
    depend on how it sorts: two of the ``k + 1`` highest logits equal (or NaN), or ``k`` or fewer
    tokens allowed; or where it would be slow (more than ``TOP_KEEPS`` logits kept and passed).
    Blocks of logits none of which passes the lowest kept are skipped whole."""
    logits = carray(_voidptr(logits_address), (n_vocab,), np.float32)
    k1 = k + 1
    top_v = np.empty(k1, np.float32)
    top_i = np.empty(k1, np.int32)
    words = carray(_voidptr(mask_address), (max(mask_len, 1) if kind == KIND_BITS else 1,), np.uint64)
    listed = carray(_voidptr(mask_address), (mask_len if kind != KIND_BITS else 0,), np.int32)
    one = np.uint64(1)
    filled = keeps = at = 0
    low = np.float32(0.0)  # the lowest kept logit (at ``top_v[at]``), once k + 1 are kept
    end = min(n_vocab, mask_len * 64) if kind == KIND_BITS else n_vocab
    # k or fewer allowed: llama.cpp keeps them all (no sort to match), and the walk below would
    # look at every token to fill its k + 1
    if kind == KIND_BITS:
        count = np.uint64(0)
        for w in range(mask_len):
            count += _popcount(words[w])
        if mask_len * 64 > end:  # (bits past the vocabulary)
            for t in range(end, mask_len * 64):
                count -= (words[t >> 6] >> np.uint64(t & 63)) & one
        allowed = np.int64(count)
    else:
        inside = np.searchsorted(listed, n_vocab)
        allowed = inside if kind == KIND_ALLOWED else n_vocab - inside
    if allowed <= k:
        return -1
    e = 0
    t = 0
    if kind == KIND_ALLOWED:  # (the first k + 1 allowed, straight from the list)
        for e in range(k1):
            t = listed[e]
            top_v[e], top_i[e] = logits[t], t
        filled, t, e = k1, t + 1, k1
    while t < end and filled < k1:
        ok, e = _allowed(kind, words, listed, t, e)
        if ok:
            top_v[filled], top_i[filled] = logits[t], t
            filled += 1
        t += 1
    if filled == k1:
        at = _lowest(top_v)
        low = top_v[at]
    while t < end:
        b = t + TOP_BLOCK
        if b > end:
            b, above = end, True
        else:
            above = _passes(logits, t, low)
        if above:
            for u in range(t, b):
                v = logits[u]
                if not v <= low:
                    ok, e = _allowed(kind, words, listed, u, e)
                    if not ok:
                        continue
                    if v != v:
                        return -1  # (an allowed NaN: llama.cpp's sort would place it anywhere)
                    keeps += 1
                    if keeps > TOP_KEEPS:
                        return -1
                    top_v[at], top_i[at] = v, u
                    at = _lowest(top_v)
                    low = top_v[at]
        t = b
    if filled < k1:
        return -1
    # highest first (insertion sort: k is small); every neighbour strictly lower
    for j in range(1, k1):
        v, t = top_v[j], top_i[j]
        m = j
        while m > 0 and top_v[m - 1] < v:
            top_v[m], top_i[m] = top_v[m - 1], top_i[m - 1]
            m -= 1
        top_v[m], top_i[m] = v, t
    for j in range(k):
        if not top_v[j] > top_v[j + 1]:
            return -1
    # the k highest in id order
    for j in range(1, k):
        v, t = top_v[j], top_i[j]
        m = j
        while m > 0 and top_i[m - 1] > t:
            top_v[m], top_i[m] = top_v[m - 1], top_i[m - 1]
            m -= 1
        top_v[m], top_i[m] = v, t
    ids = carray(_voidptr(out_address), (k, 3), np.int32)
    values = carray(_voidptr(out_address), (k, 3), np.float32)
    for j in range(k):
        ids[j, 0] = top_i[j]
        values[j, 1] = top_v[j]
        values[j, 2] = 0.0
    return k


def py_gather_top(kind, mask, logits, k, out):
    """Twin of ``gather_top``, on arrays: ``mask`` the ids or words, ``logits`` float32[n_vocab],
    ``out`` the records (``llama_token_data``'s dtype)."""
    n = len(logits)
    if kind == KIND_BITS:
        ids = np.flatnonzero(np.unpackbits(np.asarray(mask, np.uint64).view(np.uint8), bitorder="little"))
    elif kind == KIND_EXCLUDED:
        ids = np.setdiff1d(np.arange(n), mask)
    else:
        ids = np.asarray(mask, np.int64)
    ids = ids[ids < n]
    if len(ids) <= k:
        return -1
    values = logits[ids]
    order = np.argsort(-values, kind="stable")[:k + 1]
    top = values[order]
    if np.isnan(top).any() or not (top[:-1] > top[1:]).all():
        return -1
    kept = np.sort(ids[order[:k]])
    out["id"][:k] = kept
    out["logit"][:k] = logits[kept]
    out["p"][:k] = 0.0
    return k
