"""A thread-safe in-memory cache bounded in entries and bytes, least recently used out.

Compiled constraints are kept in one per process (``grammar.sources``; the server keeps its
own), so that a process compiling many constraints holds a bounded amount of memory.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable

import numpy as np


def array_bytes(obj, depth: int = 0) -> int:
    """The bytes of the numpy arrays ``obj`` holds, looked for three levels down (an estimate)."""
    if isinstance(obj, np.ndarray):
        return obj.nbytes
    if depth > 2:
        return 0
    if isinstance(obj, (list, tuple)):
        items = obj[:256]
    elif isinstance(obj, dict):
        items = list(obj.values())[:256]
    else:
        fields = getattr(obj, "__dict__", None)
        if fields is None:
            items = [getattr(obj, s, None) for s in getattr(type(obj), "__slots__", ())]
        else:
            items = list(fields.values())
    if depth == 2:  # (the last level: only arrays count there; sized in place, a compiled index holds thousands of items)
        return sum(x.nbytes for x in items if isinstance(x, np.ndarray))
    return sum(array_bytes(x, depth + 1) for x in items)


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
