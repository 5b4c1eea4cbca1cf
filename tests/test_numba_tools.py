"""The shared numba helpers against plain Python: sorting, copying, maxima."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.runtime.numba_tools import _argsort_stable, _copy_into, _copy_rows, _max_of, _sort_ints
from numba import njit

ints = st.lists(st.integers(-(2 ** 40), 2 ** 40), max_size=200)


@settings(max_examples=60, deadline=None)
@given(ints, st.data())
def test_sort_ints_sorts_the_prefix_only(values, data):
    a = np.array(values, np.int64)
    n = data.draw(st.integers(0, len(a)))
    b = a.copy()
    _sort_ints(b, n)
    assert b[:n].tolist() == sorted(values[:n])
    assert b[n:].tolist() == values[n:]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5), max_size=200))
def test_argsort_stable_is_numpys_stable_argsort(values):
    key = np.array(values, np.int64)
    assert _argsort_stable(key).tolist() == np.argsort(key, kind="stable").tolist()


@njit
def _copy_call(dst, at, src, n):
    _copy_into(dst, at, src, n)


@njit
def _rows_call(dst, src, n):
    _copy_rows(dst, src, n)


@njit
def _max_call(a):
    return _max_of(a, -1)


def test_copies_and_maxima():
    dst = np.zeros(10, np.int32)
    _copy_call(dst, 3, np.arange(1, 6, dtype=np.int32), 4)
    assert dst.tolist() == [0, 0, 0, 1, 2, 3, 4, 0, 0, 0]
    rows = np.full((4, 3), -1, np.int64)
    _rows_call(rows, np.arange(6, dtype=np.int64).reshape(2, 3), 2)
    assert rows.tolist() == [[0, 1, 2], [3, 4, 5], [-1, -1, -1], [-1, -1, -1]]
    assert _max_call(np.array([3, 9, 2], np.int32)) == 9
    assert _max_call(np.empty(0, np.int32)) == -1
