"""A compiled grammar's arrays (``GrammarIndex.arrays``) as the disk cache stores them.

Most of a grammar index's bytes are the token groups of its subterminal trees
(``masks.build_trees``), and many groups repeat one another: a format string's automaton
(an e-mail address, a URI) has hundreds of states, and the tokens that read the same way from
many of them (all letters and digits, say) form the same group in each state's tree. Each
distinct token list is stored once (``tr_list_off``; ``tr_grp_list``: each group's list), in
one of two forms:

- plain, where the whole file then stays within a bound (``SCHEMA_PLAIN_BYTES`` for a JSON
  Schema's grammar and a server request's, ``PLAIN_BYTES`` for a grammar a program compiles, the
  shipped ones among them): the
  lists as int32 (``tr_list_tok``) and the large groups' bitsets (``masks.BITS_KEYS``) as they
  are, so that a load maps them and decodes nothing; where every group fits with its own list,
  no ``tr_grp_list`` (the lists are the groups, mapped, not even copied);
- packed, above it (a schema with an e-mail address on Gemma 3's vocabulary: 31 MB plain): the
  lists as 16-bit differences (``packing.pack_sorted``), deflated; the large groups' bitsets made
  again from their lists; every other integer array in the narrowest type that holds it.

``unpack`` gives back exactly the arrays ``pack`` took, and raises ``ValueError`` for arrays that
no ``pack`` made: token lists out of order or holding ids outside the vocabulary, in either form,
and bitsets of the wrong shape or with bits past the vocabulary included (a cache file may have
been written by anyone who can write its folder: those would reach memory past the kernels'
arrays). That a plain file's bitsets hold exactly their groups' tokens is left to the file's
checksum (``runtime.cache``): checking it would cost a load more than the load itself (19 ms on
Gemma 3's C grammar), and a wrong bit there makes a wrong mask, within the vocabulary.
"""

from __future__ import annotations

import numpy as np

from ..runtime import packing

# The most a plain file may hold: for a schema (or a server request's grammar), the bound on what one
# of a few properties writes (issue 52: they are many, one per request shape); for a grammar a
# program compiles, enough for the shipped ones on a 262,144-token vocabulary (Gemma 3's SQL: 5.9 MB).
SCHEMA_PLAIN_BYTES = 5_000_000
PLAIN_BYTES = 16_000_000
_GROUP_KEYS = ("tr_grp_off", "tr_grp_tok", "tr_big_bits")


def pack(arrays: dict, plain_bytes: int = PLAIN_BYTES) -> dict:
    off, tok = arrays["tr_grp_off"], arrays["tr_grp_tok"]
    rest = {k: v for k, v in arrays.items() if k not in _GROUP_KEYS}
    whole = {**rest, "tr_list_off": np.asarray(off, np.int64), "tr_list_tok": np.asarray(tok, np.int32),
             "tr_big_bits": arrays["tr_big_bits"]}
    if _file_bytes(whole) <= plain_bytes:
        return whole
    n_grp = len(off) - 1
    first: dict = {}
    grp_list = np.empty(n_grp, np.int32)
    lists = []
    for g in range(n_grp):
        b = tok[off[g]:off[g + 1]].tobytes()
        i = first.setdefault(b, len(lists))
        if i == len(lists):
            lists.append(g)
        grp_list[g] = i
    sizes = np.diff(off)[lists] if lists else np.zeros(0, np.int64)
    list_off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    values = _gather(off, tok, lists)
    plain = {**rest, "tr_grp_list": grp_list, "tr_list_off": list_off,
             "tr_list_tok": values.astype(np.int32, copy=False), "tr_big_bits": arrays["tr_big_bits"]}
    if _file_bytes(plain) <= plain_bytes:
        return plain
    coded = packing.pack_sorted(values, list_off, "tr_list")
    d16 = coded.pop("tr_list_d16")
    out = packing.narrowed({**rest, **coded, "tr_grp_list": grp_list, "tr_list_off": list_off})
    out["tr_list_z"] = packing.deflate(d16)
    out["tr_list_n"] = np.array([len(d16)], np.int64)
    return out


