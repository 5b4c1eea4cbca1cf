"""JSON Schema → regex/DFA: per-keyword behaviour, whitespace, errors, inspection, Pydantic.

The oracle for a schema is its byte DFA (``schema_dfa``) run on ``json.dumps`` of
instances; ``jsonschema`` double-checks the labels where it is installed, and small
schemas are checked to give the same automaton through the pattern text
(``localguide.regex.regex_to_dfa(schema_to_regex(...))``).
"""

from __future__ import annotations

import json
import random
from collections import deque
from decimal import Decimal
from fractions import Fraction

import pytest

from localguide.errors import LocalguideError
from localguide.json_schema.flat import type_atom
from localguide.json_schema.schema import (
    SchemaError, UnsupportedSchemaError, build_dfa, compile_json_schema, format_inspection, inspect_schema,
    schema_dfa, schema_to_regex,
)
from localguide.regex import regex_to_dfa
from localguide.vocabulary import Vocabulary

jsonschema = pytest.importorskip("jsonschema")


def accepts(schema, text, **opts) -> bool:
    if not isinstance(text, str):
        text = json.dumps(text)
    return schema_dfa(schema, **opts).matches(text.encode("utf-8", "surrogatepass"))


def check(schema, valid=(), invalid=(), **opts):
    dfa = schema_dfa(schema, **opts)
    # jsonschema as a second opinion, except where it differs on purpose: it reads patterns with
    # Python's (Unicode) \\d and \\w, and treats formats as annotations.
    text = json.dumps(schema)
    validator = None
    if isinstance(schema, dict) and '"pattern"' not in text and '"format"' not in text:
        validator = jsonschema.validators.validator_for(schema)(schema)
    for v in valid:
        if validator is not None and not isinstance(v, _Raw):
            assert validator.is_valid(v), f"test bug: {v!r} is not valid for {schema}"
        assert dfa.matches(_text(v)), f"valid {_text(v)!r} rejected by {schema}"
    for v in invalid:
        if validator is not None and not isinstance(v, _Raw):
            assert not validator.is_valid(v), f"test bug: {v!r} is valid for {schema}"
        assert not dfa.matches(_text(v)), f"invalid {_text(v)!r} accepted by {schema}"


class _Raw(str):
    """Text given as is (not a value to serialize)."""


def _text(v) -> bytes:
    s = str(v) if isinstance(v, _Raw) else json.dumps(v)
    return s.encode("utf-8", "surrogatepass")


def equivalent(a, b) -> bool:
    seen = {(0, 0)}
    queue = deque([(0, 0)])
    while queue:
        x, y = queue.popleft()
        if (x >= 0 and a.accepting[x]) != (y >= 0 and b.accepting[y]):
            return False
        for c in range(256):
            nx = int(a.transitions[x, c]) if x >= 0 else -1
            ny = int(b.transitions[y, c]) if y >= 0 else -1
            if (nx, ny) != (-1, -1) and (nx, ny) not in seen:
                seen.add((nx, ny))
                queue.append((nx, ny))
    return True


# -- types and literals --------------------------------------------------------------------------

def test_types():
    check({"type": "null"}, [None], [0, False, "null"])
    check({"type": "boolean"}, [True, False], [0, None])
    check({"type": "string"}, ["", "a", "é", "😀", "\n\"\\"], [1, None])
    check({"type": ["integer", "null"]}, [1, None, -5, 1.0], [1.5, "1"])
    check({"type": "number"}, [1, -2.5, 1e-7, 3.0], ["1", None])
    check({"type": "array"}, [[], [1, "a", [None]]], [{}, "[]"])
    check({"type": "object"}, [{}, {"a": 1}], [[], "{}"])


def test_enum_and_const():
    check({"enum": ["a", 1, None, [1, 2], {"k": "v"}]}, ["a", 1, 1.0, None, [1, 2], {"k": "v"}],
          ["b", 2, [2, 1], {"k": "w"}, True])
    check({"const": 0}, [0, 0.0], [False, 1])
    check({"const": "é/😀"}, ["é/😀"], ["e"])
    assert accepts({"const": "é"}, '"é"') and accepts({"const": "é"}, '"\\u00E9"')
    check({"type": "string", "enum": ["a", 1, "bb"], "maxLength": 1}, ["a"], ["bb", 1])


# -- numbers --------------------------------------------------------------------------------------

@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": -17, "maximum": 1234},
    {"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 100},
    {"type": "integer", "minimum": 1.5},
    {"type": "integer", "maximum": -3},
    {"type": "number", "minimum": -2.5, "maximum": 7.25},
    {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
    {"type": "number", "minimum": 0},
    {"type": "integer", "multipleOf": 4, "minimum": -50, "maximum": 130},
    {"type": "number", "multipleOf": 0.25, "maximum": 3},
    {"type": "number", "multipleOf": 0.01},
    {"type": "integer", "multipleOf": 3, "minimum": 0, "maximum": 100},
])
def test_numeric_bounds_are_exact(schema):
    rng = random.Random(0)
    values = list(range(-130, 140)) + [rng.uniform(-200, 200) for _ in range(300)]
    values += [round(rng.uniform(-10, 10), 2) for _ in range(300)] + [0.25 * k for k in range(-20, 20)]
    dfa = schema_dfa(schema)
    plain = {k: v for k, v in schema.items() if k != "multipleOf"}
    validator = jsonschema.Draft202012Validator(plain)
    step = Fraction(Decimal(repr(schema["multipleOf"]))) if "multipleOf" in schema else None
    for v in values:
        # multipleOf is checked exactly (decimal), not with float division as jsonschema does
        ok = validator.is_valid(v) and (step is None or (Fraction(Decimal(repr(v))) / step).denominator == 1)
        got = dfa.matches(json.dumps(v).encode())
        assert not (got and not ok), f"{v} accepted by {schema}"
        if ok and "e" not in json.dumps(v):
            assert got, f"{v} rejected by {schema}"


def test_integer_accepts_integral_floats_only():
    check({"type": "integer"}, [3, 3.0, -0.0 + 0], [3.5, "3"])


def test_draft4_exclusive_flags():
    schema = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer",
              "minimum": 1, "exclusiveMinimum": True, "maximum": 5, "exclusiveMaximum": True}
    dfa = schema_dfa(schema)
    assert [v for v in range(-2, 8) if dfa.matches(str(v).encode())] == [2, 3, 4]


