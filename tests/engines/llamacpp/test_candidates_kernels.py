"""Candidate compaction kernels against their plain-Python twins."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from localguide.engines.llamacpp import candidates_kernels
from kernel_strategies import SETTINGS, candidates, candidate_arrays, PERMUTED_ENDS, _agree_in_id_order, token_data_array, bitset

@SETTINGS
@given(candidate_arrays())
@example(PERMUTED_ENDS)
def test_keep_candidates_equals_twin(case):
    data, allowed = case
    d1, d2 = data.copy(), data.copy()
    k1 = candidates_kernels.keep_candidates(d1, allowed)
    k2 = candidates_kernels.py_keep_candidates(d2, allowed)
    assert k1 == k2
    np.testing.assert_array_equal(d1[:k1], d2[:k2])
    assert set(d1[:k1, 0].tolist()) <= set(allowed.tolist())


@SETTINGS
@given(candidate_arrays())
@example((candidates([0, 2, 1, 3]), np.array([1], np.int32)))
def test_exclude_candidates_equals_twin(case):
    data, forbidden = case
    d1, d2 = data.copy(), data.copy()
    assert candidates_kernels.exclude_candidates(d1, forbidden) == candidates_kernels.py_exclude_candidates(d2, forbidden)
    np.testing.assert_array_equal(d1, d2)
    logits = d1[:, 1].view(np.float32)
    assert set(d1[np.isneginf(logits), 0].tolist()) == set(forbidden.tolist()) & set(data[:, 0].tolist())


@SETTINGS
@given(st.integers(1, 300), st.data())
def test_keep_and_exclude_in_id_order(size, data):
    """The case the sampler relies on: a full array in id order (the fast paths)."""
    chosen = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1)))), np.int32)
    arr, twin = candidates(np.arange(size)), candidates(np.arange(size))
    k = candidates_kernels.keep_candidates(arr, chosen)
    assert k == candidates_kernels.py_keep_candidates(twin, chosen) == len(chosen)
    np.testing.assert_array_equal(arr[:k], twin[:k])
    np.testing.assert_array_equal(arr[:k, 0], chosen)
    arr, twin = candidates(np.arange(size)), candidates(np.arange(size))
    assert candidates_kernels.exclude_candidates(arr, chosen) == candidates_kernels.py_exclude_candidates(twin, chosen) == size
    np.testing.assert_array_equal(arr, twin)


@SETTINGS
@given(candidate_arrays(max_id_slack=2))
@example(PERMUTED_ENDS)
@example((candidates(np.arange(6)), np.array([0, 2, 5], np.int32)))
def test_keep_in_id_order_equals_twin(case):
    """The one-pass compaction: the twin's result on id-ordered rows, -1 as soon as a row it
    reads or overwrites is out of place (the array is then not llama.cpp's fresh one)."""
    data, allowed = case
    _agree_in_id_order(candidates_kernels.keep_in_id_order, candidates_kernels.py_keep_in_id_order, candidates_kernels.py_keep_candidates,
                       data, allowed)


def test_mask_candidates_at_refuses_an_array_out_of_id_order():
    import ctypes

    arr = candidates([0, 2, 1, 3])
    cur = token_data_array(arr)
    assert not candidates_kernels.mask_candidates_at(ctypes.addressof(cur), np.array([0, 1, 3], np.int32), False)
    assert cur.size == 4


def test_keep_candidates_ignores_ids_beyond_the_array():
    """Allowed ids that are not in a (shorter) candidate array are skipped, as by the twin.

    In a subprocess: the kernel reads rows by id without bounds checks.
    """
    code = textwrap.dedent("""
        import numpy as np
        from localguide.llama import candidates_kernels
        ids = np.arange(4, dtype=np.int32)
        data = np.stack([ids, ids, ids], axis=1).astype(np.int32)
        twin = data.copy()
        allowed = np.array([1, 3, 100000, 2000000], np.int32)
        k = candidates_kernels.keep_candidates(data, allowed)
        k2 = candidates_kernels.py_keep_candidates(twin, allowed)
        print(k, data[:k, 0].tolist(), k2, twin[:k2, 0].tolist())
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["2", "[1,", "3]", "2", "[1,", "3]"], proc.stdout


def test_mask_candidates_at_address():
    import ctypes

    allowed = np.array([1, 7, 8, 49], np.int32)
    arr = candidates(np.arange(50))
    cur = token_data_array(arr)
    assert candidates_kernels.mask_candidates_at(ctypes.addressof(cur), allowed, False)
    assert cur.size == 4
    np.testing.assert_array_equal(arr[:4], candidates(allowed))
    arr = candidates(np.arange(50))
    cur = token_data_array(arr)
    candidates_kernels.mask_candidates_at(ctypes.addressof(cur), allowed, True)
    assert cur.size == 50
    logits = arr[:, 1].view(np.float32)
    assert np.flatnonzero(np.isneginf(logits)).tolist() == allowed.tolist()


def test_mask_candidates_bits_at_address():
    import ctypes

    allowed = [1, 7, 8, 49]
    arr = candidates(np.arange(50))
    cur = token_data_array(arr)
    assert candidates_kernels.mask_candidates_bits(ctypes.addressof(cur), bitset(allowed, 50)) == 4
    assert cur.size == 4
    np.testing.assert_array_equal(arr[:4], candidates(allowed))


@SETTINGS
@given(candidate_arrays(max_id_slack=70))
@example(PERMUTED_ENDS)
@example((candidates(np.arange(6)), np.array([0, 2, 5, 64, 70], np.int32)))
def test_keep_bits_in_id_order_equals_twin(case):
    """The sampler's bitset compaction visits only the set bits: the twin's result on id-ordered
    rows, -1 as soon as a row it reads or overwrites is out of place."""
    data, allowed = case
    _agree_in_id_order(candidates_kernels.keep_bits_in_id_order, candidates_kernels.py_keep_bits_in_id_order, candidates_kernels.py_keep_bits,
                       data, bitset(allowed.tolist(), len(data) + 71))


@SETTINGS
@given(candidate_arrays(max_id_slack=70))
@example(PERMUTED_ENDS)
@example((candidates(np.arange(6)), np.array([0, 2, 5, 64, 70], np.int32)))
def test_mark_bits_in_id_order_equals_twin(case):
    """A dense mask marks the rows it drops with a -inf logit (and leaves the others) instead of
    moving the rows it keeps: the twin's result, -1 as soon as a row it marks is out of place."""
    data, allowed = case
    mask = bitset(allowed.tolist(), len(data) + 71)
    d1, d2 = data.copy(), data.copy()
    k1 = candidates_kernels.mark_bits_in_id_order(d1, mask)
    k2 = candidates_kernels.py_mark_bits_in_id_order(d2, mask)
    assert k1 == k2
    if k1 >= 0:
        np.testing.assert_array_equal(d1, d2)
        assert k1 == len(data)
        keep = set(allowed.tolist())
        for row, old in zip(d1, data):
            want = old[1] if row[0] in keep else candidates_kernels.NEG_INF_BITS
            assert row[0] == old[0] and row[1] == want and row[2] == old[2]


def test_mask_candidates_bits_marks_a_dense_mask():
    import ctypes

    arr = candidates(np.arange(50))
    before = arr.copy()
    cur = token_data_array(arr)
    dropped = {3, 10, 49}
    assert candidates_kernels.mask_candidates_bits(ctypes.addressof(cur), bitset(set(range(50)) - dropped, 50)) == 50
    assert cur.size == 50
    for t in range(50):
        assert arr[t, 1] == (candidates_kernels.NEG_INF_BITS if t in dropped else before[t, 1])


@pytest.mark.parametrize("seed", range(40))
def test_marking_samples_as_compaction(seed):
    """llama.cpp's usual sampler chain (top-k, top-p, min-p, temperature, dist) picks the same
    token after either way of applying a mask, for the same seed."""
    import ctypes

    import llama_cpp

    rng = np.random.default_rng(seed)
    n = 300
    allowed = [t for t in range(n) if rng.random() < (0.9 if seed % 2 else 0.2)]
    logits = rng.normal(0, 3, n).astype(np.float32)

    def sample(apply) -> int:
        arr = candidates(np.arange(n))
        arr[:, 1] = logits.view(np.int32)
        cur = token_data_array(arr)
        apply(cur)
        chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        for smpl in (llama_cpp.llama_sampler_init_top_k(40), llama_cpp.llama_sampler_init_top_p(0.95, 1),
                     llama_cpp.llama_sampler_init_min_p(0.05, 1), llama_cpp.llama_sampler_init_temp(0.8),
                     llama_cpp.llama_sampler_init_dist(seed)):
            llama_cpp.llama_sampler_chain_add(chain, smpl)
        try:
            llama_cpp.llama_sampler_apply(chain, ctypes.byref(cur))
            return int(cur.data[cur.selected].id)
        finally:
            llama_cpp.llama_sampler_free(chain)

    mask = bitset(allowed, n)

    def compact(cur):
        data = np.ctypeslib.as_array(ctypes.cast(cur.data, ctypes.POINTER(ctypes.c_int32)), (cur.size, 3))
        cur.size = candidates_kernels.keep_bits_in_id_order(data, mask)

    def mark(cur):
        data = np.ctypeslib.as_array(ctypes.cast(cur.data, ctypes.POINTER(ctypes.c_int32)), (cur.size, 3))
        assert candidates_kernels.mark_bits_in_id_order(data, mask) == n

    a, b = sample(compact), sample(mark)
    assert a in allowed and a == b


def test_mask_candidates_bits_refuses_an_array_out_of_id_order():
    import ctypes

    arr = candidates([1, 0, 2, 3])
    cur = token_data_array(arr)
    assert candidates_kernels.mask_candidates_bits(ctypes.addressof(cur), bitset([0, 2], 4)) == -1
    assert cur.size == 4
