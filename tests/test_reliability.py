"""Whatever the input, a clear error or a result: never a crash, a raw Python error or a value
read as another (issue: reliability). Both models where a model is involved."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

import localguide
from localguide.errors import ArgumentError, GrammarError, LocalguideError, TokenNotAllowedError


# -- the empty prompt -----------------------------------------------------------------------------

def test_an_empty_prompt_generates_from_bos(model):
    text = model.generate("", max_tokens=4, temperature=0)
    assert isinstance(text, str)
    assert re.fullmatch("a+", model.generate("", regex="a+", max_tokens=4))
    assert model.tokenize_prompt("") == [model.llama.token_bos()]


def test_an_empty_prompt_from_the_command_line():
    from typer.testing import CliRunner

    from localguide.cli import app

    r = CliRunner().invoke(app, ["run", "", "--regex", "a", "--raw"])
    assert r.exit_code == 0 and r.stdout.strip() == "a"


# -- arguments out of range are named, never used ----------------------------------------------------

@pytest.mark.parametrize("kwargs,named", [
    ({"choice": "yes"}, "choice"),
    ({"temperature": math.nan}, "temperature"),
    ({"temperature": math.inf}, "temperature"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 5}, "top_p"),
    ({"top_k": -3}, "top_k"),
    ({"top_k": 2.5}, "top_k"),
    ({"min_p": 2}, "min_p"),
    ({"max_tokens": -5}, "max_tokens"),
    ({"seed": "x"}, "seed"),
    ({"regex": "a", "strict": True}, "strict"),
    ({"regex": "a", "max_ignored_run": 4}, "max_ignored_run"),
    ({"regex": b"a"}, "regex"),
])
def test_arguments_out_of_range_are_named(smollm2, kwargs, named):
    with pytest.raises(ArgumentError, match=named):
        smollm2.generate("Hi", **{"max_tokens": 4, **kwargs})


def test_a_prompt_that_is_not_text_is_named(smollm2):
    with pytest.raises(ArgumentError, match="prompt"):
        smollm2.generate(None)
    with pytest.raises(ArgumentError, match="prompt"):
        smollm2.generate(b"bytes")


def _guides(model):
    v = model.vocabulary
    yield "regex", localguide.compile_regex(r"\d+", v).guide()
    yield "schema", model.compile(json_schema={"type": "integer"}).guide(max_tokens=8)
    yield "grammar", localguide.compile_grammar("json", v).guide(max_tokens=16)
    from localguide.guides.trigger import TriggerGuide

    yield "trigger", TriggerGuide(v, b"</think>", localguide.compile_regex(r"\d+", v), 32)


@pytest.mark.parametrize("bad,what", [(48.7, "int id"), ("48", "int id"), (True, "int id"), (None, "int id"),
                                      (-1, "not in the vocabulary"), (2 ** 63, "not in the vocabulary")])
def test_advance_takes_token_ids_only(model, bad, what):
    for kind, guide in _guides(model):
        with pytest.raises(TokenNotAllowedError, match=what):
            guide.copy().advance(bad)
        with pytest.raises(TokenNotAllowedError, match="not in the vocabulary"):
            guide.copy().advance(model.vocabulary.size)
        ok = int(guide.allowed_token_ids()[0])
        g = guide.copy()
        g.advance(np.int64(ok))  # (numpy integers are ids)
        assert g.checkpoint() == 1, kind


# -- grammars: every error says where -----------------------------------------------------------

@pytest.mark.parametrize("text", ['root ::= ""', "start:", "root ::=", 'start: a\na:\n%ignore " "'])
def test_a_grammar_of_the_empty_text_generates_it(model, text):
    # (the language of the regex "": nothing but stopping, from the first token)
    guide = model.compile(grammar=text).guide(max_tokens=4)
    assert guide.is_accepting() and guide.is_finished()
    assert set(guide.allowed_token_ids().tolist()) == set(model.vocabulary.stop_ids.tolist())
    assert model.generate("Say nothing:", grammar=text, max_tokens=8, seed=0) == ""
    assert model.chat([{"role": "user", "content": "Say nothing."}], grammar=text, max_tokens=8).content == ""


def test_grammar_errors_name_line_and_column_once(smollm2_vocab):
    with pytest.raises(GrammarError) as e:
        localguide.compile_grammar('start: "a" |\n  | ) "b"', smollm2_vocab)
    assert (e.value.line, e.value.column) == (2, 5)
    assert str(e.value).count("line 2") == 1
    with pytest.raises(GrammarError) as e:
        localguide.compile_grammar('start: foo\nfoo: "a" "', smollm2_vocab)
    assert e.value.line == 2 and e.value.column is not None and str(e.value).count("line 2") == 1
    with pytest.raises(GrammarError) as e:
        localguide.compile_grammar('start: "x" /[a/', smollm2_vocab)
    assert "__ANON" not in str(e.value) and "/[a/" in str(e.value) and (e.value.line, e.value.column) == (1, 12)
    with pytest.raises(GrammarError) as e:
        localguide.compile_grammar("start: A\nA: /[a/", smollm2_vocab)
    assert "terminal A" in str(e.value) and e.value.line == 2
    with pytest.raises(GrammarError, match="%import cannot find") as e:
        localguide.compile_grammar("%import foo.BAR\nstart: BAR", smollm2_vocab)
    assert e.value.line == 1


# -- regexes: case folding of every letter ------------------------------------------------------------

@pytest.mark.parametrize("pattern,text,match", [
    ("(?i)ß", "ß", True), ("(?i)straße", "STRASSE", False), ("ŉ", "ŉ", True), ("ﬁ", "ﬁ", True),
    ("(?i)ﬁ", "FI", False), ("İ", "İ", True), ("(?i)ǅ", "ǅ", True), ("(?i)ǅ", "ǆ", True), ("(?i)ǅ", "Ǆ", True)])
def test_case_folding_of_special_letters(pattern, text, match):
    """ECMA-262 with the u flag (node agrees): simple case folding, so ß is not ss."""
    from localguide.regex import regex_to_dfa

    assert regex_to_dfa(pattern).matches(text.encode()) == match


def test_every_error_is_a_localguide_error():
    for cls in (ArgumentError, GrammarError, TokenNotAllowedError):
        assert issubclass(cls, LocalguideError) and issubclass(cls, ValueError)


# -- large and deep JSON Schemas ------------------------------------------------------------------------

def _nest(n):
    s = {"type": "integer"}
    for _ in range(n):
        s = {"type": "object", "properties": {"a": s}, "required": ["a"]}
    return s


def test_large_and_deep_schemas_compile_or_name_the_limit(smollm2_vocab):
    import json

    from localguide.errors import SchemaError
    from localguide.json_schema.shape import MAX_NESTING

    v = smollm2_vocab
    props = {f"p{i}": {"type": "integer"} for i in range(500)}
    assert localguide.compile_json_schema({"type": "object", "properties": props}, v).guide().allowed_token_ids().size
    g = localguide.compile_json_schema(_nest(60), v).guide()  # (satisfiable: not "no document satisfies")
    assert len(g.allowed_token_ids())
    for n in (MAX_NESTING + 10, 5000):
        with pytest.raises(SchemaError, match=f"more than {MAX_NESTING} levels deep") as e:
            localguide.compile_json_schema(_nest(n), v)
        assert "satisfies" not in str(e.value) and "a limit of localguide" in str(e.value)
    values = [f"value-{i}" for i in range(5000)]
    g = localguide.compile_json_schema({"enum": values}, v).guide()
    for b in json.dumps("value-4321").encode():
        g.advance(next(t for t in g.allowed_token_ids() if v[int(t)] == bytes([b])))
    assert g.is_accepting()


@pytest.mark.parametrize("schema,where", [
    ({"type": "string", "minLength": -1}, "#/minLength"),
    ({"properties": {"a": {"maxItems": "3"}}}, "#/properties/a/maxItems"),
    ({"required": "a"}, "#/required"),
    ({"anyOf": []}, "#/anyOf"),
    ({"items": 5}, "#/items"),
    ({"multipleOf": 0}, "#/multipleOf"),
])
def test_a_keyword_of_the_wrong_kind_is_named(smollm2_vocab, schema, where):
    from localguide.errors import SchemaError

    with pytest.raises(SchemaError, match=re.escape(where)):
        localguide.compile_json_schema(schema, smollm2_vocab)


def test_unique_items_over_a_small_integer_range_is_exact(smollm2_vocab):
    from localguide.json_schema.schema import inspect_schema

    v = smollm2_vocab
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 3}, "uniqueItems": True,
              "minItems": 2}
    index = localguide.compile_json_schema(schema, v)
    for text, ok in ((b"[0,1]", True), (b"[3,2,1,0]", True), (b"[1,1]", False), (b"[1]", False)):
        g = index.guide()
        took = True
        for b in text:
            nxt = [t for t in g.allowed_token_ids() if v[int(t)] == bytes([b])]
            if not nxt:
                took = False
                break
            g.advance(nxt[0])
        assert (took and g.is_accepting()) == ok, text
    assert ("#/uniqueItems", "uniqueItems", "enforced") in inspect_schema(schema)


def test_unsatisfiable_is_said_only_when_it_is(smollm2_vocab):
    from localguide.errors import SchemaError

    with pytest.raises(SchemaError, match="^no JSON document satisfies"):
        localguide.compile_json_schema({"type": "integer", "minimum": 5, "maximum": 4}, smollm2_vocab)
    with pytest.raises(SchemaError, match="approximation of this schema accepts no document") as e:
        localguide.compile_json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True,
                                        "minItems": 2}, smollm2_vocab)
    assert "#/uniqueItems" in str(e.value) and "no JSON document satisfies" not in str(e.value)


def test_the_budget_planner_follows_long_texts(smollm2_vocab):
    """(a RecursionError once came after about 1,000 '-' tokens with max_tokens=2000)"""
    index = localguide.compile_grammar("arithmetic", smollm2_vocab)
    g = index.guide(max_tokens=2000)
    minus = next(t for t in range(smollm2_vocab.size) if smollm2_vocab[t] == b"-")
    for _ in range(1500):
        assert minus in set(g.allowed_token_ids().tolist())
        g.advance(minus)
    assert len(g.allowed_token_ids()) and not g.is_accepting()


def test_pattern_properties_left_out_are_reported():
    """Overlapping patterns are split exactly (tests/json_schema/test_pattern_properties.py); past
    the split's bound, what is left out is said."""
    from localguide.json_schema import objects
    from localguide.json_schema.schema import inspect_schema

    schema = {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "b$": {"type": "string"}},
              "additionalProperties": False}
    assert ("#/patternProperties", "patternProperties", "enforced") in inspect_schema(schema)
    saved, objects.MAX_SPLIT_PATTERNS = objects.MAX_SPLIT_PATTERNS, 1
    try:
        assert ("#/patternProperties", "patternProperties", "approximated") in inspect_schema(schema)
    finally:
        objects.MAX_SPLIT_PATTERNS = saved
    apart = {"type": "object", "patternProperties": {"^a": {"type": "integer"}, "^b": {"type": "string"}},
             "additionalProperties": False}
    assert ("#/patternProperties", "patternProperties", "enforced") in inspect_schema(apart)
