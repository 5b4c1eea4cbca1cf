"""A compiled grammar's arrays as the disk cache stores them (``grammar.packed``): exact on
unpacking, a few megabytes for a schema with a format string, and a damaged file rebuilt."""

from __future__ import annotations

import numpy as np
import pytest

from localguide.runtime import cache
from packed_helpers import assert_same_arrays, format_schema
from localguide.grammar import compile_grammar, packed
from localguide.grammar.compiled import GrammarIndex
from localguide.json_schema.schema import compile_json_schema


@pytest.mark.parametrize("grammar", ["json", "c"])
def test_shipped_grammars_unpack_exactly(vocab, grammar):
    idx = compile_grammar(grammar, vocab)
    arrays = idx.arrays(seed=True)
    assert_same_arrays(packed.unpack(packed.pack(arrays), vocab.size), arrays)


@pytest.mark.parametrize("grammar", ["json", "c", "sql"])
def test_shipped_grammars_are_stored_plain_and_mapped(vocab, tmp_path, monkeypatch, grammar):
    """Their files stay within the plain bound, and a load maps the token lists: nothing inflated,
    summed or rebuilt (a cached load as fast as before the files were packed)."""
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    from localguide.grammar import sources
    sources._COMPILED.clear()  # (not an index another test compiled: this one writes its file here)
    built = compile_grammar(grammar, vocab, lazy=False)
    cache.flush()
    (path,) = [p for p in tmp_path.iterdir() if p.name.startswith("grammar-")]
    stored = cache.read(path)
    assert path.stat().st_size <= packed._file_bytes(stored) and path.stat().st_size <= packed.PLAIN_BYTES
    assert "tr_list_tok" in stored and "tr_list_z" not in stored
    back = packed.unpack(stored, vocab.size)
    assert_same_arrays(back, built.arrays(seed=True))
    sources._COMPILED.clear()
    loaded = compile_grammar(grammar, vocab, lazy=False)
    assert loaded is not built
    tok = loaded.engine.grp_tok
    np.testing.assert_array_equal(tok, back["tr_grp_tok"])
    if "tr_grp_list" not in stored and tok.nbytes >= cache._MMAP_BYTES:  # (smaller arrays are read)
        assert not tok.flags.owndata  # the index holds the mapped file's tokens: no copy on the way


def test_an_email_schema_on_the_grammar_route_writes_a_small_file(vocab, tmp_path, monkeypatch):
    """Not strict: free values, so the grammar engine. It wrote 31 MB on Gemma 3's vocabulary (22 of
    them token ids, half in duplicate groups); at most 5 MB now (a schema's plain bound, below a
    grammar's), and it loads as it was built."""
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    built = compile_json_schema(format_schema("email"), vocab, lazy=False)
    assert isinstance(built, GrammarIndex)
    cache.flush()
    (path,) = [p for p in tmp_path.iterdir() if p.name.startswith("json_schema_grammar")]
    assert path.stat().st_size <= 5_000_000 == packed.SCHEMA_PLAIN_BYTES < packed.PLAIN_BYTES
    arrays = built.arrays()
    assert_same_arrays(packed.unpack(cache.read(path), vocab.size), arrays)


def test_damaged_packed_groups_are_rebuilt_not_trusted(vocab, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cache, "_warned", False)
    schema = format_schema("date")
    built = compile_json_schema(schema, vocab, lazy=False)
    cache.flush()
    (path,) = [p for p in tmp_path.iterdir() if p.name.startswith("json_schema_grammar")]
    stored = dict(cache.read(path))
    stored["tr_list_z"] = stored["tr_list_z"][:-3]  # a deflated stream cut short
    cache.save(path, stored)
    from localguide.grammar import sources
    monkeypatch.setattr(sources, "remembered", lambda key: None)  # (not the index held in memory)
    with pytest.warns(RuntimeWarning):
        again = compile_json_schema(schema, vocab, lazy=False)
    for text in ('{"name": "a", "age": 1, "contact": "2020-02-29", "city": "b"}',
                 '{"name": "a", "age": 1, "contact": "2021-02-29", "city": "b"}'):
        assert again.matches(text) == built.matches(text)
