"""Small numba helpers shared by the kernels of every subsystem.

Growing buffers, work arrays held without reference counting (``_work``), raw
pointers (``_voidptr``), bit tricks and integer sorts. Nothing here knows about
vocabularies, automata or grammars.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import numpy as np
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic

_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_DEBRUIJN_INDEX = np.zeros(64, np.int32)
for _i in range(64):
    _DEBRUIJN_INDEX[((1 << _i) * 0x03F79D71B4CB0A89 & 0xFFFFFFFFFFFFFFFF) >> 58] = _i


# ``LOCALGUIDE_COMPILE``: "background" (the default) lets a first use take the numpy and Python
# paths while the kernels are not compiled (the grammar kernels then compile in a background
# process, ``runtime.warmup``); "foreground" takes the kernels always, compiling them in this
# process at their first call (what the test suite does, and a server that would rather wait).
COMPILE_MODE = os.environ.get("LOCALGUIDE_COMPILE", "background").strip().lower() or "background"
if COMPILE_MODE not in ("background", "foreground"):
    raise ValueError(f"LOCALGUIDE_COMPILE={COMPILE_MODE!r}: expected 'background' or 'foreground'")
_KERNELS_ONLY = COMPILE_MODE == "foreground"  # also set by ``kernels_only``


def compiled(kernel) -> bool:
    """Whether ``kernel`` (a numba dispatcher) has machine code in this process or in numba's disk
    cache: loading it costs milliseconds, compiling it seconds."""
    if _KERNELS_ONLY or not hasattr(kernel, "signatures") or kernel.signatures:
        return True  # (a plain function, as a test's twin in its place, is simply called)
    index = cache_index(kernel)
    return bool(index) and os.path.isfile(index)


def cache_index(kernel) -> str | None:
    """The path of ``kernel``'s index file in numba's disk cache (None: not cached on disk)."""
    return getattr(getattr(getattr(kernel, "_cache", None), "_cache_file", None), "_index_path", None)


def read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a``, what kernels are given: a cache file's arrays are mapped
    read-only, and numba compiles (or loads, some 10 ms) a specialization for each type."""
    v = a.view()
    v.flags.writeable = False
    return v



@njit(cache=True)
def _lowest_bit(w):
    """Index of the lowest set bit of the uint64 ``w`` (non-zero)."""
    return _DEBRUIJN_INDEX[((w & (~w + np.uint64(1))) * _DEBRUIJN) >> np.uint64(58)]


# Kernels copy with loops, sort with ``_sort_ints`` and take maxima by hand: numba's slice
# assignment between arrays checks shapes with an error message that compiles numba's string
# formatting (2-3 s of a first use), and its np.sort, np.unique, np.argsort and np.max cost
# 0.5-2.5 s each to compile.

@njit(cache=True, inline="always")
def _copy_into(dst, at, src, n):
    """``dst[at:at + n] = src[:n]`` (1-D)."""
    for i in range(n):
        dst[at + i] = src[i]


@njit(cache=True, inline="always")
def _copy_rows(dst, src, n):
    """``dst[:n] = src[:n]`` (2-D, ``dst`` at least as wide)."""
    for i in range(n):
        for j in range(src.shape[1]):
            dst[i, j] = src[i, j]