# -- strings --------------------------------------------------------------------------------------

def test_lengths_count_characters_not_bytes():
    schema = {"type": "string", "minLength": 2, "maxLength": 3}
    check(schema, ["ab", "abc", "éé", "😀😀", "a\n", "\u00e9\"\\"], ["a", "abcd", "😀", "éééé"])
    # raw UTF-8 and escapes both count one character each
    assert accepts(schema, '"éé"') and accepts(schema, '"\\u00e9\\u00e9"')
    assert accepts(schema, '"\\ud83d\\ude00x"') and not accepts(schema, '"\\ud83d\\ude00"')


def test_pattern_is_a_search_with_ecma_semantics():
    check({"type": "string", "pattern": "b+c"}, ["abbbcx", "bc"], ["ac", "cb"])
    check({"type": "string", "pattern": "^\\d{3}-\\w+$"}, ["123-ab_c"], ["12-ab", "123-", "١٢٣-ab", "123-é"])
    check({"type": "string", "pattern": "^[^\"]*$"}, ["abc", "é"], ["a\"b"])
    check({"type": "string", "pattern": "^(?:ab|cd)$|^x"}, ["ab", "cd", "xyz"], ["abx", "yx"])


def test_pattern_with_length():
    check({"type": "string", "pattern": "^[a-z]+$", "maxLength": 4}, ["a", "abcd"], ["", "abcde", "ab1"])
    check({"type": "string", "pattern": "^[a-z][0-9]*$", "minLength": 3, "maxLength": 4},
          ["a12", "b123"], ["a1", "a1234"])


@pytest.mark.parametrize("fmt,good,bad", [
    ("date", ["2024-02-29", "2000-02-29", "1999-12-31"], ["2023-02-29", "1900-02-29", "2024-13-01", "2024-04-31"]),
    ("time", ["08:30:06Z", "23:59:60Z", "12:00:00.5+05:30"], ["24:00:00Z", "12:00:00", "08:30:06 PST"]),
    ("date-time", ["1963-06-19T08:30:06.283185Z", "2020-01-01t00:00:00z"], ["1963-06-19 08:30:06Z"]),
    ("duration", ["P4DT12H30M5S", "P2W", "PT1M"], ["P1Y2W", "PT", "P1D2H"]),
    ("email", ["joe.bloggs@example.com", "a@[127.0.0.1]"], ["te..st@example.com", "@x.com", "a@b@c"]),
    ("uuid", ["2eb8aa08-aa98-11ea-b4aa-73b441d16380"], ["2eb8aa08-aa98-11ea-b4aa-73b441d1638"]),
    ("uri", ["http://foo.bar/?baz=qux#quux", "urn:isbn:0451450523"], ["//foo.bar", "abc", "http://a b"]),
    ("ipv4", ["192.168.0.1", "0.0.0.0"], ["256.1.1.1", "01.1.1.1", "1.1.1"]),
    ("ipv6", ["::1", "1:2:3:4:5:6:7:8", "::ffff:192.168.0.1"], ["12345::", "1::2::3", ":1:2"]),
    # (lengths not counted: a 64-character label passes, docs/json_schema.md)
    ("hostname", ["www.example.com", "a-b", "a--b.com", "a" * 64 + ".com"], ["-a", "a_b", "a..b", "xn--X", "a-"]),
])
def test_formats(fmt, good, bad):
    schema = {"type": "string", "format": fmt}
    check(schema, good, bad)


def test_unknown_format_is_an_annotation_and_unsupported_ones_raise():
    assert accepts({"type": "string", "format": "my-custom"}, '"anything"')
    with pytest.raises(UnsupportedSchemaError) as e:
        schema_dfa({"properties": {"r": {"type": "string", "format": "regex"}}})
    assert "#/properties/r/format" in str(e.value)


# -- objects --------------------------------------------------------------------------------------

def test_object_properties_order_required_and_additional():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
              "required": ["b"]}
    check(schema, [{"b": "x"}, {"a": 1, "b": "x"}, {"a": 1, "b": "x", "extra": [1, {"y": None}]}],
          [{"a": 1}, {"a": "1", "b": "x"}, {}])
    # property order follows the schema
    assert not accepts(schema, {"b": "x", "a": 1})
    # additional properties may not repeat a listed name
    assert not accepts(schema, '{"b": "x", "a": "not an integer"}')
    assert not accepts(schema, '{"a": 1, "b": "x", "a": "no"}')


def test_additional_properties_false_schema_and_strict():
    closed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    check(closed, [{}, {"a": 1}], [{"b": 1}, {"a": 1, "b": 2}])
    typed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}}
    check(typed, [{"a": 1, "x": True, "y": False}], [{"a": 1, "x": 1}])
    open_ = {"type": "object", "properties": {"a": {"type": "integer"}}}
    assert accepts(open_, {"a": 1, "b": 2})
    assert not accepts(open_, {"a": 1, "b": 2}, strict=True)
    assert accepts(open_, {"a": 1}, strict=True)
    # strict leaves an explicit additionalProperties alone
    assert accepts(typed, {"a": 1, "x": True}, strict=True)


def test_pattern_properties():
    schema = {"type": "object", "patternProperties": {"^x-": {"type": "string"}}, "additionalProperties": False}
    check(schema, [{}, {"x-a": "1", "x-b": "2"}], [{"x-a": 1}, {"y": "1"}])


def test_min_max_properties():
    schema = {"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "additionalProperties": False,
              "minProperties": 1, "maxProperties": 2}
    check(schema, [{"a": 1}, {"a": 1, "c": 2}], [{}, {"a": 1, "b": 2, "c": 3}])


def test_property_names_and_dependencies():
    check({"type": "object", "propertyNames": {"maxLength": 2}}, [{"ab": 1}, {}], [{"abc": 1}])
    check({"type": "object", "properties": {"a": {}, "b": {}}, "dependentRequired": {"a": ["b"]}},
          [{"b": 1}, {"a": 1, "b": 2}, {}], [{"a": 1}])


# -- arrays ---------------------------------------------------------------------------------------

