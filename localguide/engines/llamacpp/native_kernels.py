"""The native sampler: llama.cpp calls these directly, no Python in its callbacks.

A guide block (an int64 array: the cursor, then the addresses of the Index arrays) is
the sampler's ctx pointer; ``block_apply`` masks the candidates and ``block_accept``
advances the cursor, both over the regex / JSON-Schema Index.

Guides without an Index of their own (grammars, healing, triggers) compute their mask in
Python, but before the sample rather than inside llama.cpp's callbacks: a *prepared
block* (``P_*``) holds the mask's kind and address, ``prepared_apply`` applies it and
``prepared_accept`` records the token, which the guide then takes in Python. A ctypes
callback into Python costs tens of microseconds right after a decode has swept the
CPU's caches; these cost none of that.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import carray, cfunc, njit, types

from ...index.build_kernels import large_mask_ids, mask_position, next_row, next_state, within_budget
from ...index.native_block import (
    B_STATE, B_REMAINING, B_FINISHED, B_ERROR, B_ERROR_TOKEN, B_STATE_MASK, B_MASK_SIZES, B_MASK_OFFSETS, B_MASK_TOKENS,
    B_EXCL_OFFSETS, B_EXCL_TOKENS, B_NEXT_DEFAULT, B_NEXT_VALUE_OFFSETS, B_NEXT_VALUES, B_NEXT_POSITION_OFFSETS,
    B_NEXT_POSITIONS, B_DISTANCE, B_MAX_NEXT, B_SIZES, ERROR_FINISHED, ERROR_NOT_ALLOWED, ERROR_OVER_BUDGET, ERROR_ORDER,
)
from .candidates_kernels import exclude_candidates, keep_in_id_order, mask_candidates_bits
from ...runtime.numba_tools import _voidptr

_BIG = 1 << 40  # carray needs a shape; bounds come from the offsets


@njit(cache=True, inline="always")
def _i32(address):
    return carray(_voidptr(address), (_BIG,), np.int32)


@njit(cache=True, inline="always")
def _i64(address):
    return carray(_voidptr(address), (_BIG,), np.int64)


@njit(cache=True, inline="always")
def _large(block, m):
    """Whether mask ``m`` allows more than half the vocabulary (kept as its exclusions)."""
    return 2 * _i64(block[B_MASK_SIZES])[m] > block[B_SIZES]


@njit(cache=True, inline="always")
def _exclusions(block, m):
    eo = _i64(block[B_EXCL_OFFSETS])
    return _i32(block[B_EXCL_TOKENS])[eo[m]:eo[m + 1]]


@njit(cache=True)
def _mask_ids(block, m):
    """Mask ``m``'s sorted ids (made from the exclusions of a large one)."""
    if _large(block, m):
        out = np.empty(_i64(block[B_MASK_SIZES])[m], np.int32)
        large_mask_ids(_exclusions(block, m), block[B_SIZES], out)
        return out
    mo = _i64(block[B_MASK_OFFSETS])
    return _i32(block[B_MASK_TOKENS])[mo[m]:mo[m + 1]]


@njit(cache=True, inline="always")
def _nexts(block):
    """The next-state arrays of the Index behind ``block`` (``build_kernels.next_state``'s order)."""
    return (_i32(block[B_NEXT_DEFAULT]), _i64(block[B_NEXT_VALUE_OFFSETS]), _i32(block[B_NEXT_VALUES]),
            _i64(block[B_NEXT_POSITION_OFFSETS]), _i32(block[B_NEXT_POSITIONS]))


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
    r = block[B_REMAINING]
    if r >= 0 and _i32(block[B_MAX_NEXT])[s] > r - 1:
        tokens = _mask_ids(block, m)
        d, vo, v, po, p = _nexts(block)
        row = np.empty(len(tokens), np.int32)
        next_row(d, vo, v, po, p, s, row)
        kept = np.empty(len(tokens), np.int32)
        k = within_budget(tokens, row, _i32(block[B_DISTANCE]), r - 1, kept)
        tokens = kept[:k]
    elif _large(block, m):
        header[1] = exclude_candidates(data, _exclusions(block, m))
        return
    else:
        tokens = _mask_ids(block, m)
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
    pos = -1
    if 0 <= token < block[B_SIZES]:
        pos = mask_position(_i64(block[B_MASK_SIZES]), _i64(block[B_MASK_OFFSETS]), _i32(block[B_MASK_TOKENS]),
                            _i64(block[B_EXCL_OFFSETS]), _i32(block[B_EXCL_TOKENS]), block[B_SIZES],
                            _i32(block[B_STATE_MASK])[s], token)
    if pos < 0:
        block[B_ERROR] = ERROR_NOT_ALLOWED
        block[B_ERROR_TOKEN] = token
        return
    d, vo, v, po, p = _nexts(block)
    nxt = next_state(d, vo, v, po, p, s, pos)
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


