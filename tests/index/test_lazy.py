"""The LazyIndex: rows computed state by state equal the whole Index's, before and after the
hand-over, on both vocabularies; budgets are kept; large schemas get one automatically."""

from __future__ import annotations

import json
import random
import threading

import numpy as np
import pytest

import localguide
from localguide import Vocabulary, cache
from localguide.index import Index
from localguide.json_schema.schema import build_dfa, compile_json_schema
from localguide.index.lazy import LazyGuide, LazyIndex, lazy_possible

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "tags": {"type": "array", "items": {"enum": ["a", "bé", "日本"]}, "maxItems": 3},
    },
    "required": ["name", "age"],
}


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    return tmp_path


def held_lazy(dfa, vocab: Vocabulary):
    """A LazyIndex whose whole Index is withheld until the returned event is set."""
    release = threading.Event()

    def build():
        release.wait(60)
        return Index.build(dfa, vocab, "JSON schema")

    return LazyIndex(dfa, vocab, build, "JSON schema"), release


def test_json_needs_only_bytes_that_are_tokens(vocab):
    dfa, _ = build_dfa(SCHEMA)
    assert lazy_possible(dfa, vocab)
    # Without a single-byte token for "b", "ab" cannot finish after "a".
    from localguide.regex import regex_to_dfa

    small = Vocabulary.from_tokens([b"a", b"ab", b""], stop_ids=[2])
    assert not lazy_possible(regex_to_dfa("ab?b"), small)
    assert lazy_possible(regex_to_dfa("a+"), small)


def test_rows_equal_the_whole_index_before_and_after_the_hand_over(vocab, fresh_cache):
    dfa, _ = build_dfa(SCHEMA)
    eager = Index.build(dfa, vocab, "JSON schema")
    rng = random.Random(5)
    for walk in range(6):
        lazy, release = held_lazy(dfa, vocab)
        g, e = lazy.guide(), eager.guide()
        for step in range(60):
            if step == 20:
                release.set()
                lazy.index()  # from here the lazy guide reads the Index
            a = g.allowed_token_ids()
            np.testing.assert_array_equal(a, e.allowed_token_ids())
            assert g.is_accepting() == e.is_accepting()
            if len(a) == 0:
                break
            t = int(a[rng.randrange(len(a))])
            g.advance(t)
            e.advance(t)
            if e.is_finished():
                assert g.is_finished()
                break
        release.set()
        assert lazy.index() is not None


@pytest.mark.parametrize("budget", [40, 60])
def test_budget_is_kept_while_lazy(vocab, fresh_cache, budget):
    """With the Index withheld, every walk still ends in a valid document within the budget."""
    dfa, _ = build_dfa(SCHEMA)
    lazy, release = held_lazy(dfa, vocab)
    rng = random.Random(budget)
    stops = set(vocab.stop_ids.tolist())
    try:
        for walk in range(8):
            g = lazy.guide(max_tokens=budget)
            tokens = []
            for _ in range(budget):
                a = g.allowed_token_ids()
                assert len(a) > 0
                t = int(a[rng.randrange(len(a))])
                g.advance(t)
                if t in stops:
                    break
                tokens.append(t)
                if g.is_finished():  # nothing but a stop token can follow
                    break
            assert g.is_finished() or g.is_accepting()
            assert len(tokens) <= budget
            text = vocab.decode(tokens)
            assert dfa.matches(text)
            json.loads(text)
    finally:
        release.set()


def test_not_allowed_token_and_finished_guide(vocab, fresh_cache):
    dfa, _ = build_dfa(SCHEMA)
    lazy, release = held_lazy(dfa, vocab)
    try:
        g = lazy.guide()
        allowed = set(g.allowed_token_ids().tolist())
        bad = next(t for t in range(vocab.size) if t not in allowed)
        with pytest.raises(localguide.TokenNotAllowedError):
            g.advance(bad)
        copy = g.copy()
        copy.advance(int(g.allowed_token_ids()[0]))
        assert copy.state != g.state
    finally:
        release.set()


def test_large_schema_gets_a_lazy_index_then_the_cache(vocab, fresh_cache):
    index = compile_json_schema(SCHEMA, vocab, max_recursion=3, lazy=True)
    assert isinstance(index, LazyIndex)
    assert isinstance(index.guide(), LazyGuide)
    whole = index.index()
    assert isinstance(whole, Index)
    assert isinstance(index.guide(), localguide.Guide)  # built: the Index's own guide
    cache.flush()
    again = compile_json_schema(SCHEMA, vocab, max_recursion=3)  # now in the cache: the Index itself
    assert isinstance(again, Index)
    np.testing.assert_array_equal(again.mask_tokens, whole.mask_tokens)


def test_small_schema_is_indexed_at_once(vocab, fresh_cache):
    assert isinstance(compile_json_schema({"type": "boolean"}, vocab), Index)
    assert isinstance(compile_json_schema(SCHEMA, vocab, max_recursion=3, lazy=False), Index)


def test_generation_through_a_lazy_index(smollm2, fresh_cache):
    index = compile_json_schema(SCHEMA, smollm2.vocabulary, max_recursion=3, lazy=True)
    out = smollm2.generate("A person as JSON:", json_schema=SCHEMA, max_recursion=3, max_tokens=60,
                         temperature=1.0, seed=3)
    doc = json.loads(out)
    assert isinstance(doc["name"], str) and 0 <= doc["age"] <= 130
    index.index()