def test_items_prefix_items_and_counts():
    check({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 3},
          [[1], [1, 2, 3]], [[], [1, 2, 3, 4], ["a"]])
    check({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
          [[], [1], [1, "a"]], [[1, "a", 2], ["a"]])
    check({"type": "array", "prefixItems": [{"const": 1}], "items": {"type": "string"}, "minItems": 2},
          [[1, "a"], [1, "a", "b"]], [[1], [1, 2]])


def test_unique_items_over_a_finite_set():
    schema = {"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": True}
    check(schema, [[], ["x"], ["z", "x"], ["y", "z", "x"]], [["x", "x"], ["x", "y", "x"]])
    check({"type": "array", "items": {"type": "boolean"}, "uniqueItems": True},
          [[True, False], [False]], [[True, True]])


def test_unique_items_otherwise_allows_at_most_one_item():
    schema = {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}
    check(schema, [[], [5]], [[1, 1]])
    assert not accepts(schema, [1, 2])  # an approximation: reported by inspect
    assert ("#/uniqueItems", "uniqueItems", "approximated") in inspect_schema(schema)


def test_contains():
    check({"type": "array", "contains": {"const": 3}}, [[3], [1, 3, 2]], [[], [1, 2]])


# -- combinators ----------------------------------------------------------------------------------

def test_any_of_one_of_all_of():
    check({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]}, [1, "a"], ["ab", None])
    check({"oneOf": [{"type": "integer"}, {"minimum": 2}]}, [1, 2.5, -3], [3, 2])
    check({"allOf": [{"properties": {"a": {"type": "integer"}}}, {"properties": {"a": {"minimum": 3}}}]},
          [{"a": 3}], [{"a": 2}, {"a": "x"}])
    with pytest.raises(SchemaError, match="no JSON document"):
        schema_dfa({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}},
                               "additionalProperties": False}, {"required": ["b"]}]})


def test_not_and_if_then_else():
    check({"not": {"type": "string"}}, [1, None, [], {}], ["a"])
    check({"not": {"enum": ["a", "b"]}}, ["c", 1, ""], ["a", "b"])
    check({"if": {"properties": {"t": {"const": "n"}}, "required": ["t"]},
           "then": {"properties": {"v": {"type": "number"}}},
           "else": {"properties": {"v": {"type": "string"}}}},
          [{"t": "n", "v": 1}, {"t": "s", "v": "x"}, {"v": "x"}], [{"t": "n", "v": "x"}, {"t": "s", "v": 1}])


def test_refs_and_recursion():
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
    check(tree, [{"v": 1}, {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]}], [{"v": "1"}, {"kids": []}])
    deep = {"v": 1, "kids": [{"v": 2, "kids": [{"v": 3, "kids": [{"v": 4, "kids": [{"v": 5}]}]}]}]}
    assert not accepts(tree, deep)  # beyond max_recursion: rejected, never accepted wrongly
    assert accepts(tree, deep, max_recursion=5)
    legacy = {"definitions": {"s": {"type": "string"}}, "properties": {"a": {"$ref": "#/definitions/s"}}}
    check(legacy, [{"a": "x"}], [{"a": 1}])


def test_any_value_is_depth_bounded():
    assert accepts({}, [1, [2, [3]]])
    assert not accepts({}, [[[[1]]]])
    assert accepts({}, [[[[1]]]], any_depth=4)


# -- whitespace -----------------------------------------------------------------------------------

def test_compact_whitespace_accepts_both_dumps_styles_and_nothing_more():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                               "b": {"type": "boolean"}}}
    v = {"a": [1, 2], "b": True}
    assert accepts(schema, json.dumps(v))
    assert accepts(schema, json.dumps(v, separators=(",", ":")))
    for bad in ['{"a":  [1, 2]}', '{ "a": [1, 2]}', '{"a": [1, 2] }', '{"a" : [1]}', '{"a": [1,  2]}',
                '{"a": [1,\n2]}', ' {"a": [1]}', '{"a": [1]}\n']:
        assert not accepts(schema, bad), bad


def test_pretty_whitespace_is_json_dumps_indent_2():
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}},
                                               "b": {"type": "object"}, "c": {"enum": [[1, {"x": 2}]]}}}
    for v in [{"a": [1, 2], "b": {"k": [None]}, "c": [1, {"x": 2}]}, {"a": [], "b": {}}, {}]:
        assert accepts(schema, json.dumps(v, indent=2), whitespace="pretty"), v
        assert not accepts(schema, json.dumps(v), whitespace="pretty") or v == {}
    assert not accepts(schema, '{\n    "a": []\n}', whitespace="pretty")


# -- the pattern text agrees with the automaton ----------------------------------------------------

@pytest.mark.parametrize("schema", [
    {"type": "integer", "minimum": 3, "maximum": 117},
    {"type": "string", "maxLength": 3},
    {"enum": ["a", "é", 1.5, None]},
    {"type": "object", "properties": {"k": {"type": "boolean"}}, "required": ["k"], "additionalProperties": False},
    {"type": "array", "items": {"type": "number", "minimum": 0}, "maxItems": 2},
    {"type": "string", "format": "date"},
])
def test_pattern_and_automaton_agree(schema):
    assert equivalent(schema_dfa(schema), regex_to_dfa(schema_to_regex(schema)))


# -- errors and inspection ------------------------------------------------------------------------

def test_unsupported_keywords_are_listed_with_pointers():
    schema = {"properties": {"a": {"$dynamicRef": "#x"}, "b": {"type": "array", "contains": {}, "minContains": 200}},
              "items": {"type": "string", "pattern": "(?<=x)y"}}
    with pytest.raises(UnsupportedSchemaError) as e:
        schema_to_regex(schema)
    msg = str(e.value)
    assert "#/properties/a/$dynamicRef" in msg
    assert "#/properties/b/contains" in msg and "above 64" in msg
    assert "#/items/pattern" in msg
    assert isinstance(e.value, LocalguideError) and len(e.value.problems) == 3


def test_invalid_and_empty_schemas():
    with pytest.raises(SchemaError):
        schema_to_regex(False)
    with pytest.raises(SchemaError):
        schema_to_regex("{not json")
    with pytest.raises(SchemaError):
        schema_to_regex({"type": "integer", "minimum": 5, "maximum": 4})
    with pytest.raises(UnsupportedSchemaError):
        schema_to_regex({"type": "frobnicate"})


