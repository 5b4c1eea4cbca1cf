"""Streaming JSON: partial values that the finished document extends, on both models."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.chat.partial_json import extends, parse_partial

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 8},
                                                          "maxItems": 3},
    "age": {"type": "integer", "minimum": 0, "maximum": 120}, "address": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 16}}, "required": ["city"]}},
    "required": ["name", "tags", "age", "address"]}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)


@settings(max_examples=300)
@given(json_values, st.sampled_from([None, 2]), st.booleans())
def test_every_prefix_parses_to_a_value_the_document_extends(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    final = json.loads(text)
    for i in range(len(text) + 1):
        partial = parse_partial(text[:i])
        if partial is not None:
            assert extends(final, partial), (text[:i], partial)
    assert parse_partial(text) == final or not isinstance(final, (dict, list, str))


def test_partial_values():
    assert parse_partial('{"a": "hel') == {"a": "hel"}
    assert parse_partial('{"a": 12') == {}
    assert parse_partial('{"a": 12,') == {"a": 12}
    assert parse_partial('{"a": [1, 2, {"b": tr') == {"a": [1, 2, {}]}
    assert parse_partial('{"a": "x\\u00') == {"a": "x"}
    assert parse_partial('{"ke') == {}
    assert parse_partial("  ") is None
    with pytest.raises(ValueError):
        parse_partial('{"a" 1}')


def repeats_a_name(text: str) -> bool:
    """Whether some object of the JSON ``text`` has a name twice (JSON allows it; the last wins)."""
    repeated = False

    def pairs(items):
        nonlocal repeated
        repeated |= len({k for k, _ in items}) != len(items)
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)
    return repeated


@pytest.mark.parametrize("as_messages", [False, True])
def test_stream_json_on_a_model(model, as_messages, monkeypatch):
    prompt = "A person as JSON with name, tags, age and address:"
    src = [{"role": "user", "content": prompt}] if as_messages else prompt
    pieces: list[str] = []
    for name in ("stream", "chat_stream"):  # (the text under the values)
        def spy(*args, _orig=getattr(model, name), **kwargs):
            for piece in _orig(*args, **kwargs):
                pieces.append(piece if isinstance(piece, str) else piece.content)
                yield piece
        monkeypatch.setattr(model, name, spy)
    checked = 0
    for seed in range(4):
        pieces.clear()
        values = list(model.stream_json(src, json_schema=SCHEMA, max_tokens=96, temperature=1.0, seed=seed))
        final = values[-1]
        jsonschema.validate(final, SCHEMA)
        assert len(values) > 3  # (it grows in steps)
        assert json.loads("".join(pieces)) == final
        if repeats_a_name("".join(pieces)):
            continue  # (an extra property named twice: its first value is not the final one)
        for v in values[:-1]:
            assert extends(final, v), (v, final)
        checked += 1
    assert checked >= 2


def test_stream_json_with_pydantic(smollm2):
    from pydantic import BaseModel

    class City(BaseModel):
        city: str

    class Person(BaseModel):
        name: str
        age: int
        address: City

    values = list(smollm2.stream_json("A person:", json_schema=Person, max_tokens=64, temperature=1.0, seed=2))
    assert isinstance(values[-1], Person)
    assert all(isinstance(v, Person) for v in values)
