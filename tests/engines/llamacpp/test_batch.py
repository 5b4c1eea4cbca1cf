"""``Model.batch`` and the engine of many sequences (both models, real llama.cpp): every output
valid for its item's constraint, an item's error its own, a shared prefix decoded once, and the
texts of ``parallel=4`` those of ``parallel=1`` where llama.cpp's batched logits allow."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest

from localguide.errors import LocalguideError

from conftest import FreeDecodes

INSTRUCTION = ("Read the text about a person and write their facts as JSON: name, age, city and job. "
               "Answer with the JSON document only, on one line. ") * 4
PEOPLE = [("Alice", 31, "Paris", "baker"), ("Bob", 45, "Lyon", "nurse"), ("Chen", 28, "Oslo", "pilot"),
          ("Dana", 52, "Rome", "teacher"), ("Eve", 39, "Kyiv", "lawyer"), ("Farid", 61, "Cairo", "chef")]
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "age", "city", "job"],
          "properties": {"name": {"type": "string", "maxLength": 16}, "age": {"type": "integer", "minimum": 0},
                         "city": {"type": "string", "maxLength": 16}, "job": {"type": "string", "maxLength": 16}}}


def prompts():
    return [f"{INSTRUCTION}\nText: {n} is {a} years old, lives in {c} and works as a {j}.\nJSON: "
            for n, a, c, j in PEOPLE]


def test_every_item_is_valid_for_its_own_constraint_and_errors_stay_with_their_item(model):
    items = [*prompts()[:3],
             {"id": "year", "prompt": "The year the war ended: ", "regex": r"1[89][0-9]{2}", "max_tokens": 8},
             {"id": "colour", "prompt": "My favourite colour is", "choice": [" red", " green", " blue"]},
             {"id": "bad regex", "prompt": "x", "regex": "(unclosed"},
             {"id": "no prompt", "messages": None, "prompt": None},
             {"id": "unknown", "prompt": "x", "colour": "red"},
             {"id": "too long", "prompt": "word " * 5000},
             {"id": "chat", "messages": [{"role": "user", "content": "Give a number from 1 to 9."}],
              "regex": "[1-9]"},
             42]
    results = list(model.batch(items, parallel=4, json_schema=SCHEMA, temperature=0.7, seed=5, max_tokens=60))
    by = {r.index: r for r in results}
    assert sorted(by) == list(range(len(items)))  # each item once
    for i in range(3):
        r = by[i]
        assert r.error is None and r.finish_reason == "stop", r
        jsonschema.validate(json.loads(r.text), SCHEMA)
        assert r.value == json.loads(r.text) and r.stats.tokens > 0
    assert re.fullmatch(r"1[89][0-9]{2}", by[3].text) and by[3].id == "year"
    assert by[4].text in (" red", " green", " blue") and by[4].value is None
    assert re.fullmatch("[1-9]", by[9].text)
    for i, words in [(5, "unclosed"), (6, '"prompt" or "messages"'), (7, "unknown field 'colour'"),
                     (8, "exceeds"), (10, "not int")]:
        assert by[i].error is not None and by[i].text is None, by[i]
        assert words in str(by[i].error), by[i].error
    assert isinstance(by[8].error, LocalguideError)


def test_a_shared_prefix_is_decoded_once(model):
    items = prompts()
    model.engine_for(4).reset()
    results = sorted(model.batch(items, parallel=4, json_schema=SCHEMA, temperature=0, max_tokens=60),
                     key=lambda r: r.stats.cached_tokens)
    tokens = [model.tokenize_prompt(p) for p in items]
    shared = next(i for i in range(len(tokens[0])) if any(t[i] != tokens[0][i] for t in tokens))
    assert shared > 128  # (the test needs a prefix longer than a fast chunk)
    assert results[0].stats.cached_tokens == 0
    for r in results[1:]:  # (every other prompt decodes after the shared prefix only)
        assert r.stats.cached_tokens >= shared, [x.stats.cached_tokens for x in results]
    decoded = sum(r.stats.prompt_tokens - r.stats.cached_tokens for r in results)
    assert decoded <= sum(map(len, tokens)) - (len(items) - 1) * shared


def test_parallel_texts_are_those_of_one_sequence_where_the_logits_allow(model):
    items = prompts()
    one = {r.index: r.text for r in model.batch(items, parallel=1, json_schema=SCHEMA, temperature=0,
                                                max_tokens=60)}
    four = {r.index: r.text for r in model.batch(items, parallel=4, json_schema=SCHEMA, temperature=0,
                                                 max_tokens=60)}
    same = sum(one[i] == four[i] for i in one)
    # Sequences share the KV cache's cells in another order than one alone: a position's
    # logits may differ in their last bits, and greedy text parts where two tokens nearly tie.
    assert same >= len(items) // 2, (same, one, four)


def test_drafts_of_several_sequences_are_verified_together(model):
    # Whether drafting pays is the machine's to say (timed: a fast machine and a busy one answer
    # otherwise): here every decode of any width costs the same, so drafts come and are verified
    # together; a schema of this test alone, so that no other test's calibration carries over.
    items = prompts()
    schema = {**SCHEMA, "required": [*SCHEMA["required"]], "title": "verified together"}
    schema["properties"] = {**SCHEMA["properties"], "job": {"type": "string", "maxLength": 15}}
    engine = model.engine_for(4)
    saved, engine._costs = engine._costs, {n: FreeDecodes() for n in range(1, 5)}
    try:
        results = list(model.batch(items * 2, parallel=4, json_schema=schema, temperature=0, max_tokens=60))
    finally:
        engine._costs = saved
    assert all(r.error is None for r in results)
    for r in results:
        jsonschema.validate(json.loads(r.text), schema)
    assert sum(r.stats.drafted for r in results) > 0
    assert sum(r.stats.accepted for r in results) <= sum(r.stats.drafted for r in results)


def test_a_closed_batch_releases_its_sequences(model):
    engine = model.engine_for(4)
    results = model.batch(prompts(), parallel=4, json_schema=SCHEMA, temperature=0, max_tokens=60)
    first = next(results)
    assert first.error is None
    results.close()
    assert engine.active() == []
    again = list(model.batch(prompts()[:2], parallel=4, json_schema=SCHEMA, temperature=0, max_tokens=60))
    assert [r.error for r in again] == [None, None]


@pytest.mark.parametrize("bad", [0, -1, True, "4"])
def test_parallel_must_be_a_whole_number(model, bad):
    with pytest.raises(LocalguideError, match="parallel"):
        list(model.batch(["x"], parallel=bad))


def test_one_batch_at_a_time_on_an_engine(model):
    first = model.batch(prompts(), parallel=4, json_schema=SCHEMA, temperature=0, max_tokens=60)
    assert next(first).error is None
    with pytest.raises(LocalguideError, match="another batch is running"):
        list(model.batch(prompts()[:1], parallel=4))
    assert all(r.error is None for r in first)  # (the first goes on)
    # one sequence: a generation inside the loop, as an app does with each result
    for r in model.batch(prompts()[:2], parallel=1, json_schema=SCHEMA, temperature=0, max_tokens=60):
        assert r.error is None and model.generate("Say yes:", max_tokens=2, temperature=0)


def test_the_engine_is_not_closed_under_a_running_batch(model):
    running = model.batch(prompts(), parallel=4, json_schema=SCHEMA, temperature=0, max_tokens=60)
    assert next(running).error is None
    with pytest.raises(LocalguideError, match="is generating"):
        model.close_engine()
    with pytest.raises(LocalguideError, match="is generating"):
        list(model.batch(prompts()[:1], parallel=2))
    assert all(r.error is None for r in running)


def test_a_stream_left_open_inside_a_one_sequence_batch_does_not_hang_it(model):
    left = []
    for r in model.batch(prompts()[:3], parallel=1, json_schema=SCHEMA, temperature=0, max_tokens=60):
        assert r.error is None
        stream = model.stream("Count: 1, 2,", max_tokens=8, temperature=0)
        next(stream)
        left.append(stream)  # (not exhausted, not closed)
    assert len(left) == 3
