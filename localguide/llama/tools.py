"""Tool calls: ``tools`` in the OpenAI form, calls whose arguments are valid for their tool's
schema by construction (the JSON-Schema compiler), parsed into OpenAI ``tool_calls``.

A call is written ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``: the Hermes /
Qwen syntax, and localguide's envelope for templates that declare no tools (the tools and
the envelope are then described in a system message). The JSON after ``<tool_call>`` is
constrained by one schema: an ``anyOf`` of one object per tool, ``name`` a constant and
``arguments`` that tool's ``parameters`` (strict: an object lists its properties only,
unless its schema allows others, as OpenAI's strict function calling). ``tool_choice``:
``"auto"`` (text, or text then a call: the trigger of ``trigger.py``), ``"required"`` (a call, at once), ``"none"`` or
``{"type": "function", "function": {"name": ...}}`` (that tool, at once).
"""

from __future__ import annotations

import json
import uuid

from ..errors import LocalguideError

OPEN, CLOSE = "<tool_call>", "</tool_call>"


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


def call_schema(tools: list[dict]) -> dict:
    """The JSON Schema of one call to one of ``tools``."""
    one = [{"type": "object", "properties": {"name": {"const": t["function"]["name"]},
                                             "arguments": t["function"]["parameters"]},
            "required": ["name", "arguments"], "additionalProperties": False} for t in tools]
    return one[0] if len(one) == 1 else {"anyOf": one}


def describe(tools: list[dict]) -> str:
    """The system text that tells a model whose template declares no tools how to call them."""
    lines = ["You can call these tools:"]
    lines += [json.dumps(t["function"], ensure_ascii=False) for t in tools]
    lines.append(f'To call one, write {OPEN}{{"name": <tool name>, "arguments": <arguments as JSON>}}{CLOSE}.')
    return "\n".join(lines)


def declares_tools(template) -> bool:
    return "tools" in getattr(template, "source", "")


def prepare(messages: list[dict], tools: list[dict] | None, template) -> list[dict]:
    """``messages`` for ``template``: past tool calls and results written as text where the
    template has no words for them, and the tools described where it does not declare them."""
    own = getattr(template, "source", "")
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls") and "tool_calls" not in own:
            calls = "".join(f"{OPEN}{json.dumps(_as_call(c), ensure_ascii=False)}{CLOSE}" for c in m["tool_calls"])
            m = {"role": "assistant", "content": (m.get("content") or "") + calls}
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


def _as_call(call: dict) -> dict:
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return {"name": fn.get("name"), "arguments": args}


def constraint_key(schema: dict) -> str:
    """The draft counts' key of a tool-call schema (as for any JSON Schema)."""
    from ..speculate import constraint_key as key

    return key(json_schema=schema, strict=True, whitespace="compact", max_recursion=3)


def parse_call(text: str) -> dict:
    """An OpenAI ``tool_calls`` entry from the constrained JSON of one call."""
    value = json.loads(text)
    return {"id": "call_" + uuid.uuid4().hex[:24], "type": "function",
            "function": {"name": value["name"], "arguments": json.dumps(value["arguments"], ensure_ascii=False)}}
