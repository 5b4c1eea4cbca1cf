"""Real generation through llama.cpp on both models: outputs parse and validate with jsonschema."""

import json

import jsonschema
import pydantic
import pytest

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": {"type": "string", "format": "email"},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 10}, "maxItems": 3},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}

TREE = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "value": {"type": "integer", "minimum": -50, "maximum": 50},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["value"],
            "additionalProperties": False,
        }
    },
    "$ref": "#/$defs/node",
}

CHOICE = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]},
                                           "score": {"type": "number", "minimum": 0, "maximum": 1}},
          "required": ["colour", "score"], "additionalProperties": False}


class Pet(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=16)
    kind: str = pydantic.Field(max_length=12)
    age: int = pydantic.Field(ge=0, le=30)


@pytest.mark.parametrize("schema", [PERSON, TREE, CHOICE], ids=["person", "tree", "enum-number"])
def test_samples_validate(model, schema):
    for seed in range(3):
        text = model.generate("Answer with JSON:", json_schema=schema, temperature=1.0, seed=seed, max_tokens=96)
        jsonschema.validate(json.loads(text), schema)


def test_pretty_output_is_indented_json(model):
    text = model.generate("A person as JSON:", json_schema=PERSON, whitespace="pretty", seed=0, max_tokens=96)
    value = json.loads(text)
    jsonschema.validate(value, PERSON)
    assert text == json.dumps(value, indent=2, ensure_ascii=False) or "\n" in text


def test_pydantic_model_instance(model):
    pet = model.generate_json("A pet as JSON:", json_schema=Pet, seed=1, max_tokens=64)
    assert isinstance(pet, Pet)


def test_any_json_value(model):
    value = model.generate_json("Some JSON:", seed=2, max_tokens=48)
    json.dumps(value)  # a parsed JSON value round-trips


def test_unsupported_keyword_is_an_error_with_its_pointer(model):
    from localguide import UnsupportedSchemaError

    schema = {"type": "object", "properties": {"a": {"$dynamicRef": "#x"}}}
    with pytest.raises(UnsupportedSchemaError, match=r"#/properties/a"):
        model.generate("x", json_schema=schema)
