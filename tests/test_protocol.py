"""Every guide implements ``GuideProtocol``; ``rollback(j)`` after ``k`` tokens equals a fresh guide
advanced ``k - j`` tokens (masks, acceptance, budget), on both real vocabularies."""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import localguide
from localguide.index import Guide, Index
from localguide.index.lazy import LazyIndex
from localguide.json_schema.schema import build_dfa
from localguide.protocol import GuideProtocol, Mask, MaskKind

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                           "n": {"type": "integer"}}, "required": ["name"]}
_RELEASE = threading.Event()  # the held LazyIndex never hands over during these tests


def _held_lazy(vocab):
    dfa, _ = build_dfa(SCHEMA)

    def build():
        _RELEASE.wait(600)
        return Index.build(dfa, vocab, "JSON schema")

    return LazyIndex(dfa, vocab, build, "JSON schema")


@pytest.fixture(scope="module")
def indexes(smollm2_vocab, gemma3_vocab):
    """Per vocabulary, one compiled constraint of each guide kind."""
    out = {}
    for name, v in (("smollm2", smollm2_vocab), ("gemma3", gemma3_vocab)):
        out[name] = {
            "regex": localguide.compile_regex(r"[a-z]{1,6}( [0-9]{1,3}){0,3}\.?", v),
            "schema": localguide.compile_json_schema(SCHEMA, v, max_recursion=3),  # (the automaton's Index)
            "lazy": _held_lazy(v),
            "grammar": localguide.compile_grammar("arithmetic", v),
        }
    yield out
    _RELEASE.set()


def _walk(guide, rng, k: int) -> list[int]:
    """Up to ``k`` random allowed tokens (stop tokens rarely), advancing ``guide``."""
    path = []
    for _ in range(k):
        allowed = guide.allowed_token_ids()
        if len(allowed) == 0 or guide.is_finished():
            break
        t = int(allowed[rng.randrange(len(allowed))])
        guide.advance(t)
        path.append(t)
    return path


def _view(guide) -> tuple:
    mask = guide.mask()
    return (guide.allowed_token_ids().tolist(), guide.is_accepting(), guide.is_finished(),
            guide.remaining, guide.checkpoint(), int(mask.kind), np.asarray(mask.data).tobytes())


@pytest.mark.parametrize("kind", ["regex", "schema", "lazy", "grammar"])
@pytest.mark.parametrize("vname", ["smollm2", "gemma3"])
def test_every_guide_implements_the_protocol(indexes, vname, kind):
    g = indexes[vname][kind].guide()
    assert isinstance(g, GuideProtocol)
    mask = g.mask()
    assert isinstance(mask, Mask) and isinstance(mask.kind, MaskKind)
    assert g.cheap_masks == (kind != "grammar")
    assert (g.native_block() is not None) == isinstance(g, Guide)  # (a small schema's Index may be lazy)
    t = int(g.allowed_token_ids()[0])
    assert g.accepts(t)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(kind=st.sampled_from(["regex", "schema", "lazy", "grammar"]), vname=st.sampled_from(["smollm2", "gemma3"]),
       budget=st.sampled_from([None, 30]), k=st.integers(0, 14), j=st.integers(0, 14), seed=st.integers(0, 2**16))
def test_rollback_equals_a_fresh_guide(indexes, kind, vname, budget, k, j, seed):
    index = indexes[vname][kind]
    g = index.guide(max_tokens=budget)
    path = _walk(g, random.Random(seed), k)
    j = min(j, len(path))
    before = g.copy()
    g.rollback(j)
    fresh = index.guide(max_tokens=budget)
    for t in path[:len(path) - j]:
        fresh.advance(t)
    assert _view(g) == _view(fresh)
    assert before.checkpoint() == len(path)  # a copy keeps its own position and history
    before.rollback(len(path))
    assert _view(before) == _view(index.guide(max_tokens=budget))
    if j:  # the guide goes on from the rolled-back position as a fresh one would
        t = path[len(path) - j]
        g.advance(t)
        fresh.advance(t)
        assert _view(g) == _view(fresh)


@pytest.mark.parametrize("kind", ["regex", "grammar"])
def test_rollback_refuses_what_was_not_advanced(indexes, kind):
    g = indexes["smollm2"][kind].guide()
    g.advance(int(g.allowed_token_ids()[0]))
    for bad in (2, -1, 1.0, "1"):
        with pytest.raises(ValueError):
            g.rollback(bad)
    g.rollback(0)
    assert g.checkpoint() == 1


def test_lazy_rollback_across_the_hand_over(smollm2_vocab):
    """History before the hand-over to the whole Index survives it, in automaton states."""
    dfa, _ = build_dfa(SCHEMA)
    release = threading.Event()

    def build():
        release.wait(60)
        return Index.build(dfa, smollm2_vocab, "JSON schema")

    lazy = LazyIndex(dfa, smollm2_vocab, build, "JSON schema")
    g = lazy.guide(max_tokens=40)
    rng = random.Random(3)
    path = _walk(g, rng, 4)
    release.set()
    lazy.index()
    path += _walk(g, rng, 4)
    assert g.checkpoint() == len(path)

    def replayed(n):
        fresh = lazy.guide(max_tokens=40)
        for t in path[:n]:
            fresh.advance(t)
        return fresh

    assert _view(g)[:4] == _view(replayed(len(path)))[:4]  # the budget is the Index guide's after the hand-over
    g.rollback(len(path) - 2)
    assert _view(g)[:4] == _view(replayed(2))[:4]
    for t in path[2:]:  # and again across the hand-over, from the automaton state
        g.advance(t)
    assert _view(g)[:4] == _view(replayed(len(path)))[:4]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 300), st.data())
def test_a_masks_allowed_ids_read_every_kind_alike(size, data):
    allowed = np.array(sorted(data.draw(st.sets(st.integers(0, size - 1)))), np.int32)
    excluded = np.setdiff1d(np.arange(size), allowed).astype(np.int32)
    words = np.zeros((size + 63) // 64, np.uint64)
    for t in allowed.tolist():
        words[t >> 6] |= np.uint64(1) << np.uint64(t & 63)
    for mask in (Mask(MaskKind.ALLOWED, allowed), Mask(MaskKind.EXCLUDED, excluded), Mask(MaskKind.BITS, words)):
        got = mask.allowed(size)
        assert got.dtype == np.int32 and got.tolist() == allowed.tolist(), mask.kind
