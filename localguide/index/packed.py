"""An Index's arrays as the disk cache stores them: a few bytes per entry, not eight.

In memory an Index lists, for each distinct mask, its sorted token ids and, for each state,
the state each allowed token leads to (``index.Index``). Most of that repeats: a mask
allowing most of the vocabulary is also stored as the tokens it excludes, and a state's
tokens nearly all lead to one state (the inside of a string leads back to itself): packed, the
arrays take a fraction of their in-memory bytes. ``unpack`` gives the in-memory arrays back
exactly; a damaged file raises ``ValueError`` (or ``IndexError``/``KeyError``), which the cache
treats as corrupt.

- ``mask_d16``/``excl_d16``: each sorted token list as the differences between neighbours
  (the first from 0) in 16 bits, a difference that does not fit being 0 there and kept in
  ``*_esc_pos``/``*_esc_val``; a mask allowing more than half the vocabulary is not listed
  (it is the vocabulary less its exclusions).
- ``next_default``: the state most of each state's tokens lead to; ``next_esc_pos``/
  ``next_esc_val`` the entries that lead elsewhere.
"""

from __future__ import annotations

import numpy as np

from ..runtime.packing import pack_sorted, positions_ok, unpack_sorted

# stored as the in-memory Index has them (one entry per state or per mask)
PLAIN = ("state_mask", "mask_offsets", "excl_offsets", "next_offsets", "accepting", "distance",
         "max_next_distance", "stop_ids", "dfa_states")


def _big(mask_offsets: np.ndarray, vocab_size: int) -> np.ndarray:
    """Which masks allow more than half the vocabulary (applied, and stored, by exclusion)."""
    return 2 * np.diff(mask_offsets) > vocab_size


def pack(arrays: dict, vocab_size: int) -> dict:
    """The arrays of an Index (``index.build_arrays``) as stored on disk."""
    out = {k: arrays[k] for k in PLAIN}
    mo = arrays["mask_offsets"]
    big = _big(mo, vocab_size)
    tokens = arrays["mask_tokens"]
    lengths = np.where(big, 0, np.diff(mo))
    keep = np.repeat(~big, np.diff(mo))
    small_offsets = np.concatenate(([0], np.cumsum(lengths)))
    out.update(pack_sorted(tokens[keep], small_offsets, "mask"))
    out.update(pack_sorted(arrays["excl_tokens"], arrays["excl_offsets"], "excl"))
    nexts, no = arrays["next_states"], arrays["next_offsets"]
    n_states = len(no) - 1
    counts = np.diff(no)
    # each state's most frequent next state: count the (state, next) pairs, keep each state's largest
    key = np.repeat(np.arange(n_states, dtype=np.int64), counts) * (n_states + 1) + (nexts.astype(np.int64) + 1)
    pairs, times = np.unique(key, return_counts=True)
    state, nxt = pairs // (n_states + 1), pairs % (n_states + 1) - 1
    order = np.lexsort((-times, state))
    first = order[np.flatnonzero(np.diff(state[order], prepend=-1))]
    default = np.full(n_states, -1, np.int32)
    default[state[first]] = nxt[first]
    esc = np.flatnonzero(nexts != np.repeat(default, counts))
    out.update(next_default=default, next_esc_pos=esc.astype(np.int64), next_esc_val=nexts[esc].astype(np.int32))
    return out


def unpack(packed: dict, vocab_size: int) -> dict:
    """The in-memory arrays of an Index from what ``pack`` stored."""
    out = {k: packed[k] for k in PLAIN}
    mo = np.asarray(out["mask_offsets"], np.int64)
    eo = np.asarray(out["excl_offsets"], np.int64)
    if len(mo) < 1 or len(eo) != len(mo) or (np.diff(mo) < 0).any() or (np.diff(eo) < 0).any():
        raise ValueError("packed mask offsets out of order")
    big = _big(mo, vocab_size)
    lengths = np.diff(mo)
    small_offsets = np.concatenate(([0], np.cumsum(np.where(big, 0, lengths))))
    small = unpack_sorted(packed, "mask", small_offsets)
    excl = unpack_sorted(packed, "excl", eo)
    if (len(excl) and excl.max() >= vocab_size) or (len(small) and small.max() >= vocab_size):
        raise ValueError("packed ids beyond the vocabulary")
    # (written in place: the small masks at once, each large one as the ids its exclusions leave)
    tokens = np.empty(int(mo[-1]), np.int32)
    tokens[np.repeat(~big, lengths)] = small
    ids = np.arange(vocab_size, dtype=np.int32)
    keep = np.empty(vocab_size, bool)
    for m in np.flatnonzero(big).tolist():
        a, b = int(mo[m]), int(mo[m + 1])
        keep.fill(True)
        keep[excl[eo[m]:eo[m + 1]]] = False
        part = ids[keep]
        if len(part) != b - a:
            raise ValueError("a packed mask does not have the length its offsets say")
        tokens[a:b] = part
    out["mask_tokens"] = tokens
    out["excl_tokens"] = excl
    no = np.asarray(out["next_offsets"], np.int64)
    default = packed["next_default"]
    if len(default) != len(no) - 1 or (np.diff(no) < 0).any():
        raise ValueError("packed next states do not match their offsets")
    nexts = np.repeat(np.asarray(default, np.int32), np.diff(no))
    pos, val = packed["next_esc_pos"], packed["next_esc_val"]
    if len(pos) != len(val) or not positions_ok(pos, len(nexts)):
        raise ValueError("packed next states out of range")
    # (each entry is a state's default or an exception: checking those checks them all)
    for part in (np.asarray(default), np.asarray(val)):
        if len(part) and (part.min() < -1 or part.max() >= len(default)):
            raise ValueError("packed next states out of range")
    nexts[pos] = val
    out["next_states"] = nexts
    return out
