"""Zeroed bitsets carved from large anonymous mappings.

Every mask a grammar index caches is a fresh bitset of the vocabulary (6 KB on SmolLM2's,
32 KB on Gemma's). On some machines (virtual ones above all) the first touch of each 4 KB
page costs about 2 µs, more than computing the mask: 16 µs of page faults for one of Gemma's.
Carved from 4 MB mappings that Linux is asked to back with transparent huge pages, fresh
bitsets arrive 2 MB at a time, one fault for dozens of them. Elsewhere a slab is an ordinary
zeroed array: no gain, no loss.
"""

from __future__ import annotations

import mmap
import threading

import numpy as np

SLAB_BYTES = 4 << 20


def _slab(nbytes: int) -> np.ndarray:
    """A zeroed uint64 array of ``nbytes``, advised for huge pages where the OS has them."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    flags = getattr(mmap, "MAP_PRIVATE", None)
    if advice is not None and flags is not None:
        try:
            m = mmap.mmap(-1, nbytes, flags=flags | mmap.MAP_ANONYMOUS)
            m.madvise(advice)
            return np.frombuffer(m, np.uint64)  # (the array keeps the mapping alive)
        except (OSError, ValueError):
            pass
    return np.zeros(nbytes // 8, np.uint64)


class Slabs:
    """Hands out zeroed uint64 arrays, each a view of the current slab. Memory is never reused:
    an array handed out may live on with whoever holds it, and its slab with it."""

    def __init__(self, slab_bytes: int = SLAB_BYTES):
        self.slab_words = slab_bytes // 8
        self._cur = np.zeros(0, np.uint64)
        self._pos = 0
        self._lock = threading.Lock()

    def zeros(self, n: int) -> np.ndarray:
        if 8 * n > self.slab_words:  # (large arrays would waste most of a slab)
            return np.zeros(n, np.uint64)
        with self._lock:
            if self._pos + n > len(self._cur):
                self._cur = _slab(8 * self.slab_words)
                self._pos = 0
            a = self._cur[self._pos:self._pos + n]
            self._pos += n
        return a

    def release(self) -> None:
        """Start the next array on a new slab (the current one is freed once its arrays are)."""
        with self._lock:
            self._cur = np.zeros(0, np.uint64)
            self._pos = 0
