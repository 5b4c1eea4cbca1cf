"""Tool calls: ``tools`` in the OpenAI form, calls whose arguments are valid for their tool's
schema by construction (the JSON-Schema compiler), parsed into OpenAI ``tool_calls``.

A call is written in the model family's own syntax where its chat template declares one
(``ToolFormat``, told from the template's text):

- Hermes / Qwen (and localguide's envelope for templates that declare no tools, which then get
  the tools described in a system message): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  one block per call;
- Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (a control token in Mistral's
  vocabulary, matched by its id);
- Llama 3.1: the answer is ``{"name": ..., "parameters": {...}}`` alone (one call).

The JSON of a call is constrained by one schema: an ``anyOf`` of one object per tool, ``name``
a constant and the arguments that tool's ``parameters`` (strict: an object lists its
properties only, unless its schema allows others, as OpenAI's strict function calling).
Each tool's parameters are a schema resource of their own (an ``$id`` under ``TOOLS_BASE``),
so their ``$ref``s resolve against them; errors name ``tools[i].function.parameters``.
``tool_choice``: ``"auto"`` (text, or text then calls: the trigger of ``trigger.py``;
Llama 3.1: text or a call, by the first token), ``"required"`` (calls, at once), ``"none"`` or
``{"type": "function", "function": {"name": ...}}`` (that tool, at once).
``parallel_tool_calls`` (default True, as OpenAI's): several calls in one answer, each
whole within ``max_tokens`` (Llama 3.1's syntax has one call an answer).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from urllib.parse import urljoin

from ..constraint import Constraint
from ..errors import LocalguideError, SchemaError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
TOOLS_BASE = "https://localguide.invalid/tools/"  # (each tool's parameters: a resource under it)


@dataclass(frozen=True)
class ToolFormat:
    """How a model family writes tool calls: ``open`` before them (the trigger in ``"auto"``; ""
    where the call is the answer itself), ``sep`` between two calls ("" where they are one JSON
    array, ``array``), ``close`` after the last, and the key of the arguments."""

    name: str
    open: str
    sep: str
    close: str
    args_key: str = "arguments"
    array: bool = False
    parallel: bool = True

    def render(self, calls: list[dict]) -> str:
        """Past calls (OpenAI form) as the text the model writes."""
        objs = [_as_call(c, self.args_key) for c in calls]
        if self.array:
            return self.open + json.dumps(objs, ensure_ascii=False) + self.close
        if not self.sep:
            return "\n".join(json.dumps(o, ensure_ascii=False) for o in objs)
        return self.open + self.sep.join(json.dumps(o, ensure_ascii=False) for o in objs) + self.close


HERMES = ToolFormat("hermes", OPEN, CLOSE + "\n" + OPEN, CLOSE)
MISTRAL = ToolFormat("mistral", "[TOOL_CALLS]", "", "", array=True)
LLAMA3 = ToolFormat("llama3", "", "", "", args_key="parameters", parallel=False)

# The families' syntaxes, each with how a chat template shows it is its own, in the order they are
# tried; a template that declares tools in none of them writes Hermes' envelope.
FORMATS: list[tuple[ToolFormat, object]] = []


def register_format(fmt: ToolFormat, declared_by) -> ToolFormat:
    """Add a family's call syntax: ``declared_by(template source)`` says a template is that family's."""
    FORMATS.append((fmt, declared_by))
    return fmt


register_format(MISTRAL, lambda src: "[TOOL_CALLS]" in src)
register_format(LLAMA3, lambda src: "<|python_tag|>" in src or ('"parameters"' in src and "<|start_header_id|>" in src))


def tool_format(template) -> ToolFormat:
    """The syntax of ``template``'s family (Hermes where it declares no other, or no tools)."""
    src = getattr(template, "source", "")
    if not declares_tools(template):
        return HERMES
    return next((fmt for fmt, declared in FORMATS if declared(src)), HERMES)


class ToolError(LocalguideError, ValueError):
    """Tools or a tool choice that cannot be used (the message names the one at fault)."""


