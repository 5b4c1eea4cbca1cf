"""The syntaxes whose calls are JSON: ``{"name": ..., "arguments": {...}}`` objects, after a
family's open mark (Hermes' ``<tool_call>`` blocks, Mistral's ``[TOOL_CALLS]`` array, Llama 3.1's
bare object).

The JSON of a call is constrained by one schema: an ``anyOf`` of one object per tool, ``name``
a constant and the arguments that tool's ``parameters`` (strict: an object lists its
properties only, unless its schema allows others, as OpenAI's strict function calling).
Each tool's parameters are a schema resource of their own (an ``$id`` under ``TOOLS_BASE``),
so their ``$ref``s resolve against them; errors name ``tools[i].function.parameters``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass

from ...constraint import Constraint
from ...errors import SchemaError
from ...json_schema.parameters import own_resource
from .common import CallSyntax, past_arguments



@dataclass(frozen=True)
class ToolFormat(CallSyntax):
    """A syntax whose calls are JSON objects: ``open`` before them (the trigger in ``"auto"``; ""
    where the call is the answer itself), ``sep`` between two calls ("" where they are one JSON
    array, ``array``), ``close`` after the last, and the key of the arguments."""

    name: str
    open: str
    sep: str
    close: str
    args_key: str = "arguments"
    array: bool = False
    parallel: bool = True

    def call_constraint(self, tools: list[dict], parallel: bool):
        schema = calls_schema(tools, self, parallel)
        # (strict: no arguments the tool does not list)
        constraint = Constraint.of(json_schema=schema, strict=True)
        return constraint, lambda e: located(e, arguments_pointers(tools, self, parallel))

    def render(self, calls: list[dict]) -> str:
        objs = [_as_call(c, self.args_key) for c in calls]
        if self.array:
            return self.open + json.dumps(objs, ensure_ascii=False) + self.close
        if not self.sep:
            return "\n".join(json.dumps(o, ensure_ascii=False) for o in objs)
        return self.open + self.sep.join(json.dumps(o, ensure_ascii=False) for o in objs) + self.close

    def parse(self, text: str, tools: list[dict] | None = None) -> list[dict]:
        return parse_calls(text, self)

    def stream(self, tools: list[dict] | None = None):
        from ..call_stream import CallStream

        return CallStream(self.args_key)


def call_schema(tools: list[dict], fmt: ToolFormat | None = None) -> dict:
    """The JSON Schema of one call to one of ``tools`` in ``fmt``'s words. Each tool's parameters
    are a schema resource of their own (``$id``), so that their references (``#/$defs/...``,
    ``#``) resolve against them, not against the call schema they sit in."""
    key = fmt.args_key if fmt is not None else "arguments"
    one = [{"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                             key: own_resource(t["function"]["parameters"], i)},
            "required": ["name", key], "additionalProperties": False} for i, t in enumerate(tools)]
    return one[0] if len(one) == 1 else {"anyOf": one}


def arguments_pointers(tools: list[dict], fmt: ToolFormat, parallel: bool) -> list[str]:
    """Where each tool's parameters sit in ``calls_schema``'s document (JSON pointers)."""
    top = "/items" if fmt.array else ""
    one = [f"/anyOf/{i}" for i in range(len(tools))] if len(tools) > 1 else [""]
    return [f"{top}{p}/properties/{fmt.args_key}" for p in one]


def located(e: SchemaError, pointers: list[str]) -> SchemaError:
    """``e`` (from compiling ``calls_schema``) with its places told as ``tools[i].function.parameters``
    and a JSON pointer into them, as the user wrote the tools."""
    text = str(e)
    for i, ptr in sorted(enumerate(pointers), key=lambda p: -len(p[1])):
        at = r"(?<![^\s'\"(])#?" + re.escape(ptr) + r"(?=[/:\s'\"),]|$)"
        text = re.sub(at, f"tools[{i}].function.parameters#", text)
    if text == str(e):
        return e
    out = SchemaError(text)
    out.problems = getattr(e, "problems", None)
    return out


def calls_schema(tools: list[dict], fmt: ToolFormat, parallel: bool) -> dict:
    """The JSON Schema of what follows ``fmt.open``: one call, or (array formats) the calls."""
    one = call_schema(tools, fmt)
    if not fmt.array:
        return one
    return {"type": "array", "items": one, "minItems": 1, **({} if parallel else {"maxItems": 1})}


def _as_call(call: dict, key: str = "arguments") -> dict:
    name, args = past_arguments(call)
    return {"name": name, key: args}


def parse_calls(text: str, fmt: ToolFormat) -> list[dict]:
    """OpenAI ``tool_calls`` entries from the constrained text after ``fmt.open``: each call's
    JSON read whole (``raw_decode``: a separator inside a string is the string's), the
    separators between them skipped."""
    dec = json.JSONDecoder()
    values, pos = [], 0
    marks = [m for m in (fmt.close, fmt.open) if m]
    while True:
        pos = _skip(text, pos, marks)
        if pos >= len(text):
            break
        value, pos = dec.raw_decode(text, pos)
        values += value if fmt.array else [value]
    return [{"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
             "function": {"name": v["name"], "arguments": json.dumps(v[fmt.args_key], ensure_ascii=False)}}
            for v in values]


def _skip(text: str, pos: int, marks: list[str]) -> int:
    """``pos`` moved past whitespace and the format's marks."""
    while True:
        start = pos
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        for m in marks:
            if text.startswith(m, pos):
                pos += len(m)
        if pos == start:
            return pos
