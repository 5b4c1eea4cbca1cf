"""``schema_to_ast(raw_strings=True)``: a string at the top is its characters. A text is in the raw
language exactly where its JSON form is in the schema's JSON language (the same compiler, two
encodings), and the ``jsonschema`` package agrees."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.errors import SchemaError
from localguide.json_schema.schema import schema_to_ast
from localguide.regex.ast_dfa import ast_to_dfa

SCHEMAS = [
    {"type": "string"},
    {"type": "string", "minLength": 2, "maxLength": 5},
    {"type": "string", "pattern": "^[a-c]+x?$"},
    {"type": "string", "format": "date"},
    {"enum": ["red", "green", "a\nb"], "type": "string"},
    {"type": "string", "not": {"enum": ["no"]}},
    {"type": "string", "pattern": "<", "maxLength": 4},
]
_DFAS = {}


def _dfas(i):
    if i not in _DFAS:
        raw = ast_to_dfa(schema_to_ast(SCHEMAS[i], raw_strings=True).node)
        js = ast_to_dfa(schema_to_ast(SCHEMAS[i]).node)
        _DFAS[i] = raw, js
    return _DFAS[i]


_TEXT = st.one_of(st.text(max_size=7), st.text("abcx<\n", max_size=6), st.sampled_from(
    ["red", "green", "a\nb", "no", "2024-02-29", "2023-02-29", "ab", "abcx", "<", "<<<<<"]))


@settings(max_examples=400, deadline=None)
@given(i=st.integers(0, len(SCHEMAS) - 1), text=_TEXT)
def test_raw_text_is_in_the_language_where_its_json_is(i, text):
    raw, js = _dfas(i)
    encoded = text.encode("utf-8", "surrogatepass")
    in_raw = raw.matches(encoded)
    assert in_raw == js.matches(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    try:
        jsonschema.validate(text, SCHEMAS[i], format_checker=jsonschema.FormatChecker())
        valid = True
    except jsonschema.ValidationError:
        valid = False
    if not text.endswith("\n"):  # (Python's re, which jsonschema uses, lets $ match before a last line break)
        assert in_raw == valid, (SCHEMAS[i], text)


def test_values_of_other_types_are_left_out():
    raw = ast_to_dfa(schema_to_ast({"type": ["string", "integer"]}, raw_strings=True).node)
    assert raw.matches(b"12") and raw.matches(b"ab")  # (the texts "12" and "ab": strings)
    with pytest.raises(SchemaError):
        schema_to_ast({"type": "integer"}, raw_strings=True)
