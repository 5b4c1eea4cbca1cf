"""An Index's arrays as it holds them, which is also how the disk cache stores them.

``build_arrays`` lists, for each distinct mask, its sorted token ids and, for each state, the
state each allowed token leads to. Most of that repeats, so an Index keeps:

- **masks**: ``mask_sizes`` (how many tokens each allows); the ids of a mask allowing at most
  half the vocabulary in ``mask_tokens`` (from ``mask_offsets``), and of one allowing more only
  its exclusions, in ``excl_tokens`` (from ``excl_offsets``): the vocabulary less those.
- **next states**, row by row (a state's row: one entry per token of its mask): ``next_default``
  is the state most of the row leads to, and the entries that lead elsewhere are listed, their
  positions in ``next_positions`` and states in ``next_values``; a row where that would take
  more room than the row itself is kept whole in ``next_values`` (its ``next_default`` is
  ``build_kernels.DENSE``). ``build_kernels.next_state`` reads either.

Nothing is rebuilt on load: the arrays are memory-mapped from the file and read where used
(``unpack`` only checks them), so a cached index of hundreds of megabytes of next states loads
in milliseconds. A damaged file raises ``ValueError``, which the cache treats as corrupt.
"""

from __future__ import annotations

import numpy as np

from .build_kernels import DENSE

# one entry per state or per mask, as ``build_arrays`` makes them
PLAIN = ("state_mask", "accepting", "distance", "max_next_distance", "stop_ids", "dfa_states")
MASKS = ("mask_sizes", "mask_offsets", "mask_tokens", "excl_offsets", "excl_tokens")
NEXT = ("next_default", "next_value_offsets", "next_values", "next_position_offsets", "next_positions")
ARRAYS = PLAIN[:1] + MASKS + NEXT + PLAIN[1:]


def big(mask_sizes: np.ndarray, vocab_size: int) -> np.ndarray:
    """Which masks allow more than half the vocabulary (kept as their exclusions)."""
    return 2 * np.asarray(mask_sizes, np.int64) > vocab_size


def pack(built: dict, vocab_size: int) -> dict:
    """An Index's arrays from those of ``index.build_arrays``."""
    sizes = np.diff(np.asarray(built["mask_offsets"], np.int64))
    large = big(sizes, vocab_size)
    keep = np.repeat(~large, sizes)
    out = {k: built[k] for k in PLAIN}
    out.update(mask_sizes=sizes, mask_offsets=_offsets(np.where(large, 0, sizes)),
               mask_tokens=np.asarray(built["mask_tokens"], np.int32)[keep],
               excl_offsets=np.asarray(built["excl_offsets"], np.int64),
               excl_tokens=np.asarray(built["excl_tokens"], np.int32))
    out.update(_pack_nexts(np.asarray(built["next_states"], np.int32), np.asarray(built["next_offsets"], np.int64)))
    return out


def _pack_nexts(nexts: np.ndarray, no: np.ndarray) -> dict:
    n_states = len(no) - 1
    counts = np.diff(no)
    row = np.repeat(np.arange(n_states, dtype=np.int32), counts)
    # each state's most frequent next state: count the (state, next) pairs, keep each state's largest
    key = row.astype(np.int64) * (n_states + 1) + (nexts.astype(np.int64) + 1)
    pairs, times = np.unique(key, return_counts=True)
    del key
    state, nxt = pairs // (n_states + 1), pairs % (n_states + 1) - 1
    order = np.lexsort((-times, state))
    first = order[np.flatnonzero(np.diff(state[order], prepend=-1))]
    default = np.full(n_states, -1, np.int32)
    default[state[first]] = nxt[first]
    exc = nexts != default[row]
    # a row is kept whole where its exceptions (a position and a value each) would take more room
    dense = 2 * np.bincount(row[exc], minlength=n_states) >= counts
    default[dense] = DENSE
    whole = dense[row]
    take = whole | exc
    listed = exc & ~whole
    positions = (np.arange(len(nexts), dtype=np.int64) - no[row])[listed].astype(np.int32)
    return {"next_default": default,
            "next_value_offsets": _offsets(np.bincount(row[take], minlength=n_states)),
            "next_values": nexts[take],
            "next_position_offsets": _offsets(np.bincount(row[listed], minlength=n_states)),
            "next_positions": positions}


def _offsets(counts: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.cumsum(counts))).astype(np.int64)


def unpack(stored: dict, vocab_size: int, trusted: bool = False) -> dict:
    """The arrays of an Index from the disk cache, checked to fit together; their values too
    unless ``trusted`` (a file this process wrote or has checked before: its large arrays,
    mapped and not yet read, are not read through again)."""
    out = {k: stored[k] for k in ARRAYS}
    for k in MASKS + NEXT + ("state_mask", "distance", "max_next_distance"):  # (as the kernels read them)
        if out[k].dtype != (np.int64 if k.endswith(("offsets", "sizes")) else np.int32):
            raise ValueError(f"stored {k} of another type")
    n_states, n_masks = len(out["state_mask"]), len(out["mask_sizes"])
    sizes = np.asarray(out["mask_sizes"], np.int64)
    if n_states == 0 or (sizes < 0).any() or (sizes > vocab_size).any():
        raise ValueError("stored mask sizes out of range")
    sm = out["state_mask"]
    if sm.min() < 0 or sm.max() >= n_masks:
        raise ValueError("a state's mask is not a mask")
    for k in ("accepting", "distance", "max_next_distance", "dfa_states"):
        if len(out[k]) != n_states:
            raise ValueError(f"stored {k} does not match the states")
    large = big(sizes, vocab_size)
    _lists(out["mask_offsets"], out["mask_tokens"], np.where(large, 0, sizes), vocab_size, trusted, "mask")
    _lists(out["excl_offsets"], out["excl_tokens"], np.where(large, vocab_size - sizes, 0), vocab_size, trusted,
           "exclusion")
    _check_nexts(out, sizes[sm], trusted)
    return out


