"""The cache's small forms (``localguide.runtime.packing``, ``grammar.packed``): whatever they are given,
they give back exactly."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.runtime import packing
from localguide.grammar import packed as grammar_packed


@st.composite
def sorted_lists(draw):
    top = draw(st.sampled_from([10, 70_000, 2**31 - 1]))
    lists = draw(st.lists(st.lists(st.integers(0, top), unique=True, max_size=12), max_size=6))
    lists = [sorted(x) for x in lists]
    offsets = np.concatenate(([0], np.cumsum([len(x) for x in lists]))).astype(np.int64)
    values = np.array([v for x in lists for v in x], np.int32)
    return values, offsets


@settings(max_examples=200, deadline=None)
@given(sorted_lists())
def test_sorted_lists_come_back(case):
    values, offsets = case
    got = packing.unpack_sorted(packing.pack_sorted(values, offsets, "x"), "x", offsets)
    assert got.dtype == np.int32 and got.tolist() == values.tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-2**40, 2**40), min_size=0, max_size=40), st.sampled_from(["int16", "int32", "int64"]),
       st.integers(0, 3))
def test_narrowed_integers_come_back(values, dtype, scale):
    info = np.iinfo(dtype)
    a = np.clip(np.array(values, np.int64) >> (scale * 12), info.min, info.max).astype(dtype)
    back = packing.widened(packing.narrowed({"a": a, "f": np.ones(3)}, min_size=0))
    assert back["a"].dtype == a.dtype and back["a"].tolist() == a.tolist() and back["f"].tolist() == [1.0] * 3


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=2000))
def test_deflated_bytes_come_back(data):
    a = np.frombuffer(data, np.uint8)
    assert packing.inflate(packing.deflate(a), np.uint8, len(a)).tobytes() == data


def test_inflating_damage_is_a_value_error():
    z = packing.deflate(np.arange(1000, dtype=np.uint16))
    with pytest.raises(ValueError):
        packing.inflate(z[:-4], np.uint16, 1000)
    with pytest.raises(ValueError):
        packing.inflate(z, np.uint16, 999)


@st.composite
def tree_groups(draw):
    """Token groups as ``masks.build_trees`` lays them out, many repeating others, some large
    (with the bitsets ``MaskEngine.tree_arrays`` makes for them)."""
    vocab_size = draw(st.integers(1, 300))
    pool = draw(st.lists(st.lists(st.integers(0, vocab_size - 1), unique=True, max_size=40), min_size=1, max_size=5))
    picks = draw(st.lists(st.integers(0, len(pool) - 1), max_size=12))
    groups = [sorted(pool[i]) for i in picks]
    off = np.concatenate(([0], np.cumsum([len(g) for g in groups]))).astype(np.int64)
    tok = np.array([t for g in groups for t in g], np.int32)
    big = np.array([g for g in range(len(groups)) if len(groups[g]) >= 20], np.int64)
    words = (vocab_size + 63) // 64
    bits = np.zeros((len(big), words), np.uint64)
    for i, g in enumerate(big.tolist()):
        for t in groups[g]:
            bits[i, t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    other = np.array(draw(st.lists(st.integers(-40_000, 40_000), min_size=1100, max_size=1100)), np.int64)
    return vocab_size, {"tr_grp_off": off, "tr_grp_tok": tok, "tr_big_grp": big, "tr_big_bits": bits,
                        "tr_other": other, "format": np.array([10])}


def _forms(arrays: dict) -> dict:
    """``grammar_packed.pack(arrays)`` in each form a bound on plain files gives."""
    whole = grammar_packed.pack(arrays, plain_bytes=10**12)
    size = sum(a.nbytes for a in whole.values())
    return {"whole": whole, "below": grammar_packed.pack(arrays, plain_bytes=size - 1),
            "packed": grammar_packed.pack(arrays, plain_bytes=0)}


@settings(max_examples=100, deadline=None)
@given(tree_groups())
def test_grammar_groups_come_back(case):
    vocab_size, arrays = case
    forms = _forms(arrays)
    assert "tr_grp_list" not in forms["whole"] and "tr_list_tok" in forms["whole"]
    assert "tr_list_z" in forms["packed"] and "tr_big_bits" not in forms["packed"]
    for form, stored in forms.items():
        back = grammar_packed.unpack(stored, vocab_size)
        assert set(back) == set(arrays), form
        for k, a in arrays.items():
            assert back[k].dtype == a.dtype, (form, k)
            np.testing.assert_array_equal(back[k], a, err_msg=f"{form} {k}")


@settings(max_examples=60, deadline=None)
@given(tree_groups(), st.sampled_from(["high", "negative", "bits", "length", "list"]))
def test_damaged_plain_groups_raise(case, damage):
    """A plain file is mapped, not decoded: what a load checks instead, each kind of damage refused."""
    vocab_size, arrays = case
    for stored in _forms(arrays).values():
        if "tr_list_tok" not in stored:
            continue
        stored = {k: np.array(v) for k, v in stored.items()}
        tok, bits = stored["tr_list_tok"], stored["tr_big_bits"]
        if damage in ("high", "negative"):
            if len(tok) == 0:
                continue
            tok[-1] = vocab_size if damage == "high" else -1
        elif damage == "bits":
            stored["tr_big_bits"] = bits[:, :-1] if bits.shape[1] > 1 else bits.astype(np.int64)
        elif damage == "length":
            stored["tr_list_tok"] = np.append(tok, np.int32(0))
        else:
            if "tr_grp_list" not in stored or len(stored["tr_grp_list"]) == 0:
                continue
            stored["tr_grp_list"][0] = len(stored["tr_list_off"]) - 1
        with pytest.raises(ValueError):
            grammar_packed.unpack(stored, vocab_size)


def test_a_bitset_beyond_the_vocabulary_raises():
    groups = {"tr_grp_off": np.array([0, 3], np.int64), "tr_grp_tok": np.array([1, 2, 60], np.int32),
              "tr_big_grp": np.array([0], np.int64), "tr_big_bits": np.array([[2**1 + 2**2 + 2**60]], np.uint64),
              "format": np.array([10])}
    stored = grammar_packed.pack(groups)
    assert grammar_packed.unpack(stored, 61)["tr_big_bits"].tolist() == groups["tr_big_bits"].tolist()
    stored["tr_big_bits"] = stored["tr_big_bits"] | np.uint64(2**61)
    with pytest.raises(ValueError):
        grammar_packed.unpack(stored, 61)