@njit(cache=True)
def _sort_ints(a, n):
    """Sort ``a[:n]`` in place: insertion sort when short, else heapsort (no allocation)."""
    if n <= 32:
        for i in range(1, n):
            x = a[i]
            j = i - 1
            while j >= 0 and a[j] > x:
                a[j + 1] = a[j]
                j -= 1
            a[j + 1] = x
        return
    for start in range(n // 2 - 1, -1, -1):
        _sift_down(a, start, n)
    for end in range(n - 1, 0, -1):
        x = a[0]
        a[0] = a[end]
        a[end] = x
        _sift_down(a, 0, end)


@njit(cache=True, inline="always")
def _sift_down(a, root, end):
    x = a[root]
    while True:
        child = 2 * root + 1
        if child >= end:
            break
        if child + 1 < end and a[child + 1] > a[child]:
            child += 1
        if a[child] <= x:
            break
        a[root] = a[child]
        root = child
    a[root] = x


@njit(cache=True)
def _argsort_stable(key):
    """The stable argsort of the 1-D ``key``: bottom-up merge sort of positions."""
    n = len(key)
    perm = np.empty(n, np.int64)
    for i in range(n):
        perm[i] = i
    tmp = np.empty(n, np.int64)
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i = lo
            j = mid
            k = lo
            while i < mid and j < hi:
                if key[perm[j]] < key[perm[i]]:
                    tmp[k] = perm[j]
                    j += 1
                else:
                    tmp[k] = perm[i]
                    i += 1
                k += 1
            while i < mid:
                tmp[k] = perm[i]
                i += 1
                k += 1
            while j < hi:
                tmp[k] = perm[j]
                j += 1
                k += 1
        perm, tmp = tmp, perm
        width *= 2
    return perm


@njit(cache=True, inline="always")
def lower_bound(a, lo, hi, x):
    """The first index in ``a[lo:hi]`` (sorted) whose value is not below ``x`` (``hi`` if none)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _max_of(a, empty):
    """The largest entry of the 1-D ``a``, or ``empty`` when it has none."""
    m = empty
    for i in range(len(a)):
        if i == 0 or a[i] > m:
            m = a[i]
    return m


@njit(cache=True)
def _grow(a, n):
    """A 1-D array twice as long (at least 16) holding ``a[:n]``; the rest is unset."""
    b = np.empty(max(2 * len(a), 16), a.dtype)
    _copy_into(b, 0, a, n)
    return b


# Work arrays. numba counts references to an array variable that a loop may reassign (a
# buffer that grows) at every iteration of that loop, atomically: most of the time of the
# tree walks (masks, and the subterminal trees of a compile). A kernel allocates such
# buffers into a list ``keep`` (one per dtype), which holds them for the call, and works on
# views without a count; it empties ``keep`` (``_release``) after its last use of the views, and
# returns copies, never the views.


@njit(cache=True, inline="always")
def _bare(a):
    """A view of ``a`` without reference counting: valid only while the caller holds ``a``."""
    return carray(_voidptr(a.ctypes.data), a.shape, a.dtype)


@njit(cache=True, inline="always")
def _work(keep, n):
    """A new 1-D work array of ``n`` entries of ``keep``'s dtype, held by ``keep``."""
    a = np.empty(n, keep[0].dtype)
    keep.append(a)
    return _bare(a)


@njit(cache=True, inline="always")
def _work2(keep, rows, cols):
    """A new 2-D work array (``rows`` × ``cols``, all -1) of ``keep``'s dtype, held by ``keep``."""
    a = np.full((rows, cols), -1, keep[0].dtype)
    keep.append(a)
    return _bare(a)


@njit(cache=True, inline="always")
def _release(keep):
    """Free ``keep``'s work arrays now (after the last use of their views). One by one: numba's
    ``list.clear()`` on a list of arrays does not release them (a leak of every work array)."""
    while len(keep):
        keep.pop()


@njit(cache=True, inline="always")
def _work_grown(keep, a, n):
    """``_grow(a, n)`` as a ``_work`` array."""
    b = _work(keep, max(2 * len(a), 16))
    _copy_into(b, 0, a, n)
    return b


@intrinsic
def _voidptr(typingctx, address):
    """An integer address as a ``void*`` that ``numba.carray`` accepts."""
    sig = types.voidptr(address)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


@njit(cache=True)
def _counting_order(keys, n_keys, perm):
    """Stable reordering of ``perm`` by ``keys[perm]`` (values in ``[0, n_keys)``)."""
    count = np.zeros(n_keys + 1, np.int64)
    for i in range(len(perm)):
        count[keys[perm[i]] + 1] += 1
    for k in range(n_keys):
        count[k + 1] += count[k]
    out = np.empty(len(perm), np.int64)
    for i in range(len(perm)):
        k = keys[perm[i]]
        out[count[k]] = perm[i]
        count[k] += 1
    return out


@njit(cache=True)
def _radix_sort(a, bound):
    """``a`` (ints in ``0..bound-1``) sorted: LSD radix sort, 11 bits a pass.

    Cheaper than ``np.sort`` here, and loading numba's cached ``np.sort`` costs half a
    second per process.
    """
    out = a.copy()
    tmp = np.empty_like(a)
    counts = np.zeros(2049, np.int64)
    shift = 0
    while (bound - 1) >> shift > 0:
        counts[:] = 0
        for i in range(len(out)):
            counts[((out[i] >> shift) & 2047) + 1] += 1
        for k in range(2048):
            counts[k + 1] += counts[k]
        for i in range(len(out)):
            d = (out[i] >> shift) & 2047
            tmp[counts[d]] = out[i]
            counts[d] += 1
        out, tmp = tmp, out
        shift += 11
    return out


@njit(cache=True, inline="always")
def _popcount(w):
    w = w - ((w >> np.uint64(1)) & np.uint64(0x5555555555555555))
    w = (w & np.uint64(0x3333333333333333)) + ((w >> np.uint64(2)) & np.uint64(0x3333333333333333))
    w = (w + (w >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (w * np.uint64(0x0101010101010101)) >> np.uint64(56)



@contextmanager
def kernels_only():
    """Within the block, ``compiled`` says yes: the kernels are taken, compiled first if need be."""
    global _KERNELS_ONLY
    before, _KERNELS_ONLY = _KERNELS_ONLY, True
    try:
        yield
    finally:
        _KERNELS_ONLY = before
