"""The native sampler: llama.cpp calls these directly, no Python per token.

A guide block (an int64 array: the cursor, then the addresses of the Index arrays) is
the sampler's ctx pointer; ``block_apply`` masks the candidates and ``block_accept``
advances the cursor, both over the regex / JSON-Schema Index.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import carray, cfunc, njit, types

from ..index.build_kernels import within_budget
from ..index.native_block import (
    B_STATE, B_REMAINING, B_FINISHED, B_ERROR, B_ERROR_TOKEN, B_STATE_MASK, B_MASK_OFFSETS, B_MASK_TOKENS, B_EXCL_OFFSETS, B_EXCL_TOKENS, B_NEXT_OFFSETS, B_NEXT_STATES, B_DISTANCE, B_MAX_NEXT, B_SIZES, ERROR_FINISHED, ERROR_NOT_ALLOWED, ERROR_OVER_BUDGET, ERROR_ORDER,
)
from .candidates_kernels import exclude_candidates, keep_in_id_order
from ..numba_tools import _voidptr

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
