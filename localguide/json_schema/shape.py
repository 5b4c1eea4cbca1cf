"""A schema's shape checked before it is compiled: every keyword's value of the kind the
specification says (``minLength`` a non-negative integer, ``required`` an array of strings,
``properties`` an object of schemas, ...). A fault is a ``SchemaError`` naming its JSON pointer
and what was expected, never a raw Python error from deep in the compiler. Walked with a stack:
no nesting depth makes it recurse."""

from __future__ import annotations

import math
import numbers

from ..errors import SchemaError, json_pointer

TYPES = ("string", "number", "integer", "object", "array", "boolean", "null")
_SCHEMA = ("additionalProperties", "additionalItems", "not", "if", "then", "else", "contains", "propertyNames",
           "unevaluatedProperties", "unevaluatedItems", "contentSchema")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties", "minContains",
           "maxContains")
_NUMBERS = ("minimum", "maximum")
_STRINGS = ("pattern", "format", "$ref", "$id", "$schema", "$anchor", "contentEncoding", "contentMediaType",
            "$dynamicRef", "$dynamicAnchor", "$recursiveRef")


def _number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


MAX_NESTING = 256  # schemas within schemas: past it, a limit error (the compilers recurse along it)


def check_shape(doc) -> None:
    """Raise ``SchemaError`` at the first keyword whose value is not of its kind, or where
    schemas nest deeper than ``MAX_NESTING``."""
    stack = [(doc, "")]
    while stack:
        node, ptr = stack.pop()
        if isinstance(node, bool):
            continue
        if ptr.count("/") > 2 * MAX_NESTING and _depth(ptr) > MAX_NESTING:
            where = json_pointer(ptr)
            raise SchemaError(f"{where if len(where) <= 80 else where[:77] + '...'}: the schema nests more than "
                              f"{MAX_NESTING} levels deep, over "
                              "localguide's bound (localguide.json_schema.shape.MAX_NESTING; a limit of "
                              "localguide, not of the schema)")
        if not isinstance(node, dict):
            raise SchemaError(f"{json_pointer(ptr)}: a schema must be an object or a boolean, "
                              f"not {type(node).__name__}")
        for kw, v in node.items():
            where = json_pointer(ptr, kw)
            sub = f"{ptr}/{kw.replace('~', '~0').replace('/', '~1')}"

            def fail(expected: str):
                raise SchemaError(f"{where}: expected {expected}, got {json_dumps(v)}")

            if kw == "type":  # (an unknown name is the compiler's to report, as unsupported)
                names = v if isinstance(v, list) else [v]
                if not names or not all(isinstance(t, str) for t in names):
                    fail("one of " + ", ".join(TYPES) + " (or an array of them)")
            elif kw in _SCHEMA:
                stack.append((v, sub))
            elif kw in _SCHEMA_MAPS:
                if not isinstance(v, dict):
                    fail("an object of schemas")
                stack.extend((s, f"{sub}/{k.replace('~', '~0').replace('/', '~1')}") for k, s in v.items())
            elif kw in _SCHEMA_LISTS:
                if not isinstance(v, list) or (not v and kw != "prefixItems"):
                    fail("a non-empty array of schemas")
                stack.extend((s, f"{sub}/{i}") for i, s in enumerate(v))
            elif kw == "items":
                if isinstance(v, list):  # (draft 4 to 7: a schema per position)
                    stack.extend((s, f"{sub}/{i}") for i, s in enumerate(v))
                else:
                    stack.append((v, sub))
            elif kw in _COUNTS:
                if isinstance(v, float) and v.is_integer():
                    v = int(v)
                if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                    fail("a non-negative integer")
            elif kw in _NUMBERS:
                if not _number(v):
                    fail("a number")
            elif kw in ("exclusiveMinimum", "exclusiveMaximum"):
                if not (_number(v) or isinstance(v, bool)):  # (a boolean in draft 4)
                    fail("a number")
            elif kw == "multipleOf":
                if not _number(v) or v <= 0:
                    fail("a number above 0")
            elif kw in _STRINGS:
                if not isinstance(v, str):
                    fail("a string")
            elif kw == "required":
                if isinstance(v, bool):  # (draft 3's per-property form is not supported: said elsewhere)
                    continue
                if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
                    fail("an array of strings")
            elif kw == "enum":
                if not isinstance(v, list):
                    fail("an array")
            elif kw == "uniqueItems":
                if not isinstance(v, bool):
                    fail("true or false")
            elif kw == "dependentRequired":
                if not isinstance(v, dict) or not all(isinstance(x, list) and all(isinstance(y, str) for y in x)
                                                      for x in v.values()):
                    fail("an object of arrays of strings")
            elif kw == "dependencies":
                if not isinstance(v, dict):
                    fail("an object")
                for k, x in v.items():
                    if not isinstance(x, list):
                        stack.append((x, f"{sub}/{k}"))


def _depth(ptr: str) -> int:
    """Schemas within schemas along ``ptr`` (a keyword and, for maps and lists, a name or index each)."""
    parts = ptr.split("/")[1:]
    depth, i = 0, 0
    while i < len(parts):
        depth += 1
        i += 2 if parts[i] in _SCHEMA_MAPS + _SCHEMA_LISTS + ("items", "dependencies") and i + 1 < len(parts) \
            and (parts[i] != "items" or parts[i + 1].isdigit()) else 1
    return depth


def json_dumps(v) -> str:
    import json

    try:
        text = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."
