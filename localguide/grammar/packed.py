"""A compiled grammar's arrays (``GrammarIndex.arrays``) as the disk cache stores them.

Most of a grammar index's bytes are the token groups of its subterminal trees
(``masks.build_trees``), and most groups repeat one another: a format string's automaton
(an e-mail address, a URI) has hundreds of states, and the tokens that read the same way from
many of them (all letters and digits, say) form the same group in each state's tree. On
Gemma 3's vocabulary most of the bytes of a schema with an e-mail address are token ids, more
than half of them in exact duplicates. Stored here:

- ``tr_grp_list``: each group's distinct token list; the lists as 16-bit differences
  (``packing.pack_sorted``), deflated;
- the large groups' bitsets (``masks.BITS_KEYS``) not stored: made again from their lists;
- every other integer array in the narrowest type that holds it.

``unpack`` gives back exactly the arrays ``pack`` took.
"""

from __future__ import annotations

import numpy as np

from ..runtime import packing


def pack(arrays: dict) -> dict:
    off, tok = arrays["tr_grp_off"], arrays["tr_grp_tok"]
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
    values = _gather(off, tok, np.array(lists, np.int64))
    coded = packing.pack_sorted(values, list_off, "tr_list")
    d16 = coded.pop("tr_list_d16")
    rest = {k: v for k, v in arrays.items() if k not in ("tr_grp_off", "tr_grp_tok", "tr_big_bits")}
    out = packing.narrowed({**rest, **coded, "tr_grp_list": grp_list, "tr_list_off": list_off})
    out["tr_list_z"] = packing.deflate(d16)
    out["tr_list_n"] = np.array([len(d16)], np.int64)
    return out


def _gather(off: np.ndarray, tok: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """The token lists of ``groups``, one after another."""
    lengths = (off[groups + 1] - off[groups]).astype(np.int64)
    starts = np.repeat(off[groups].astype(np.int64) - np.concatenate(([0], np.cumsum(lengths)[:-1])), lengths)
    return tok[starts + np.arange(int(lengths.sum()), dtype=np.int64)]


def unpack(stored: dict, vocab_size: int) -> dict:
    a = packing.widened(stored)
    list_off = np.asarray(a.pop("tr_list_off"), np.int64)
    grp_list = np.asarray(a.pop("tr_grp_list"), np.int64)
    n = int(a.pop("tr_list_n")[0])
    if len(list_off) < 1 or list_off[0] != 0 or (np.diff(list_off) < 0).any() or list_off[-1] != n \
            or not packing.positions_ok(grp_list, len(list_off) - 1):
        raise ValueError("the packed token groups do not match their offsets")
    coded = {"tr_list_d16": packing.inflate(a.pop("tr_list_z"), np.uint16, n),
             "tr_list_esc_pos": a.pop("tr_list_esc_pos"), "tr_list_esc_val": a.pop("tr_list_esc_val")}
    values = packing.unpack_sorted(coded, "tr_list", list_off)
    sizes = np.diff(list_off)[grp_list]
    grp_off = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
    a["tr_grp_off"] = grp_off
    a["tr_grp_tok"] = _gather(list_off, values, grp_list) if len(grp_list) else np.zeros(0, np.int32)
    big = np.asarray(a["tr_big_grp"], np.int64)
    if not packing.positions_ok(big, len(grp_list)):
        raise ValueError("the packed large groups are not groups")
    words = (vocab_size + 63) // 64
    bits = np.zeros((len(big), words), np.uint64)
    for i, g in enumerate(big.tolist()):
        t = a["tr_grp_tok"][grp_off[g]:grp_off[g + 1]]
        if len(t) and (t.min() < 0 or t.max() >= vocab_size):
            raise ValueError("a large group holds ids beyond the vocabulary")
        member = np.zeros(words * 64, bool)
        member[t] = True
        bits[i] = np.packbits(member, bitorder="little").view("<u8")
    a["tr_big_bits"] = bits
    return a
