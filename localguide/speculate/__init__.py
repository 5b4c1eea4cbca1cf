"""Speculative decoding from the constraint (DOMINO §3.6): drafts and the count model.

``Drafter`` proposes the tokens that likely come next (forced text, learned counts);
``localguide.engines.llamacpp.loop`` verifies them in one decode. ``CountModel`` keeps the counts
per compiled constraint and model, in the cache directory.
"""

from __future__ import annotations

from .counts import FORMAT as COUNTS_FORMAT, CountModel
from .drafts import DecodeCost, Drafter, choose_length, forced_text
from ..runtime import oldpaths as _oldpaths

__all__ = ["COUNTS_FORMAT", "CountModel", "DecodeCost", "Drafter", "choose_length", "forced_text"]


__getattr__ = _oldpaths.getattr_of(__name__)  # (names that moved elsewhere)