def test_inspect_reports_each_keyword():
    schema = {"type": "object", "title": "t", "properties": {"a": {"type": "array", "uniqueItems": True},
                                                              "b": {"not": {"pattern": "x"}},
                                                              "c": {"not": {"type": "integer", "multipleOf": 3}},
                                                              "d": {"not": {"multipleOf": 0.5}}}}
    rows = {(p, k): s for p, k, s in inspect_schema(schema)}
    assert rows[("#/type", "type")] == "enforced"
    assert rows[("#/title", "title")] == "annotation"
    assert rows[("#/properties/a/uniqueItems", "uniqueItems")] == "approximated"
    assert rows[("#/properties/b/not/pattern", "pattern")] == "enforced"
    assert rows[("#/properties/c/not/multipleOf", "multipleOf")] == "enforced"  # (integers by their residues)
    assert rows[("#/properties/d/not/multipleOf", "multipleOf")] == "approximated"  # (a subset: ``test_negation_*``)
    assert "uniqueItems" in format_inspection(inspect_schema(schema))


# -- inputs ---------------------------------------------------------------------------------------

def test_json_string_and_pydantic_model():
    pydantic = pytest.importorskip("pydantic")

    class Point(pydantic.BaseModel):
        x: int
        y: float = 0.0
        label: str | None = None

    dfa = schema_dfa(Point)
    assert dfa.matches(Point(x=1, y=2.5).model_dump_json().encode())
    assert dfa.matches(json.dumps({"x": 1}).encode())
    assert not dfa.matches(json.dumps({"x": "1"}).encode())
    assert schema_to_regex(json.dumps({"type": "boolean"})) == "true|false"


def test_compile_json_schema_with_a_byte_vocabulary(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCALGUIDE_CACHE_DIR", str(tmp_path))
    tokens = [bytes([b]) for b in range(256)] + [b'{"', b'":', b'", "', b"true", b"</s>"]
    vocab = Vocabulary.from_tokens(tokens, stop_ids=[len(tokens) - 1])
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "ok": {"type": "boolean"}},
              "required": ["name"], "additionalProperties": False}
    index = compile_json_schema(schema, vocab)
    by_bytes = {t: i for i, t in enumerate(tokens)}

    def walk(pieces):
        g = index.guide()
        for p in pieces:
            g.advance(by_bytes[p])
        return g

    g = walk([b'{"', b"n", b"a", b"m", b"e", b'":', b'"', b"x", b'", "', b"o", b"k", b'":', b"true", b"}"])
    assert g.is_accepting()
    g = walk([b'{"'])  # "ok" cannot come first: "name" is required and listed first
    assert by_bytes[b"n"] in g.allowed_token_ids() and by_bytes[b"o"] not in g.allowed_token_ids()
    assert compile_json_schema(schema, vocab).n_states == index.n_states  # from the cache


def test_equal_subexpressions_are_built_once(monkeypatch):
    """Structurally equal sub-expressions (distinct objects, as a ``$ref`` expanded twice
    gives) share one automaton: one subset construction, the same language."""
    from localguide.regex import ast_dfa as JD
    from localguide.regex.ast import Alt, Cls, Lit, Rep, Seq

    calls = []
    real = JD._determinize
    monkeypatch.setattr(JD, "_determinize", lambda *a: calls.append(len(a[0])) or real(*a))

    def part():
        return Seq((Lit('"k":'), Rep(Cls(((48, 57),)), 1, 30), Lit(",")))

    a, b = part(), part()
    dfa = JD.ast_to_dfa(Alt((Seq((a, Lit("x"), a)), Seq((b, Lit("y"), b)))))
    assert len(calls) == 2  # the part once, the whole once
    assert dfa.matches(b'"k":12,x"k":3,') and dfa.matches(b'"k":0,y"k":99,')
    assert not dfa.matches(b'"k":12,x"k":3') and not dfa.matches(b'"k":,y"k":1,')


def test_shared_definitions_are_compiled_once(monkeypatch):
    """A definition used in many places is compiled once per nesting depth; recursive
    ones still count their expansions, so the language is the one without the memo."""
    from localguide.json_schema.compiler import Compiler
    from localguide.regex.ast_dfa import ast_to_dfa
    from localguide.json_schema.schema import schema_to_ast

    field = {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}
    shared = {"definitions": {"field": field}, "type": "object",
              "properties": {f"p{i}": {"$ref": "#/definitions/field"} for i in range(12)}}
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "v": {"type": "integer", "minimum": 0, "maximum": 9},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
        "other": {"$ref": "#/$defs/leaf"}}, "required": ["v"]},
        "leaf": {"enum": [1, 2]}},
        "type": "array", "prefixItems": [{"$ref": "#/$defs/node"}, {"$ref": "#/$defs/node"}], "items": False}
    calls = []
    real = Compiler._value
    monkeypatch.setattr(Compiler, "_value", lambda self, subs, depth: calls.append(subs[0].ptr) or
                        real(self, subs, depth))
    schema_to_ast(shared)
    assert sum(p.startswith("/properties/p") for p in calls) == 1  # p0; p1..p11 reuse it
    # C's value depends on the way there: through A, A has one expansion left, through B two
    paths = {"$defs": {"A": {"type": "object", "properties": {"z": {"$ref": "#/$defs/C"}}},
                       "B": {"type": "object", "properties": {"z": {"$ref": "#/$defs/C"}}},
                       "C": {"anyOf": [{"type": "null"},
                                       {"type": "object", "properties": {"w": {"$ref": "#/$defs/A"}}}]}},
             "type": "object", "properties": {"y": {"$ref": "#/$defs/B"}, "x": {"$ref": "#/$defs/A"}}}
    for schema, rec in ((shared, 2), (tree, 2), (paths, 1), (paths, 2)):
        memo = ast_to_dfa(schema_to_ast(schema, max_recursion=rec).node)
        monkeypatch.setattr(Compiler, "value", Compiler._value)  # every expansion compiled again
        plain = ast_to_dfa(schema_to_ast(schema, max_recursion=rec).node)
        monkeypatch.undo()
        assert memo.transitions.tolist() == plain.transitions.tolist()
        assert memo.accepting.tolist() == plain.accepting.tolist()
    assert accepts(tree, '[{"v":1,"kids":[{"v":2}]},{"v":3,"other":2}]')


# -- contains with counts -------------------------------------------------------------------------

_CONTAINS_VALUES = [1, 2, "a", None, [], 1.5]


