"""Fuzzing every parser of user input (issue: reliability): arbitrary regexes, JSON Schemas, Lark and
GBNF grammars give a result or one of localguide's documented errors, never another exception
(no IndexError, RecursionError, MemoryError, ...), within the bounds. Hypothesis draws the same
examples on every run (``tests/conftest.py``); HYPOTHESIS_PROFILE=explore draws new ones."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localguide.errors import LocalguideError

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# -- regexes ------------------------------------------------------------------------------------

_REGEX_PIECES = st.sampled_from(
    ["a", "b", "é", "中", ".", "\\d", "\\w", "\\s", "\\b", "\\B", "[", "]", "[^", "-", "(", ")", "(?:", "(?=", "(?!",
     "(?<", ">", "|", "*", "+", "?", "{", "}", "{2}", "{1,3}", "{,4}", "{3,1}", "^", "$", "\\", "\\u{1F600}",
     "\\p{L}", "\\P{Lu}", "(?i)", "\\1", "\\k<n>", "\\x4", "\\u12", "\\cA", "\\0", "\\n", "ß", "ǅ", "İ", " "])


@FUZZ
@given(st.one_of(st.text(max_size=24), st.lists(_REGEX_PIECES, max_size=12).map("".join)))
def test_regex_parser_fuzz(pattern):
    from localguide.regex import regex_to_dfa

    try:
        regex_to_dfa(pattern)
    except LocalguideError:
        pass


# -- JSON Schemas -----------------------------------------------------------------------------------

_KEYWORDS = ["type", "properties", "required", "items", "prefixItems", "additionalProperties", "enum", "const",
             "minimum", "maximum", "exclusiveMinimum", "multipleOf", "minLength", "maxLength", "pattern", "format",
             "minItems", "maxItems", "uniqueItems", "anyOf", "oneOf", "allOf", "not", "$ref", "$defs", "if", "then",
             "else", "patternProperties", "propertyNames", "minProperties", "maxProperties", "contains",
             "dependentRequired", "$dynamicRef", "default", "title"]
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 1000), st.floats(-1e3, 1e3, allow_nan=False),
                    st.sampled_from(["string", "integer", "number", "object", "array", "null", "boolean", "#",
                                     "#/$defs/a", "#/properties/x", "^a", "b$", "[", "date", "email", "uuid", "x", ""]))


def _schemas():
    return st.recursive(
        st.one_of(st.booleans(), st.dictionaries(st.sampled_from(_KEYWORDS), _VALUES, max_size=4)),
        lambda inner: st.one_of(
            st.dictionaries(st.sampled_from(_KEYWORDS), st.one_of(_VALUES, inner, st.lists(inner, max_size=3),
                                                                  st.dictionaries(st.sampled_from(["a", "b", "x"]),
                                                                                  inner, max_size=3)),
                            max_size=5)),
        max_leaves=12)


def _shaped():
    """Schemas of the right shape (each keyword's value of its kind): they reach the compiler."""
    small = st.integers(0, 6)
    leaf = st.one_of(
        st.builds(lambda t: {"type": t}, st.sampled_from(["string", "integer", "number", "boolean", "null"])),
        st.builds(lambda a, b: {"type": "string", "minLength": a, "maxLength": a + b}, small, small),
        st.builds(lambda a, b: {"type": "integer", "minimum": a - 3, "maximum": a + b}, small, small),
        st.builds(lambda p: {"type": "string", "pattern": p}, st.sampled_from(["^a+$", "b", "^[0-9]{2}$", "(x"])),
        st.builds(lambda e: {"enum": e}, st.lists(st.one_of(st.integers(-3, 3), st.text(max_size=3)), max_size=4)),
        st.builds(lambda f: {"type": "string", "format": f}, st.sampled_from(["date", "email", "uuid", "ipv4", "x"])),
        st.booleans())

    def grow(inner):
        return st.one_of(
            st.builds(lambda props, req, extra: {"type": "object", "properties": props,
                                                 "required": [k for k in props if k in req],
                                                 "additionalProperties": extra},
                      st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3),
                      st.lists(st.sampled_from(["a", "b", "c"]), max_size=3), st.one_of(st.booleans(), inner)),
            st.builds(lambda it, lo, u: {"type": "array", "items": it, "minItems": lo, "maxItems": lo + 2,
                                         "uniqueItems": u}, inner, st.integers(0, 2), st.booleans()),
            st.builds(lambda xs, k: {k: xs}, st.lists(inner, min_size=1, max_size=3),
                      st.sampled_from(["anyOf", "oneOf", "allOf"])),
            st.builds(lambda x: {"not": x}, inner),
            st.builds(lambda x: {"$defs": {"n": x}, "$ref": "#/$defs/n"}, inner))

    return st.recursive(leaf, grow, max_leaves=8)


