"""One convention for distances to acceptance, in tokens or in bytes.

Every distance array (an Index's tokens to acceptance, a DFA's bytes to acceptance, the
grammar budget's bounds) holds ``UNREACHABLE`` where acceptance cannot be reached: a
number larger than any real distance, so ``d <= budget`` needs no special case, and small
enough that adding a few distances to it stays far from overflowing an int64.
"""

from __future__ import annotations

import numpy as np

UNREACHABLE = 1 << 40


def byte_distances(dfa) -> np.ndarray:
    """For each state of a ``ByteDFA``, the fewest bytes to an accepting state (``UNREACHABLE`` if none)."""
    n = dfa.n_states
    dist = np.where(dfa.accepting, 0, UNREACHABLE).astype(np.int64)
    trans = dfa.transitions
    ext = np.append(dist, np.int64(UNREACHABLE))
    while True:
        ext[:n] = dist
        new = np.minimum(dist, ext[trans].min(axis=1) + 1)  # trans == -1 reads ext[-1] = UNREACHABLE
        new = np.minimum(new, UNREACHABLE)
        if np.array_equal(new, dist):
            return dist
        dist = new