def _agrees_on_arrays(schema) -> None:
    """``schema``'s automaton accepts exactly the arrays ``jsonschema`` accepts, among every array of
    up to 3 of ``_CONTAINS_VALUES`` and 200 random ones of 4 and 5 (no automaton: it accepts none)."""
    import itertools

    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    try:
        dfa = schema_dfa(schema)
    except SchemaError:  # no array: then jsonschema accepts none either
        dfa = None
    for n in range(6):
        for arr in itertools.product(_CONTAINS_VALUES, repeat=n) if n <= 3 else \
                (random.Random(n).choices(_CONTAINS_VALUES, k=n) for _ in range(200)):
            arr = list(arr)
            got = dfa is not None and dfa.matches(json.dumps(arr).encode())
            assert got == validator.is_valid(arr), (schema, arr)


def _contains_schemas():
    from hypothesis import strategies as st

    counts = st.one_of(st.none(), st.integers(0, 4))
    sub = st.sampled_from([{"type": "integer"}, {"const": 2}, {"type": "string"}, {"enum": [1, None]}, True])
    items = st.sampled_from([None, {"enum": [1, 2, "a"]}, {"type": ["integer", "string"]}])
    uneval = st.sampled_from([None, False, {"type": "integer"}])
    return st.tuples(sub, counts, counts, counts, counts, items, uneval)


def test_contains_counts_match_jsonschema():
    """Property: minContains/maxContains with minItems/maxItems, items and unevaluatedItems accept
    exactly the arrays ``jsonschema`` accepts (all arrays of up to 6 values from a small set)."""
    from hypothesis import given, settings

    @settings(max_examples=60, deadline=None)
    @given(_contains_schemas())
    def check(params):
        sub, cmin, cmax, lo, hi, items, uneval = params
        schema = {"type": "array", "contains": sub}
        for k, v in (("minContains", cmin), ("maxContains", cmax), ("minItems", lo), ("maxItems", hi)):
            if v is not None:
                schema[k] = v
        if items is not None:
            schema["items"] = items
        if uneval is not None and items is None:
            schema["unevaluatedItems"] = uneval
        _agrees_on_arrays(schema)

    check()


