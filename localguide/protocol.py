"""The guide protocol: what every guide offers the generation loop and the llama.cpp sampler.

A guide is a cheap cursor over an immutable compiled constraint (an ``Index``, a
``LazyIndex`` or a ``GrammarIndex``). Every guide implements ``GuideProtocol``; the
sampler and the model call these methods and nothing else:

- ``allowed_token_ids()``: the sorted ids allowed now (stop ids exactly where the text is
  complete); ``mask()`` the same set in the form cheapest to apply (``MaskKind``).
- ``accepts(token)``: whether one token is allowed, without building the mask when the
  guide can avoid it (opportunistic masking, DOMINO §3.5).
- ``advance(token)``, ``is_accepting()``, ``is_finished()``, ``copy()``.
- ``checkpoint()`` and ``rollback(n)``: the number of tokens advanced so far, and undo the
  last ``n`` of them in O(n) (speculative decoding rolls back rejected drafts). A copy
  shares its history with the original; either may roll back independently.
- ``state_key()``: an int naming the constraint state (the same across processes for the
  same compiled constraint; -1 once finished): the speculative drafts' count model is keyed by it.
- ``cheap_masks``: True where masks are precomputed lookups (the Index guides), so
  opportunistic masking cannot pay and the model does not use it.
- ``native_block()``: an optional capability. The Index guides hand the native llama.cpp
  sampler a block (``localguide.index.native_block``) so that no Python runs per token;
  others return None and are driven through ``mask()`` and ``advance``.
"""

from __future__ import annotations

from enum import IntEnum
from typing import NamedTuple, Protocol, runtime_checkable

import numpy as np


class MaskKind(IntEnum):
    """How a mask is given: the allowed ids, the excluded ids, or a bitset of the vocabulary."""

    ALLOWED = 0   # sorted int32 ids of the allowed tokens
    EXCLUDED = 1  # sorted int32 ids of the tokens not allowed (cheaper when most are allowed)
    BITS = 2      # uint64 words, bit ``t`` of word ``t // 64`` set when token ``t`` is allowed


class Mask(NamedTuple):
    """A guide's mask for the next token: ``kind`` says how ``data`` reads."""

    kind: MaskKind
    data: np.ndarray

    def allowed(self, size: int) -> np.ndarray:
        """The sorted int32 ids of the allowed tokens, of a vocabulary of ``size`` tokens."""
        if self.kind == MaskKind.ALLOWED:
            return self.data
        if self.kind == MaskKind.BITS:
            return bits_ids(self.data)
        # (a boolean pass, not np.setdiff1d, which sorts: slow on a large vocabulary)
        keep = np.ones(size, bool)
        keep[self.data] = False
        return np.flatnonzero(keep).astype(np.int32)


def bits_ids(bits: np.ndarray) -> np.ndarray:
    """The sorted token ids of the vocabulary bitset ``bits`` (int32, read-only)."""
    out = np.flatnonzero(np.unpackbits(bits.view(np.uint8), bitorder="little")).astype(np.int32)
    out.flags.writeable = False
    return out


@runtime_checkable
class GuideProtocol(Protocol):
    """The cursor every compiled constraint hands out (``index.guide(max_tokens=None)``)."""

    cheap_masks: bool

    def allowed_token_ids(self) -> np.ndarray: ...

    def mask(self) -> Mask: ...

    def accepts(self, token_id: int) -> bool: ...

    def advance(self, token_id: int) -> None: ...

    def is_accepting(self) -> bool: ...

    def is_finished(self) -> bool: ...

    def copy(self) -> "GuideProtocol": ...

    def checkpoint(self) -> int: ...

    def state_key(self) -> int: ...

    def rollback(self, n: int) -> None: ...

    def native_block(self) -> np.ndarray | None: ...


def unwind(node, depth: int, n: int):
    """Undo ``n`` steps of a guide's history: (the node ``n`` steps back, the cursor saved there, the new depth).

    A history is a linked list shared between copies: each node is ``(previous node,
    cursor before the step)``, so pushing and copying are O(1) and undoing ``n`` steps O(n).
    ``cursor`` is None when ``n`` is 0.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"rollback takes a number of tokens >= 0, not {n!r}")
    if n > depth:
        raise ValueError(f"cannot roll back {n} tokens: the guide has advanced {depth}")
    cursor = None
    for _ in range(n):
        node, cursor = node
    return node, cursor, depth - n
