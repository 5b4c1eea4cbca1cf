"""Speculative decoding from the constraint (DOMINO §3.6): drafts and the count model.

``Drafter`` proposes the tokens that likely come next (forced text, learned counts);
``localguide.engines.llamacpp.loop`` verifies them in one decode. ``CountModel`` keeps the counts
per compiled constraint and model, in the cache directory.
"""

from __future__ import annotations

from .counts import FORMAT as COUNTS_FORMAT, CountModel
from .drafts import DecodeCost, Drafter, choose_length, forced_text

__all__ = ["COUNTS_FORMAT", "CountModel", "DecodeCost", "Drafter", "choose_length", "forced_text"]


def __getattr__(name: str):  # (names that moved elsewhere: runtime.oldpaths)
    from ..runtime import oldpaths

    return oldpaths.attribute(__name__, name)
