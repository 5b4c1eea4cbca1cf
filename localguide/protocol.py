"""The guide protocol: what every guide offers the generation loop and the llama.cpp sampler."""

from __future__ import annotations

from enum import IntEnum


class MaskKind(IntEnum):
    """How a mask is given: the allowed ids, the excluded ids, or a bitset of the vocabulary."""

    ALLOWED = 0
    EXCLUDED = 1
    BITS = 2