def _file_bytes(arrays: dict) -> int:
    """At least what ``cache.save`` writes for ``arrays``: each array padded to 64 bytes and its
    entry in the header (name, type, shape, offset; a generous 200 bytes), plus the header's own."""
    return 4096 + sum(a.nbytes + 64 + 200 for a in arrays.values())


def _gather(off: np.ndarray, tok: np.ndarray, groups) -> np.ndarray:
    """The token lists of ``groups``, one after another (each a slice: copied whole, no index array)."""
    if len(groups) == 0:
        return np.zeros(0, np.int32)
    off = off.tolist()
    return np.concatenate([tok[off[g]:off[g + 1]] for g in groups])


def _vector(x: np.ndarray, dtype) -> np.ndarray:
    if x.ndim != 1:
        raise ValueError("a packed grammar array has the wrong shape")
    return np.asarray(x, dtype)


def _lists_ok(values: np.ndarray, list_off: np.ndarray, vocab_size: int) -> bool:
    """Each list increasing (no id twice) and every id within the vocabulary: what the kernels
    and the masks made from a group's tokens take for granted."""
    if len(values) == 0:
        return True
    if int(values.view(np.uint32).max()) >= vocab_size:  # (a negative id is a large unsigned one)
        return False
    up = values[1:] > values[:-1]
    starts = list_off[1:-1]
    up[starts[(starts > 0) & (starts < len(values))] - 1] = True  # (each list starts afresh)
    return bool(up.all())


def unpack(stored: dict, vocab_size: int) -> dict:
    a = packing.widened(stored)
    list_off = _vector(a.pop("tr_list_off"), np.int64)
    n_lists = len(list_off) - 1
    own = "tr_grp_list" not in a  # (each group its own list, in order)
    grp_list = np.arange(max(n_lists, 0), dtype=np.int64) if own else _vector(a.pop("tr_grp_list"), np.int64)
    if n_lists < 0 or list_off[0] != 0 or (np.diff(list_off) < 0).any() \
            or not packing.positions_ok(grp_list, n_lists):
        raise ValueError("the packed token groups do not match their offsets")
    plain = "tr_list_tok" in a
    if plain:
        values = a.pop("tr_list_tok")
        if values.dtype != np.int32 or values.ndim != 1 or len(values) != list_off[-1]:
            raise ValueError("the token lists do not match their offsets")
    else:
        n = int(a.pop("tr_list_n")[0])
        if list_off[-1] != n:
            raise ValueError("the packed token groups do not match their offsets")
        coded = {"tr_list_d16": packing.inflate(a.pop("tr_list_z"), np.uint16, n),
                 "tr_list_esc_pos": a.pop("tr_list_esc_pos"), "tr_list_esc_val": a.pop("tr_list_esc_val")}
        values = packing.unpack_sorted(coded, "tr_list", list_off)
    if not _lists_ok(values, list_off, vocab_size):
        raise ValueError("a token list is out of order or holds ids beyond the vocabulary")
    if own:
        grp_off, a["tr_grp_tok"] = list_off, values
    else:
        grp_off = np.zeros(len(grp_list) + 1, np.int64)
        np.cumsum(np.diff(list_off)[grp_list], out=grp_off[1:])
        a["tr_grp_tok"] = _gather(list_off, values, grp_list.tolist())
    a["tr_grp_off"] = grp_off
    big = _vector(a["tr_big_grp"], np.int64)
    if not packing.positions_ok(big, len(grp_list)):
        raise ValueError("the packed large groups are not groups")
    words = (vocab_size + 63) // 64
    if plain:
        bits = a["tr_big_bits"]
        if bits.dtype != np.uint64 or bits.shape != (len(big), words) or \
                (vocab_size % 64 and len(big) and int(bits[:, -1].max() >> np.uint64(vocab_size % 64))):
            raise ValueError("the large groups' bitsets do not fit the vocabulary")
        return a
    bits = np.zeros((len(big), words), np.uint64)
    for i, g in enumerate(big.tolist()):
        t = a["tr_grp_tok"][grp_off[g]:grp_off[g + 1]]
        member = np.zeros(words * 64, bool)
        member[t] = True
        bits[i] = np.packbits(member, bitorder="little").view("<u8")
    a["tr_big_bits"] = bits
    return a
