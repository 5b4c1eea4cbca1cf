"""The packed form of an Index in the disk cache: exact on unpacking, small, and a damaged file
is rebuilt, not trusted."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.runtime import cache
from packed_helpers import assert_same_arrays, assert_same_index_arrays, built_arrays, format_schema
from localguide.index import Index, packed
from localguide.index.build_kernels import DENSE
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
    return vocab_size, built_arrays(masks, rows, vocab_size, state_mask)


@settings(max_examples=150, deadline=None)
@given(index_arrays())
def test_unpack_gives_back_exactly_what_was_packed(case):
    vocab_size, arrays = case
    assert_same_index_arrays(packed.unpack(packed.pack(arrays, vocab_size), vocab_size), arrays, vocab_size)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_schema_with_a_format_packs_small_and_exactly(vocab, fmt):
    """A four-property schema with a format string: at most 5 MB on disk (it was 14 MB on Gemma 3's
    vocabulary with 'email'), and every array back as built."""
    dfa, _ = build_dfa(format_schema(fmt), strict=True, whitespace="pretty")
    arrays = build_arrays(dfa, vocab)
    stored = packed.pack(arrays, vocab.size)
    assert sum(a.nbytes for a in stored.values()) <= 5_000_000
    assert_same_index_arrays(packed.unpack(stored, vocab.size), arrays, vocab.size)


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


@pytest.mark.parametrize("damage", ["mask_tokens", "excl_tokens", "mask_sizes", "next_positions", "next_values",
                                    "next_default", "next_offsets", "mask_offsets", "state_mask", "type"])
def test_damaged_packed_arrays_raise_never_pass(vocab, damage):
    dfa, _ = build_dfa(format_schema("date-time"), strict=True)
    stored = packed.pack(build_arrays(dfa, vocab), vocab.size)
    bad = dict(stored)
    if damage == "mask_tokens":  # an id beyond the vocabulary
        bad["mask_tokens"] = bad["mask_tokens"].copy()
        bad["mask_tokens"][-1] = vocab.size
    elif damage == "excl_tokens":  # a list out of order
        bad["excl_tokens"] = bad["excl_tokens"][::-1].copy()
    elif damage == "mask_sizes":
        bad["mask_sizes"] = bad["mask_sizes"] + 1
    elif damage == "type":
        bad["next_values"] = bad["next_values"].astype(np.int64)
    elif damage == "next_positions":  # a listed position before the row (out of order)
        bad["next_positions"] = bad["next_positions"].copy()
        bad["next_positions"][0] = -5
    elif damage == "next_values":
        bad["next_values"] = bad["next_values"].copy()
        bad["next_values"][-1] = len(bad["state_mask"])
    elif damage == "next_default":
        bad["next_default"] = bad["next_default"][:-1]
    elif damage == "next_offsets":
        bad["next_value_offsets"] = bad["next_value_offsets"].copy()
        bad["next_value_offsets"][1] += 1
    elif damage == "state_mask":
        bad["state_mask"] = bad["state_mask"] + np.int32(1000)
    else:
        bad["mask_offsets"] = bad["mask_offsets"][::-1].copy()
    with pytest.raises(ValueError):
        packed.unpack(bad, vocab.size)


def test_each_stored_form_is_chosen_where_it_pays_and_unpacks_exactly():
    """Masks of most of the vocabulary whose tokens lead to one state are kept as their exclusions
    and one next state a row; rows whose tokens lead to many states are kept whole; both read back
    exactly."""
    v = 50_000
    most = np.setdiff1d(np.arange(v), [5, 77, 4000]).astype(np.int32)
    loop = built_arrays([most, most[1:]], [np.full(len(most), 1, np.int32), np.full(len(most) - 1, 0, np.int32)], v)
    stored = packed.pack(loop, v)
    assert len(stored["mask_tokens"]) == 0 and len(stored["excl_tokens"]) == 3 + 4  # (both masks as exclusions)
    assert (stored["next_default"] >= -1).all() and len(stored["next_values"]) == 0
    assert sum(a.nbytes for a in stored.values()) * 50 < sum(a.nbytes for a in loop.values())
    assert_same_index_arrays(packed.unpack(stored, v), loop, v)
    rng = np.random.default_rng(0)
    few = [np.sort(rng.choice(v, 300, replace=False)).astype(np.int32) for _ in range(40)]
    keys = built_arrays(few, [rng.integers(-1, 40, 300).astype(np.int32) for _ in range(40)], v)
    stored = packed.pack(keys, v)
    assert (stored["next_default"] == DENSE).all() and len(stored["next_positions"]) == 0
    assert_same_index_arrays(packed.unpack(stored, v), keys, v)


def test_a_plain_stored_array_loads_mapped_not_copied(vocab, tmp_path, monkeypatch):
    """The e-mail regex: its next states scatter (a token's length decides where it leads), so its
    rows are stored whole; a later load maps them from the file instead of rebuilding anything."""
    from localguide.regex import compile_regex

    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    pattern = r"[a-z0-9._%+-]{1,20}@[a-z0-9.-]{1,20}\.[a-z]{2,4}"
    idx = compile_regex(pattern, vocab)
    cache.flush()
    (path,) = [p for p in tmp_path.iterdir() if p.name.startswith("regex")]
    assert (cache.read(path)["next_default"] == DENSE).any()
    again = compile_regex(pattern, vocab)
    assert again is not idx and not again.next_values.flags.owndata
    assert_same_arrays(again.to_arrays(), idx.to_arrays())
