"""The packed form of an Index in the disk cache: exact on unpacking, small, and a damaged file
is rebuilt, not trusted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.runtime import cache
from packed_helpers import assert_same_arrays, format_schema
from localguide.index import Index, packed
from localguide.index.index import build_arrays
from localguide.json_schema.schema import build_dfa, compile_json_schema

FORMATS = ("email", "uri-reference", "date-time", "hostname")


@st.composite
def index_arrays(draw):
    """Arrays shaped as ``build_arrays`` makes them: distinct sorted masks, some allowing most of
    the vocabulary (with their exclusions), and per state a next state for each allowed token,
    mostly one value (as inside a string) or scattered."""
    vocab_size = draw(st.integers(1, 70_000))
    n_masks = draw(st.integers(1, 5))
    masks = []
    for _ in range(n_masks):
        if draw(st.booleans()):
            k = draw(st.integers(0, min(vocab_size, 40)))
            ids = draw(st.lists(st.integers(0, vocab_size - 1), min_size=k, max_size=k, unique=True))
        else:  # most of the vocabulary: all but a few
            out = set(draw(st.lists(st.integers(0, vocab_size - 1), max_size=20, unique=True)))
            ids = [t for t in range(vocab_size) if t not in out]
        masks.append(np.array(sorted(ids), np.int32))
    n_states = draw(st.integers(1, 8))
    state_mask = np.array(draw(st.lists(st.integers(0, n_masks - 1), min_size=n_states, max_size=n_states)), np.int32)
    rows = []
    for s in range(n_states):
        n = len(masks[state_mask[s]])
        base = draw(st.integers(-1, n_states - 1))
        scattered = draw(st.lists(st.integers(-1, n_states - 1), min_size=min(n, 30), max_size=min(n, 30)))
        row = np.full(n, base, np.int32)
        row[:len(scattered)] = scattered
        rows.append(row)
    lengths = [len(m) for m in masks]
    everything = np.arange(vocab_size, dtype=np.int32)
    excl = [np.setdiff1d(everything, m).astype(np.int32) if 2 * len(m) > vocab_size else np.zeros(0, np.int32)
            for m in masks]
    return vocab_size, {
        "state_mask": state_mask,
        "mask_offsets": np.concatenate(([0], np.cumsum(lengths))).astype(np.int64),
        "mask_tokens": np.concatenate(masks).astype(np.int32),
        "excl_offsets": np.concatenate(([0], np.cumsum([len(x) for x in excl]))).astype(np.int64),
        "excl_tokens": np.concatenate(excl).astype(np.int32),
        "next_offsets": np.concatenate(([0], np.cumsum([len(r) for r in rows]))).astype(np.int64),
        "next_states": np.concatenate(rows).astype(np.int32),
        "accepting": np.zeros(n_states, bool), "distance": np.zeros(n_states, np.int32),
        "max_next_distance": np.zeros(n_states, np.int32), "stop_ids": np.zeros(1, np.int32),
        "dfa_states": np.arange(n_states, dtype=np.int32),
    }


@settings(max_examples=150, deadline=None)
@given(index_arrays())
def test_unpack_gives_back_exactly_what_was_packed(case):
    vocab_size, arrays = case
    assert_same_arrays(packed.unpack(packed.pack(arrays, vocab_size), vocab_size), arrays)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_schema_with_a_format_packs_small_and_exactly(vocab, fmt):
    """A four-property schema with a format string: at most 5 MB on disk (it was 14 MB on Gemma 3's
    vocabulary with 'email'), and every array back as built."""
    dfa, _ = build_dfa(format_schema(fmt), strict=True, whitespace="pretty")
    arrays = build_arrays(dfa, vocab)
    stored = packed.pack(arrays, vocab.size)
    assert sum(a.nbytes for a in stored.values()) <= 5_000_000
    assert_same_arrays(packed.unpack(stored, vocab.size), arrays)


def test_an_index_loads_from_its_packed_file_as_it_was_built(vocab, tmp_path, monkeypatch):
    """Through the library's own path: the file the compile writes, then a second compile that loads it."""
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    idx = compile_json_schema(format_schema("email"), vocab, strict=True, whitespace="pretty", lazy=False)
    cache.flush()
    files = [p for p in tmp_path.iterdir() if p.name.startswith("json_schema")]
    assert files and max(p.stat().st_size for p in files) <= 5_000_000
    again = compile_json_schema(format_schema("email"), vocab, strict=True, whitespace="pretty", lazy=False)
    assert isinstance(again, Index)
    assert_same_arrays(again.to_arrays(), idx.to_arrays())


@pytest.mark.parametrize("damage", ["d16", "esc_pos", "next_esc_pos", "next_default", "mask_offsets"])
def test_damaged_packed_arrays_raise_never_pass(vocab, damage):
    dfa, _ = build_dfa(format_schema("date-time"), strict=True)
    stored = packed.pack(build_arrays(dfa, vocab), vocab.size)
    bad = dict(stored)
    if damage == "d16":
        bad["mask_d16"] = bad["mask_d16"][:-1]
    elif damage == "esc_pos":
        bad["excl_esc_pos"] = np.array([10**9], np.int64)
        bad["excl_esc_val"] = np.array([1], np.int64)
    elif damage == "next_esc_pos":
        bad["next_esc_pos"] = np.array([-5], np.int64)
        bad["next_esc_val"] = np.array([0], np.int32)
    elif damage == "next_default":
        bad["next_default"] = bad["next_default"][:-1]
    else:
        bad["mask_offsets"] = bad["mask_offsets"][::-1].copy()
    with pytest.raises((ValueError, IndexError)):
        packed.unpack(bad, vocab.size)
