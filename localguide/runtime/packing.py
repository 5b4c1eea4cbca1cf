"""Small forms of the arrays the disk cache holds: sorted id lists as 16-bit differences,
integers in the narrowest type that holds them, bytes deflated. Each ``unpack_*`` gives back
exactly what its ``pack_*`` took, and raises ``ValueError`` (or ``IndexError``/``KeyError``)
for arrays that no ``pack_*`` made: the cache then treats the file as corrupt."""

from __future__ import annotations

import zlib

import numpy as np

_NARROW = "~"  # ``name~int32``: an array stored narrower than its type, restored to it


def positions_ok(pos: np.ndarray, n: int) -> bool:
    return len(pos) == 0 or (int(pos.min()) >= 0 and int(pos.max()) < n)


def pack_sorted(values: np.ndarray, offsets: np.ndarray, prefix: str) -> dict:
    """The lists ``values[offsets[i]:offsets[i+1]]`` (each sorted) as differences between
    neighbours (each list's first from 0) in 16 bits; one that does not fit is 0 there and kept in
    ``{prefix}_esc_pos``/``{prefix}_esc_val``."""
    d = np.diff(values.astype(np.int64), prepend=0)
    starts = offsets[:-1][np.diff(offsets) > 0]
    d[starts] = values[starts]
    esc = np.flatnonzero((d < 0) | (d > 0xFFFF))
    d16 = d.astype(np.uint16)
    d16[esc] = 0
    return {f"{prefix}_d16": d16, f"{prefix}_esc_pos": esc.astype(np.int64),
            f"{prefix}_esc_val": d[esc].astype(np.int64)}


def unpack_sorted(a: dict, prefix: str, offsets: np.ndarray) -> np.ndarray:
    """The int32 values ``pack_sorted`` took (``offsets`` as it had them)."""
    d = a[f"{prefix}_d16"].astype(np.uint32)
    pos, val = a[f"{prefix}_esc_pos"], a[f"{prefix}_esc_val"]
    if len(d) != offsets[-1] or len(pos) != len(val) or not positions_ok(pos, len(d)):
        raise ValueError(f"the packed {prefix} lists do not match their offsets")
    # (sums modulo 2**32, in 4 bytes a value rather than 8: each list's values less the running sum
    # before it are exact wherever they fit in 31 bits, which is what ``pack_sorted`` took)
    d[pos] = np.asarray(val, np.int64) & 0xFFFFFFFF
    c = np.cumsum(d, dtype=np.uint32)
    starts = np.asarray(offsets[:-1], np.int64)
    before = np.where(starts > 0, c[np.maximum(starts - 1, 0)] if len(c) else 0, 0).astype(np.uint32)
    c -= np.repeat(before, np.diff(offsets))
    out = c.view(np.int32)
    if len(out) and out.min() < 0:
        raise ValueError(f"packed {prefix} ids out of range")
    return out


def deflate(a: np.ndarray) -> np.ndarray:
    return np.frombuffer(zlib.compress(np.ascontiguousarray(a).tobytes(), 1), np.uint8)


def inflate(z: np.ndarray, dtype, count: int) -> np.ndarray:
    try:
        data = zlib.decompress(np.ascontiguousarray(z).tobytes())
    except zlib.error as e:
        raise ValueError(f"a deflated array does not inflate ({e})") from None
    if len(data) != np.dtype(dtype).itemsize * count:
        raise ValueError("a deflated array has another length than recorded")
    return np.frombuffer(data, dtype).copy()


def narrowed(arrays: dict, min_size: int = 1024) -> dict:
    """``arrays`` with each integer array of at least ``min_size`` entries in the narrowest
    signed type that holds its values (named ``name~type``)."""
    out = {}
    for k, a in arrays.items():
        if a.dtype.kind == "i" and a.size >= max(min_size, 1) and a.dtype.itemsize > 1:
            lo, hi = int(a.min()), int(a.max())
            for t in (np.int8, np.int16, np.int32):
                if np.dtype(t).itemsize < a.dtype.itemsize and np.iinfo(t).min <= lo and hi <= np.iinfo(t).max:
                    out[f"{k}{_NARROW}{a.dtype.name}"] = a.astype(t)
                    break
            else:
                out[k] = a
        else:
            out[k] = a
    return out


def widened(arrays: dict) -> dict:
    """The arrays ``narrowed`` took."""
    out = {}
    for k, a in arrays.items():
        if _NARROW in k:
            name, dtype = k.split(_NARROW, 1)
            if dtype not in ("int16", "int32", "int64") or a.dtype.kind != "i":
                raise ValueError(f"unknown narrowed array {k!r}")
            out[name] = a.astype(dtype)
        else:
            out[k] = a
    return out
