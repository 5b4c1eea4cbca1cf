"""The masks on llama.cpp's candidate array in numpy: a first use's path, before
``candidates_kernels`` is compiled.

``mask_candidates_bits`` (a grammar's masks) takes and does what the kernel of that name does
(O(vocabulary) here, not O(allowed)) until the grammar warm-up has compiled it
(``runtime.warmup``); ``mask_candidates_at`` likewise. A test compares them with the kernels.
"""

from __future__ import annotations

import ctypes

import numpy as np

from ...guides.logits import allowed_row, mask_logits
from ...protocol import Mask, MaskKind


def _rows(array_address: int) -> tuple[np.ndarray, np.ndarray]:
    """(the header (data pointer, size), the rows (id, logit bits, p) as int32) of a
    ``llama_token_data_array``, both views of llama.cpp's memory."""
    header = np.ctypeslib.as_array((ctypes.c_int64 * 2).from_address(array_address))
    n = int(header[1])
    if n == 0:
        return header, np.zeros((0, 3), np.int32)
    data = np.ctypeslib.as_array((ctypes.c_int32 * (3 * n)).from_address(int(header[0]))).reshape(n, 3)
    return header, data


def _logits(data: np.ndarray) -> np.ndarray:
    """The logit column of the rows, as float32 (a view: writes land in llama.cpp's array)."""
    return data[:, 1].view(np.float32)


def _in_id_order(data: np.ndarray) -> bool:
    return bool((data[:, 0] == np.arange(len(data), dtype=np.int32)).all())


def _keep(header, data, allowed: np.ndarray) -> int:
    allowed = allowed[allowed < len(data)]
    data[:len(allowed)] = data[allowed]
    header[1] = len(allowed)
    return len(allowed)


def mask_candidates_at(array_address: int, tokens: np.ndarray, exclude: bool) -> bool:
    """``candidates_kernels.mask_candidates_at``."""
    header, data = _rows(array_address)
    if exclude:
        if _in_id_order(data):
            mask_logits(Mask(MaskKind.EXCLUDED, tokens), _logits(data))
        else:
            forbidden = np.asarray(tokens, np.int64)
            _logits(data)[np.isin(data[:, 0], forbidden)] = -np.inf
        return True
    if not _in_id_order(data):
        return False
    _keep(header, data, np.asarray(tokens, np.int64))
    return True


def mask_candidates_bits(array_address: int, words: np.ndarray) -> int:
    """``candidates_kernels.mask_candidates_bits``: the new size, or -1 if the array was not in
    token-id order, or 0 (size unchanged) if the mask allows no token."""
    header, data = _rows(array_address)
    if not words.any():
        return 0
    if not _in_id_order(data):
        return -1
    n = len(data)
    kept = int(np.count_nonzero(np.unpackbits(words.view(np.uint8))))  # (every bit of the mask, as the kernel counts)
    if 2 * kept > n:
        mask_logits(Mask(MaskKind.BITS, words), _logits(data))
        return n
    return _keep(header, data, np.flatnonzero(allowed_row(Mask(MaskKind.BITS, words), n)))
