"""The grammar scanner kernel against its plain-Python twin."""

from __future__ import annotations

import numpy as np
import pytest

from localguide.grammar import lexer_kernels

@pytest.mark.parametrize("name", ["json", "sql", "c", "arithmetic", "yaml", "json-gbnf"])
def test_scanner_closure_equals_twin(name, monkeypatch):
    """The grammar scanner's subset construction: kernel and twin give the same states and transitions."""
    from localguide.grammar.cfg import normalize
    from localguide.grammar.earley import Grammar
    from localguide.grammar.lexer import Scanner
    from localguide.grammar.sources import resolve, to_cfg

    g = Grammar(normalize(to_cfg(*resolve(name))))
    got = Scanner(g)
    monkeypatch.setattr(lexer_kernels, "scanner_closure", lexer_kernels.py_scanner_closure)
    want = Scanner(g)
    for a, b in ((got.trans, want.trans), (got.st_off, want.st_off), (got.st_rd, want.st_rd)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    monkeypatch.undo()
    # from one seed reading, with other hashes: equal, and the state budget honoured by both
    inputs = _closure_inputs(got, g.cfg)
    full = lexer_kernels.scanner_closure(*inputs, 10 ** 6)
    for a, b in zip(full, lexer_kernels.py_scanner_closure(*inputs, 10 ** 6)):
        np.testing.assert_array_equal(a, b)
    n = len(full[0])
    assert n >= 2
    assert len(lexer_kernels.scanner_closure(*inputs, n - 1)[0]) == 0
    assert len(lexer_kernels.py_scanner_closure(*inputs, n - 1)[0]) == 0
    assert len(lexer_kernels.scanner_closure(*inputs, n)[0]) == n


def _closure_inputs(sc, cfg):
    n_r = len(sc.r_term)
    r_next = sc.reading_moves(cfg)
    h = np.arange(1, n_r + 2, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    h[n_r] = 0
    off = np.array([0, 1], np.int64)
    rd = np.array([sc.r_base[0]], np.int32)
    return r_next, h, h ^ np.uint64(12345), off, rd
