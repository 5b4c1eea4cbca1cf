"""``Constraint``: one object for what the text must be, its registry of kinds, its checks and its key."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, strategies as st

import localguide
from localguide.constraint import KINDS, Constraint, Kind, as_constraint, register
from localguide.errors import ArgumentError
from localguide.regex import compile_choice

SOURCES = {"regex": "[0-9]{4}", "choice": ["yes", "no"], "grammar": 'start: "a"+',
           "json_schema": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
OPTIONS = {"strict": [False, True], "whitespace": ["compact", "pretty"], "max_recursion": [None, 0, 3],
           "max_ignored_run": [32, None, 4]}


def test_the_four_kinds_are_registered_with_their_options():
    assert [k for k in KINDS if KINDS[k].keyword] == ["regex", "choice", "grammar", "json_schema"]
    # (the library's own: calls written one parameter at a time, never a keyword of Constraint.of)
    assert [k for k in KINDS if not KINDS[k].keyword] == ["xml_calls"]
    with pytest.raises(ArgumentError, match="unknown option xml_calls="):
        Constraint.of(xml_calls=[{"name": "f", "parameters": {}}])
    made = Constraint.made("xml_calls", [{"name": "f", "parameters": {"type": "object"}}])
    assert made.kind == "xml_calls" and made.key() == Constraint.made("xml_calls", made.source).key()
    assert dict(KINDS["json_schema"].defaults) == {"strict": False, "whitespace": "compact", "max_recursion": None}
    assert dict(KINDS["grammar"].defaults) == {"max_ignored_run": 32}


@given(kinds=st.lists(st.sampled_from(sorted(SOURCES)), max_size=2, unique=True),
       options=st.dictionaries(st.sampled_from(sorted(OPTIONS)), st.integers(0, 2), max_size=3))
def test_of_builds_a_constraint_or_says_which_argument_is_wrong(kinds, options):
    arguments = {k: SOURCES[k] for k in kinds}
    arguments.update({k: OPTIONS[k][i % len(OPTIONS[k])] for k, i in options.items()})
    try:
        c = Constraint.of(**arguments)
    except ArgumentError as e:
        named = re.findall(r"(\w+)=", str(e))
        assert named and set(named) <= set(KINDS) | set(OPTIONS)
        assert len(kinds) > 1 or any(k in str(e) for k in options)
        return
    assert len(kinds) <= 1
    if not kinds:
        assert c is None
        return
    assert c.kind == kinds[0] and c.source == SOURCES[kinds[0]]
    assert set(c.options) == set(KINDS[c.kind].defaults)  # (every default filled in)
    again = Constraint.of(**c.arguments())
    assert again == c and again.key() == c.key()  # (a round trip through the arguments)
    key = json.loads(c.key())
    assert key[c.kind] == c.source


def test_an_option_of_another_kind_is_refused_unless_it_is_the_default():
    assert Constraint.of(regex="a", strict=False, max_ignored_run=32).options == {}
    with pytest.raises(ArgumentError, match=r"^strict= applies to json_schema= only$"):
        Constraint.of(regex="a", strict=True)
    with pytest.raises(ArgumentError, match=r"^max_ignored_run= applies to grammar= only$"):
        Constraint.of(json_schema={}, max_ignored_run=3)
    with pytest.raises(ArgumentError, match=r"^give at most one of regex=, choice=, grammar= and json_schema=$"):
        Constraint.of(regex="a", choice=["a"])
    with pytest.raises(ArgumentError, match=r"^unknown option colour="):
        Constraint.of(regex="a", colour="red")
    with pytest.raises(ArgumentError, match=r"^choice= takes a list of strings"):
        Constraint.of(choice="yes")
    with pytest.raises(ArgumentError, match=r"^regex= takes a str"):
        Constraint.of(regex=b"a")


def test_the_key_names_the_language_not_how_it_is_compiled():
    a = Constraint.of(grammar='start: "a"+')
    assert a.key() == Constraint.of(grammar='start: "a"+', lazy=False).key()  # (how, not what)
    assert a.key() != Constraint.of(grammar='start: "a"+', max_ignored_run=None).key()
    assert Constraint.of(choice=("a", "b")).key() == Constraint.of(choice=["a", "b"]).key()
    assert Constraint.of(json_schema=b'{"type": "integer"}').key() == json.dumps(
        {"json_schema": '{"type": "integer"}', "max_recursion": None, "strict": False, "whitespace": "compact"})


def test_a_pydantic_model_is_keyed_by_its_schema():
    pydantic = pytest.importorskip("pydantic")

    class Person(pydantic.BaseModel):
        name: str
        age: int

    c = Constraint.of(json_schema=Person)
    assert json.loads(c.key())["json_schema"] == Person.model_json_schema()


def test_as_constraint_takes_a_constraint_its_arguments_or_none():
    c = Constraint.of(regex="[a-z]+")
    assert as_constraint(c) is c and as_constraint(None) is None
    assert as_constraint({"regex": "[a-z]+"}) == c
    assert as_constraint({"json_schema": {}}, strict=True).options["strict"] is True
    with pytest.raises(ArgumentError, match="not str"):
        as_constraint("[a-z]+")


@pytest.fixture
def literal_kind():
    """A new kind, registered the way a module of its own would: one text, exactly."""
    kind = register(Kind("literal", lambda source, vocabulary: compile_choice([source], vocabulary),
                         check=lambda s: s if isinstance(s, str) else (_ for _ in ()).throw(ArgumentError("literal=: a str"))))
    yield kind
    KINDS.pop("literal")


def test_a_new_kind_is_one_registration_and_generates(model, literal_kind):
    c = Constraint.of(literal="forty-two")
    assert c.kind == "literal" and json.loads(c.key()) == {"literal": "forty-two"}
    assert model.generate("The answer:", constraint=c, max_tokens=20, seed=1) == "forty-two"
    assert model.compile(c).guide().allowed_token_ids().size > 0


def test_the_model_takes_a_constraint_or_its_arguments_alike(model):
    c = localguide.Constraint.of(regex="(19|20)[0-9]{2}")
    a = model.generate("Year of birth:", constraint=c, max_tokens=8, temperature=0)
    b = model.generate("Year of birth:", regex="(19|20)[0-9]{2}", max_tokens=8, temperature=0)
    assert a == b and re.fullmatch("(19|20)[0-9]{2}", a)
    x, y = model.compile(c), model.compile(regex="(19|20)[0-9]{2}")
    assert x.n_states == y.n_states and (x.guide().allowed_token_ids() == y.guide().allowed_token_ids()).all()
    with pytest.raises(ArgumentError, match="not both"):
        model.generate("x", constraint=c, regex="a")
    with pytest.raises(ArgumentError, match="takes a localguide.Constraint"):
        model.generate("x", constraint={"regex": "a"})


def test_a_chat_takes_a_constraint(model):
    c = Constraint.of(choice=["red", "green", "blue"])
    answer = model.chat([{"role": "user", "content": "A colour?"}], constraint=c, max_tokens=8, seed=3)
    assert answer.content in ("red", "green", "blue")