@FUZZ
@given(st.one_of(_schemas(), _shaped()))
def test_schema_compiler_fuzz(schema):
    from localguide.json_schema.schema import build_dfa, inspect_schema

    try:
        build_dfa(schema, max_states=5000)
    except LocalguideError:
        pass
    try:
        inspect_schema(schema)
    except LocalguideError:
        pass


@FUZZ
@given(st.text(max_size=40))
def test_schema_text_fuzz(text):
    from localguide.json_schema.schema import build_dfa

    try:
        build_dfa(text, max_states=5000)
    except LocalguideError:
        pass


# -- grammars ---------------------------------------------------------------------------------------

_LARK = st.sampled_from(['start', ':', '"a"', '"b"', '/[a-z]+/', '/(/', '|', '*', '+', '?', '(', ')', '[', ']',
                         '\n', ' ', 'x', 'X', 'A', ':', '%import common.WS', '%ignore', ' WS', '%import foo.BAR',
                         '->', 'alias', '.2', '_r', '?r', '~', '3', '..', '"', "'", '{', '}', '%declare', 'start:'])
_GBNF = st.sampled_from(['root', '::=', '"a"', '"b"', '[a-z]', '[^', ']', '|', '*', '+', '?', '(', ')', '{2,3}',
                         '{,}', '\n', ' ', 'x', 'x-y', '# c', '"\\x41"', '"\\u00e9"', '.', '"', '::=', 'root ::='])


@FUZZ
@given(st.one_of(st.lists(_LARK, max_size=14).map(" ".join), st.lists(_LARK, max_size=14).map("".join),
                 st.text(max_size=30)))
def test_lark_front_end_fuzz(text):
    from localguide.grammar.sources import to_cfg

    try:
        to_cfg(text, "lark", "grammar")
    except LocalguideError:
        pass


@FUZZ
@given(st.one_of(st.lists(_GBNF, max_size=14).map(" ".join), st.lists(_GBNF, max_size=14).map("".join),
                 st.text(max_size=30)))
def test_gbnf_front_end_fuzz(text):
    from localguide.grammar.sources import to_cfg

    try:
        to_cfg(text, "gbnf", "grammar")
    except LocalguideError:
        pass


def test_fuzz_strategies_reach_valid_inputs():
    """(the strategies do draw compilable inputs, not only errors)"""
    from localguide.grammar.sources import to_cfg
    from localguide.json_schema.schema import build_dfa
    from localguide.regex import regex_to_dfa

    regex_to_dfa("a|b")
    build_dfa(json.loads('{"type": "object", "properties": {"x": {"type": "integer"}}}'))
    to_cfg('start: "a" "b"', "lark", "grammar")
    to_cfg('root ::= "a" [a-z]*', "gbnf", "grammar")


def test_what_fuzzing_found():
    """Each input a fuzz run once found crashing, now a documented error."""
    import pytest

    from localguide.errors import GrammarError, PatternError
    from localguide.grammar.sources import to_cfg
    from localguide.regex import regex_to_dfa

    # (a superscript two is a digit to str.isdigit, not to int: no count, so the braces are literal,
    # as in 'a{x}')
    assert regex_to_dfa("a{²}").matches("a{²}".encode()) and regex_to_dfa("{²").matches("{²".encode())
    with pytest.raises(PatternError):
        regex_to_dfa("{1}")
    with pytest.raises(GrammarError, match="lark could not read it"):
        to_cfg("%declare start", "lark", "grammar")
    with pytest.raises(GrammarError):
        to_cfg('root ::= "a"{²}', "gbnf", "grammar")
