"""patternProperties, additionalProperties and listed names, alone and merged (allOf): the keys
are split exactly by the patterns they match (``Compiler.key_regions``), so the automaton accepts
a document exactly when jsonschema says it is valid, and ``inspect`` reports nothing approximated.
"""

from __future__ import annotations

import json

import jsonschema
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.json_schema.schema import build_dfa, inspect_schema, schema_to_ast

PATTERNS = ["^a", "b$", "^[ab]+$", "c", "^ab", "^.$"]
VALUES = [{"type": "integer"}, {"type": "string"}, {"minimum": 3}, {"maxLength": 2}, {"type": "array"},
          {"enum": [0, "s", None]}, False, True]
KEYS = ["a", "b", "ab", "ba", "abc", "c", "x", "aab", "bb", "zc"]
DOC_VALUES = [0, 5, "s", "long", [], None, [1]]


@st.composite
def object_schemas(draw):
    s = {"type": "object"}
    names = draw(st.lists(st.sampled_from(KEYS), max_size=2, unique=True))
    if names:
        s["properties"] = {n: draw(st.sampled_from(VALUES)) for n in names}
    pats = draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3, unique=True))
    s["patternProperties"] = {p: draw(st.sampled_from(VALUES)) for p in pats}
    extra = draw(st.sampled_from(["absent", "false", "schema"]))
    if extra == "false":
        s["additionalProperties"] = False
    elif extra == "schema":
        s["additionalProperties"] = draw(st.sampled_from(VALUES[:6]))
    return s


@st.composite
def schemas(draw):
    parts = draw(st.lists(object_schemas(), min_size=1, max_size=3))
    if len(parts) == 1:
        return parts[0]
    merged = {"allOf": parts}
    if draw(st.booleans()):
        merged["maxProperties"] = draw(st.integers(1, 3))
    return merged


documents = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(DOC_VALUES), max_size=3)


@settings(max_examples=150, deadline=None)
@given(schemas(), st.lists(documents, min_size=8, max_size=8))
def test_keys_split_exactly(schema, docs):
    # (the bounded automaton, whose only note may be the depth of free values: these documents'
    # values nest one level at most)
    compiled = schema_to_ast(schema)
    assert all("nested at most" in note for _, _, note in compiled.approximated), compiled.approximated
    assert "approximated" not in {status for _, _, status in inspect_schema(schema)}  # (exact: the default)
    dfa = build_dfa(schema)[0]
    validator = jsonschema.Draft202012Validator(schema)
    listed = [n for part in schema.get("allOf", [schema]) for n in part.get("properties", {})]
    for doc in docs:
        # (listed properties come first, in the schema's order: README, "JSON Schema")
        doc = {k: doc[k] for k in sorted(doc, key=lambda k: listed.index(k) if k in listed else len(listed))}
        text = json.dumps(doc)
        assert dfa.matches(text.encode()) == validator.is_valid(doc), (schema, text)


def test_the_issue_example():
    """^a: integer and b$: string, no other properties: "ab" needs both (nothing satisfies that),
    "a..." an integer, "...b" a string."""
    schema = {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "string"}},
              "additionalProperties": False}
    dfa = build_dfa(schema)[0]
    for doc, ok in [({}, True), ({"a": 1, "xb": "y"}, True), ({"ax": 1, "b": "z"}, True), ({"ab": 1}, False),
                    ({"ab": "x"}, False), ({"c": 1}, False), ({"b": 3}, False)]:
        assert dfa.matches(json.dumps(doc).encode()) == ok, doc
    assert "approximated" not in {status for _, _, status in inspect_schema(schema)}
