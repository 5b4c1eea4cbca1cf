"""Any guide on any engine: a row of logits with every token the guide does not allow now at -inf.

The engine-neutral seam. An engine that hands out its logits as numpy (Hugging Face transformers
through a ``LogitsProcessor``, MLX, an ONNX runtime) masks them here, samples as it likes, and
advances the guide by the token it chose (``examples/transformers_logits_processor.py``).
llama.cpp's engine masks its candidate array here too where its kernels are not compiled yet.
"""

from __future__ import annotations

import numpy as np

from ..protocol import Mask, MaskKind


def allowed_row(mask: Mask, size: int) -> np.ndarray:
    """``mask`` as a bool row of ``size`` tokens (ids at or past ``size`` dropped)."""
    kind, data = mask
    if kind == MaskKind.BITS:
        flags = np.unpackbits(np.asarray(data, np.uint64).view(np.uint8), bitorder="little")[:size].view(bool)
        if len(flags) == size:
            return flags
        row = np.zeros(size, bool)
        row[:len(flags)] = flags
        return row
    ids = np.asarray(data, np.int64)
    ids = ids[(ids >= 0) & (ids < size)]
    row = np.zeros(size, bool) if kind == MaskKind.ALLOWED else np.ones(size, bool)
    row[ids] = kind == MaskKind.ALLOWED
    return row


def mask_logits(guide, logits: np.ndarray, vocab_size: int | None = None) -> np.ndarray:
    """``logits`` (one row, or rows whose last axis is the vocabulary) with every token that
    ``guide`` (any guide, or a ``Mask``) does not allow now set to -inf, in place; returns it.
    ``vocab_size``: where rows are wider than the vocabulary (models pad theirs), the tokens
    past it are disallowed too."""
    mask = guide if isinstance(guide, Mask) else guide.mask()
    size = logits.shape[-1]
    if vocab_size is not None and vocab_size < size:
        logits[..., vocab_size:] = -np.inf
        size = vocab_size
    if mask.kind == MaskKind.EXCLUDED:
        ids = np.asarray(mask.data, np.int64)
        logits[..., ids[(ids >= 0) & (ids < size)]] = -np.inf  # (no row of the vocabulary built)
        return logits
    logits[..., :size][..., ~allowed_row(mask, size)] = -np.inf
    return logits
