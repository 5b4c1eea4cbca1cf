"""A table whose rows are made when first read.

A grammar loaded from the disk cache has 10⁴ scanner states and ε-DFA states and reads
few of them; their Python forms are made on demand. Reads are a ``dict``'s (the hot
paths index these tables per byte); only a miss calls back.
"""

from __future__ import annotations


class Rows(dict):
    """``n`` rows, row ``i`` made by ``make(i)`` when first read."""

    def __init__(self, n: int, make):
        super().__init__()
        self.n = n
        self.make = make

    def __missing__(self, i: int):
        if not 0 <= i < self.n:
            raise IndexError(i)
        v = self[i] = self.make(i)
        return v

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        return (self[i] for i in range(self.n))
