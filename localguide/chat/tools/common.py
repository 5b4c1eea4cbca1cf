"""What every tool-call syntax shares: the tools checked, the tool choice, past calls and results
written for a template, the description for a template that declares no tools, the registry of
the families' syntaxes, and ``CallSyntax``, the protocol each syntax module fills in.

A syntax says how a model family writes calls (``open`` before them, ``sep`` between two,
``close`` after the last), makes the constraint of one call (``call_constraint``), reads the
calls back (``parse``), streams their arguments as OpenAI deltas (``stream``) and writes past
calls (``render``). How the answer starts (``"required"``: a call at once, ``"auto"``: text or
calls) and several calls in a row are the same for all: ``maker`` here.
"""

from __future__ import annotations

import json

from ...errors import LocalguideError

OPEN, CLOSE = "<tool_call>", "</tool_call>"


class ToolError(LocalguideError, ValueError):
    """Tools or a tool choice that cannot be used (the message names the one at fault)."""


class CallSyntax:
    """One family's way of writing tool calls. A subclass sets ``name``, ``open``, ``sep``,
    ``close`` and ``parallel`` (several calls an answer) and defines ``call_constraint``,
    ``parse``, ``stream`` and ``render``."""

    name: str
    open: str
    sep: str
    close: str
    parallel: bool = True
    object_arguments = False  # (templates of the family read past calls' arguments as a mapping)

    def call_constraint(self, tools: list[dict], parallel: bool):
        """(the ``Constraint`` of what follows ``open``: one call, or every call where the syntax
        writes them as one value; a function that turns a ``SchemaError`` from compiling it into
        one naming ``tools[i].function.parameters``)."""
        raise NotImplementedError

    def parse(self, text: str, tools: list[dict]) -> list[dict]:
        """OpenAI ``tool_calls`` entries from the constrained text after ``open`` (calls to ``tools``)."""
        raise NotImplementedError

    def stream(self, tools: list[dict]):
        """A fresh reader of calls to ``tools``, their text piece by piece: ``feed(piece)`` gives OpenAI's
        streamed ``tool_calls`` deltas, ``calls()`` the final calls (None where incomplete)."""
        raise NotImplementedError

    def render(self, calls: list[dict]) -> str:
        """Past calls (OpenAI form) as the text the model writes."""
        raise NotImplementedError

    def joins_calls(self, parallel: bool) -> bool:
        """Whether several calls are one constrained text each, joined by ``sep`` (``Calls``)."""
        return bool(self.sep) and parallel

    def maker(self, model, tools: list[dict], mode: str, parallel: bool, compile=None):
        """(the maker of the answer's guides, ``guide(max_tokens=)``; the draft counts' key; the id
        of ``open`` where it is one control token, else None). ``compile``: what compiles a
        ``Constraint`` (default ``model.compile``)."""
        from ...errors import SchemaError
        from ...guides.tool_guides import Calls, Lead
        from ...guides.trigger import Triggered

        parallel = parallel and self.parallel
        constraint, locate = self.call_constraint(tools, parallel)
        try:
            made = index = (compile or model.compile)(constraint)
        except SchemaError as e:
            raise locate(e) from None
        if self.joins_calls(parallel):
            made = Calls(model.vocabulary, index, self.sep.encode("utf-8"))
        key = constraint.key()
        if not self.open:  # (the call is the answer: "required" at once, "auto" a call or text)
            return (made if mode == "required" else Lead(model.vocabulary, made)), key, None
        token = control_token(model, self.open)
        trigger = token if token is not None else self.open.encode("utf-8")
        return Triggered(model.vocabulary, trigger, made, force_after=0 if mode == "required" else None,
                         optional=mode == "auto"), key, token


# The families' syntaxes, each with how a chat template shows it is its own, in the order they are
# tried; a template that declares tools in none of them writes Hermes' envelope.
FORMATS: list[tuple[CallSyntax, object]] = []


def register_format(fmt: CallSyntax, declared_by) -> CallSyntax:
    """Add a family's call syntax: ``declared_by(template source)`` says a template is that family's."""
    FORMATS.append((fmt, declared_by))
    return fmt


def tool_format(template, default: CallSyntax) -> CallSyntax:
    """The syntax of ``template``'s family (``default`` where it declares no other, or no tools)."""
    src = getattr(template, "source", "")
    if not declares_tools(template):
        return default
    return next((fmt for fmt, declared in FORMATS if declared(src)), default)


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


def describe(tools: list[dict]) -> str:
    """The system text that tells a model whose template declares no tools how to call them."""
    lines = ["You can call these tools:"]
    lines += [json.dumps(t["function"], ensure_ascii=False) for t in tools]
    lines.append(f'To call one, write {OPEN}{{"name": <tool name>, "arguments": <arguments as JSON>}}{CLOSE}; '
                 'to call several, one such block after another.')
    return "\n".join(lines)


def declares_tools(template) -> bool:
    return "tools" in getattr(template, "source", "")


def prepare(messages: list[dict], tools: list[dict] | None, template, fmt: CallSyntax) -> list[dict]:
    """``messages`` for ``template``: past tool calls (in ``fmt``'s syntax) and results written as
    text where the template has no words for them, and the tools described where it does not
    declare them."""
    own = getattr(template, "source", "")
    out = []
    for m in messages:
        if m["role"] == "assistant" and m.get("tool_calls") and "tool_calls" not in own:
            m = {"role": "assistant", "content": (m.get("content") or "") + fmt.render(m["tool_calls"])}
        elif m["role"] == "assistant" and m.get("tool_calls") and fmt.object_arguments:
            m = {**m, "tool_calls": [_with_object_arguments(c) for c in m["tool_calls"]]}
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


def past_arguments(call: dict) -> tuple[str, object]:
    """(name, arguments) of a past call in OpenAI form (arguments parsed where they are JSON text)."""
    fn = call.get("function", call)
    args = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    return fn.get("name"), args


def _with_object_arguments(call):
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    _, args = past_arguments(call)
    return {**call, "function": {**call["function"], "arguments": args}}


def control_token(model, text: str) -> int | None:
    """The id of ``text`` where the model's vocabulary has it as one control token (no bytes)."""
    ids = model.tokenize_text(text.encode("utf-8"), special=True)
    return ids[0] if len(ids) == 1 and not model.vocabulary[ids[0]] else None
