"""A thread-safe in-memory cache bounded in entries and bytes, least recently used out.

Compiled constraints are kept in one per process (``grammar.sources``; the server keeps its
own), so that a process compiling many constraints holds a bounded amount of memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable


def array_bytes(obj, depth: int = 0) -> int:
    """The bytes of the numpy arrays ``obj`` holds, looked for three levels down (an estimate)."""
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if depth > 2:
        return 0
    if isinstance(obj, (list, tuple)):
        return sum(array_bytes(x, depth + 1) for x in obj[:256])
    if isinstance(obj, dict):
        return sum(array_bytes(x, depth + 1) for x in list(obj.values())[:256])
    fields = getattr(obj, "__dict__", None)
    if fields is None:
        slots = getattr(type(obj), "__slots__", ())
        return sum(array_bytes(getattr(obj, s, None), depth + 1) for s in slots)
    return sum(array_bytes(v, depth + 1) for v in list(fields.values()))


class BoundedCache:
    """At most ``entries`` values and about ``max_bytes`` (``size_of`` each, measured when stored)."""

    def __init__(self, entries: int, max_bytes: int, size_of: Callable[[object], int] = array_bytes):
        self.entries, self.max_bytes, self._size_of = entries, max_bytes, size_of
        self._items: OrderedDict = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key, value) -> None:
        size = self._size_of(value)
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while len(self._items) > 1 and (len(self._items) > self.entries or self._bytes > self.max_bytes):
                _, (_, gone) = self._items.popitem(last=False)
                self._bytes -= gone

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes
