"""``multipleOf`` by any integer and ``not: {multipleOf: n}``: integers read digit by digit by their
residue, exactly, where the old compiler listed 1,000 values near 0 or rejected every number."""

from __future__ import annotations

import json
from fractions import Fraction

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localguide.json_schema import inspect_schema, schema_to_regex
from localguide.json_schema.numbers import number_node
from localguide.grammar.compiled import GrammarIndex
from localguide.json_schema.schema import compile_json_schema, schema_dfa
from localguide.regex.ast import Auto, length_range, nullable
from localguide.regex.ast_dfa import ast_to_dfa

_PROBES = list(range(-130, 131)) + [10 ** 9 + 7, -(10 ** 12) - 1, 123456789012, 2 ** 40, -(2 ** 40) + 1]


def _spellings(v: int) -> list[str]:
    return [str(v), f"{v}.0"]


@settings(max_examples=60, deadline=None)
@given(c=st.sampled_from([None, 1, 3, 4, 7, 12, 13, 24, 99]),
       nots=st.lists(st.sampled_from([2, 3, 5, 7, 8, 11, 13, 17]), max_size=3, unique=True),
       lo=st.one_of(st.none(), st.integers(-10 ** 6, 100)),
       span=st.one_of(st.none(), st.integers(0, 10 ** 7)))
def test_integers_by_residue_are_exactly_the_valid_ones(c, nots, lo, span):
    """Property: the integers spelled are exactly those in range, multiples of ``c``, of no ``nots``."""
    hi = None if span is None or lo is None else lo + span
    node, note = number_node(None if lo is None else Fraction(lo), False, None if hi is None else Fraction(hi), False,
                             integer=True, multiple_of=None if c is None else Fraction(c), not_multiples=nots)
    assert note is None
    dfa = ast_to_dfa(node)
    for v in _PROBES + ([lo, lo + 1, lo - 1] if lo is not None else []) + ([hi, hi - 1, hi + 1] if hi else []):
        want = ((lo is None or v >= lo) and (hi is None or v <= hi) and (c is None or v % c == 0)
                and all(v % n for n in nots))
        for text in _spellings(v):
            assert dfa.matches(text.encode()) == want, (c, nots, lo, hi, text)


def test_not_multiple_of_allows_every_non_integer():
    node, note = number_node(multiple_of=None, not_multiples=[2])
    dfa = ast_to_dfa(node)
    assert note is None
    for text, want in [("1.5", True), ("-0.25", True), ("3", True), ("3.0", True), ("4", False), ("4.00", False),
                       ("0", False), ("-0", False), ("-7", True)]:
        assert dfa.matches(text.encode()) == want, text
    # not a multiple of 1: only non-integers
    dfa = ast_to_dfa(number_node(not_multiples=[1])[0])
    assert dfa.matches(b"0.5") and not dfa.matches(b"2") and not dfa.matches(b"2.0")


def test_a_large_modulus_is_one_automaton_leaf_through_every_consumer(smollm2_vocab):
    """A modulus whose regex would be huge (13 * 8 = 104) stays an automaton (``Auto``): the DFA,
    the grammar route, lengths and nullability read it; ``schema_to_regex`` says it has no regex."""
    schema = {"type": "integer", "multipleOf": 13, "not": {"multipleOf": 8}}
    dfa = schema_dfa(schema)
    validator = jsonschema.Draft202012Validator(schema)
    for v in _PROBES:
        assert dfa.matches(json.dumps(v).encode()) == validator.is_valid(v), v
    node = number_node(integer=True, multiple_of=Fraction(13), not_multiples=[8])[0]
    stack, leaves = [node], 0
    while stack:
        n = stack.pop()
        leaves += isinstance(n, Auto)
        stack.extend(getattr(n, "items", ()))
    assert leaves == 2  # (negative and non-negative magnitudes)
    assert not nullable(node)
    assert length_range(node) == (2, None)  # 13 the shortest (0 is a multiple of 8)
    with pytest.raises(Exception, match="regex|pattern"):
        schema_to_regex(schema)
    # the grammar route (an automaton budget too small for the array) keeps the language
    arrays = {"type": "array", "items": schema, "maxItems": 6}
    idx = compile_json_schema(arrays, smollm2_vocab, max_states=30)
    assert isinstance(idx, GrammarIndex)
    check = jsonschema.Draft202012Validator(arrays)
    for doc in ([13, 26, 39], [104], [-13, 0], [1040, 13], [], [12], [13] * 7, [13 * 8 * 3 + 13]):
        assert idx.matches(json.dumps(doc, separators=(",", ":")).encode()) == check.is_valid(doc), doc


def test_maskbench_style_modular_logic_compiles_exactly():
    """MaskBench's handwritten modular puzzles: each was refused ("accepts no document")."""
    schemas = [
        {"type": "number", "allOf": [{"minimum": 1}, {"anyOf": [{"multipleOf": 3}, {"multipleOf": 5}, {"multipleOf": 7}]},
                                     {"anyOf": [{"allOf": [{"not": {"multipleOf": 5}}, {"not": {"multipleOf": 7}}]},
                                                {"multipleOf": 24}]},
                                     {"anyOf": [{"not": {"multipleOf": 8}}, {"multipleOf": 11}]}, {"not": {"multipleOf": 8}}]},
        {"type": "number", "allOf": [{"minimum": 1}, {"oneOf": [{"multipleOf": 3}, {"multipleOf": 5}, {"multipleOf": 15}]},
                                     {"oneOf": [{"allOf": [{"not": {"multipleOf": 5}}, {"not": {"multipleOf": 3}}]},
                                                {"multipleOf": 8}]},
                                     {"oneOf": [{"not": {"multipleOf": 8}}, {"multipleOf": 11}]}]},
        {"type": "number", "if": {"maximum": 5}, "then": {"minimum": 5}, "else": {"minimum": 9, "exclusiveMaximum": 11},
         "multipleOf": 5, "not": {"multipleOf": 2}, "enum": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20]},
    ]
    for schema in schemas:
        dfa = schema_dfa(schema)
        validator = jsonschema.Draft202012Validator(schema)
        assert not [r for r in inspect_schema(schema) if r[2] in ("approximated", "unsupported")], schema
        for v in list(range(-200, 1000)) + [x / 4 for x in range(-40, 40)]:
            assert dfa.matches(json.dumps(v).encode()) == validator.is_valid(v), (schema, v)