def check_tools(tools) -> list[dict]:
    """``tools`` checked: a list of ``{"type": "function", "function": {"name", "parameters"}}``."""
    if not isinstance(tools, (list, tuple)) or not tools:
        raise ToolError("tools must be a non-empty list of {'type': 'function', 'function': {...}}")
    seen = set()
    out = []
    for i, t in enumerate(tools):
        fn = t.get("function") if isinstance(t, dict) else None
        if not isinstance(fn, dict) or t.get("type", "function") != "function":
            raise ToolError(f"tools[{i}]: expected {{'type': 'function', 'function': {{'name': ..., ...}}}}")
        name = fn.get("name")
        if not isinstance(name, str) or not name:
            raise ToolError(f"tools[{i}].function.name: expected a non-empty string")
        if name in seen:
            raise ToolError(f"tools[{i}].function.name: {name!r} is given twice")
        seen.add(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise ToolError(f"tools[{i}].function.parameters: expected a JSON Schema object")
        out.append({"type": "function", "function": {**fn, "parameters": params}})
    return out


def chosen(tools: list[dict], tool_choice) -> tuple[str, list[dict]]:
    """(mode, the tools a call may use): mode "none", "auto" or "required"."""
    if tool_choice in ("none", "auto", "required"):
        return tool_choice, tools
    if isinstance(tool_choice, dict):
        name = (tool_choice.get("function") or {}).get("name")
        hit = [t for t in tools if t["function"]["name"] == name]
        if not hit:
            raise ToolError(f"tool_choice names {name!r}, which is not in tools "
                            f"({', '.join(t['function']['name'] for t in tools)})")
        return "required", hit
    raise ToolError(f"tool_choice: expected 'auto', 'required', 'none' or "
                    f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")


def call_schema(tools: list[dict], fmt: ToolFormat = HERMES) -> dict:
    """The JSON Schema of one call to one of ``tools`` in ``fmt``'s words. Each tool's parameters
    are a schema resource of their own (``$id``), so that their references (``#/$defs/...``,
    ``#``) resolve against them, not against the call schema they sit in."""
    key = fmt.args_key
    one = [{"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                             key: _own_resource(t["function"]["parameters"], i)},
            "required": ["name", key], "additionalProperties": False} for i, t in enumerate(tools)]
    return one[0] if len(one) == 1 else {"anyOf": one}


def _own_resource(params, i: int):
    """``params`` with an ``$id`` of the ``i``-th tool's own (one they give is taken relative to it)."""
    if not isinstance(params, dict):
        return params
    base = f"{TOOLS_BASE}{i}/parameters.json"
    own = params.get("$id")
    return {**params, "$id": urljoin(base, own) if isinstance(own, str) else base}


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


def describe(tools: list[dict]) -> str:
    """The system text that tells a model whose template declares no tools how to call them."""
    lines = ["You can call these tools:"]
    lines += [json.dumps(t["function"], ensure_ascii=False) for t in tools]
    lines.append(f'To call one, write {OPEN}{{"name": <tool name>, "arguments": <arguments as JSON>}}{CLOSE}; '
                 'to call several, one such block after another.')
    return "\n".join(lines)


def declares_tools(template) -> bool:
    return "tools" in getattr(template, "source", "")


def prepare(messages: list[dict], tools: list[dict] | None, template, fmt: ToolFormat = HERMES) -> list[dict]:
    """``messages`` for ``template``: past tool calls (in ``fmt``'s syntax) and results written as
    text where the template has no words for them, and the tools described where it does not
    declare them."""
    own = getattr(template, "source", "")
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls") and "tool_calls" not in own:
            m = {"role": "assistant", "content": (m.get("content") or "") + fmt.render(m["tool_calls"])}
        elif m["role"] == "tool" and "tool" not in own:
            m = {"role": "user", "content": f"Tool result: {m['content']}"}
        out.append(m)
    if tools and not declares_tools(template):
        text = describe(tools)
        if out and out[0]["role"] == "system":
            out[0] = {**out[0], "content": out[0]["content"] + "\n\n" + text}
        else:
            out.insert(0, {"role": "system", "content": text})
    return out


def _as_call(call: dict, key: str = "arguments") -> dict:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return {"name": fn.get("name"), key: args}


def calls_maker(model, tools: list[dict], fmt: ToolFormat, mode: str, parallel: bool, compile=None):
    """(the maker of the answer's guides, ``guide(max_tokens=)``, for calls to ``tools`` in ``fmt``;
    the draft counts' key; the id of ``fmt.open`` where it is one control token, else None).
    ``compile``: what compiles the call schema (default ``model.compile``)."""
    from ..guides.tool_guides import Calls, Lead
    from ..guides.trigger import Triggered

    parallel = parallel and fmt.parallel
    schema = calls_schema(tools, fmt, parallel)
    try:
        # (strict: no arguments the tool does not list)
        constraint = Constraint.of(json_schema=schema, strict=True)
        made = index = (compile or model.compile)(constraint)
    except SchemaError as e:
        raise located(e, arguments_pointers(tools, fmt, parallel)) from None
    if fmt.sep and parallel:
        made = Calls(model.vocabulary, index, fmt.sep.encode("utf-8"))
    key = constraint.key()
    if not fmt.open:  # (the call is the answer: "required" at once, "auto" a call or text)
        return (made if mode == "required" else Lead(model.vocabulary, made)), key, None
    token = control_token(model, fmt.open)
    trigger = token if token is not None else fmt.open.encode("utf-8")
    return Triggered(model.vocabulary, trigger, made, force_after=0 if mode == "required" else None,
                     optional=mode == "auto"), key, token


def control_token(model, text: str) -> int | None:
    """The id of ``text`` where the model's vocabulary has it as one control token (no bytes)."""
    ids = model.tokenize_text(text.encode("utf-8"), special=True)
    return ids[0] if len(ids) == 1 and not model.vocabulary[ids[0]] else None


def parse_calls(text: str, fmt: ToolFormat = HERMES) -> list[dict]:
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
