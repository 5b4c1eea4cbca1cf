"""Compiled indexes shared between threads (issue: reliability): eight threads walking guides of
one compiled index, each walk the one a single thread makes with the same draws."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import localguide


def _walks(index, vocab, seed: int, walks: int, max_tokens: int, budget: bool = True) -> list[bytes]:
    rng = np.random.default_rng(seed)
    stops = set(vocab.stop_ids.tolist())
    out = []
    for _ in range(walks):
        g = index.guide(max_tokens=max_tokens if budget else None)
        text = b""
        for _ in range(max_tokens):
            allowed = g.allowed_token_ids()
            assert len(allowed), "a guide that allows nothing"
            t = int(rng.choice(allowed))
            if t in stops:
                assert g.is_accepting(), f"a stop token allowed on incomplete text {text!r}"
                break
            g.advance(t)
            text += vocab[t]
        out.append(text)
    return out


@pytest.mark.parametrize("what", ["sql", "json", "c", "regex", "schema"])
def test_eight_threads_walk_one_index_as_one_thread_does(smollm2_vocab, what):
    v = smollm2_vocab
    if what == "regex":
        make = lambda: localguide.compile_regex(r"[a-z]+(, [a-z]+){0,8}\.", v)  # noqa: E731
    elif what == "schema":
        make = lambda: localguide.compile_json_schema(  # noqa: E731
            {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string", "maxLength": 8}}}, v)
    else:
        make = lambda: localguide.compile_grammar(what, v)  # noqa: E731
    # (a lazy index hands its guides over to the whole Index when that is built, at a moment that
    # differs from run to run: near a budget's end the two may part, so those walk without one)
    budget = what not in ("regex", "schema")
    alone = [_walks(make(), v, seed, 6, 40, budget) for seed in range(8)]
    from localguide.grammar import sources

    sources._COMPILED.clear()  # (a fresh index: its caches fill while the threads race)
    shared = make()
    got, errors = {}, []

    def run(seed):
        try:
            got[seed] = _walks(shared, v, seed, 6, 40, budget)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=run, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert [got[s] for s in range(8)] == alone
