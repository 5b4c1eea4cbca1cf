"""Lengths and counts of a schema are checked before anything scales with them (issue 51)."""

from __future__ import annotations

import time

import pytest

from localguide.errors import UnsupportedSchemaError
from localguide.json_schema import compile_json_schema


@pytest.mark.parametrize("schema, pointer", [
    ({"type": "string", "minLength": 1_000_000_000}, "#/minLength"),
    ({"type": "array", "minItems": 1_000_000_000}, "#/minItems"),
    ({"type": "object", "properties": {"a": {"type": "string", "minLength": 100_000}}}, "#/properties/a/minLength"),
])
def test_a_huge_minimum_is_refused_at_once_naming_its_pointer(smollm2_vocab, schema, pointer):
    t = time.perf_counter()
    with pytest.raises(UnsupportedSchemaError, match=f"{pointer}: .*MAX_MIN_COUNT"):
        compile_json_schema(schema, smollm2_vocab)
    assert time.perf_counter() - t < 5  # (unbounded: a MemoryError, or minutes)
