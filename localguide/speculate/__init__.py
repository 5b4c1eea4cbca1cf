"""Speculative decoding from the constraint (DOMINO §3.6): drafts and the count model.

``Drafter`` proposes the tokens that likely come next (forced text, learned counts);
``localguide.llama.loop`` verifies them in one decode. ``CountModel`` keeps the counts
per compiled constraint and model, in the cache directory.
"""

from __future__ import annotations

import json
import os

from .counts import FORMAT as COUNTS_FORMAT, CountModel
from .drafts import DecodeCost, Drafter, choose_length, forced_text

__all__ = ["COUNTS_FORMAT", "CountModel", "DecodeCost", "Drafter", "choose_length", "constraint_key",
           "forced_text"]


def constraint_key(**constraint) -> str | None:
    """A text naming a constraint as ``Model.compile`` takes it (None when it cannot be written),
    to key its draft counts by."""
    for kind in ("regex", "choice", "grammar", "json_schema"):
        if constraint.get(kind) is None:
            constraint.pop(kind, None)
    schema = constraint.get("json_schema")
    if isinstance(schema, type) and hasattr(schema, "model_json_schema"):
        constraint["json_schema"] = schema.model_json_schema()
    elif isinstance(schema, (bytes, bytearray)):
        constraint["json_schema"] = schema.decode("utf-8", "replace")
    if isinstance(constraint.get("grammar"), os.PathLike):
        constraint["grammar"] = os.fspath(constraint["grammar"])
    if constraint.get("choice") is not None:
        constraint["choice"] = list(constraint["choice"])
    try:
        return json.dumps(constraint, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return None