def test_several_contains_match_jsonschema():
    """Property: two or three ``contains`` on one array (from ``allOf``, or ``not: {items}`` beside a
    ``contains``), each with a minContains, with minItems/maxItems and items, accept exactly the
    arrays ``jsonschema`` accepts; an item may match several of them."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    sub = st.sampled_from([{"type": "integer"}, {"const": 2}, {"type": "string"}, {"enum": [1, None]}, True])
    part = st.tuples(sub, st.one_of(st.none(), st.integers(0, 2)))
    counts = st.one_of(st.none(), st.integers(0, 4))
    items = st.sampled_from([None, {"enum": [1, 2, "a"]}, {"type": ["integer", "string"]}])

    @settings(max_examples=60, deadline=None)
    @given(st.lists(part, min_size=2, max_size=3), counts, counts, items, st.booleans())
    def check(parts, lo, hi, items, negated):
        schema = {"type": "array", "allOf": [{"contains": c, **({"minContains": m} if m is not None else {})}
                                             for c, m in parts]}
        if negated:
            schema["not"] = {"items": {"type": "integer"}}
        for k, v in (("minItems", lo), ("maxItems", hi), ("items", items)):
            if v is not None:
                schema[k] = v
        _agrees_on_arrays(schema)

    check()


# -- negation -------------------------------------------------------------------------------------

_NOT_VALUES = [0, 3, 4, 7.5, -2, 9, -21, 4.0, 1.5, "", "ab", "abcd", "xyz", "bab", "abab", "b", None, True, [], [1],
               [1, "a", 2], ["a"], [5, 6], {}, {"a": 1}, {"a": "s"}, {"b": 1, "c": 2}, {"a": 1, "b": [], "xy": 0}]
_NOT_PARTS = {"type": ["integer", "string", ["object", "null"], "array"], "minimum": [3], "exclusiveMaximum": [4],
              "minLength": [1, 3], "maxLength": [2], "minItems": [1], "maxItems": [1], "required": [["a"], ["a", "b"]],
              "properties": [{"a": {"type": "integer"}}], "minProperties": [2], "maxProperties": [1],
              "enum": [[3, "ab", None], [[], 3]], "const": [1, [1], {"a": 1}], "multipleOf": [2, 3, 6],
              "contains": [{"type": "integer"}, {"const": "a"}], "items": [{"type": "integer"}, False],
              "oneOf": [[{"type": "integer"}, {"minimum": 3}], [{"required": ["a"]}, {"required": ["b"]}]],
              "dependentRequired": [{"a": ["b"]}], "dependentSchemas": [{"a": {"required": ["c"]}}],
              "propertyNames": [{"not": {"const": "a"}}, {"enum": ["b", "c"]}],
              # (no negation here: left out of the complement, a subset)
              "pattern": ["^a"], "patternProperties": [{"^x": {"type": "string"}}],
              "additionalProperties": [False]}
_NO_NEGATION = {"patternProperties", "additionalProperties"}
_INEXACT = [("propertyNames", {"enum": ["b", "c"]})]  # (the names that fail it are not a finite list)


def _loosened_dfa(schema):
    """(DFA, the value kinds a loosened negation may let through): a false accept is allowed only of a
    kind a keyword reported as *loosened* applies to (a subset accepted no document there)."""
    import warnings

    from localguide.json_schema.flattener import _KEYWORD_TYPES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        dfa, compiled = build_dfa(schema, max_recursion=2)
    return dfa, set().union(*[_KEYWORD_TYPES[kw] for _, kw, _ in compiled.loosened])


def test_negation_never_accepts_what_jsonschema_rejects():
    """Property: ``not`` over one to three keywords, alone or beside a type, never allows a value
    ``jsonschema`` rejects; where every keyword has a negation here, it allows exactly what
    ``jsonschema`` allows. (``{"not": {"required": ["a"]}}`` allowed 5 and "s": a keyword about
    objects holds for every other value, so its negation holds for none of them; and
    ``{"not": {"const": [1]}}`` allowed [1].)"""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    part = st.sampled_from(sorted(_NOT_PARTS)).flatmap(lambda k: st.tuples(st.just(k), st.sampled_from(_NOT_PARTS[k])))

    @settings(max_examples=150, deadline=None)
    @given(st.lists(part, min_size=1, max_size=3, unique_by=lambda kv: kv[0]),
           st.sampled_from([{}, {"type": "integer"}, {"type": "string"}, {"type": "object"}, {"type": "array"},
                            {"type": "string", "maxLength": 3}, {"minLength": 2, "pattern": "b"}]))
    def run(parts, outer):
        schema = {"not": dict(parts), **outer}
        validator = jsonschema.Draft202012Validator(schema)
        # (an array or object excluded by value leaves out every array or object: a subset too)
        exact = not any(k in _NO_NEGATION or (k, v) in _INEXACT or (k == "const" and isinstance(v, (list, dict)))
                        or (k == "enum" and any(isinstance(x, (list, dict)) for x in v)) for k, v in parts)
        try:
            dfa, loose = _loosened_dfa(schema)
        except SchemaError:
            assert not exact or not any(validator.is_valid(v) for v in _NOT_VALUES), schema
            return
        for v in _NOT_VALUES:
            got, want = dfa.matches(json.dumps(v).encode()), validator.is_valid(v)
            assert not got or want or type_atom(v) in loose, ("accepted", schema, v)
            if exact:
                assert got == want, ("rejected", schema, v)

    run()


def test_negation_of_conditionals_and_dependencies_is_exact():
    """``not`` over ``if``/``then``/``else``, ``oneOf``, dependencies, ``contains`` with ``minContains`` and
    ``propertyNames``: each was a subset that rejected every value failing only that keyword."""
    schemas = [
        {"not": {"if": {"type": "integer"}, "then": {"minimum": 3}, "else": {"type": "string"}}},
        {"not": {"if": {"type": "integer"}, "then": {"minimum": 3}}},
        {"not": {"if": {"type": "string"}, "else": {"type": "array"}}},
        {"not": {"oneOf": [{"properties": {"bar": {}, "baz": {}}, "required": ["bar"]},
                           {"properties": {"foo": {}}, "required": ["foo"]}]}},
        {"not": {"oneOf": [{"type": "integer"}, {"minimum": 3}, {"maximum": 0}]}},
        {"type": "object", "not": {"dependentRequired": {"a": ["b", "c"]}}},
        {"$schema": "http://json-schema.org/draft-07/schema#",
         "not": {"dependencies": {"a": {"required": ["b"]}, "xy": ["a"]}}},
        {"type": "array", "not": {"contains": {"type": "integer"}, "minContains": 2}},
        {"type": "object", "not": {"propertyNames": {"not": {"enum": ["a", "xy"]}}}},
    ]
    values = _NOT_VALUES + [{"a": 1, "b": 2, "c": 3}, {"a": 1, "c": 3}, {"a": 2, "xy": 1}, {"bar": 2, "foo": 1},
                            {"foo": 1}, [1, 2, "a"], [1, "a"], 1, -1, 3.5, "s"]
    for schema in schemas:
        dfa = schema_dfa(schema, max_recursion=2)
        validator = jsonschema.validators.validator_for(schema)(schema)
        assert not [r for r in inspect_schema(schema) if r[2] in ("approximated", "unsupported")], schema
        for v in values:
            assert dfa.matches(json.dumps(v).encode()) == validator.is_valid(v), (schema, v)


def test_a_subset_that_accepts_nothing_is_loosened_not_refused():
    """MaskBench's allOfPProp2: every key matches "a", has 4+ characters, and some key matches "b" (a
    ``not`` over ``patternProperties`` with no names around to try). The subset accepted no document;
    the schema is compiled again with that negation not enforced, reported and warned about."""
    schema = {"type": "object", "allOf": [{"patternProperties": {"^.{1,3}$": False}, "additionalProperties": True},
                                          {"patternProperties": {"a": True}, "additionalProperties": False}],
              "not": {"patternProperties": {"b": False}}, "minProperties": 4}
    with pytest.warns(RuntimeWarning, match="loosened.*#/not/patternProperties"):
        dfa = schema_dfa(schema)
    valid = {"abcd": 1, "aaaa": 2, "aaab": 3, "aaac": 4}
    jsonschema.validate(valid, schema)
    assert dfa.matches(json.dumps(valid).encode())
    # what is still enforced: every key matches "a" and is longer than 3; at least 4 keys
    for bad in ({"abcd": 1, "aaaa": 2, "aaab": 3}, {"abcd": 1, "aaaa": 2, "aaab": 3, "xxxx": 4},
                {"abcd": 1, "aaaa": 2, "aaab": 3, "ab": 4}):
        assert not dfa.matches(json.dumps(bad).encode()), bad
    rows = {(p, k): st for p, k, st in inspect_schema(schema)}
    assert rows[("#/not/patternProperties", "patternProperties")] == "loosened"
    # a schema whose subset accepts documents keeps the subset (nothing invalid accepted)
    schema["not"] = {"patternProperties": {"b": False}, "required": ["zzzz"]}
    rows = {(p, k): st for p, k, st in inspect_schema(schema)}
    assert rows[("#/not/patternProperties", "patternProperties")] == "approximated"
    dfa = schema_dfa(schema)
    assert dfa.matches(json.dumps(valid).encode())
    # a schema no document satisfies is still refused as such
    with pytest.raises(SchemaError, match="no JSON document"):
        schema_dfa({"type": "integer", "not": {"type": "integer"}})


def test_an_enum_of_objects_is_checked_whatever_its_key_order():
    """An enum's object is checked against the schema beside it key by key (its keys need not come
    in the order the schema lists them), nested too; an invalid one is still left out."""
    inner = {"allOf": [{"properties": {"foo": {"type": "string"}}, "required": ["foo"]},
                       {"properties": {"baz": {"type": "null"}}, "required": ["baz"]}],
             "properties": {"bar": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                  "uniqueItems": True}},
             "required": ["bar"]}
    good = {"bar": 2, "baz": None, "foo": "quux", "kids": [{"kids": [], "foo": "a", "baz": None, "bar": 1}]}
    bad = [{"bar": 2, "baz": None}, {"bar": 2, "baz": None, "foo": "q", "kids": [{"bar": "x", "foo": "a", "baz": None}]},
           {"bar": 2, "baz": None, "foo": "q", "kids": [{"bar": 1, "foo": "a", "baz": None}] * 2}]
    schema = {"$defs": {"node": inner}, "allOf": [{"enum": [good] + bad}, {"not": {"not": {"$ref": "#/$defs/node"}}}]}
    validator = jsonschema.Draft202012Validator(schema)
    dfa = schema_dfa(schema)
    for v in [good] + bad:
        assert dfa.matches(json.dumps(v).encode()) == validator.is_valid(v), v


def test_a_negated_items_beside_unique_items_is_a_subset_not_an_error():
    """``not: {items: S}`` is "some item fails S", a ``contains``; beside ``uniqueItems`` (which a contains
    cannot join here) that branch is left out, reported, and the rest of the complement stays."""
    schema = {"type": "array", "items": {"enum": [1, 2, 3, "a"]}, "uniqueItems": True,
              "not": {"items": {"type": "integer"}, "maxItems": 1}}
    dfa = schema_dfa(schema)
    assert dfa.matches(b"[1,2]") and not dfa.matches(b"[1]") and not dfa.matches(b"[1,1]")
    assert not dfa.matches(b'["a"]')  # (valid: the left-out branch)
    assert ("#/not", "not", "approximated") in inspect_schema(schema)
    alone = {"type": "array", "uniqueItems": True, "not": {"items": {"type": "integer"}}}
    with pytest.warns(RuntimeWarning, match="loosened"):  # (the subset accepts nothing: a superset)
        dfa = schema_dfa(alone)
    assert dfa.matches(b'["a"]') and ("#/not", "not", "loosened") in inspect_schema(alone)


def test_contains_beside_prefix_items_is_a_subset_then_loosened():
    """A contains beside prefixItems (no automaton here): such arrays are left out, reported; where
    that leaves no document, the contains is not enforced instead (loosened), never a refusal."""
    array = {"type": "array", "prefixItems": [{"type": "integer"}], "contains": {"type": "string"}}
    holder = {"type": "object", "properties": {"a": array}}
    dfa = schema_dfa(holder)
    assert dfa.matches(b'{}') and not dfa.matches(b'{"a":[1,"x"]}')
    assert ("#/properties/a/contains", "contains", "approximated") in inspect_schema(holder)
    with pytest.warns(RuntimeWarning, match="loosened"):
        dfa = schema_dfa(array)
    assert dfa.matches(b'[1,"x"]') and dfa.matches(b'[1]') and not dfa.matches(b'["x"]')
    assert ("#/contains", "contains", "loosened") in inspect_schema(array)


_OBJ_VALUES = [{}, {"a": 1}, {"a": "s"}, {"b": 1}, {"b": "s"}, {"a": 1, "b": 2}, {"a": "s", "b": 1}, {"xy": "s"},
               {"xy": 1}, {"a": 1, "xy": "s"}, {"c": 1}, {"b": 1, "c": 2}, {"a": 1, "b": "s", "xy": 0}, 5, "s", None]
_OBJ_PARTS = [{"properties": {"a": {"type": "integer"}}}, {"properties": {"b": {}}}, {"properties": {"a": {}, "b": {}}},
              {"required": ["a"]}, {"required": ["b"]}, {"additionalProperties": False},
              {"additionalProperties": {"type": "integer"}}, {"patternProperties": {"^x": {"type": "string"}}}]


def test_negated_additional_and_pattern_properties_never_accept_what_jsonschema_rejects():
    """Property: a oneOf, not or if over objects whose negation needs 'some key fails
    additionalProperties (or patternProperties)': the keys the schemas around it name are tried
    (a subset of the complement), so a value jsonschema rejects is never allowed, and the
    discriminated unions people write (the keys of one alternative closed to the other) are exact."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    branch = st.lists(st.sampled_from(_OBJ_PARTS), min_size=1, max_size=3).map(
        lambda ps: {"type": "object", **{k: v for p in ps for k, v in p.items()}})

    @settings(max_examples=120, deadline=None)
    @given(branch, branch, st.sampled_from(["oneOf", "not", "if"]))
    def run(x, y, how):
        schema = {"oneOf": [x, y]} if how == "oneOf" else {**x, "not": y} if how == "not" else \
            {"if": y, "then": x, "else": {"required": ["c"]}}
        validator = jsonschema.Draft202012Validator(schema)
        try:
            dfa, loose = _loosened_dfa(schema)
        except SchemaError:
            return
        for v in _OBJ_VALUES:
            assert not dfa.matches(json.dumps(v).encode()) or validator.is_valid(v) or type_atom(v) in loose, \
                ("accepted", schema, v)

    run()
    # each alternative closed to the other's keys: exact (was refused: "accepts no document")
    check({"type": "object", "oneOf": [{"properties": {"next": {"type": "string"}}, "additionalProperties": False},
                                       {"properties": {"previous": {"type": "string"}}, "additionalProperties": False}]},
          [{"next": "x"}, {"previous": "y"}], [{}, {"next": "x", "previous": "y"}, {"other": 1}, {"next": 1}])
    check({"type": "object", "properties": {"a": {}, "xy": {}}, "not": {"patternProperties": {"^x": {"type": "string"}}}},
          [{"xy": 1}, {"a": 1, "xy": []}], [{}, {"xy": "s"}, {"a": 1}])


