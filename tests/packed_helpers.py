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


def assert_same_index_arrays(kept: dict, built: dict, vocab_size: int) -> None:
    """An Index's arrays (``index.packed``) say what ``build_arrays`` made: every mask's ids and
    every row of next states the same."""
    from localguide.index import packed

    assert_same_arrays(packed.plain(kept, vocab_size), built)