# A prepared block (int64): the mask's kind (``MaskKind``; -1: none prepared), the address and
# length of its array, the token accepted (-1: none yet) and an error (``ERROR_*`` of the guide block).
P_KIND, P_ADDRESS, P_LENGTH, P_TOKEN, P_ERROR = range(5)
PREPARED_LEN = 5
ERROR_EMPTY, ERROR_UNPREPARED = 5, 6
_ALLOWED, _EXCLUDED, _BITS = 0, 1, 2  # MaskKind


@njit(cache=True)
def prepared_apply(block, array_address):
    """The prepared mask applied to the candidate array; a mask that allows nothing, or a
    missing one, is flagged and leaves the array as it was (llama.cpp aborts on an empty one)."""
    kind = block[P_KIND]
    if kind < 0:
        block[P_ERROR] = ERROR_UNPREPARED
        return
    n = block[P_LENGTH]
    if kind == _BITS:
        k = mask_candidates_bits(array_address, carray(_voidptr(block[P_ADDRESS]), (n,), np.uint64))
        if k == 0:
            block[P_ERROR] = ERROR_EMPTY
        elif k < 0:
            block[P_ERROR] = ERROR_ORDER
        return
    header = carray(_voidptr(array_address), (2,), np.int64)
    data = carray(_voidptr(header[0]), (header[1], 3), np.int32)
    tokens = carray(_voidptr(block[P_ADDRESS]), (n,), np.int32)
    if kind == _EXCLUDED:
        header[1] = exclude_candidates(data, tokens)
        return
    if n == 0:
        block[P_ERROR] = ERROR_EMPTY
        return
    k = keep_in_id_order(data, tokens)
    if k < 0:
        block[P_ERROR] = ERROR_ORDER
        return
    header[1] = k


@njit(cache=True)
def prepared_accept(block, token):
    """Record the sampled token; the prepared mask has served (the guide takes the token in Python)."""
    if block[P_KIND] >= 0 and block[P_ERROR] == 0:
        block[P_TOKEN] = token
    block[P_KIND] = -1


def py_prepared_apply(block, array_address) -> None:
    """Twin of ``prepared_apply``, on ``candidates_numpy``."""
    import ctypes

    from . import candidates_numpy

    kind, address, n = (int(x) for x in block[:3])
    if kind < 0:
        block[P_ERROR] = ERROR_UNPREPARED
        return
    dtype = np.uint64 if kind == _BITS else np.int32
    mask = np.frombuffer((ctypes.c_char * (n * np.dtype(dtype).itemsize)).from_address(address), dtype) \
        if n else np.zeros(0, dtype)
    if kind == _BITS:
        k = candidates_numpy.mask_candidates_bits(array_address, mask)
        if k <= 0:
            block[P_ERROR] = ERROR_EMPTY if k == 0 else ERROR_ORDER
    elif kind == _ALLOWED and n == 0:
        block[P_ERROR] = ERROR_EMPTY
    elif not candidates_numpy.mask_candidates_at(array_address, mask, kind == _EXCLUDED):
        block[P_ERROR] = ERROR_ORDER


def py_prepared_accept(block, token) -> None:
    """Twin of ``prepared_accept``."""
    if block[P_KIND] >= 0 and block[P_ERROR] == 0:
        block[P_TOKEN] = token
    block[P_KIND] = -1


@lru_cache(maxsize=None)
def prepared_callbacks():
    """(apply, accept) over a prepared block, as C function pointers (see ``native_callbacks``)."""

    @cfunc(types.void(types.voidptr, types.voidptr), cache=True)
    def prepared_apply_c(smpl, cur_p):
        ctx = carray(smpl, (2,), np.int64)[1]
        prepared_apply(carray(_voidptr(ctx), (PREPARED_LEN,), np.int64), cur_p)

    @cfunc(types.void(types.voidptr, types.int32), cache=True)
    def prepared_accept_c(smpl, token):
        ctx = carray(smpl, (2,), np.int64)[1]
        prepared_accept(carray(_voidptr(ctx), (PREPARED_LEN,), np.int64), token)

    return prepared_apply_c.address, prepared_accept_c.address


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