_LOOKAHEADS = ["^(?![ \\t]*\\(default(.*)\\))[\\s\\S]*", "^(?!.*://)(?=.{1,8}$)[a-z:/.]+$", "^(?=a)(?!ab)[a-c]+",
               "^(?!(x|y))", "^(?=[)])..?$", "^ab(?!c)", "^(?:(?!::).)*$", "x(?=y|b$)",
               "^([a-z](?:(?!.*--)[a-z-]*[a-z])?)$", "^(a|b(?!x))+$"]


def test_patterns_with_lookaheads_are_exact():
    """A pattern with lookaheads (``^(?!A)(?=B)R``: npm names, hostnames, 'not a default' in real
    schemas; or anywhere: ``(?:(?!--).)*``, package names with no ``--``) matches the same strings
    as Python's re, whose lookaheads read these patterns alike (``$`` as ``\\Z``), under the pattern
    and under its negation. A lookbehind is refused, naming its position."""
    import re

    from hypothesis import given, settings
    from hypothesis import strategies as st

    dfas = {p: (schema_dfa({"type": "string", "pattern": p}), schema_dfa({"type": "string", "not": {"pattern": p}}))
            for p in _LOOKAHEADS}

    @settings(max_examples=300, deadline=None)
    @given(st.sampled_from(_LOOKAHEADS), st.text(alphabet="abxy:/.()- \t\n", max_size=10))
    def run(p, text):
        want = re.search(p.replace("$", r"\Z"), text) is not None
        yes, no = dfas[p]
        data = json.dumps(text).encode()
        assert yes.matches(data) == want, (p, text)
        assert no.matches(data) == (not want), (p, text)

    run()
    for text in ["(default x)", " \t(default)", "ab-c", "ab--c", "a::b", "xb", "default", "abc://", "a.b/c", "abc", "ab", "", ")x", ")"]:
        for p in _LOOKAHEADS:
            assert dfas[p][0].matches(json.dumps(text).encode()) == (
                re.search(p.replace("$", r"\Z"), text) is not None), (p, text)
    with pytest.raises(SchemaError, match="lookbehind is not supported at position 3"):
        schema_dfa({"type": "string", "pattern": "^ab(?<!c)"})


