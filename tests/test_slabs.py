"""Bitsets carved from slabs are zeroed, disjoint, and outlive the slab's release."""

from __future__ import annotations

import gc

import numpy as np

from localguide.runtime.slabs import Slabs, _slab


def test_arrays_are_zeroed_and_disjoint_across_slabs():
    slabs = Slabs(slab_bytes=4096)  # 512 words: a new slab every fifth array of 100
    arrays = []
    for i in range(12):
        a = slabs.zeros(100)
        assert a.dtype == np.uint64 and a.shape == (100,) and not a.any()
        a[:] = i + 1
        arrays.append(a)
    for i, a in enumerate(arrays):
        assert (a == i + 1).all()  # no later array overwrote it
    assert len({a.ctypes.data for a in arrays}) == 12


def test_released_slab_lives_on_in_its_arrays():
    slabs = Slabs(slab_bytes=4096)
    a = slabs.zeros(10)
    a[:] = 7
    slabs.release()
    gc.collect()
    b = slabs.zeros(10)
    assert not b.any() and (a == 7).all()
    assert not np.shares_memory(a, b)


def test_large_arrays_get_their_own_memory():
    slabs = Slabs(slab_bytes=4096)
    a = slabs.zeros(1000)  # over an eighth of a slab
    assert a.shape == (1000,) and not a.any() and a.flags.owndata


def test_a_slab_is_writable_zeroed_memory():
    s = _slab(1 << 21)
    assert len(s) == (1 << 18) and not s.any()
    s[-1] = 3
    assert s[-1] == 3