def _lists(offsets: np.ndarray, values: np.ndarray, counts: np.ndarray, vocab_size: int, trusted: bool, what: str):
    """Check sorted id lists: ``counts`` of them each, from ``offsets``, in the vocabulary (unless trusted)."""
    if len(offsets) != len(counts) + 1 or offsets[0] != 0 or (np.diff(offsets) != counts).any() \
            or offsets[-1] != len(values):
        raise ValueError(f"stored {what} lists do not match their sizes")
    if trusted or not len(values):
        return
    if not _increasing(values, offsets[:-1][counts > 0]) or values.max() >= vocab_size:
        raise ValueError(f"stored {what} lists out of order or beyond the vocabulary")


def _check_nexts(arrays: dict, rows: np.ndarray, trusted: bool) -> None:
    n_states = len(rows)
    default, values, positions = arrays["next_default"], arrays["next_values"], arrays["next_positions"]
    counts = []
    for k, n in (("next_value_offsets", len(values)), ("next_position_offsets", len(positions))):
        o = arrays[k]
        if len(o) != n_states + 1 or o[0] != 0 or o[-1] != n or (np.diff(o) < 0).any():
            raise ValueError("stored next states do not match their offsets")
        counts.append(np.diff(o))
    if len(default) != n_states:
        raise ValueError("stored next states do not match their offsets")
    whole = default == DENSE
    listed, at = counts
    if (listed[whole] != rows[whole]).any() or at[whole].any() or (listed[~whole] != at[~whole]).any() \
            or (at > rows).any():
        raise ValueError("stored next states do not match their masks")
    if trusted:
        return
    usual = default[~whole]
    for part in (values, usual):
        if len(part) and (part.min() < -1 or part.max() >= n_states):
            raise ValueError("stored next states out of range")
    if len(positions):
        row = np.repeat(np.arange(n_states), at)
        if not _increasing(positions, arrays["next_position_offsets"][:-1][at > 0]) \
                or (positions >= rows[row]).any():
            raise ValueError("stored next states out of order")


def _increasing(values: np.ndarray, starts: np.ndarray) -> bool:
    """Whether each list of ``values`` (from each of ``starts``) is non-negative and strictly increasing."""
    step = np.diff(values.astype(np.int64), prepend=-1)
    step[starts] = values[starts].astype(np.int64) + 1
    return bool((step > 0).all())


def mask_ids(arrays: dict, m: int, vocab_size: int) -> np.ndarray:
    """The sorted ids mask ``m`` allows (for a large mask, made from its exclusions)."""
    mo, eo = arrays["mask_offsets"], arrays["excl_offsets"]
    if 2 * int(arrays["mask_sizes"][m]) <= vocab_size:
        return arrays["mask_tokens"][mo[m]:mo[m + 1]]
    keep = np.ones(vocab_size, bool)
    keep[arrays["excl_tokens"][eo[m]:eo[m + 1]]] = False
    return np.flatnonzero(keep).astype(np.int32)


def next_row(arrays: dict, s: int) -> np.ndarray:
    """State ``s``'s next states, one per token of its mask."""
    n = int(arrays["mask_sizes"][arrays["state_mask"][s]])
    usual, v = int(arrays["next_default"][s]), int(arrays["next_value_offsets"][s])
    if usual == DENSE:
        return arrays["next_values"][v:v + n]
    a, b = arrays["next_position_offsets"][s], arrays["next_position_offsets"][s + 1]
    out = np.full(n, usual, np.int32)
    out[arrays["next_positions"][a:b]] = arrays["next_values"][v:v + b - a]
    return out


def plain(arrays: dict, vocab_size: int) -> dict:
    """The arrays as ``build_arrays`` made them (every mask's ids, every row of next states)."""
    n_masks, n_states = len(arrays["mask_sizes"]), len(arrays["state_mask"])
    masks = [mask_ids(arrays, m, vocab_size) for m in range(n_masks)]
    rows = [next_row(arrays, s) for s in range(n_states)]
    out = {k: arrays[k] for k in PLAIN}
    out.update(mask_offsets=_offsets([len(t) for t in masks]), mask_tokens=_joined(masks),
               excl_offsets=arrays["excl_offsets"], excl_tokens=arrays["excl_tokens"],
               next_offsets=_offsets([len(r) for r in rows]), next_states=_joined(rows))
    return out


def _joined(parts: list) -> np.ndarray:
    return np.concatenate(parts).astype(np.int32) if parts else np.zeros(0, np.int32)