def test_lookaheads_too_large_to_apply_are_a_subset_then_loosened(monkeypatch):
    """Where a pattern's lookaheads, applied, leave an automaton too large to write back, the
    strings under it are left out (reported); where that leaves no document, the lookaheads are
    not enforced instead (a superset, reported *loosened*, warned about), never a refusal."""
    from localguide.json_schema import strings

    monkeypatch.setattr(strings, "MAX_LOOKAHEAD_STATES", 3)
    pattern = "^[a-z](?!.*--)[a-z-]{1,5}q$"
    rows = {(p, k): st for p, k, st in inspect_schema({"type": "object", "properties": {
        "p": {"type": "string", "pattern": pattern}}})}
    assert rows[("#/properties/p/pattern", "pattern")] == "approximated"
    dfa = schema_dfa({"type": "object", "properties": {"p": {"type": "string", "pattern": pattern}}})
    assert dfa.matches(b'{}') and not dfa.matches(b'{"p":"abq"}')
    with pytest.warns(RuntimeWarning, match="loosened"):
        dfa = schema_dfa({"type": "string", "pattern": pattern})
    assert dfa.matches(b'"abq"') and dfa.matches(b'"a--bq"')  # (the lookahead not enforced)
    assert not dfa.matches(b'"abc"') and not dfa.matches(b'"Abq"')
    assert {(p, k): st for p, k, st in inspect_schema({"type": "string", "pattern": pattern})}[
        ("#/pattern", "pattern")] == "loosened"


def _valid_strings_accepted(schema, dfa, alphabet: str, n: int = 20000, longest: int = 6) -> int:
    """Every string of ``alphabet`` (up to ``longest`` characters, a random sample) that jsonschema finds valid
    is accepted by ``dfa``; the count of those."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(0)
    valid = 0
    for _ in range(n):
        x = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))
        if validator.is_valid(x):
            valid += 1
            assert dfa.matches(json.dumps(x).encode()), x
    return valid


def test_string_differences_too_large_to_write_are_loosened_not_refused():
    """Patterns, lengths and negated patterns on one string whose strings are too many to write as a
    regex: first left out (a subset, empty here), then the negated patterns are not enforced (a
    superset, reported *loosened* at each one): every valid string is accepted, never a refusal."""
    schema = {"type": "string", "minLength": 10, "maxLength": 90, "pattern": "[aA][12].*[zZ]",
              "not": {"anyOf": [{"pattern": "ab1"}, {"pattern": "b12"}, {"pattern": "c12"}]}}
    with pytest.warns(RuntimeWarning, match="loosened"):
        dfa = schema_dfa(schema)
    rows = {(p, k): st for p, k, st in inspect_schema(schema)}
    assert all(rows[(f"#/not/anyOf/{i}/pattern", "pattern")] == "loosened" for i in range(3))
    assert _valid_strings_accepted(schema, dfa, "aA12zZb", 20000, longest=13) > 100
    assert not dfa.matches(b'"x1zzzzzzzzz"')  # (the pattern itself still holds)


def test_alternatives_past_the_bound_are_loosened_when_the_kept_ones_accept_nothing():
    """An allOf of anyOfs past 64 alternatives keeps the first 64 (a subset); where they accept no
    document, the part that multiplied them past the bound is not enforced instead (a superset,
    reported at that allOf): every valid string is accepted, the rest of the schema still holds."""
    schema = {"type": "string", "not": {"pattern": "^[a-d]"}, "allOf": [
        {"anyOf": [{"pattern": f"^{c}"} for c in "abcde"]}, {"anyOf": [{"pattern": f"{c}$"} for c in "abcd"]},
        {"anyOf": [{"minLength": 3}, {"maxLength": 1}, {"const": "eb"}, {"const": "ea"}]}]}
    with pytest.warns(RuntimeWarning, match="loosened"):
        dfa = schema_dfa(schema)
    assert ("#/allOf", "allOf", "loosened") in inspect_schema(schema)
    assert _valid_strings_accepted(schema, dfa, "abcdex") > 500
    assert not dfa.matches(b'"ab"') and not dfa.matches(b'"ex"') and dfa.matches(b'"eab"')


def test_what_a_loose_compile_leaves_out_is_reported_and_a_superset():
    """Length bounds left out with the patterns are reported loosened too; contains beside
    unevaluatedItems left out take the unevaluatedItems with them (else the items the contains
    would have evaluated are refused: no superset); many large minContains are bounded work."""
    strings = {"type": "string", "allOf": [{"pattern": "b.{3}b"}, {"pattern": "aa"}], "minLength": 4, "maxLength": 55}
    rows = inspect_schema(strings)
    assert {k.split()[0] for _, k, st in rows if st == "loosened"} >= {"pattern", "minLength", "maxLength"}
    arrays = {"type": "array", "allOf": [{"contains": {"const": 1}}, {"contains": {"const": 2}}],
              "unevaluatedItems": False}
    with pytest.warns(RuntimeWarning, match="loosened"):
        dfa = schema_dfa(arrays)
    assert dfa.matches(b"[1,2]") and dfa.matches(b"[2,1,1]")
    many = {"type": "array", "allOf": [{"contains": {"type": "integer"}, "minContains": 20}] * 4}
    with pytest.warns(RuntimeWarning, match="loosened"):
        dfa = schema_dfa(many)
    assert dfa.matches(json.dumps(list(range(20))).encode())


def test_one_of_strings_with_disjoint_patterns_or_formats_is_exact():
    """Two patterns (or formats) that match no string in common need no negation to tell them apart
    (a uuid's pattern beside a name's was refused: 'not' over 'pattern')."""
    check({"oneOf": [{"type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}$"}, {"type": "string", "pattern": "^[A-Z]+$"},
                     {"type": "integer"}]},
          ["0123abcd-ffff", "ABC", 7], ["abc", "0123abcd-fff", "AB1", 1.5])
    check({"oneOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "ipv4"}]},
          ["2020-01-31", "10.0.0.1"], ["2020-13-01", "10.0.0.256", "x"])
