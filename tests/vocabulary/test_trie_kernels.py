"""The vocabulary trie kernel against its plain-Python twin."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from localguide import vocabulary_kernels, vocabulary_numpy
from kernel_strategies import SETTINGS, synthetic_vocabularies

def assert_same_trie(kernel_out, twin_out) -> None:
    node_byte, node_depth, subtree_end, tok_start, tok_count = kernel_out
    p_byte, p_depth, p_end, p_start, p_count = twin_out
    np.testing.assert_array_equal(node_byte, p_byte)
    np.testing.assert_array_equal(node_depth, p_depth)
    np.testing.assert_array_equal(subtree_end, p_end)
    np.testing.assert_array_equal(tok_count, p_count)
    # tok_start only means something where tokens end.
    has = tok_count > 0
    np.testing.assert_array_equal(tok_start[has], p_start[has])


# --- build_trie -------------------------------------------------------------------------

@SETTINGS
@given(st.lists(st.binary(max_size=6).map(lambda b: bytes(x % 4 for x in b)), min_size=1, max_size=60))
def test_sorted_rows_sort_as_python_does(tokens):
    """Tokens of the bytes 0-3 (zero bytes inside and at the end, prefixes, duplicates, empty
    ones left out): the order of ``sorted`` by bytes, ties by id, with their rows."""
    flat = np.frombuffer(b"".join(tokens), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(t) for t in tokens])]).astype(np.int64)
    rows = vocabulary_numpy.sorted_rows(flat, offsets)
    want = sorted((t for t in range(len(tokens)) if tokens[t]), key=lambda t: tokens[t])
    assert rows.order.tolist() == want
    for i, t in enumerate(want):
        assert rows.lengths[i] == len(tokens[t])
        assert bytes(rows.data[i, :len(tokens[t])]) == tokens[t] and not rows.data[i, len(tokens[t]):].any()

@SETTINGS
@given(synthetic_vocabularies())
def test_build_trie_equals_twin(vocab):
    order = vocab.trie.order
    kernel_out = vocabulary_kernels.build_trie(vocab.flat, vocab.offsets, order)
    twin_out = vocabulary_kernels.py_build_trie(vocab.flat, vocab.offsets, order)
    assert_same_trie(kernel_out, twin_out)
    numpy_out = vocabulary_numpy.build_trie(vocab.flat, vocab.offsets, order)
    for a, b in zip(numpy_out, kernel_out):  # (the numpy build: the same arrays, exactly)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    # And the trie spells exactly the non-empty tokens.
    node_byte, node_depth, _, tok_start, tok_count = kernel_out
    spelled = {}
    path: list[int] = []
    for n in range(1, len(node_byte)):
        path = path[: node_depth[n] - 1] + [int(node_byte[n])]
        for k in range(tok_start[n], tok_start[n] + tok_count[n]):
            spelled[int(order[k])] = bytes(path)
    expected = {t: vocab[t] for t in range(vocab.size) if vocab[t]}
    assert spelled == expected


def test_build_trie_long_tokens():
    """Tokens longer than 511 bytes (a fixed-size path buffer) must not corrupt memory.

    Run in a subprocess: an out-of-bounds write in a numba kernel can abort the interpreter.
    """
    code = textwrap.dedent("""
        import numpy as np
        from localguide import Vocabulary, vocabulary_kernels
        from localguide.index import Index
        from localguide.regex import regex_to_dfa
        tokens = [b"", b"a" * 600, b"a", b"b" * 520 + b"c", b"b"]
        v = Vocabulary.from_tokens(tokens, [0])
        out = vocabulary_kernels.build_trie(v.flat, v.offsets, v.trie.order)
        twin = vocabulary_kernels.py_build_trie(v.flat, v.offsets, v.trie.order)
        assert all(np.array_equal(a, b) for a, b in zip(out[:3], twin[:3]))
        from localguide import vocabulary_numpy
        fast = vocabulary_numpy.build_trie(v.flat, v.offsets, v.trie.order)
        assert all(np.array_equal(a, b) for a, b in zip(out, fast))
        idx = Index.build(regex_to_dfa("a*"), v)
        assert idx.allowed(0).tolist() == [0, 1, 2], idx.allowed(0)
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", (proc.returncode, proc.stderr[-2000:])
