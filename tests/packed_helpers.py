"""What the packed-cache tests share: a four-property schema with a format string, and exact
equality of two sets of arrays (values and types)."""

from __future__ import annotations

import numpy as np


def format_schema(fmt: str) -> dict:
    props = {"name": {"type": "string"}, "age": {"type": "integer"},
             "contact": {"type": "string", "format": fmt}, "city": {"type": "string"}}
    return {"type": "object", "properties": props, "required": list(props)}


def assert_same_arrays(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        assert np.asarray(a[k]).dtype == np.asarray(b[k]).dtype, k
        np.testing.assert_array_equal(np.asarray(a[k]), np.asarray(b[k]), err_msg=k)


def built_arrays(masks: list, rows: list, vocab_size: int, state_mask=None) -> dict:
    """Arrays shaped as ``build_arrays`` makes them from sorted ``masks`` and next-state ``rows``
    (one per state; state ``s`` has mask ``state_mask[s]``, by default mask ``s``)."""
    everything = np.arange(vocab_size, dtype=np.int32)
    excl = [np.setdiff1d(everything, m).astype(np.int32) if 2 * len(m) > vocab_size else np.zeros(0, np.int32)
            for m in masks]
    n = len(rows)
    return {
        "state_mask": np.arange(n, dtype=np.int32) if state_mask is None else np.asarray(state_mask, np.int32),
        "mask_offsets": np.concatenate(([0], np.cumsum([len(m) for m in masks]))).astype(np.int64),
        "mask_tokens": np.concatenate(masks).astype(np.int32),
        "excl_offsets": np.concatenate(([0], np.cumsum([len(x) for x in excl]))).astype(np.int64),
        "excl_tokens": np.concatenate(excl).astype(np.int32),
        "next_offsets": np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64),
        "next_states": np.concatenate(rows).astype(np.int32),
        "accepting": np.zeros(n, bool), "distance": np.zeros(n, np.int32),
        "max_next_distance": np.zeros(n, np.int32), "stop_ids": np.zeros(1, np.int32),
        "dfa_states": np.arange(n, dtype=np.int32),
    }


def assert_same_index_arrays(kept: dict, built: dict, vocab_size: int) -> None:
    """An Index's arrays (``index.packed``) say what ``build_arrays`` made: every mask's ids and
    every row of next states the same."""
    from localguide.index import packed

    assert_same_arrays(packed.plain(kept, vocab_size), built)
