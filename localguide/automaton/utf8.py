"""Code point ranges as UTF-8 byte-range sequences.

A range of characters becomes a few sequences of byte ranges, e.g. U+0080..U+07FF
is ``[C2-DF][80-BF]``; surrogates (U+D800..U+DFFF) are never produced, so every
path through the resulting automaton is valid UTF-8.
"""

from __future__ import annotations

_MAX = [0x7F, 0x7FF, 0xFFFF, 0x10FFFF]


def _encode(cp: int) -> bytes:
    return chr(cp).encode("utf-8", "surrogatepass")


def _split(lo: int, hi: int, out: list[list[tuple[int, int]]]) -> None:
    # First make both ends encode to the same length.
    for m in _MAX[:-1]:
        if lo <= m < hi:
            _split(lo, m, out)
            _split(m + 1, hi, out)
            return
    if hi <= 0x7F:
        out.append([(lo, hi)])
        return
    # Then split until each continuation byte spans its full 80..BF range or is fixed.
    n = len(_encode(lo))
    for i in range(1, n):
        mask = (1 << (6 * i)) - 1
        if lo & ~mask != hi & ~mask:
            if lo & mask:
                _split(lo, lo | mask, out)
                _split((lo | mask) + 1, hi, out)
                return
            if hi & mask != mask:
                _split(lo, (hi & ~mask) - 1, out)
                _split(hi & ~mask, hi, out)
                return
    a, b = _encode(lo), _encode(hi)
    out.append([(a[i], b[i]) for i in range(n)])


def utf8_sequences(lo: int, hi: int) -> list[list[tuple[int, int]]]:
    """Byte-range sequences matching exactly the UTF-8 encodings of ``lo..hi``, minus surrogates."""
    out: list[list[tuple[int, int]]] = []
    for a, b in ((lo, min(hi, 0xD7FF)), (max(lo, 0xE000), hi)):
        if a <= b:
            _split(a, b, out)
    return out


def merge_ranges(ranges) -> list[tuple[int, int]]:
    """Inclusive ranges, sorted, with overlapping and adjacent ones merged."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(hi, out[-1][1]))
        else:
            out.append((lo, hi))
    return out


def complement_ranges(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """All of U+0000..U+10FFFF not covered by sorted disjoint ``ranges``."""
    out, nxt = [], 0
    for lo, hi in ranges:
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= 0x10FFFF:
        out.append((nxt, 0x10FFFF))
    return out
