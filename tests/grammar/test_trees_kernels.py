"""Grammar token-group kernels against their plain-Python twins and their numpy versions
(``trees_numpy``, a first use's path)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.grammar import trees_kernels, trees_numpy
from kernel_strategies import SETTINGS, bitset

@given(st.integers(1, 300), st.data())
@settings(max_examples=150, deadline=None)
def test_union_groups_equals_twin(size, data):
    """Unions of token groups: both the sorted path (small unions) and the vocabulary pass (large);
    ids outside the vocabulary (a damaged cache file) are left out."""
    n_groups = data.draw(st.integers(0, 12))
    groups = [sorted(data.draw(st.sets(st.integers(-2, size + 2), max_size=size))) for _ in range(n_groups)]
    off = np.zeros(n_groups + 1, np.int64)
    off[1:] = np.cumsum([len(g) for g in groups])
    tok = np.array([t for g in groups for t in g], np.int32)
    gids = np.array(data.draw(st.lists(st.integers(0, n_groups - 1), max_size=8)) if n_groups else [], np.int64)
    extra = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1), max_size=5))), np.int32)
    marks = np.zeros(size, np.uint8)
    got = trees_kernels.union_groups(off, tok, gids, extra, marks)
    assert got.dtype == np.int32
    assert got.tolist() == trees_kernels.py_union_groups(off, tok, gids, extra, marks).tolist()
    assert not marks.any()
    numpy_ = trees_numpy.union_groups(off, tok, gids, extra, marks)
    assert numpy_.dtype == np.int32 and numpy_.tolist() == got.tolist()


@st.composite
def group_unions(draw):
    n_tok = draw(st.integers(1, 200))
    groups = draw(st.lists(st.sets(st.integers(0, n_tok - 1), max_size=40), min_size=1, max_size=8))
    off = np.zeros(len(groups) + 1, np.int64)
    np.cumsum([len(g) for g in groups], out=off[1:])
    tok = np.array([t for g in groups for t in sorted(g)], np.int32)
    key = sorted(draw(st.sets(st.integers(0, len(groups) - 1))))
    key = sorted(-1 - t for t in draw(st.sets(st.integers(0, n_tok - 1), max_size=5))) + key
    big_min = draw(st.integers(1, 41))
    with_row = draw(st.lists(st.booleans(), min_size=len(groups), max_size=len(groups)))
    n_words = (n_tok + 63) // 64
    g_row = np.full(len(groups), -1, np.int64)
    gw = np.zeros((len(groups), n_words), np.uint64)
    for g, has in enumerate(with_row):
        if has:
            g_row[g] = g
            gw[g] = bitset(groups[g], n_tok)
    return groups, off, tok, np.array(key, np.int64), big_min, g_row, gw, n_tok


@SETTINGS
@given(group_unions())
def test_union_bits_equals_twin(case):
    groups, off, tok, key, big_min, g_row, gw, n_tok = case
    out1 = np.zeros((n_tok + 63) // 64, np.uint64)
    out2 = out1.copy()
    out3 = out1.copy()
    miss1 = trees_kernels.union_bits(key, off, tok, big_min, g_row, gw, out1)
    miss2 = trees_kernels.py_union_bits(key, off, tok, big_min, g_row, gw, out2)
    miss3 = trees_numpy.union_bits(key, off, tok, big_min, g_row, gw, out3)
    np.testing.assert_array_equal(out1, out2)
    np.testing.assert_array_equal(miss1, miss2)
    np.testing.assert_array_equal(out1, out3)
    assert miss1.tolist() == miss3.tolist()
    want = {-1 - g for g in key.tolist() if g < 0} | {t for g in key.tolist() if g >= 0 for t in groups[g]}
    np.testing.assert_array_equal(out1, bitset(want, n_tok))
    assert miss1.tolist() == [g for g in key.tolist() if g >= 0 and len(groups[g]) >= big_min and g_row[g] < 0]


_NO_LEAK = r"""
import gc, sys, time
from numba.core.runtime import rtsys
import localguide
from localguide.grammar import compile_grammar, masks, warmup

v = localguide.Vocabulary.from_gguf(sys.argv[1])
while not warmup.ready():
    time.sleep(0.1)

def live():
    s = rtsys.get_allocation_stats()
    return s.alloc - s.free

def once():
    masks.build_trees(compile_grammar("json", v).scanner, v, workers=2)
    idx = compile_grammar("sql", v)
    g = idx.guide(max_tokens=40)
    for _ in range(12):  # masks through the compiled walk (its work arrays too)
        ids = g.allowed_token_ids()
        g.advance(int(ids[len(ids) // 2]))
    idx.flush()

once()
gc.collect()
base = live()
for _ in range(3):
    once()
gc.collect()
print(live() - base)
"""


def test_kernels_free_their_work_arrays(smollm2_path, cache_dir):
    """The kernels' work arrays are freed (numba's ``list.clear()`` on a list of arrays leaked
    them all: 100 MB per schema compiled on Gemma 3). Counted by numba's runtime itself."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, NUMBA_NRT_STATS="1", LOCALGUIDE_CACHE_DIR=str(cache_dir))
    out = subprocess.run([sys.executable, "-c", _NO_LEAK, str(smollm2_path)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout.split()[-1]) <= 0, out.stdout
