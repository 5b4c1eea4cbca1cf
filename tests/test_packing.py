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
    large = draw(st.integers(1, 24))  # (how long a group with a bitset is, drawn: large ones come often)
    big = np.array([g for g in range(len(groups)) if len(groups[g]) >= large], np.int64)
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
    size = grammar_packed._file_bytes(whole)
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


def _damaged_tokens(arrays: dict, damage: str, vocab_size: int) -> dict | None:
    """``arrays`` with one group's tokens damaged (each form then stores the damage as it stores
    tokens), or None where no group is long enough for it."""
    off, tok = arrays["tr_grp_off"], arrays["tr_grp_tok"].copy()
    sizes = np.diff(off)
    g = int(np.argmax(sizes)) if len(sizes) else 0
    if len(tok) == 0 or damage in ("unsorted", "twice") and sizes[g] < 2:
        return None
    a, b = int(off[g]), int(off[g + 1])
    if damage == "high":
        tok[b - 1] = vocab_size
    elif damage == "negative":
        tok[a] = -1
    elif damage == "unsorted":
        tok[a], tok[a + 1] = tok[a + 1], tok[a]
    else:
        tok[a + 1] = tok[a]
    return {**arrays, "tr_grp_tok": tok}


def _damaged(stored: dict, damage: str) -> dict | None:
    """``stored`` (a copy) with one kind of damage to its structure, or None where this form has
    nothing to damage so."""
    stored = {k: np.array(v) for k, v in stored.items()}
    plain = "tr_list_tok" in stored
    off = stored["tr_list_off"]
    if damage == "bits":
        if not plain:
            return None
        bits = stored["tr_big_bits"]
        stored["tr_big_bits"] = bits[:, :-1] if bits.shape[1] > 1 else bits.astype(np.int64)
    elif damage == "length":
        if not plain:
            return None
        stored["tr_list_tok"] = np.append(stored["tr_list_tok"], np.int32(0))
    elif damage == "list":
        if "tr_grp_list" not in stored or len(stored["tr_grp_list"]) == 0:
            return None
        stored["tr_grp_list"][0] = len(off) - 1
    elif damage == "shape":
        key = "tr_list_tok" if plain else "tr_list_off"
        stored[key] = stored[key].reshape(-1, 1)
    else:  # "offsets": out of order
        if len(off) < 3 or off[1] == 0:
            return None
        off[1] = off[-1] + 1
    return stored


@settings(max_examples=60, deadline=None)
@given(tree_groups(), st.sampled_from(["high", "negative", "unsorted", "twice"]))
def test_damaged_tokens_raise(case, damage):
    """Ids outside the vocabulary or out of order would reach the masks: refused in every form
    (a plain file is mapped, not decoded, and checked instead)."""
    vocab_size, arrays = case
    bad = _damaged_tokens(arrays, damage, vocab_size)
    if bad is None:
        return
    for stored in _forms(bad).values():
        with pytest.raises(ValueError):
            grammar_packed.unpack(stored, vocab_size)


@settings(max_examples=60, deadline=None)
@given(tree_groups(), st.sampled_from(["bits", "length", "list", "shape", "offsets"]))
def test_damaged_structure_raises(case, damage):
    vocab_size, arrays = case
    for stored in _forms(arrays).values():
        bad = _damaged(stored, damage)
        if bad is not None:
            with pytest.raises(ValueError):
                grammar_packed.unpack(bad, vocab_size)


def test_duplicate_groups_are_stored_once_in_the_plain_form():
    lists = [np.arange(0, 200, 2, dtype=np.int32), np.arange(1, 101, dtype=np.int32)]
    groups = [lists[0], lists[1], lists[0], lists[0], lists[1]]
    arrays = {"tr_grp_off": np.concatenate(([0], np.cumsum([len(g) for g in groups]))).astype(np.int64),
              "tr_grp_tok": np.concatenate(groups), "tr_big_grp": np.zeros(0, np.int64),
              "tr_big_bits": np.zeros((0, 4), np.uint64), "format": np.array([10])}
    forms = _forms(arrays)
    below = forms["below"]
    assert below["tr_grp_list"].tolist() == [0, 1, 0, 0, 1] and len(below["tr_list_tok"]) == 200
    for stored in forms.values():
        back = grammar_packed.unpack(stored, 256)
        assert back["tr_grp_tok"].tolist() == arrays["tr_grp_tok"].tolist()
        assert back["tr_grp_off"].tolist() == arrays["tr_grp_off"].tolist()


def test_a_bitset_beyond_the_vocabulary_raises():
    groups = {"tr_grp_off": np.array([0, 3], np.int64), "tr_grp_tok": np.array([1, 2, 60], np.int32),
              "tr_big_grp": np.array([0], np.int64), "tr_big_bits": np.array([[2**1 + 2**2 + 2**60]], np.uint64),
              "format": np.array([10])}
    stored = grammar_packed.pack(groups)
    assert grammar_packed.unpack(stored, 61)["tr_big_bits"].tolist() == groups["tr_big_bits"].tolist()
    stored["tr_big_bits"] = stored["tr_big_bits"] | np.uint64(2**61)
    with pytest.raises(ValueError):
        grammar_packed.unpack(stored, 61)
